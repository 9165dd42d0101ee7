"""Prompt synthesis to a requested token length.

With a tokenizer (a ``tokenizer.json`` loaded by :mod:`tailscope.io.tokenizer`) prompts are exact: text is built,
encoded, cut or extended to the requested count and decoded. Without one, prompts are approximate: one common English
word per token (short lowercase words are single tokens in typical BPE vocabularies); the achieved prompt length is
taken from the server's usage either way. Each request gets its own words (seeded per request), so prompts differ
unless a shared prefix is asked for; a shared prefix variant is the same text for every request that uses it.

Cold by default: a bench run passes a per-run ``nonce`` (see :mod:`tailscope.runner.resolve`) that seeds the words
after any shared prefix together with the request's seed, so two runs with the same seed send the same lengths at the
same times but different text (common one-token words either way, so prompt token counts do not shift): a rerun does
not find the previous run's prompts in the server's prefix cache. Only the shared prefixes a profile declares stay
identical across runs (as a real system prompt does). Without a nonce (``--same-prompts``) the text depends only on
the seed and the request, as before.

Cost (it is on the send path): a prompt's words are one bulk draw, one byte per word over a 256-word table, from a
SHAKE-128 stream keyed by the request's seed and the nonce (cheaper to start than a seeded ``random.Random``). The
text for a given seed is not promised stable across tailscope versions; lengths and the rules above are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an they "
    "you were her she there one all we their has been would when who will more no if out so said what up its about "
    "into than them can only other new some time could these two may then do first any my now such like our over "
    "man me even most made after also did many before must through back years where much your way well down should "
    "because each just those people how too little state good very make world still own see men work long get here "
    "between both life being under never day same another know while last might us great old year off come since "
    "against go came right used take three a add age ago air am area art ask away bad base bed best big bit body "
    "book box boy call car case city cold cut dark data deal door east easy eat end eye face fact far fast feel few "
    "find fire five food form four free full game girl give got hand hard head hear help high hold home hope hot hour "
    "idea keep kind land law lead left less let line list live look lot love low main mean mind move name need next "
    "open part past pay plan play put read real red rest road room run say seem set top try use war why yes yet"
).split()
# exactly 256 distinct words (a test checks), so one random byte picks one word uniformly and a prompt's words come
# from a single bulk draw
_WORD_AT = _WORDS.__getitem__


class PromptSynthesizer:
    """Builds prompts of a given token length.

    Args:
        tokenizer: a loaded ``tokenizers.Tokenizer`` (:func:`tailscope.io.tokenizer.load_tokenizer`); ``None`` for
            the approximate word-per-token mode.
        nonce: the run's content nonce (fresh text per run); ``None`` = text from the seed alone.
    """

    def __init__(self, tokenizer: Any = None, *, nonce: int | None = None) -> None:
        self.nonce = nonce
        self._tok: Any = tokenizer
        self.exact = tokenizer is not None
        self._prefix_cache: dict[tuple[int, int], str] = {}

    def count(self, text: str) -> int | None:
        """Tokens in ``text`` with the tokenizer, or ``None`` without one."""
        if self._tok is None:
            return None
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def counter(self) -> Callable[[str], int] | None:
        """A token counter for streamed text when a tokenizer is loaded, else ``None``."""
        tok = self._tok
        if tok is None:
            return None

        def count(text: str) -> int:
            return len(tok.encode(text, add_special_tokens=False).ids)

        return count

    def _words(self, n: int, rng: _Draw) -> str:
        # one bulk draw for all n words (a per-word random.choice cost ~10x more: this is on the send path)
        return " ".join(map(_WORD_AT, rng.take(n))) if n > 0 else ""

    def _fit(self, text: str, n: int, rng: _Draw) -> str:
        """Cut or extend ``text`` to exactly ``n`` tokens with the tokenizer."""
        ids: list[int] = self._tok.encode(text, add_special_tokens=False).ids
        while len(ids) < n:
            text = text + " " + self._words(n - len(ids), rng)
            ids = self._tok.encode(text, add_special_tokens=False).ids
        out: str = self._tok.decode(ids[:n])
        # decoding then re-encoding may merge differently; trim until the count is exact
        for _ in range(8):
            got = len(self._tok.encode(out, add_special_tokens=False).ids)
            if got == n:
                break
            if got > n:
                ids = ids[: max(1, len(ids) - (got - n))]
                out = self._tok.decode(ids[:n])
            else:
                out = out + " " + self._words(n - got, rng)
        return out

    def prefix(self, prefix_id: int, n_tokens: int) -> str:
        """The shared-prefix text of variant ``prefix_id`` (same text every time)."""
        key = (prefix_id, n_tokens)
        if key not in self._prefix_cache:
            rng = _Draw(f"prefix|{prefix_id}|{n_tokens}")
            head = f"System prompt variant {prefix_id}. "
            body = self._words(max(1, n_tokens - 4), rng)
            text = head + body
            self._prefix_cache[key] = self._fit(text, n_tokens, rng) if self.exact else _approx(text, n_tokens)
        return self._prefix_cache[key]

    def make(self, n_tokens: int, seed: int, *, prefix_id: int | None = None, prefix_tokens: int = 0) -> str:
        """A prompt of ``n_tokens`` tokens (exact with a tokenizer), starting with the shared prefix if given."""
        nonce = self.nonce
        rng = _Draw(f"{seed}" if nonce is None else f"{seed}|{nonce}")
        if prefix_id is not None and prefix_tokens > 0:
            pre = self.prefix(prefix_id, min(prefix_tokens, n_tokens))
            rest = max(0, n_tokens - prefix_tokens)
            if rest == 0:
                return pre
            tail = self._fit(self._words(rest, rng), rest, rng) if self.exact else self._words(rest, rng)
            return pre + " " + tail
        # a per-request number first makes every prompt distinct even for tiny lengths
        text = f"{seed} " + self._words(max(0, n_tokens - 1), rng)
        if self.exact:
            return self._fit(text, n_tokens, rng)
        # n_tokens >= 2 already gives exactly n_tokens words; only shorter asks need trimming
        return text if n_tokens >= 2 else _approx(text, n_tokens)


class _Draw:
    """Reproducible random bytes from a key: SHAKE-128 of the key and a block counter.

    Seeding a ``random.Random`` costs ~6 us (Mersenne Twister set-up), more than drawing a 64-word prompt; a hash of
    the key costs under 1 us. Distinct keys give independent streams; the same key gives the same bytes.
    """

    __slots__ = ("_block", "_key")

    def __init__(self, key: str) -> None:
        self._key = key.encode()
        self._block = 0

    def take(self, n: int) -> bytes:
        """The next ``n`` bytes (each later call starts a new block)."""
        self._block += 1
        return hashlib.shake_128(self._key + b"|%d" % self._block).digest(n)


def _approx(text: str, n_tokens: int) -> str:
    words = text.split()
    return " ".join(words[:n_tokens])
