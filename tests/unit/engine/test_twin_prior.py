"""The trained step model as the twin's prior, the probe as its update (issue 23, item 10)."""

from __future__ import annotations

import math
import random

import pytest
import yaml

from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.model_catalog import resolve_model
from tailscope.engine.residuals import residual_group
from tailscope.engine.step_model import TrainedStepModel
from tailscope.engine.twin import ServerFacts, twin_from_mapping
from tailscope.engine.twin_fit import DecodeObservation, PrefillObservation, fit_twin
from tailscope.engine.twin_prior import DECODE_TERMS, PREFILL_TERMS, TwinPrior, parse_prior_ref, twin_prior
from tailscope.errors import ConfigError

FACTS = ServerFacts(block_size=16, num_blocks=4096, max_num_seqs=64, max_num_batched_tokens=2048, max_model_len=4096)
TRUTH = {
    "step_overhead_us": 4000.0,
    "per_seq_us": 300.0,
    "per_kv_token_us": 0.5,
    "prefill_per_token_us": 20.0,
    "prefill_attn_us": 0.01,
}


def prior_at(mean: dict[str, float], rel_sd: float) -> TwinPrior:
    return TwinPrior(mean_us=dict(mean), sd_us={k: v * rel_sd for k, v in mean.items()}, source="test")


def observe(
    concurrencies: tuple[int, ...], noise: float, seed: int = 0
) -> tuple[list[PrefillObservation], list[DecodeObservation]]:
    rng = random.Random(seed)
    t = TRUTH
    fixed = 10_000 + t["step_overhead_us"] + t["per_seq_us"]  # front end + one step
    pre = [
        PrefillObservation(
            p, (fixed + t["prefill_per_token_us"] * p + t["prefill_attn_us"] * p * p / 2) * (1 + rng.gauss(0, noise))
        )
        for p in (64, 256, 768) * 6
    ]
    dec = [
        DecodeObservation(
            float(c),
            float(ctx),
            (t["step_overhead_us"] + t["per_seq_us"] * c + t["per_kv_token_us"] * c * ctx) * (1 + rng.gauss(0, noise)),
        )
        for c in concurrencies
        for ctx in (100, 400, 900)
        for _ in range(5)
    ]
    return pre, dec


@pytest.mark.parametrize(
    ("ref", "want"),
    [
        ("llama-3.1-8b@h100", ("llama-3.1-8b", "h100", 1)),
        ("llama-3.1-70b@h100-sxmx4", ("llama-3.1-70b", "h100-sxm", 4)),
        ("models/tiny/config.json@cpu.yaml", ("models/tiny/config.json", "cpu.yaml", 1)),
    ],
)
def test_prior_references(ref: str, want: tuple[str, str, int]) -> None:
    assert parse_prior_ref(ref) == want


@pytest.mark.parametrize("ref", ["llama-3.1-8b", "@h100", "llama@", "llama@h100x0"])
def test_bad_prior_references_are_one_clear_line(ref: str) -> None:
    with pytest.raises(ConfigError, match="--prior"):
        parse_prior_ref(ref)


def test_the_trained_model_projected_onto_the_twins_terms() -> None:
    step = TrainedStepModel(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), engine="vllm")
    group = residual_group("vllm", "h100-sxm", "llama-3.1-8b")
    prior = twin_prior(step, max_num_batched_tokens=2048, max_model_len=8192, group=group, source="8b on h100")
    assert set(prior.mean_us) == set(DECODE_TERMS) | set(PREFILL_TERMS)
    assert all(prior.mean_us[k] > 0 and 0 < prior.sd_us[k] < prior.mean_us[k] for k in prior.mean_us)
    # the decode terms give back the model's own TPOT (its median bias on such configurations removed)
    bias = math.exp(-group.tpot[1]) if group else 1.0
    for c, ctx in ((1, 512), (8, 1024)):
        want = step.step_s([], c, c * ctx) * 1e6 * bias
        m = prior.mean_us
        got = m["step_overhead_us"] + m["per_seq_us"] * c + m["per_kv_token_us"] * c * ctx
        assert got == pytest.approx(want, rel=0.05)
    assert "cross-validated residuals on engine=vllm" in prior.source
    assert prior.projection["prefill"] < 0.2


def test_a_prior_on_no_term_is_the_plain_fit() -> None:
    """The prior's path with nothing to use (every term without a prior) gives the plain fit exactly, and the shared
    IRLS loop with an all-infinite prior matches the plain one to rounding."""
    import numpy as np

    from tailscope.engine.twin_fit import huber_fit

    pre, dec = observe((1, 2, 4, 8), 0.03, seed=1)
    plain = fit_twin(pre, dec, FACTS)
    empty = fit_twin(pre, dec, FACTS, prior=TwinPrior(mean_us={}, sd_us={}, source="none"))
    assert (empty.coefficients, empty.stderr) == (plain.coefficients, plain.stderr)
    assert "prior" not in plain.fitted_on
    assert empty.fitted_on["prior"]["used"] == []
    x = np.array([[1.0, o.concurrency, o.concurrency * o.context] for o in dec])
    y = np.array([o.tpot_us for o in dec])
    nothing = (np.zeros(3), np.full(3, np.inf))
    assert np.allclose(huber_fit(x, y, prior=nothing), huber_fit(x, y), rtol=1e-9, atol=0)


