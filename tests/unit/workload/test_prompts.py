"""Prompt synthesis: fresh text per run (cold caches), stable shared prefixes and lengths."""

from __future__ import annotations


def test_a_run_nonce_gives_fresh_text_but_keeps_shared_prefixes_and_lengths() -> None:
    from tailscope.workload.prompts import PromptSynthesizer

    plain, a, a2, b = (
        PromptSynthesizer(),
        PromptSynthesizer(nonce=11),
        PromptSynthesizer(nonce=11),
        PromptSynthesizer(nonce=12),
    )
    assert a.make(64, 5) == a2.make(64, 5)  # reproducible within a nonce
    assert a.make(64, 5) != b.make(64, 5)  # another run, other words
    assert len(a.make(64, 5).split()) == len(b.make(64, 5).split()) == 64
    assert plain.make(64, 5) == PromptSynthesizer().make(64, 5)  # no nonce: text from the seed alone
    pa = a.make(100, 5, prefix_id=0, prefix_tokens=40)
    pb = b.make(100, 5, prefix_id=0, prefix_tokens=40)
    shared = a.prefix(0, 40)
    assert pa.startswith(shared)  # the declared shared prefix stays the same
    assert pb.startswith(shared)
    assert pa != pb


def test_the_word_table_is_256_distinct_short_lowercase_words() -> None:
    from tailscope.workload.prompts import _WORDS

    # one random byte picks one word: the table must be exactly 256 distinct entries
    assert len(_WORDS) == 256
    assert len(set(_WORDS)) == 256
    assert all(w.isascii() and w.isalpha() and w.islower() and len(w) <= 8 for w in _WORDS)


def test_approximate_prompts_have_one_word_per_token_at_every_length() -> None:
    from tailscope.workload.prompts import _WORDS, PromptSynthesizer

    synth = PromptSynthesizer(nonce=3)
    assert synth.make(0, 9) == ""
    assert synth.make(1, 9) == "9"
    for n in (2, 3, 17, 300):
        words = synth.make(n, 9).split(" ")
        assert len(words) == n
        assert words[0] == "9"
        assert set(words[1:]) <= set(_WORDS)
    assert len(synth.make(40, 9, prefix_id=1, prefix_tokens=10).split(" ")) == 40
