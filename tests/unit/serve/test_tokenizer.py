"""The built-in server's deterministic tokenizer, chat template, filler text and block hashes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tailscope.serve.tokenizer import (
    CHAT_BOS_TOKENS,
    CHAT_GENERATION_PROMPT_TOKENS,
    CHAT_PER_MESSAGE_TOKENS,
    FILLER_WORDS,
    VOCAB_SIZE,
    ChatMessage,
    block_hashes,
    count_text,
    encode_chat,
    encode_text,
    filler_text,
    filler_token,
    tokenize_text,
)


def test_rules_words_digits_punctuation() -> None:
    assert tokenize_text("Hello, world!") == ["Hello", ",", "world", "!"]
    assert tokenize_text("internationalization") == ["internatio", "nalization"]
    assert tokenize_text("something assistant") == ["something", "assistant"]
    assert tokenize_text("12345") == ["123", "45"]
    assert tokenize_text("  a\n\tb  ") == ["a", "b"]
    assert tokenize_text("") == []
    assert tokenize_text("héllo") == ["h", "é", "llo"]
    assert count_text("the quick brown fox jumps over the lazy dog.") == 10


def test_ids_are_stable_and_in_range() -> None:
    ids = encode_text("the cat sat on the mat")
    assert ids == encode_text("the cat sat on the mat")
    assert ids[0] == ids[4]  # "the" twice
    assert all(0 <= i < VOCAB_SIZE - 256 for i in ids)
    # fixed values: CRC-32 based, the same in every process and version of Python
    assert encode_text("hello") == [907060870 % (VOCAB_SIZE - 256)]


def test_chat_template_overhead() -> None:
    one = encode_chat([ChatMessage("user", "hello there")])
    assert len(one) == 2 + CHAT_BOS_TOKENS + CHAT_PER_MESSAGE_TOKENS + CHAT_GENERATION_PROMPT_TOKENS == 12
    two = encode_chat([ChatMessage("system", "be brief"), ChatMessage("user", "hi")], add_generation_prompt=False)
    assert len(two) == 3 + 1 + 2 * 5


def test_filler_words_are_one_token_each() -> None:
    for word in FILLER_WORDS:
        assert count_text(word) == 1, word
    assert len(set(FILLER_WORDS)) == len(FILLER_WORDS)


@given(st.integers(0, 2**32 - 1), st.integers(0, 300))
def test_filler_text_counts_back_exactly(key: int, n: int) -> None:
    text = filler_text(key, n)
    assert count_text(text) == n
    assert text == "".join(filler_token(key, i) for i in range(n))


def test_block_hashes_cover_full_blocks_only() -> None:
    assert block_hashes(list(range(15))) == ()
    assert len(block_hashes(list(range(16)))) == 1
    assert len(block_hashes(list(range(47)))) == 2
    assert len(block_hashes(list(range(48)), block_size=8)) == 6
    assert all(0 <= h < 2**63 for h in block_hashes(list(range(100))))


@given(
    st.lists(st.integers(0, 100_000), min_size=0, max_size=80),
    st.lists(st.integers(0, 100_000), min_size=0, max_size=80),
)
def test_block_hashes_are_chained_prefix_hashes(a: list[int], b: list[int]) -> None:
    ha, hb = block_hashes(a), block_hashes(b)
    common_blocks = 0
    while (
        common_blocks < min(len(a), len(b)) // 16
        and a[common_blocks * 16 : (common_blocks + 1) * 16] == b[common_blocks * 16 : (common_blocks + 1) * 16]
    ):
        common_blocks += 1
    # equal prefixes → equal hashes; the first differing block and every later one differ
    assert ha[:common_blocks] == hb[:common_blocks]
    for i in range(common_blocks, min(len(ha), len(hb))):
        assert ha[i] != hb[i]


def test_same_block_after_different_prefix_hashes_differently() -> None:
    block = list(range(16))
    a = block_hashes([1] * 16 + block)
    b = block_hashes([2] * 16 + block)
    assert a[1] != b[1]
