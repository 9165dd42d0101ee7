"""The decision trees' results: a symptom's tree (:class:`Tree`) of checks (:class:`Branch`) and what a tree reads
(:class:`TreeInput`). A branch's verdict is ``yes`` (the evidence points here), ``no`` (the evidence rules it out) or
``unknown`` (this run holds no evidence for it — the branch says what would).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tailscope.verify.findings import RunView

YES, NO, UNKNOWN = "yes", "no", "unknown"


@dataclass(frozen=True, slots=True)
class Branch:
    """One check of a tree.

    Attributes:
        check: what the method says to check.
        verdict: ``yes`` (the evidence points here), ``no`` (ruled out) or ``unknown`` (no evidence in this run).
        evidence: the numbers behind the verdict, or what would give one.
        remedy: the method's fix for this branch.
    """

    check: str
    verdict: str
    evidence: str
    remedy: str

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "verdict": self.verdict, "evidence": self.evidence, "remedy": self.remedy}


@dataclass(frozen=True, slots=True)
class Tree:
    """One symptom's decision tree, walked on a run.

    Attributes:
        symptom: the tree's id (``ttft_high``, ``tpot_high``, ``stutter``, ``oom``, ``tail``, ``throughput_ceiling``,
            ``smaller_model_slower``, ``cost_spike``).
        title: the symptom in the method's words.
        present: whether the run shows the symptom (``None``: cannot tell, e.g. no baseline to compare with).
        evidence: the numbers behind ``present``.
        branches: the checks in the method's order.
        source: where in the method the tree comes from.
    """

    symptom: str
    title: str
    present: bool | None
    evidence: str
    branches: tuple[Branch, ...]
    source: str

    @property
    def causes(self) -> tuple[Branch, ...]:
        """The branches the evidence points at."""
        return tuple(b for b in self.branches if b.verdict == YES)

    def to_dict(self) -> dict[str, Any]:
        return {
            "symptom": self.symptom,
            "title": self.title,
            "present": self.present,
            "evidence": self.evidence,
            "source": self.source,
            "branches": [b.to_dict() for b in self.branches],
        }


@dataclass(frozen=True, slots=True)
class TreeInput:
    """What the trees read besides the run's view: GPU figures, model names, a baseline run's view."""

    view: RunView
    gpu: Mapping[str, Any]
    model: str | None = None
    baseline: RunView | None = None
    baseline_model: str | None = None
    summary: Mapping[str, Any] | None = None
