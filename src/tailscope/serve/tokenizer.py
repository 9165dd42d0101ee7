"""The built-in server's deterministic tokenizer, chat template, filler text and prefix block hashes.

The simulated engine has no vocabulary, but token *counts* must be exact and repeatable because they drive the
engine's prefill work, the ``usage`` block and the prefix cache. The rules (documented in ``docs/serve.md``):

- A run of ASCII letters is one token per started 10 letters (``"the"`` → 1, ``"internationalization"`` → 2);
  common English words are one token each, as in typical BPE vocabularies.
- A run of digits is one token per started 3 digits (``"12345"`` → 2), like Llama-3's number splitting.
- Every other non-space character (punctuation, symbols, each non-ASCII character) is one token.
- Whitespace is never a token on its own (it belongs to the next piece).

Token ids are a stable hash of the piece text (CRC-32 modulo :data:`VOCAB_SIZE`), so equal text gives equal ids in
every process. Chat requests are rendered with a Llama-3-shaped template whose special tokens have fixed ids.

Filler output is one common word per token, so re-tokenizing generated text gives back exactly the generated count.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

#: Size of the pretend vocabulary (Llama-3's); ordinary ids are in ``[0, VOCAB_SIZE - 256)``.
VOCAB_SIZE = 128_256
#: Block size of the paged KV cache (tokens per block), as in vLLM.
DEFAULT_BLOCK_SIZE = 16

BOS_ID = 128_000
START_HEADER_ID = 128_006
END_HEADER_ID = 128_007
EOT_ID = 128_009
_NEWLINES_ID = 271  # "\n\n"
_ROLE_IDS = {"system": 9125, "user": 882, "assistant": 78191, "tool": 14506, "developer": 35580}

#: Tokens the chat template adds: BOS once, 5 around every message, 4 for the assistant header it ends with.
CHAT_BOS_TOKENS = 1
CHAT_PER_MESSAGE_TOKENS = 5
CHAT_GENERATION_PROMPT_TOKENS = 4

_PIECE = re.compile(r"[A-Za-z]+|[0-9]+|[^\sA-Za-z0-9]")
_LETTERS_PER_TOKEN = 10
_DIGITS_PER_TOKEN = 3
_ORDINARY_IDS = VOCAB_SIZE - 256

#: Filler vocabulary for generated text: short common words, each exactly one token under the rules above.
FILLER_WORDS: tuple[str, ...] = tuple(
    (
        "the of and to in is that for it as was with be by on not this are or from at which but have an they "
        "you were one all we their has been would when who will more no if out so said what up its about into "
        "than them can only other new some time could these two may then do first any my now such like our over "
        "even most made after also did many before must through back years where much your way well down should "
        "because each just those people how too little state good very make world still own see work long get "
        "here between both life being under never day same another know while last might great old year off come "
        "since against go came right used take three"
    ).split()
)


def _piece_id(piece: str) -> int:
    return zlib.crc32(piece.encode("utf-8")) % _ORDINARY_IDS


def _split_run(run: str, per_token: int) -> list[str]:
    return [run[i : i + per_token] for i in range(0, len(run), per_token)]


def tokenize_text(text: str) -> list[str]:
    """Split ``text`` into token pieces by the rules in the module docstring.

    Args:
        text: any Unicode text.

    Returns:
        The pieces in order; their count is the token count. Empty text gives ``[]``.
    """
    pieces: list[str] = []
    for m in _PIECE.finditer(text):
        run = m.group(0)
        first = run[0]
        if first.isascii() and first.isalpha():
            pieces.extend(_split_run(run, _LETTERS_PER_TOKEN) if len(run) > _LETTERS_PER_TOKEN else (run,))
        elif first.isascii() and first.isdigit():
            pieces.extend(_split_run(run, _DIGITS_PER_TOKEN) if len(run) > _DIGITS_PER_TOKEN else (run,))
        else:
            pieces.append(run)
    return pieces


def encode_text(text: str) -> list[int]:
    """Token ids of ``text`` (no special tokens)."""
    return [_piece_id(p) for p in tokenize_text(text)]


def count_text(text: str) -> int:
    """Number of tokens in ``text`` (no special tokens)."""
    return len(tokenize_text(text))


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One chat message reduced to what the template needs: its role and its text."""

    role: str
    content: str


