"""The API-server latency model used before requests reach the engine (same as sim's)."""

from __future__ import annotations

from tailscope.serve.frontend import Frontend, FrontendModel


class Prices:
    def tokenize_ns(self, prompt_tokens: int) -> int:
        return 1_000 * prompt_tokens

    def frontend_delay_ns(self, in_flight: int, u: float = 0.5) -> int:
        return int(10_000_000 * 2 * u) + 100_000 * in_flight


def test_no_model_no_delay() -> None:
    assert Frontend(None).delay_ns(5, 1000, 3, 1) == 0


def test_prices_protocol_is_structural() -> None:
    assert isinstance(Prices(), FrontendModel)
    assert not isinstance(object(), FrontendModel)


def test_tokenization_is_serialized_and_jitter_is_seeded() -> None:
    f = Frontend(Prices(), seed=4)
    a = f.delay_ns(0, 1000, 1, key=1)  # tokenizes 0 → 1 ms
    b = f.delay_ns(0, 1000, 2, key=2)  # waits for the first: tokenizes 1 → 2 ms
    g = Frontend(Prices(), seed=4)
    assert g.delay_ns(0, 1000, 1, key=1) == a
    fixed_a = a - 1_000_000 - 100_000
    fixed_b = b - 2_000_000 - 200_000
    assert 0 <= fixed_a < 20_000_000
    assert 0 <= fixed_b < 20_000_000
    assert fixed_a != fixed_b  # per-request jitter
    # later, after the queue drained, no waiting for tokenization
    c = f.delay_ns(50_000_000, 10, 1, key=3)
    assert c - 10_000 - 100_000 < 20_000_000


class TrainedPrices(Prices):
    """The trained model's extra hooks: the engine's wait before it schedules a request, and the corpus' closed-loop
    synchrony."""

    def engine_wait_ns(self, in_flight: int, prompt_tokens: int, *, prefill_pool: bool = False) -> int:
        return 7_000_000

    def arrival_burst_ns(self, in_flight: int, prompt_tokens: int) -> int:
        raise AssertionError("serve charged the closed-loop synchrony: its real client brings its own")


def test_serve_waits_for_the_engine_but_not_the_corpus_synchrony() -> None:
    plain = Frontend(Prices(), seed=2).delay_ns(0, 100, 9, key=1)
    assert Frontend(TrainedPrices(), seed=2).delay_ns(0, 100, 9, key=1) == plain + 7_000_000
