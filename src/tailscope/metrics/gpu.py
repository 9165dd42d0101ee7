"""Host and GPU telemetry of a run: a DCGM exporter's (and a node exporter's) samples, scraped beside the engine's
``/metrics`` and aligned with the run's clock, reduced to the figures ``summary.gpu`` holds.

Pure: samples in, a JSON-ready dict out. The names are DCGM's field names as its exporter writes them
(``DCGM_FI_DEV_GPU_UTIL{gpu="0",…}``) and the node exporter's CPU counter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tailscope.records import ServerSample

#: DCGM exporter fields tailscope reads (units as DCGM reports them)
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent, 0–100
FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
FB_FREE = "DCGM_FI_DEV_FB_FREE"  # MiB
DRAM_ACTIVE = "DCGM_FI_PROF_DRAM_ACTIVE"  # ratio of cycles the memory interface is busy, 0–1
POWER = "DCGM_FI_DEV_POWER_USAGE"  # W
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"  # mJ since boot (counter)
#: node exporter: CPU seconds per mode and core (counter)
NODE_CPU = "node_cpu_seconds_total"

TELEMETRY_NAMES = frozenset({GPU_UTIL, FB_USED, FB_FREE, DRAM_ACTIVE, POWER, ENERGY, NODE_CPU})


def keep_telemetry(name: str) -> bool:
    """Whether a sample scraped from a telemetry exporter is stored with the run."""
    return name in TELEMETRY_NAMES


def _by_label(samples: Sequence[ServerSample], name: str) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for s in samples:
        if s.name == name:
            out.setdefault(s.labels, []).append((s.t_ns, s.value))
    for v in out.values():
        v.sort()
    return out


def _per_scrape(samples: Sequence[ServerSample], name: str, how: str) -> list[float]:
    """One value per scrape time over the label sets (GPUs): their ``mean``, ``sum`` or ``max``."""
    acc: dict[int, list[float]] = {}
    for s in samples:
        if s.name == name:
            acc.setdefault(s.t_ns, []).append(s.value)
    out = []
    for t in sorted(acc):
        vals = acc[t]
        out.append(sum(vals) / len(vals) if how == "mean" else sum(vals) if how == "sum" else max(vals))
    return out


def _stats(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "mean": sum(ordered) / len(ordered),
        "p50": ordered[len(ordered) // 2],
        "max": ordered[-1],
        "samples": float(len(ordered)),
    }


def summarize_gpu(samples: Sequence[ServerSample], *, output_tokens: int | None = None) -> dict[str, Any]:
    """``summary.gpu``: GPU utilisation, memory, memory bandwidth, power, energy (per output token) and host CPU.

    Keys are absent when the exporter did not expose the field; ``{}`` when no telemetry was scraped.

    * ``gpus``: how many GPUs reported (label sets of ``DCGM_FI_DEV_GPU_UTIL`` or ``FB_USED``).
    * ``util_pct``: mean over GPUs per scrape, then mean/p50/max over the run.
    * ``memory_used_mib`` / ``memory_total_mib`` / ``memory_used_frac``: the fullest GPU (used ÷ (used + free)).
    * ``dram_active``: memory-bandwidth busy ratio (0–1), mean over GPUs per scrape.
    * ``power_w``: summed over GPUs per scrape.
    * ``energy_j``: energy over the run, summed over GPUs (counter delta, mJ → J); ``energy_per_output_token_j``.
    * ``cpu_busy_pct``: the node exporter's non-idle CPU share over the run (all cores).
    """
    out: dict[str, Any] = {}
    util = _per_scrape(samples, GPU_UTIL, "mean")
    used_by = _by_label(samples, FB_USED)
    free_by = _by_label(samples, FB_FREE)
    gpus = max(len(_by_label(samples, GPU_UTIL)), len(used_by))
    if gpus:
        out["gpus"] = gpus
    if util:
        out["util_pct"] = _stats(util)
    if used_by:
        used_max = max(v for series in used_by.values() for _, v in series)
        out["memory_used_mib"] = {"max": used_max, "mean": _stats(_per_scrape(samples, FB_USED, "max"))["mean"]}
        totals = []
        fracs = []
        for labels, series in used_by.items():
            free = dict(free_by.get(labels, []))
            for t, used in series:
                if t in free and used + free[t] > 0:
                    totals.append(used + free[t])
                    fracs.append(used / (used + free[t]))
        if totals:
            out["memory_total_mib"] = max(totals)
            out["memory_used_frac"] = {"max": max(fracs), "mean": sum(fracs) / len(fracs)}
    dram = _per_scrape(samples, DRAM_ACTIVE, "mean")
    if dram:
        out["dram_active"] = _stats(dram)
    power = _per_scrape(samples, POWER, "sum")
    if power:
        out["power_w"] = _stats(power)
    energy = _by_label(samples, ENERGY)
    if energy:
        joules = sum(max(0.0, s[-1][1] - s[0][1]) for s in energy.values() if len(s) >= 2) / 1000.0
        out["energy_j"] = joules
        if output_tokens:
            out["energy_per_output_token_j"] = joules / output_tokens
    cpu = _cpu_busy(samples)
    if cpu is not None:
        out["cpu_busy_pct"] = cpu
    return out


def _cpu_busy(samples: Sequence[ServerSample]) -> float | None:
    """Non-idle share (%) of the node's CPU seconds over the run."""
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for s in sorted((s for s in samples if s.name == NODE_CPU), key=lambda s: s.t_ns):
        first.setdefault(s.labels, s.value)
        last[s.labels] = s.value
    if not last:
        return None
    total = sum(last[k] - first[k] for k in last)
    idle = sum(last[k] - first[k] for k in last if 'mode="idle"' in k)
    return 100.0 * (1.0 - idle / total) if total > 0 else None


def gpu_figure(gpu: Mapping[str, Any], key: str, stat: str = "max") -> float | None:
    """One figure of a ``summary.gpu`` dict (``gpu_figure(g, "util_pct", "mean")``), ``None`` when absent."""
    value = gpu.get(key)
    if isinstance(value, Mapping):
        value = value.get(stat)
    return float(value) if isinstance(value, int | float) else None
