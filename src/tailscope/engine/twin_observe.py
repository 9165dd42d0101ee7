"""From request records to the twin's fitting observations (pure).

Works on any stored run — a calibration probe or an ordinary bench run — because concurrency is measured from the
records themselves: a request's *in-flight* count is how many other requests were between sent and end when it was
sent, and its *decode concurrency* is the average number of requests streaming during its own decode phase.
"""

from __future__ import annotations

from collections.abc import Sequence

from tailscope.engine.twin_fit import DecodeObservation, LoadedTtftObservation, PrefillObservation
from tailscope.metrics.request import output_token_count
from tailscope.records import RequestRecord


def _overlap_counts(records: Sequence[RequestRecord]) -> tuple[list[int], list[float]]:
    """(other requests in flight at any time between this request's send and its first token, mean concurrency
    over this request's decode phase).

    Requests sent at the same instant count as in flight for each other: a closed-loop probe that starts N
    requests together is not N requests alone on the server.
    """
    spans = [(r.sent_ns or 0, r.end_ns or 0) for r in records]
    inflight: list[int] = []
    decode_conc: list[float] = []
    for i, r in enumerate(records):
        s, _ = spans[i]
        f = r.first_token_ns or s
        inflight.append(sum(1 for j, (s2, e2) in enumerate(spans) if j != i and s2 <= f and e2 > s))
        a, b = f, r.end_ns or s
        if b <= a:
            decode_conc.append(1.0)
            continue
        total = 0.0
        for s2, e2 in spans:
            lo, hi = max(a, s2), min(b, e2)
            if hi > lo:
                total += hi - lo
        decode_conc.append(total / (b - a))
    return inflight, decode_conc


def observations(
    records: Sequence[RequestRecord], *, min_output: int = 8
) -> tuple[list[PrefillObservation], list[DecodeObservation], list[LoadedTtftObservation]]:
    """Observations from successful, non-warmup records with known prompt lengths.

    - a request sent with nothing else in flight → a prefill observation (TTFT from send), except the run's first
      request(s), whose TTFT also pays for opening a connection;
    - sent while others streamed → a loaded-TTFT observation;
    - at least ``min_output`` tokens → a decode observation: its TPOT, at its measured decode concurrency and
      average context (prompt + half the output).
    """
    ok = [
        r
        for r in records
        if r.ok and not r.warmup and r.input_tokens and r.sent_ns is not None and r.first_token_ns is not None
    ]
    if not ok:
        return [], [], []
    inflight, conc = _overlap_counts(ok)
    first_sent = min(r.sent_ns or 0 for r in ok)
    pre: list[PrefillObservation] = []
    dec: list[DecodeObservation] = []
    loaded: list[LoadedTtftObservation] = []
    for r, n_in, c in zip(ok, inflight, conc, strict=True):
        prompt = r.input_tokens or 0  # filtered above: known for every record here
        ttft_us = ((r.first_token_ns or 0) - (r.sent_ns or 0)) / 1e3
        if r.sent_ns == first_sent:
            pass  # the run's first TTFT includes opening its connection (measured +10–20 ms on vLLM): not prefill
        elif n_in == 0:
            pre.append(PrefillObservation(prompt, ttft_us))
        else:
            loaded.append(LoadedTtftObservation(float(n_in), prompt, ttft_us))
        n = output_token_count(r)
        if n >= min_output and r.end_ns is not None and r.end_ns > (r.first_token_ns or 0):
            # TPOT, not the median gap: events that reach the client in one read share a stamp (gap 0), so
            # per-gap statistics undercount; the mean over the decode phase does not
            decode_us = (r.end_ns - (r.first_token_ns or 0)) / 1e3
            dec.append(DecodeObservation(c, prompt + n / 2.0, decode_us / (n - 1), decode_us))
    return pre, dec, loaded


def steady_decode_gaps(
    runs: Sequence[Sequence[RequestRecord]], *, max_streams: int = 8
) -> dict[int, tuple[float, int]]:
    """The mean time between two tokens of a stream by how many streams were decoding, counting only the gaps during
    which no other request was arriving: ``{streams: (mean gap ms, gaps)}`` over the runs (each one run's records,
    on its own timeline), ``max_streams`` standing for that many or more.

    A gap counts when no request's window from its send to its first token overlaps it: what is left is the engine's
    steady decode step at that batch, without any arrival's front end or prefill (which on a real server stall the
    decodes over several gaps, in a simulation within one). Comparing a server's gaps with its twin's at equal batch
    separates a change in the server's speed from the twin's model of batching and arrivals.
    """
    total: dict[int, list[float]] = {}
    for records in runs:
        for streams, (ms, n) in _steady_gaps(records, max_streams).items():
            acc = total.setdefault(streams, [0.0, 0])
            acc[0] += ms
            acc[1] += n
    return {k: (v[0] / v[1], int(v[1])) for k, v in sorted(total.items())}


def _steady_gaps(records: Sequence[RequestRecord], max_streams: int) -> dict[int, tuple[float, int]]:
    """One run's steady gaps: ``{streams: (total ms, gaps)}``."""
    import numpy as np

    ok = [r for r in records if r.ok and r.sent_ns is not None and r.first_token_ns is not None and r.end_ns]
    if not ok:
        return {}
    sent = np.array([r.sent_ns for r in ok], dtype=np.float64)
    order = np.argsort(sent, kind="stable")
    win_s = sent[order]
    win_max_f = np.maximum.accumulate(np.array([r.first_token_ns for r in ok], dtype=np.float64)[order])
    firsts = np.sort(np.array([r.first_token_ns for r in ok], dtype=np.float64))
    ends = np.sort(np.array([r.end_ns for r in ok], dtype=np.float64))
    starts: list[np.ndarray] = []
    stops: list[np.ndarray] = []
    for r in ok:
        t = np.asarray(r.chunk_times_ns, dtype=np.float64)
        if len(t) >= 2:
            starts.append(t[:-1])
            stops.append(t[1:])
    if not starts:
        return {}
    a, b = np.concatenate(starts), np.concatenate(stops)
    # a gap (a, b) overlaps an arrival window (s, f) when s < b and f > a: among the windows opened before b, the
    # latest first token
    k = np.searchsorted(win_s, b, side="left")
    overlapped = (k > 0) & (win_max_f[np.maximum(k - 1, 0)] > a)
    mid = (a + b) / 2
    streams = np.searchsorted(firsts, mid, side="right") - np.searchsorted(ends, mid, side="right")
    keep = ~overlapped & (streams >= 1)
    gaps_ms = (b - a)[keep] / 1e6
    n = np.minimum(streams[keep], max_streams)
    return {int(s): (float(gaps_ms[n == s].sum()), int((n == s).sum())) for s in np.unique(n)}
