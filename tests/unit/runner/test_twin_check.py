"""twin check's pure parts: the median over repeats, the anchors' rescaling of the twin, and its errors."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tailscope.engine.twin import ServerFacts, TwinCoefficients, TwinModel
from tailscope.errors import ConfigError
from tailscope.io.calibration import load_calibration
from tailscope.records import RequestRecord, Status
from tailscope.runner.twin_check import (
    LONE_ANCHOR,
    anchored_calibration,
    lone_anchor_specs,
    lone_ttfts,
    median_summary,
    merge_ttfts,
    predicted_anchor_ms,
    prefill_factor,
    scaled,
)

TWIN = TwinModel(
    coefficients=TwinCoefficients(4000, 300, 0.5, 20, 0.01, 10_000, 0),
    stderr=TwinCoefficients(100, 10, 0.05, 1, 0.001, 500, 0),
    facts=ServerFacts(block_size=128, num_blocks=128, max_num_seqs=64, max_num_batched_tokens=2048),
)


def write(tmp_path: Path, twin: TwinModel) -> Path:
    path = tmp_path / "twin.yaml"
    path.write_text(yaml.safe_dump(twin.to_mapping()))
    return path


def test_median_summary_takes_each_percentile_separately() -> None:
    runs = [
        {"ttft_ms": {"p50": 10.0, "p90": 30.0}, "tpot_ms": {"p50": 5.0}, "output_tokens_per_s": 100.0},
        {"ttft_ms": {"p50": 12.0, "p90": 20.0}, "tpot_ms": {"p50": 7.0}, "output_tokens_per_s": 90.0},
        {"ttft_ms": {"p50": 50.0, "p90": 25.0}, "tpot_ms": {"p50": 6.0}, "output_tokens_per_s": 95.0},
    ]
    m = median_summary(runs)
    assert m["ttft_ms"] == {"p50": 12.0, "p90": 25.0}
    assert m["tpot_ms"] == {"p50": 6.0}
    assert m["output_tokens_per_s"] == 95.0
    assert median_summary(runs[:2])["ttft_ms"]["p50"] == 11.0


def test_scaled_moves_only_the_decode_path() -> None:
    s = scaled(TWIN, 1.5)
    c = s.coefficients
    assert (c.step_overhead_us, c.per_seq_us, c.per_kv_token_us) == pytest.approx((6000, 450, 0.75))
    assert c.prefill_per_token_us == pytest.approx(20)
    # a lone request's TTFT (frontend + overhead + per_seq + prefill) stays as calibrated: the front end gives back
    # what the decode path's overhead gained
    assert c.frontend_us + c.step_overhead_us + c.per_seq_us == pytest.approx(10_000 + 4000 + 300)
    assert s.stderr.step_overhead_us == pytest.approx(150)
    assert s.fitted_on["anchor_decode_factor"] == 1.5


def test_scaled_prefill_factor_scales_a_lone_requests_ttft_exactly() -> None:
    base = TWIN.coefficients
    for decode, prefill in ((1.0, 0.8), (1.4, 0.8), (0.7, 1.3)):
        c = scaled(TWIN, decode, prefill).coefficients
        for p in (16, 500, 1500):
            assert c.lone_ttft_us(p) == pytest.approx(prefill * base.lone_ttft_us(p))
        assert c.step_overhead_us == pytest.approx(4000 * decode)


def test_lone_ttft_is_the_front_end_and_one_prefill_step() -> None:
    # 10 ms front end + 4 ms overhead + 0.3 ms per sequence + 100 × 20 µs + 0.01 µs × 100² / 2
    assert TWIN.coefficients.lone_ttft_us(100) == pytest.approx(10_000 + 4000 + 300 + 2000 + 50)


def test_scaled_never_makes_the_front_end_negative() -> None:
    assert scaled(TWIN, 10.0, 0.5).coefficients.frontend_us == 0.0


def test_anchor_that_matches_the_twin_changes_nothing(tmp_path: Path) -> None:
    path = write(tmp_path, TWIN)
    _, tpot = predicted_anchor_ms(path)
    a = anchored_calibration(path, [tpot, tpot], tmp_path)
    assert a.decode == pytest.approx(1.0)
    assert a.prefill is None  # the twin has no lone-request reference
    twin = load_calibration(a.path).twin
    assert twin is not None
    assert twin.coefficients.step_overhead_us == pytest.approx(4000)


def test_anchor_on_a_slower_server_scales_the_twin_up(tmp_path: Path) -> None:
    path = write(tmp_path, TWIN)
    _, tpot = predicted_anchor_ms(path)
    a = anchored_calibration(path, [tpot * 1.3, tpot * 1.5], tmp_path)
    assert a.decode == pytest.approx(1.4)
    assert predicted_anchor_ms(a.path)[1] == pytest.approx(tpot * 1.4, rel=0.05)  # the rescaled twin reproduces it


def test_anchor_without_measurements_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="drop --anchor"):
        anchored_calibration(write(tmp_path, TWIN), [0.0], tmp_path)


def test_anchor_compares_the_server_with_its_own_reference_when_the_twin_has_one(tmp_path: Path) -> None:
    from dataclasses import replace

    reference = {"anchor_tpot_ms": 5.0, "anchor_lone_ttft_ms": {64: 10.0, 768: 40.0}}
    path = write(tmp_path, replace(TWIN, fitted_on=reference))
    a = anchored_calibration(path, [6.0, 7.0], tmp_path, {64: 8.0, 768: 50.0, 256: 99.0})
    assert a.decode == pytest.approx(1.3)  # (6 + 7) / 2 ÷ 5, whatever the model says about the anchor stream
    assert a.prefill == pytest.approx((0.8 * 1.25) ** 0.5)  # geometric mean over the lengths both measured
    twin = load_calibration(a.path).twin
    assert twin is not None
    assert twin.fitted_on["anchor_prefill_factor"] == pytest.approx(a.prefill)
    assert twin.coefficients.prefill_per_token_us == pytest.approx(20 * a.prefill)


def test_prefill_factor_needs_a_shared_length() -> None:
    assert prefill_factor({64: 10.0}, {256: 12.0}) is None
    assert prefill_factor({}, {64: 1.0}) is None
    assert prefill_factor({64: 12.0, 256: 30.0}, {64: 10.0, 256: 25.0}) == pytest.approx(1.2)


def test_lone_anchor_specs_differ_in_text_but_not_in_lengths() -> None:
    a, b = lone_anchor_specs(0, 0), lone_anchor_specs(0, 1)
    lengths, per, _ = LONE_ANCHOR
    assert [s.input_tokens for s in a] == [s.input_tokens for s in b]
    assert len(a) == 1 + len(lengths) * per
    assert not {s.seed for s in a} & {s.seed for s in b}  # a prefix cache never answers an anchor
    assert max(s.input_tokens for s in lone_anchor_specs(0, 0, max_prompt=100)) == 100


def test_lone_ttfts_skip_the_connection_opener_and_failures() -> None:
    specs = lone_anchor_specs(0, 0)

    def rec(i: int, ttft_ms: float, ok: bool = True) -> RequestRecord:
        t = 1_000_000_000 * i
        return RequestRecord(
            id=i,
            scheduled_ns=t,
            sent_ns=t,
            first_token_ns=t + int(ttft_ms * 1e6),
            end_ns=t + int(ttft_ms * 1e6) + 1,
            status=Status.OK if ok else Status.ERROR,
        )

    got = lone_ttfts([rec(0, 99.0), rec(1, 10.0), rec(2, 20.0), rec(4, 12.0), rec(5, 500.0, ok=False)], specs)
    assert got == {specs[1].input_tokens: [10.0, 12.0], specs[2].input_tokens: [20.0]}
    assert merge_ttfts([got, {specs[1].input_tokens: [30.0]}])[specs[1].input_tokens] == 12.0


def test_repeats_send_the_same_stream_with_new_prompt_text() -> None:
    from tailscope.runner.twin_check import fresh_prompts
    from tailscope.workload.spec import RequestSpec

    specs = [
        RequestSpec(id=i, input_tokens=100 + i, output_tokens=8, at_ns=i * 1000, prefix_id=i % 2, seed=i)
        for i in range(5)
    ]
    assert list(fresh_prompts(iter(specs), 0)) == specs  # the first measurement is the predicted stream itself
    again = list(fresh_prompts(iter(specs), 1))
    third = list(fresh_prompts(iter(specs), 2))
    for a, b, c in zip(specs, again, third, strict=True):
        assert (b.input_tokens, b.output_tokens, b.at_ns, b.prefix_id) == (
            a.input_tokens,
            a.output_tokens,
            a.at_ns,
            a.prefix_id,
        )
        assert len({a.seed, b.seed, c.seed}) == 3  # a prefix cache cannot answer a repeat from the previous one


def _stream(i: int, sent_ms: float, first_ms: float, gap_ms: float, tokens: int) -> RequestRecord:
    """A request sent at ``sent_ms`` whose tokens arrive every ``gap_ms`` from ``first_ms`` on."""
    times = tuple(int((first_ms + k * gap_ms) * 1e6) for k in range(tokens))
    return RequestRecord(
        id=i,
        scheduled_ns=int(sent_ms * 1e6),
        sent_ns=int(sent_ms * 1e6),
        first_token_ns=times[0],
        end_ns=times[-1],
        status=Status.OK,
        output_tokens=tokens,
        chunk_times_ns=times,
    )


def test_steady_decode_counts_gaps_by_batch_and_leaves_out_arrivals() -> None:
    from tailscope.engine.twin_observe import steady_decode_gaps

    # a lone stream at 5 ms a token, then a second one joins (its send-to-first-token window 100–130 ms) and both
    # decode at 8 ms; the first stream's gaps inside that window are left out, whatever their length
    one = _stream(0, 0.0, 10.0, 5.0, 19)  # tokens 10 … 100 ms
    slow_part = (120_000_000, 200_000_000, 208_000_000, 216_000_000, 224_000_000)
    one = replace(one, chunk_times_ns=(*one.chunk_times_ns, *slow_part), end_ns=224_000_000, output_tokens=24)
    two = _stream(1, 100.0, 130.0, 8.0, 13)  # tokens 130 … 226 ms
    got = steady_decode_gaps([[one, two]])
    assert got[1][1] == 18  # the lone stream's 18 gaps before the arrival
    assert abs(got[1][0] - 5.0) < 1e-9
    assert abs(got[2][0] - 8.0) < 1e-9  # after the window both decode at 8 ms; the 100 → 120 → 200 gaps are out
    assert all(n > 0 for _, n in got.values())


def test_steady_decode_report_is_the_measured_over_predicted_speed_at_equal_batch() -> None:
    from tailscope.runner.twin_check import steady_decode_report

    measured = [[_stream(0, 0.0, 10.0, 6.0, 41)], [_stream(0, 0.0, 10.0, 6.0, 41)]]  # two repeats, 6 ms a token
    predicted = [_stream(0, 0.0, 10.0, 5.0, 41)]
    rep = steady_decode_report(measured, predicted)
    row = {"measured_ms": 6.0, "predicted_ms": 5.0, "measured_gaps": 80, "predicted_gaps": 40}
    assert rep["by_streams"]["1"] == row
    assert abs(rep["ratio"] - 1.2) < 1e-9
    # too few gaps at a batch size: no ratio, the rows still reported
    few = steady_decode_report([[_stream(0, 0.0, 10.0, 6.0, 5)]], [_stream(0, 0.0, 10.0, 5.0, 5)])
    assert few["ratio"] is None
    assert few["by_streams"]["1"]["measured_gaps"] == 4