def encode_chat(messages: Sequence[ChatMessage], *, add_generation_prompt: bool = True) -> list[int]:
    """Token ids of ``messages`` rendered with the Llama-3-shaped chat template.

    ``<|begin_of_text|>`` then, per message, ``<|start_header_id|>ROLE<|end_header_id|>\\n\\n CONTENT <|eot_id|>``,
    then (with ``add_generation_prompt``) the assistant header. A single user message therefore costs its content
    tokens + 10.
    """
    ids = [BOS_ID]
    for msg in messages:
        role_id = _ROLE_IDS.get(msg.role, _piece_id(msg.role))
        ids.extend((START_HEADER_ID, role_id, END_HEADER_ID, _NEWLINES_ID))
        ids.extend(encode_text(msg.content))
        ids.append(EOT_ID)
    if add_generation_prompt:
        ids.extend((START_HEADER_ID, _ROLE_IDS["assistant"], END_HEADER_ID, _NEWLINES_ID))
    return ids


def block_hashes(token_ids: Sequence[int], block_size: int = DEFAULT_BLOCK_SIZE) -> tuple[int, ...]:
    """Chained hashes of the full ``block_size``-token blocks of a prompt, for the engine's prefix cache.

    Block *i*'s hash covers block *i*'s ids and block *i-1*'s hash, so equal hashes mean equal prefixes (as in
    vLLM). A trailing partial block has no hash. Hashes are 63-bit non-negative ints, stable across processes.

    Args:
        token_ids: the prompt's token ids.
        block_size: tokens per KV block (≥ 1).

    Raises:
        ValueError: if ``block_size`` < 1.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be ≥ 1 (got {block_size})")
    out: list[int] = []
    prev = b"\x00" * 8
    n_full = len(token_ids) // block_size
    for b in range(n_full):
        chunk = token_ids[b * block_size : (b + 1) * block_size]
        h = hashlib.blake2b(prev, digest_size=8)
        h.update(b"".join(t.to_bytes(4, "little", signed=False) for t in chunk))
        prev = h.digest()
        out.append(int.from_bytes(prev, "little") >> 1)
    return tuple(out)


def filler_token(request_key: int, index: int) -> str:
    """Text of output token ``index`` (0-based) of a response; deterministic in ``(request_key, index)``.

    Every token but the first starts with a space, so the concatenation is a sentence of common words and
    ``count_text`` of it equals the number of tokens.
    """
    word = FILLER_WORDS[(request_key + index * 7919) % len(FILLER_WORDS)]
    return word if index == 0 else " " + word


def filler_text(request_key: int, n_tokens: int, start: int = 0) -> str:
    """Concatenated text of output tokens ``start .. start + n_tokens - 1``."""
    return "".join(filler_token(request_key, i) for i in range(start, start + n_tokens))


def as_counted_by(token_ids: Sequence[int], scale: float, offset: float) -> tuple[int, ...]:
    """The prompt as another server's tokenizer counts it: ``max(1, round(offset + scale × N))`` tokens (a digital
    twin's ``prompt_scale`` and ``prompt_offset``, fitted on the real server). The first ``round(offset)`` are a
    template token; the rest stretch the ids in order (token ``j`` is our token ``⌊(j − offset) / scale⌋``), so two
    prompts that share a prefix of ours share the stretched prefix too and the prefix cache sees what it would have.
    """
    n = len(token_ids)
    count = max(1, round(offset + scale * n))
    head = min(count, max(0, round(offset)))
    if n == 0:
        return (0,) * count
    body = tuple(token_ids[min(n - 1, int((j - head) / scale))] for j in range(head, count))
    return (0,) * head + body


def stable_key(token_ids: Sequence[int]) -> int:
    """A stable 32-bit key of a prompt, used to pick filler words and the natural (EOS) output length."""
    data = b"".join(t.to_bytes(4, "little", signed=False) for t in token_ids[-64:])
    return zlib.crc32(data) ^ (len(token_ids) * 2_654_435_761 & 0xFFFFFFFF)
