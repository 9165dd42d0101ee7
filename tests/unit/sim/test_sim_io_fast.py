"""The simulation's fast I/O path (issue 23 item 8) writes what the slow one wrote: the streamed orjson export has
the values of ``build_export`` + ``json.dumps``, the columnar store insert reads back the same records as the
per-record writer, and the stored summary is the one computed from the stored records."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from tailscope.metrics.document import build_export, export_chunks
from tailscope.metrics.summary import summarize
from tailscope.records import ErrorClass, RequestRecord, Run, ServerSample, Status
from tailscope.sim.run import SimArgs, SimOutcome, run_sim
from tailscope.store.runs import RunStore


def _sim(db: Path | None = None) -> SimOutcome:
    return run_sim(
        SimArgs(rate=40.0, requests=300, input_tokens="uniform:100:900", output_tokens="uniform:5:60", seed=3, db=db)
    )


def _hand_made() -> list[RequestRecord]:
    ok = RequestRecord(
        id=7,
        scheduled_ns=0,
        sent_ns=5,
        first_token_ns=2**60,  # beyond float64's exact integers: the per-value path
        end_ns=2**60 + 3,
        status=Status.OK,
        session_id="s-1",
        turn=2,
        chunk_times_ns=(2**60, 2**60 + 3),
        chunk_tokens=(2, 1),
        error_detail="café",
    )
    err = RequestRecord(
        id=3,
        scheduled_ns=10,
        sent_ns=None,
        first_token_ns=None,
        end_ns=20,
        status=Status.ERROR,
        error=ErrorClass.HTTP_4XX,
        http_status=400,
    )
    return [ok, err]


def _close(a: object, b: object) -> None:
    """Equal, floats to float precision (a mean summed in another order differs in the last bit)."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys()
        for k in a:
            _close(a[k], b[k])
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _close(x, y)
    elif isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-12)
    else:
        assert a == b


def _export_equal(run: Run, summary: dict[str, object], records: list[RequestRecord]) -> None:
    new = orjson.loads(b"".join(export_chunks(run, summary, records)))
    old = json.loads(json.dumps(build_export(run, summary, records)))
    assert new == old
    assert list(new) == ["run", "summary", "requests"]
    assert [list(r) for r in new["requests"]] == [list(r) for r in old["requests"]]  # key order too


def test_streamed_export_has_the_values_of_the_old_one() -> None:
    out = _sim()
    summary = dict(out.summary)
    summary["odd"] = {"nan": float("nan"), "inf": float("-inf"), 3: (1, 2)}  # null, null, non-string key, tuple
    _export_equal(out.run, summary, out.records)
    _export_equal(out.run, {}, _hand_made())
    _export_equal(out.run, {}, [])


