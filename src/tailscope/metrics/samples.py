"""A run's latency samples as arrays: per-request TTFT, TPOT, E2E and send lag, and the token gaps (max stall, ITL,
ICL) of every stream, vectorised (a long run has millions of token gaps)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np

from tailscope.metrics import request as rq
from tailscope.metrics.chunk_times import EXACT, ChunkTimes
from tailscope.records import RequestRecord, Status

_MS = 1e6


def run_samples(records: Sequence[RequestRecord], chunk_times: ChunkTimes | None = None) -> dict[str, Any]:
    """The samples :func:`~tailscope.metrics.summary.summarize` reads (ms): ``ttft``, ``ttft_sent``, ``tpot``,
    ``e2e``, ``e2e_sent`` over successful requests, ``lag`` (send lag) over all, the token gaps ``stall``, ``itl`` and
    ``icl`` (see :func:`gap_samples`), and ``_flat``: the integer token gaps where the perceived block can reuse them.
    ``chunk_times``: ``records``' chunk times already flattened (:func:`~tailscope.metrics.chunk_times.flatten`).
    """
    scalars = _scalar_samples(records)
    if scalars is None:
        scalars = _scalar_samples_py(records)
    ok = [r for r in records if r.ok]
    if chunk_times is not None and len(ok) != len(records):
        chunk_times = chunk_times.select(np.fromiter((r.ok for r in records), dtype=bool, count=len(records)))
    flat: list[tuple[np.ndarray, np.ndarray]] = []
    stall, itl, icl = gap_samples(ok, flat, chunk_times)
    return {"_flat": flat, **scalars, "stall": stall, "itl": itl, "icl": icl}


_TIMES = attrgetter("scheduled_ns", "sent_ns", "first_token_ns", "end_ns", "output_tokens")
_NONE = type(None)
_LIMIT = 2**62  # int64 differences of values below this cannot overflow


def _int_column(values: tuple[Any, ...], n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(values as int64 with None as 0, where a value is given)``, or None when one is neither a plain int that
    fits nor None."""
    kinds = set(map(type, values))
    if not kinds <= {int, _NONE}:
        return None
    given = np.fromiter((v is not None for v in values), dtype=bool, count=n) if _NONE in kinds else np.ones(n, bool)
    try:
        arr = np.fromiter(values if _NONE not in kinds else (0 if v is None else v for v in values), np.int64, n)
    except OverflowError:
        return None
    if n and not (abs(int(arr.max())) < _LIMIT and abs(int(arr.min())) < _LIMIT):
        return None
    return arr, given


def _scalar_samples(records: Sequence[RequestRecord]) -> dict[str, np.ndarray] | None:
    """The per-request samples of :func:`_scalar_samples_py`, column by column: the same values bit for bit (int64
    differences are exact below 2**62 and then divided as Python divides an int by a float), in the same order.
    None when a time or token count is not a plain int (hand-made records): the per-request path takes those."""
    n = len(records)
    if n == 0:
        return None
    columns = tuple(zip(*map(_TIMES, records), strict=True))
    parsed = [_int_column(c, n) for c in columns[:4]]
    if any(c is None for c in parsed):
        return None
    (sched, has_sched), (sent, has_sent), (first, has_first), (end, has_end) = parsed  # type: ignore[misc]
    if not has_sched.all():
        return None
    ok = np.fromiter((r.status is Status.OK for r in records), dtype=bool, count=n)
    outs = columns[4]
    if not set(map(type, outs)) <= {int, _NONE}:
        return None
    tokens = [rq.output_token_count(r) if o is None else o for r, o in zip(records, outs, strict=True)]
    if not all(type(t) is int and abs(t) < _LIMIT for t in tokens):
        return None
    ntok = np.asarray(tokens, dtype=np.int64)
    got_first = ok & has_first
    got_end = ok & has_end
    tpot = got_first & got_end & (ntok >= 2)
    return {
        "ttft": (first - sched)[got_first] / _MS,
        "ttft_sent": (first - sent)[got_first & has_sent] / _MS,
        "tpot": (end - first)[tpot] / _MS / (ntok[tpot] - 1),
        "e2e": (end - sched)[got_end] / _MS,
        "e2e_sent": (end - sent)[got_end & has_sent] / _MS,
        "lag": (sent - sched)[has_sent] / _MS,
    }


def _scalar_samples_py(records: Sequence[RequestRecord]) -> dict[str, np.ndarray]:
    """TTFT, TPOT, E2E (from scheduled and from sent) of successful requests and the send lag of all, one request at
    a time with :mod:`~tailscope.metrics.request`'s functions (the definition; any value types)."""
    out: dict[str, list[float]] = {k: [] for k in ("ttft", "ttft_sent", "tpot", "e2e", "e2e_sent", "lag")}
    for r in records:
        values = [("lag", rq.send_lag_ms(r))]
        if r.ok:
            values += [
                ("ttft", rq.ttft_ms(r)),
                ("ttft_sent", rq.ttft_ms(r, from_sent=True)),
                ("tpot", rq.tpot_ms(r)),
                ("e2e", rq.e2e_ms(r)),
                ("e2e_sent", rq.e2e_ms(r, from_sent=True)),
            ]
        for key, val in values:
            if val is not None:
                out[key].append(val)
    return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}


