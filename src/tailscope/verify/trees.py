"""The method's troubleshooting tables as decision trees: symptom → the checks in the method's order → each check's
verdict from what tailscope saw in the run (records, server metrics, GPU telemetry, a trace analysis, a baseline).

Sources: ``shared/method/001`` §5.1 (the table: slow first token, slow generation, stuttering, OOM under
concurrency, P50 fine / P99 broken, smaller model slower) and ``004`` §9 (the decision tree: TTFT high, TPOT high,
P99 ≫ P50, throughput ceiling, cost spike). A branch's verdict is ``yes`` (the evidence points here), ``no`` (the
evidence rules it out) or ``unknown`` (this run holds no evidence for it — the branch says what would).

The results are in :mod:`~tailscope.verify.tree_model`, the thresholds and shared evidence in
:mod:`~tailscope.verify.tree_evidence`, the trees in :mod:`~tailscope.verify.trees_latency` and
:mod:`~tailscope.verify.trees_capacity`; this module lists them in the method's order and walks them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tailscope.metrics.gpu import summarize_gpu
from tailscope.verify.findings import RunView
from tailscope.verify.tree_model import Tree, TreeInput
from tailscope.verify.trees_capacity import cost_tree, oom_tree, smaller_model_tree, throughput_tree
from tailscope.verify.trees_latency import stutter_tree, tail_tree, tpot_tree, ttft_tree

#: every tree, in the order the method lists the symptoms
TREES: dict[str, Callable[[TreeInput], Tree]] = {
    "ttft_high": ttft_tree,
    "tpot_high": tpot_tree,
    "stutter": stutter_tree,
    "oom": oom_tree,
    "tail": tail_tree,
    "throughput_ceiling": throughput_tree,
    "smaller_model_slower": smaller_model_tree,
    "cost_spike": cost_tree,
}


def walk_trees(
    view: RunView,
    *,
    gpu: Mapping[str, Any] | None = None,
    model: str | None = None,
    baseline: RunView | None = None,
    baseline_model: str | None = None,
    summary: Mapping[str, Any] | None = None,
) -> tuple[Tree, ...]:
    """Every tree walked on a run (``gpu``: ``summary.gpu``, computed from the view's samples when not given)."""
    if gpu is None:
        out_tokens = int(np.nansum(view.output_tokens)) if view.n else 0
        gpu = summarize_gpu(view.samples, output_tokens=out_tokens or None)
    inp = TreeInput(view, gpu, model=model, baseline=baseline, baseline_model=baseline_model, summary=summary)
    return tuple(tree(inp) for tree in TREES.values())