def test_columnar_store_insert_reads_back_as_the_record_writer_does(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    out = _sim(db)
    store = RunStore(db)
    run = out.run
    records = sorted(out.records, key=lambda r: r.id)
    assert sorted(store.load_records(run.id), key=lambda r: r.id) == records
    # the stored summary is the one computed from the stored records (the old way), to float precision
    stored = store.get_run(run.id).summary or {}
    again = summarize(store.load_records(run.id)).to_dict()
    _close({k: v for k, v in stored.items() if k != "sim"}, json.loads(json.dumps(again)))
    # the same records through the per-record writer read back identically
    other = replace(run, id=run.id + "-w")
    store.create_run(other)
    store.write_records(other.id, records)
    assert sorted(store.load_records(other.id), key=lambda r: r.id) == records
    # ids already stored are skipped, as a fold skips them
    store.write_records_bulk(run.id, records[:5])
    assert len(store.load_records(run.id)) == len(records)


def test_values_that_do_not_fit_take_the_bounded_path(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "t.duckdb")
    out = _sim()
    run = replace(out.run, id="r1")
    store.create_run(run)
    records = _hand_made()
    samples = [ServerSample(t_ns=1, name="vllm:num_requests_running", value=float("nan"))]
    store.write_records_bulk(run.id, records, samples)  # non-ASCII text: the record writer's path
    back = {r.id: r for r in store.load_records(run.id)}
    assert set(back) == {3, 7}
    assert back[3] == records[1]
    assert back[7].chunk_times_ns == records[0].chunk_times_ns
    got = store.load_samples(run.id)
    assert len(got) == 1


def test_the_columnar_path_keeps_empty_and_multi_token_chunks(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "t.duckdb")
    run = replace(_sim().run, id="r2")
    store.create_run(run)
    ok, err = _hand_made()
    ok = replace(ok, error_detail="plain", chunk_times_ns=(10, 20, 30), chunk_tokens=(2, 1, 1))
    ones = replace(ok, id=8, chunk_tokens=(1, 1, 1))
    store.write_records_bulk(run.id, [ok, err, ones])
    back = {r.id: r for r in store.load_records(run.id)}
    assert back == {7: ok, 3: err, 8: ones}
    assert back[3].chunk_times_ns == ()
    assert back[3].chunk_tokens == ()


def test_the_summary_shares_its_chunk_arrays_without_changing_a_figure() -> None:
    from tailscope.metrics.perceived import perceived

    out = _sim()
    records = out.records
    summary = summarize(records)
    assert summary.perceived is not None
    # the perceived block computed the old way (reading every chunk time again, as float64)
    assert summary.perceived.to_dict() == perceived(records).to_dict()
    stalls = replace(records[0], chunk_times_ns=(0, 10, 2_000_000_000, 2_000_000_001), chunk_tokens=(1, 1, 1, 1))
    mixed = [stalls, *records[1:]]
    assert summarize(mixed).perceived.to_dict() == perceived(mixed).to_dict()  # type: ignore[union-attr]


def test_simulate_stores_the_summary_it_returns_interval_included_in_one_write(tmp_path: Path) -> None:
    """The prediction interval goes into the run's one ``finish_run`` (no second write of the run row): the stored
    summary is the result's ``summary_dict()``, interval and its source included, and the run is complete."""
    from unittest import mock

    from tailscope.api.sim import simulate

    db = tmp_path / "t.duckdb"
    with mock.patch.object(RunStore, "finish_run", autospec=True, side_effect=RunStore.finish_run) as finish:
        out = simulate(rate=40.0, requests=200, input_tokens="512", output_tokens="32", seed=1, store=db)
    assert finish.call_count == 1
    assert out.prediction_interval is not None  # llama-3.1-8b on an H100 has a residual group
    stored = RunStore(db).get_run(out.run.id)
    assert stored.run.status.value == "complete"
    assert stored.summary == json.loads(json.dumps(out.summary_dict(), default=str))
    assert stored.summary is not None
    assert stored.summary["prediction_interval_source"]["kind"] == "residuals"


def _mixed(out: SimOutcome) -> list[RequestRecord]:
    """The simulation's records with a warmup, a failed, an empty and a multi-token one among them."""
    err = _hand_made()[1]
    rs = list(out.records)
    rs[1] = replace(rs[1], warmup=True)
    rs[4] = replace(rs[4], chunk_tokens=(2,) * len(rs[4].chunk_times_ns))
    return [*rs[:10], replace(err, id=10_001), *rs[10:]]


def test_flattened_chunk_times_change_no_summary_figure_export_value_or_stored_record(tmp_path: Path) -> None:
    from tailscope.metrics.chunk_times import flatten

    out = _sim()
    records = _mixed(out)
    flat = flatten(records)
    assert flat is not None
    assert flat.flat.tolist() == [t for r in records for t in r.chunk_times_ns]
    assert summarize(records, chunk_times=flat) == summarize(records)
    assert summarize(records, chunk_times=flat, slos=()).to_dict() == summarize(records).to_dict()
    with_flat = b"".join(export_chunks(out.run, out.summary, records, flat))
    assert with_flat == b"".join(export_chunks(out.run, out.summary, records))
    store = RunStore(tmp_path / "t.duckdb")
    for run_id, given in (("a", flat), ("b", None)):
        store.create_run(replace(out.run, id=run_id))
        store.write_records_bulk(run_id, records, chunk_times=given)
    assert store.load_records("a") == store.load_records("b")
    assert sorted(store.load_records("a"), key=lambda r: r.id) == sorted(records, key=lambda r: r.id)


def test_hand_made_times_are_not_flattened() -> None:
    from tailscope.metrics.chunk_times import flatten

    ok, err = _hand_made()
    assert flatten([ok, err]) is None  # beyond 2**53: the readers' per-value paths
    assert flatten([replace(ok, chunk_times_ns=(1.5, 2.0))]) is None  # floats
    assert flatten([err]) is not None  # no times at all: empty arrays


def test_a_long_simulation_flattens_each_stored_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tailscope.sim.run as sim_run

    monkeypatch.setattr(sim_run, "_BATCH", 70)  # 300 records: four full batches and a last one
    db = tmp_path / "t.duckdb"
    out = _sim(db)
    assert out.chunk_times is not None
    assert out.chunk_times.flat.tolist() == [t for r in out.records for t in r.chunk_times_ns]
    store = RunStore(db)
    assert sorted(store.load_records(out.run.id), key=lambda r: r.id) == sorted(out.records, key=lambda r: r.id)
    assert out.run_summary == summarize(out.records)


def test_one_token_chunks_are_stored_without_their_ones_and_read_back_whole(tmp_path: Path) -> None:
    """A simulation's all-one chunk counts are NULL in the store; every reader gives the ones back (load_records,
    the CSV and Parquet exports), and rows written with the ones listed (older stores, the record writer) read
    the same."""
    import duckdb

    db = tmp_path / "t.duckdb"
    out = _sim(db)
    store = RunStore(db)
    listed = replace(out.run, id=out.run.id + "-w")
    store.create_run(listed)
    store.write_records(listed.id, out.records)  # the record writer: lists of ones
    with duckdb.connect(str(db), read_only=True) as con:
        nulls = dict(
            con.execute("SELECT run_id, count(*) FROM requests WHERE chunk_tokens IS NULL GROUP BY run_id").fetchall()
        )
    assert nulls == {out.run.id: len(out.records)}
    assert store.load_records(out.run.id) == store.load_records(listed.id)
    for fmt in ("csv", "parquet"):
        a, b = tmp_path / f"a.{fmt}", tmp_path / f"b.{fmt}"
        store.export_requests(out.run.id, a, fmt=fmt)
        store.export_requests(listed.id, b, fmt=fmt)
        with duckdb.connect() as con:
            read = "SELECT * EXCLUDE (run_id) FROM '{}' ORDER BY id"
            assert con.execute(read.format(a)).fetchall() == con.execute(read.format(b)).fetchall()
