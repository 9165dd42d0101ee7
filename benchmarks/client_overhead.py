"""Client overhead: how accurately tailscope measures, and at what CPU cost, as concurrent streams grow.

Setup (as in shared/TARGETS.md): a loopback ground-truth streaming server in its own process (TTFT 50 ms, ITL 10 ms,
256 output tokens, closed loop), which logs the true send time of every token event on the same monotonic clock.
Error = the time tailscope measured for an event minus the server's true send time of that event.

Prints, per stream count: TTFT error p50/p99, ITL error p50/p99 (per token gap, measured gap − true gap), sustained
output tokens/s vs the ideal, client CPU % (process time / wall time, every thread: tailscope's includes its store
writer), CPU µs per token event, the process's peak RSS during the run, and the TTFT error p99 of the first wave (the
first token of each stream's first request, all due at the same instant) apart from the rest. Module imports are in no
row: DuckDB's, which a bench loads at its first store use, and what tailscope's lazy facade loads at the first bench
(the bench's own modules, pydantic, …; ≈ 0.3–0.5 s of CPU here, ≈ 3.5 µs per event of a 256-stream row) are paid by a
one-request warm-up bench before the rows and printed on their own line once (``--warm-up off``: the first tailscope
row pays them).

    .venv/bin/python benchmarks/client_overhead.py --streams 16,64,256 --tokens 256
    .venv/bin/python benchmarks/client_overhead.py --streams 64,256 --trace-context off,on   # traceparent's cost
    .venv/bin/python benchmarks/client_overhead.py --streams 256 --store on,off   # the DuckDB store's share
    .venv/bin/python benchmarks/client_overhead.py --streams 64,256 --trace-context on --otlp off,on   # client spans
    .venv/bin/python benchmarks/client_overhead.py --streams 256,256,256,256,256,256 --arrival-stamp kernel \
        --order alternate   # paired: tailscope − reference per trio, median and its interval

A stream count given more than once prints, after the rows, each variant's CPU per event minus the reference's trio
by trio, their median with a bootstrap 95 % interval, and how many trios were below (the machine's run-to-run spread,
±2–4 µs here, is larger than the difference, so one trio decides nothing).

Each stream count runs the 60-line raw reference client (``_ref_stream``: asyncio streams on uvloop, one keep-alive
connection per stream, every read stamped on arrival) first, then tailscope, each against a fresh server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import tailscope


class PeakRss:
    """This process's peak resident memory while the block runs (MB; /proc sampled every 20 ms)."""

    def __enter__(self) -> PeakRss:
        import threading

        self.peak = _rss_mb()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, _rss_mb())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def _rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def _switches() -> int:
    """Context switches of this process so far, every thread (voluntary: a thread slept, e.g. in epoll_wait; and
    involuntary): a loop that wakes for every event pays one per wake-up."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_nvcsw + ru.ru_nivcsw


@contextlib.contextmanager
def _read_window(us: str | None) -> Any:
    """``TAILSCOPE_READ_WINDOW_US`` set to ``us`` for the block (``None``: as it is)."""
    if us is None:
        yield
        return
    old = os.environ.get("TAILSCOPE_READ_WINDOW_US")
    os.environ["TAILSCOPE_READ_WINDOW_US"] = us
    try:
        yield
    finally:
        if old is None:
            del os.environ["TAILSCOPE_READ_WINDOW_US"]
        else:
            os.environ["TAILSCOPE_READ_WINDOW_US"] = old


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(proc: subprocess.Popen[bytes], port: int, what: str, wait_s: float) -> subprocess.Popen[bytes]:
    """``proc`` once something accepts connections on ``port`` (killed, and the run stopped, after ``wait_s``)."""
    deadline = time.time() + wait_s
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{what} did not start")


def start_server(port: int, truth: Path, ttft_ms: float, itl_ms: float) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tailscope.testing.scripted_server",
            "--port",
            str(port),
            "--ttft-ms",
            str(ttft_ms),
            "--itl-ms",
            str(itl_ms),
            "--truth-out",
            str(truth),
        ],
    )
    return _listening(proc, port, "the ground-truth server", 20)


def start_collector(port: int, db: Path) -> subprocess.Popen[bytes]:
    """``tailscope trace collect`` in its own process (as a real deployment's collector would be)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tailscope",
            "trace",
            "collect",
            "--port",
            str(port),
            "--set",
            "client",
            "--db",
            str(db),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return _listening(proc, port, "trace collect", 30)


# -- the reference: a 60-line raw asyncio client (what the machine allows) ---------------------------------------------
async def _ref_stream(port: int, rounds: int, tokens: int, out: list[tuple[str, list[int]]]) -> None:
    """One closed-loop stream: a keep-alive connection, ``rounds`` requests; every network read stamped on arrival,
    every SSE event carrying ``"content":"`` with text counted as a token event."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps(
        {
            "model": "m",
            "max_tokens": tokens,
            "stream": True,
            "ignore_eos": True,
            "messages": [{"role": "user", "content": "tok " * 64}],
        }
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    for _ in range(rounds):
        writer.write(head + body)
        rid, stamps, buf, ended = "", [], b"", False
        await reader.readuntil(b"\r\n\r\n")  # response head (chunked)
        while not ended:
            data = await reader.read(65536)
            now = time.perf_counter_ns()
            if not data:
                return
            buf += data
            while True:  # chunked frames: SIZE\r\nDATA\r\n
                j = buf.find(b"\r\n")
                if j < 0:
                    break
                size = int(buf[:j], 16)
                if len(buf) < j + 2 + size + 2:
                    break
                payload, buf = buf[j + 2 : j + 2 + size], buf[j + 4 + size :]
                if size == 0:
                    ended = True
                    break
                for ev in payload.split(b"\n\n"):
                    if ev.startswith(b"data: {") and b'"content": "tok' in ev:
                        stamps.append(now)
                        if not rid:
                            rid = json.loads(ev[6:])["id"]
        out.append((rid, stamps))
    writer.close()


def run_reference(port: int, streams: int, rounds: int, tokens: int) -> list[tuple[str, list[int]]]:
    out: list[tuple[str, list[int]]] = []

    async def main() -> None:
        await asyncio.gather(*(_ref_stream(port, rounds, tokens, out) for _ in range(streams)))

    try:
        import uvloop  # the reference runs on uvloop, as tailscope does when it is installed
    except ImportError:
        asyncio.run(main())
    else:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main())
    return out


def _errors(pairs: list[tuple[list[int], list[int]]]) -> tuple[list[float], list[float]]:
    """TTFT and per-gap ITL errors (ms) of (measured, true) token-time pairs on the same clock; the TTFT errors in
    the order the server sent the first tokens (so the first ``streams`` of them are the first wave's)."""
    firsts, itl_err = [], []
    for measured, sent in pairs:
        if not sent or len(sent) != len(measured):
            continue
        got, true = np.asarray(measured, dtype=np.int64), np.asarray(sent, dtype=np.int64)
        firsts.append((int(true[0]), (got[0] - true[0]) / 1e6))
        itl_err.extend(((np.diff(got) - np.diff(true)) / 1e6).tolist())
    firsts.sort()
    return [e for _, e in firsts], itl_err


def measure_reference(streams: int, tokens: int, rounds: int, ttft_ms: float, itl_ms: float) -> dict[str, float]:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        truth_path = Path(tmp) / "truth.json"
        server = start_server(port, truth_path, ttft_ms, itl_ms)
        try:
            cpu0, wall0, cs0 = time.process_time(), time.perf_counter(), _switches()
            with PeakRss() as rss:
                got = run_reference(port, streams, rounds, tokens)
            cpu, wall, cs = time.process_time() - cpu0, time.perf_counter() - wall0, _switches() - cs0
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(20)
        truth = json.loads(truth_path.read_text())
    ttft_err, itl_err = _errors([(stamps, truth["token_ns"].get(rid, [])) for rid, stamps in got])
    events = sum(len(s) for _, s in got)
    row = _row(streams, len(ttft_err), ttft_err, itl_err, events / wall, itl_ms, cpu / wall, cpu / max(1, events))
    return {**row, "peak_rss_mb": rss.peak, "switches_per_kevent": 1e3 * cs / max(1, events)}


def _row(
    streams: int,
    ok: int,
    ttft_err: list[float],
    itl_err: list[float],
    out_tok_s: float,
    itl_ms: float,
    cpu: float,
    cpu_per_event_s: float,
) -> dict[str, float]:
    ideal = streams * 1000.0 / itl_ms  # tokens/s if every stream ran at the server's pace
    first, rest = ttft_err[:streams], ttft_err[streams:]
    return {
        # the first wave (the first ``streams`` first tokens the server sent: every slot's first request) and the rest
        "ttft_err_p99_first_wave": float(np.percentile(first, 99)) if first else float("nan"),
        "ttft_err_p99_rest": float(np.percentile(rest, 99)) if rest else float("nan"),
        "streams": streams,
        "requests_ok": ok,
        "ttft_err_p50": float(np.percentile(ttft_err, 50)),
        "ttft_err_p99": float(np.percentile(ttft_err, 99)),
        "itl_err_p50": float(np.percentile(itl_err, 50)),
        "itl_err_p99": float(np.percentile(itl_err, 99)),
        "out_tok_s": out_tok_s,
        "sustained_pct": 100.0 * out_tok_s / ideal,
        "client_cpu_pct": 100.0 * cpu,
        "cpu_us_per_event": 1e6 * cpu_per_event_s,
    }


def measure(
    streams: int,
    tokens: int,
    rounds: int,
    ttft_ms: float,
    itl_ms: float,
    trace_context: str = "off",
    store: bool = True,
    otlp: bool = False,
    arrival_stamp: str = "user",
    hot: str | None = None,
) -> dict[str, float]:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        truth_path = Path(tmp) / "truth.json"
        server = start_server(port, truth_path, ttft_ms, itl_ms)
        collector, cport = None, 0
        if otlp:
            cport = free_port()
            collector = start_collector(cport, Path(tmp) / "traces.duckdb")
        try:
            cpu0, wall0, cs0 = time.process_time(), time.perf_counter(), _switches()
            with PeakRss() as rss, tailscope.using_hot_loop(hot) if hot else contextlib.nullcontext():
                res = tailscope.bench(
                    f"http://127.0.0.1:{port}",
                    requests=streams * rounds,
                    concurrency=streams,
                    input_tokens=64,
                    output_tokens=tokens,
                    timeout_first_token=60,
                    timeout_total=120,
                    metrics_url="off",
                    trace_context=trace_context,
                    otlp_endpoint=f"http://127.0.0.1:{cport}" if collector is not None else None,
                    store=Path(tmp) / "db.duckdb" if store else None,
                    arrival_stamp=arrival_stamp,
                )
            cpu, wall, cs = time.process_time() - cpu0, time.perf_counter() - wall0, _switches() - cs0
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(20)
            if collector is not None:
                collector.send_signal(signal.SIGINT)
                collector.wait(20)
        truth = json.loads(truth_path.read_text())
    ttft_err, itl_err = _errors(
        [
            ([t + res.t0_ns for t in r.chunk_times_ns], truth["token_ns"].get(r.server_request_id or "", []))
            for r in res.records
            if r.ok
        ]
    )
    # the server's true gap between events that share a stamp: ≈ 0 when the server wrote them together (no error),
    # ≈ the ITL when they arrived apart and were read together (the earlier one stamped late by that much)
    true_of = truth["token_ns"]
    shared_gaps = [
        (t[i + 1] - t[i]) / 1e6
        for r in res.records
        if r.ok and len(t := true_of.get(r.server_request_id or "", [])) == len(r.chunk_times_ns)
        for i in range(len(t) - 1)
        if r.chunk_times_ns[i] == r.chunk_times_ns[i + 1]
    ]
    s = res.summary
    events = sum(len(r.chunk_times_ns) for r in res.records)
    # events that share their arrival stamp with the previous one: read together (coalesced in one network read)
    shared = sum(sum(a == b for a, b in zip(r.chunk_times_ns, r.chunk_times_ns[1:], strict=False)) for r in res.records)
    return _row(
        streams,
        s.requests.completed,
        ttft_err,
        itl_err,
        s.output_tokens_per_s,
        itl_ms,
        cpu / wall,
        cpu / max(1, events),
    ) | {
        "peak_rss_mb": rss.peak,
        "switches_per_kevent": 1e3 * cs / max(1, events),
        "shared_stamp_pct": 100.0 * shared / max(1, events),
        "shared_true_gap_p50": float(np.percentile(shared_gaps, 50)) if shared_gaps else float("nan"),
        "shared_true_gap_p99": float(np.percentile(shared_gaps, 99)) if shared_gaps else float("nan"),
        "spans_exported": float(res.extra.get("trace_context", {}).get("client_spans", {}).get("exported", 0)),
        "arrival_stamps": dict(res.extra.get("client", {}).get("arrival_stamps") or {}),
        "late_firsts": _late_firsts(res, truth["token_ns"]),
    }


def _late_firsts(
    res: Any, true_of: dict[str, list[int]], over_ms: float = 1.0
) -> list[tuple[float, float, bool, float]]:
    """(seconds into the run, error ms, read together with the next event, the server's gap to that event ms) of
    every first token stamped more than ``over_ms`` after the server sent it. A TCP read carries one stamp, the last
    segment's: a first token still unread when the server's next event arrived shares that event's stamp."""
    out = []
    for r in res.records:
        t = true_of.get(r.server_request_id or "", [])
        c = r.chunk_times_ns
        if r.ok and t and c:
            err = (c[0] + res.t0_ns - t[0]) / 1e6
            if err > over_ms:
                shared = len(c) > 1 and c[0] == c[1]
                gap = (t[1] - t[0]) / 1e6 if len(t) > 1 else float("nan")
                out.append((round(c[0] / 1e9, 3), round(err, 2), shared, round(gap, 2)))
    return sorted(out)


def _paired_line(n: int, who: str, trios: list[tuple[float, float, float, float]], seed: int) -> str:
    """The CPU per event of ``who`` minus the reference's, trio by trio (each pair measured in the same minutes):
    median, a bootstrap 95 % interval of that median, and how many trios were below; TTFT error p99 counts alike."""
    d = np.array([t - r for t, r, _, _ in trios])
    rng = np.random.default_rng(seed)
    boot = np.median(rng.choice(d, size=(10_000, len(d))), axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    ttft_le = sum(t <= r for _, _, t, r in trios)
    return (
        f"{who} − reference at {n} streams, CPU µs/event over {len(d)} trios: median {np.median(d):+.2f} "
        f"(95 % interval of the median {lo:+.2f} … {hi:+.2f}), below in {int((d < 0).sum())} of {len(d)}; "
        f"[{', '.join(f'{x:+.1f}' for x in d)}]; TTFT error p99 at or below the reference's in {ttft_le} of {len(d)}"
    )


def warm_up(store: bool) -> float:
    """One one-request bench against a fresh server: what the first bench of a process loads (tailscope's facade
    imports lazily) is then outside every row, as the reference's and DuckDB's imports are. Returns its CPU ms."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(port, Path(tmp) / "truth.json", 1.0, 1.0)
        try:
            cpu0 = time.process_time()
            tailscope.bench(
                f"http://127.0.0.1:{port}",
                requests=1,
                concurrency=1,
                input_tokens=8,
                output_tokens=4,
                metrics_url="off",
                store=Path(tmp) / "warm.duckdb" if store else None,
            )
            return 1e3 * (time.process_time() - cpu0)
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", default="16,64,128,256")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=10, help="requests per stream (issue 20's setup: 10)")
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--trace-context", default="off", help="comma list of off/on/RATIO: a row per value")
    ap.add_argument(
        "--otlp", default="off", help="comma list of off/on: export client spans to a `trace collect` process"
    )
    ap.add_argument(
        "--arrival-stamp",
        default="user",
        help="comma list of user/kernel: tailscope's arrival stamps (a row per value)",
    )
    ap.add_argument(
        "--hot-loop",
        default="",
        help="comma list of compiled/python: tailscope's hot loop, a row per value (default: what is installed)",
    )
    ap.add_argument(
        "--read-window",
        default="",
        help="comma list of µs: kernel-stamped reads batched per window (TAILSCOPE_READ_WINDOW_US; 0 = off), a row per"
        " value (default: the library's)",
    )
    ap.add_argument("--reference", choices=("on", "off"), default="on", help="also run the raw reference client")
    ap.add_argument(
        "--store", default="on", help="comma list of on/off: tailscope with its DuckDB store (as bench runs) or without"
    )
    ap.add_argument(
        "--warm-up",
        choices=("on", "off"),
        default="on",
        help="one tiny bench before the rows, so that no row pays tailscope's lazy imports (printed on its own)",
    )
    ap.add_argument(
        "--order",
        choices=("fixed", "alternate"),
        default="fixed",
        help="fixed: the reference first in every trio; alternate: last in every second one (for paired comparisons)",
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the paired comparison's bootstrap")
    a = ap.parse_args()
    print(f"machine: {os.cpu_count()} CPUs; server TTFT {a.ttft_ms} ms, ITL {a.itl_ms} ms, {a.tokens} tokens")
    if "on" in a.store.split(","):
        # imports are outside every row's CPU (the reference's and tailscope's own modules load with this script);
        # DuckDB loads lazily at a bench's first store use: imported here, so the first store row does not pay it alone
        cpu0 = time.process_time()
        import duckdb  # noqa: F401

        print(f"DuckDB import: {1e3 * (time.process_time() - cpu0):.0f} ms CPU (once per process; not in the rows)")
    if a.warm_up == "on":
        ms = warm_up(store="on" in a.store.split(","))
        print(
            f"tailscope's first bench (lazy imports, first-call set-up): {ms:.0f} ms CPU "
            "(once per process; not in the rows)"
        )
    print(
        f"{'client':>15} {'streams':>7} {'trace':>5} {'ok':>5} {'TTFT err p50':>12} {'p99':>7} {'ITL err p50':>11} "
        f"{'p99':>7} {'out tok/s':>10} {'sustained':>9} {'client CPU':>10} {'µs/event':>8} {'peak RSS':>8} "
        f"{'TTFT err p99 1st wave':>21} {'rest':>7}"
    )

    def show(who: str, n: int, tc: str, m: dict[str, float]) -> None:
        print(
            f"{who:>15} {n:>7} {tc:>5} {m['requests_ok']:>5} {m['ttft_err_p50']:>10.2f}ms {m['ttft_err_p99']:>5.2f}ms "
            f"{m['itl_err_p50']:>9.3f}ms {m['itl_err_p99']:>5.2f}ms {m['out_tok_s']:>10,.0f} "
            f"{m['sustained_pct']:>8.1f}% {m['client_cpu_pct']:>9.1f}% {m['cpu_us_per_event']:>8.1f} "
            f"{m['peak_rss_mb']:>6.0f}MB {m['ttft_err_p99_first_wave']:>19.2f}ms {m['ttft_err_p99_rest']:>5.2f}ms"
            f"  wake-ups {m['switches_per_kevent']:.0f}/1k events"
            + (f"  spans {m['spans_exported']:.0f}" if m.get("spans_exported") else "")
            + (
                f"  shared stamps {m['shared_stamp_pct']:.1f}% (true gap p50 {m['shared_true_gap_p50']:.2f} ms, "
                f"p99 {m['shared_true_gap_p99']:.2f} ms)"
                if "shared_stamp_pct" in m
                else ""
            )
            + (
                f"  first tokens >1 ms late: {len(m['late_firsts'])}"
                f" at {sorted({round(x[0], 1) for x in m['late_firsts']})} s"
                f" ({sum(x[2] for x in m['late_firsts'])} read together with the next event; the server's gap to it"
                f" {min(x[3] for x in m['late_firsts']):.1f}–{max(x[3] for x in m['late_firsts']):.1f} ms)"
                if m.get("late_firsts")
                else ""
            )
            + (f"  stamps {m['arrival_stamps']}" if m.get("arrival_stamps") else ""),
            flush=True,
        )

    paired: dict[tuple[int, str], list[tuple[float, float, float, float]]] = {}
    for k, x in enumerate(a.streams.split(",")):
        n = int(x)
        ref: dict[str, float] | None = None
        # with --order alternate the reference runs last in every second trio, so that no order effect favours a side
        ref_last = a.order == "alternate" and k % 2 == 1
        if a.reference == "on" and not ref_last:
            ref = measure_reference(n, a.tokens, a.rounds, a.ttft_ms, a.itl_ms)
            show("reference", n, "-", ref)
        rows = []
        for tc in a.trace_context.split(","):
            for st in a.store.split(","):
                for ot in a.otlp.split(","):
                    if ot == "on" and tc == "off":
                        continue  # client spans are exported for traced requests only
                    for stamp in a.arrival_stamp.split(","):
                        for hot in a.hot_loop.split(",") if a.hot_loop else [None]:
                            for window in a.read_window.split(",") if a.read_window else [None]:
                                with _read_window(window):
                                    m = measure(
                                        n, a.tokens, a.rounds, a.ttft_ms, a.itl_ms, tc, st == "on", ot == "on",
                                        arrival_stamp=stamp, hot=hot,
                                    )  # fmt: skip
                                who = ("tailscope" if st == "on" else "ts -store") + ("+spans" if ot == "on" else "")
                                who += ("/k" if stamp == "kernel" else "") + ("/py" if hot == "python" else "")
                                who += f"/w{window}" if window is not None else ""
                                show(who, n, tc, m)
                                rows.append((who, m))
        if a.reference == "on" and ref_last:
            ref = measure_reference(n, a.tokens, a.rounds, a.ttft_ms, a.itl_ms)
            show("reference", n, "-", ref)
        if ref is not None:
            for who, m in rows:
                paired.setdefault((n, who), []).append(
                    (m["cpu_us_per_event"], ref["cpu_us_per_event"], m["ttft_err_p99"], ref["ttft_err_p99"])
                )
    for (n, who), trios in paired.items():
        if len(trios) > 1:
            print(_paired_line(n, who, trios, a.seed))


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