def test_a_term_the_probe_cannot_see_comes_from_the_prior() -> None:
    """A decode ladder at one batch size cannot split the step's cost from each sequence's: alone, the fit puts an
    arbitrary share in each; with the prior, each lands near the physics and the sum stays the probe's."""
    pre, dec = observe((4,), 0.02, seed=2)
    alone = fit_twin(pre, dec, FACTS).coefficients
    assert abs(alone.per_seq_us - TRUTH["per_seq_us"]) > 0.5 * TRUTH["per_seq_us"]  # an arbitrary split
    near = {k: v * 1.1 for k, v in TRUTH.items()}  # a prior 10 % high, sized ±20 %
    twin = fit_twin(pre, dec, FACTS, prior=prior_at(near, 0.2))
    c = twin.coefficients
    assert c.per_seq_us == pytest.approx(TRUTH["per_seq_us"], rel=0.25)
    assert c.step_overhead_us == pytest.approx(TRUTH["step_overhead_us"], rel=0.1)
    assert c.step_overhead_us + 4 * c.per_seq_us == pytest.approx(4000 + 4 * 300, rel=0.03)  # what was measured
    report = twin.fitted_on["prior"]
    assert set(report["used"]) == set(DECODE_TERMS) | set(PREFILL_TERMS)
    assert report["rejected"] == {}
    # the posterior: narrower than the prior, and as wide as the prior leaves it where the probe cannot see (the
    # split), far narrower where it can (the KV term)
    prior_sd = 0.2 * near["per_seq_us"]
    assert 0.5 * prior_sd < twin.stderr.per_seq_us < prior_sd
    assert twin.stderr.per_kv_token_us < 0.5 * 0.2 * near["per_kv_token_us"]


def test_a_prior_the_probe_contradicts_is_overruled_and_named() -> None:
    pre, dec = observe((1, 2, 4, 8), 0.02, seed=3)
    wrong = dict(TRUTH, step_overhead_us=400.0)  # a device the prior was never sized on: 10× off, ±20 %
    twin = fit_twin(pre, dec, FACTS, prior=prior_at(wrong, 0.2))
    report = twin.fitted_on["prior"]
    assert "step_overhead_us" in report["rejected"]
    assert "sd apart" in report["rejected"]["step_overhead_us"]
    assert "step_overhead_us" not in report["used"]
    assert twin.coefficients.step_overhead_us == pytest.approx(4000, rel=0.1)  # the probe's
    assert report["probe_only_us"]["step_overhead_us"] == pytest.approx(4000, rel=0.1)


def test_a_twin_fitted_on_a_prior_round_trips() -> None:
    pre, dec = observe((1, 4), 0.02, seed=4)
    twin = fit_twin(pre, dec, FACTS, prior=prior_at(TRUTH, 0.3))
    text = yaml.safe_dump(twin.to_mapping(), sort_keys=False)
    back = twin_from_mapping(yaml.safe_load(text), source="twin.yaml")
    assert back.coefficients == twin.coefficients
    assert back.fitted_on["prior"]["source"] == "test"
    assert back.fitted_on["prior"]["sd_us"]["per_seq_us"] == pytest.approx(90.0)


def test_a_prefill_prior_the_probe_contradicts_leaves_the_measured_ttft_alone() -> None:
    """Per token and attention pull against each other along the prompt ladder: the check is joint, the furthest
    term loses its prior first, and the lone TTFT the probe measured stays the probe's."""
    pre, dec = observe((1, 2, 4, 8), 0.03, seed=5)
    skewed = dict(TRUTH, prefill_per_token_us=10.0, prefill_attn_us=0.02)
    twin = fit_twin(pre, dec, FACTS, prior=prior_at(skewed, 0.3))
    report = twin.fitted_on["prior"]
    assert set(report["rejected"]) & set(PREFILL_TERMS)
    c = twin.coefficients
    for p in (64, 768):  # the lone TTFT the probe measured stays the probe's
        want = 10_000 + 4000 + 300 + 20 * p + 0.01 * p * p / 2
        assert c.lone_ttft_us(p) == pytest.approx(want, rel=0.05)


def test_a_prior_that_conflicts_only_jointly_is_caught() -> None:
    """Two terms the probe cannot tell apart but whose sum it measures: a prior close enough on each (the probe says
    little of either alone) but whose sum is far from the measured one conflicts, jointly."""
    import numpy as np

    from tailscope.engine.twin_fit import updated_by_probe

    rng = np.random.default_rng(0)
    c = rng.uniform(1.0, 1.02, 200)
    x = np.column_stack([np.ones(200), c])  # nearly collinear: the sum is measured, the split is not
    y = x @ np.array([1.0, 1.0]) + rng.normal(0, 0.001, 200)
    mean, sd = np.array([1.8, 1.8]), np.array([0.3, 0.3])
    _, _, report = updated_by_probe(x, y, (mean, sd), ("a", "b"), seed=0)
    assert report["rejected"], report  # 3.8 sd jointly
    assert "jointly" in next(iter(report["rejected"].values()))
    _, _, fine = updated_by_probe(x, y, (np.array([1.2, 0.8]), sd), ("a", "b"), seed=0)
    assert fine["rejected"] == {}  # the same sum, another split: no conflict
    assert fine["used"] == ["a", "b"]