def gap_samples(
    ok: Sequence[RequestRecord],
    flat: list[tuple[np.ndarray, np.ndarray]] | None = None,
    chunk_times: ChunkTimes | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Max stall per request, ITL and ICL samples (ms) of ``ok`` in record order, as :mod:`~tailscope.metrics.request`
    computes them one request at a time, vectorised — a long run has millions of token gaps.

    The values are the same bit for bit: integer times are differenced exactly in int64 and then divided, as
    Python's ``(int − int) / 1e6`` is; float times (hand-made records) are differenced in float64, as Python does.
    Times beyond what those represent exactly fall back to the per-request functions. ``flat`` receives
    ``(lengths, gaps)`` — the gaps inside each request, int64 ns — when the times are integers below 2**53 (the
    perceived block's stall counts reuse them). ``chunk_times``: ``ok``'s chunk times already flattened (then
    read from there, not from the records; never modified).
    """
    if chunk_times is not None:
        lengths, times, ints = chunk_times.lengths, chunk_times.flat, True
        total = len(times)
    else:
        lengths = np.fromiter((len(r.chunk_times_ns) for r in ok), dtype=np.int64, count=len(ok))
        total = int(lengths.sum())
    if total == 0:
        empty = np.asarray([], dtype=np.float64)
        return empty, empty.copy(), empty.copy()
    if chunk_times is None:
        ints = all(type(x) is int for r in ok for x in r.chunk_times_ns[:1]) and all(
            type(x) is int for r in ok for x in r.chunk_times_ns[-1:]
        )
        try:
            times = np.fromiter(
                chain.from_iterable(r.chunk_times_ns for r in ok), dtype=np.int64 if ints else np.float64, count=total
            )
        except (OverflowError, TypeError, ValueError):
            return _gap_samples_py(ok)
        lim = 2**62 if ints else 2.0**53  # int64 differences cannot overflow / float64 holds the integers exactly
        if not abs(times.max()) < lim or not abs(times.min()) < lim:  # (also catches inf and nan)
            return _gap_samples_py(ok)
    d = np.diff(times)  # d[j] = times[j+1] - times[j]
    starts = np.cumsum(lengths) - lengths
    keep = np.ones(total, dtype=bool)
    keep[starts[lengths > 0]] = False  # a request's first chunk has no gap before it
    inner = keep[1:]
    gaps_ns = d[inner]
    del d  # a long run's arrays are tens of MB each: fewer alive at once, fewer fresh pages to fault in
    if (
        flat is not None
        and ints
        and (chunk_times is not None or (abs(times.max()) < EXACT and abs(times.min()) < EXACT))
    ):
        flat.append((lengths, gaps_ns))
    icl = gaps_ns.astype(np.float64)
    icl /= _MS  # in place: the same division as ``/``, without a second array
    multi = lengths >= 2
    if multi.any():
        # gaps of request i occupy gap_starts[i] ... in gaps_ns (requests with < 2 chunks contribute none)
        n_gaps = np.where(multi, lengths - 1, 0)
        gap_starts = (np.cumsum(n_gaps) - n_gaps)[multi]
        stall = np.maximum.reduceat(gaps_ns, gap_starts).astype(np.float64) / _MS
    else:
        stall = np.asarray([], dtype=np.float64)
    if _all_unit_tokens(ok):
        return stall, icl, icl  # one token per chunk: ITL = ICL (the same array; callers only read it)
    ks = np.fromiter(chain.from_iterable(_chunk_ks(r) for r in ok), dtype=np.int64, count=total)[keep]
    split = ks > 1
    values = np.where(split, icl / np.where(split, ks, 1), icl)
    itl = np.repeat(values, np.where(split, ks, 1))
    return stall, itl, icl


def _all_unit_tokens(ok: Sequence[RequestRecord]) -> bool:
    """Whether no chunk of ``ok`` carries more than one token. Each distinct ``chunk_tokens`` object is checked
    once (simulated records share one tuple per length; the records keep every object alive meanwhile)."""
    seen: set[int] = set()
    for r in ok:
        toks = r.chunk_tokens
        key = id(toks)
        if key in seen:
            continue
        if toks and max(toks) > 1:
            return False
        seen.add(key)
    return True


def _chunk_ks(r: RequestRecord) -> list[int]:
    """Tokens of each chunk of ``r`` as :func:`~tailscope.metrics.request.itl_samples_ms` reads them (missing = 1)."""
    n = len(r.chunk_times_ns)
    toks = list(r.chunk_tokens[:n])
    return toks + [1] * (n - len(toks))


def _gap_samples_py(ok: Sequence[RequestRecord]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    stall: list[float] = []
    itl: list[float] = []
    icl: list[float] = []
    for r in ok:
        v = rq.max_stall_ms(r)
        if v is not None:
            stall.append(v)
        itl.extend(rq.itl_samples_ms(r))
        icl.extend(rq.icl_samples_ms(r))
    return np.asarray(stall), np.asarray(itl), np.asarray(icl)
