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
