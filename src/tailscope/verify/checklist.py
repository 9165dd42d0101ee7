"""The method's pre-launch checklist (article 003 §5.1, "12 items, none optional"), each item judged from evidence:
the store's runs (summaries, tags, probes), trace sets, a contract, a generated alert-rule file — or a person's
attestation for what no measurement can show (an emergency plan, a security audit).

Pure: the caller (:func:`tailscope.checklist`) gathers the facts; this module decides what counts. Statuses:
``evidenced`` (the facts show it), ``attested`` (a person said so: ``--attest ID``) and ``missing``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tailscope.record_ops import find_record
from tailscope.verify.contract import Contract
from tailscope.verify.evaluate import Verdict, check_slo
from tailscope.verify.rundata import RunData

EVIDENCED, ATTESTED, MISSING = "evidenced", "attested", "missing"
#: the method: three rounds of load tests meeting the targets
BASELINE_RUNS = 3
#: the method: 20 % capacity headroom over the forecast
HEADROOM = 0.20
#: the method's golden alerts
GOLDEN_ALERTS = 5
#: a run passes its own targets with at most this error rate (when no contract says otherwise)
MAX_ERROR_RATE = 0.01


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What the checklist reads about one stored run."""

    id: str
    kind: str
    status: str
    probe: str | None = None
    tags: tuple[str, ...] = ()
    summary: Mapping[str, Any] | None = None
    started_at: str = ""


@dataclass(frozen=True, slots=True)
class ChecklistFacts:
    """Everything the checklist is judged on.

    Attributes:
        runs: the store's runs, newest first.
        trace_sets: names of the stored trace sets.
        contract: the service's contract (``None``: none given); ``contract_error`` when it did not validate.
        alert_rules: the alert names of a generated rule file (``None``: no file given), and its path.
        target_rps: the forecast request rate the capacity must hold with headroom (``None``: from the contract's
            ``requests_per_s``/``goodput_rps`` minimum, else unknown).
        attested: ids of items a person attests (``--attest ID``).
    """

    runs: Sequence[RunFacts] = ()
    trace_sets: Sequence[str] = ()
    contract: Contract | None = None
    contract_error: str | None = None
    alert_rules: Sequence[str] | None = None
    alerts_path: str | None = None
    target_rps: float | None = None
    attested: Collection[str] = field(default_factory=frozenset)


@dataclass(frozen=True, slots=True)
class ChecklistItem:
    """One item: the method's wording, its status, the evidence (or what is missing) and what counts."""

    id: str
    title: str
    status: str
    evidence: str
    counts: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "status": self.status, "evidence": self.evidence,
                "counts": self.counts}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Checklist:
    """The checklist judged: ``items`` in the method's order; ``exit_code`` 1 while any item is missing."""

    items: tuple[ChecklistItem, ...]

    @property
    def missing(self) -> tuple[ChecklistItem, ...]:
        return tuple(i for i in self.items if i.status == MISSING)

    @property
    def passed(self) -> bool:
        return not self.missing

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def item(self, item_id: str) -> ChecklistItem:
        """One item by id. Raises KeyError."""
        return find_record(self.items, lambda i: i.id, item_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "exit_code": self.exit_code,
            "missing": [i.id for i in self.missing],
            "items": [i.to_dict() for i in self.items],
        }


#: items no measurement can show: id → (the method's wording, what counts)
MANUAL_ITEMS: dict[str, tuple[str, str]] = {
    "emergency_plan": (
        "Emergency plan filed: steps, owners, contacts mailed to every stakeholder",
        "a person's attestation (--attest emergency_plan)",
    ),
    "canary": (
        "Canary strategy set: share (e.g. 5 %), duration (e.g. 24 h), rollback condition (e.g. error rate > 1 %)",
        "a person's attestation (--attest canary)",
    ),
    "logging": (
        "Log conventions: request_id, user_id, prompt_hash and durations in every service's logs",
        "a person's attestation (--attest logging)",
    ),
    "security": (
        "Security audit passed: penetration test, prompt-injection defences verified",
        "a person's attestation (--attest security)",
    ),
    "compliance": (
        "Compliance checked: data masking, log retention, output review",
        "a person's attestation (--attest compliance)",
    ),
    "on_call": (
        "On-call rota for the first 72 hours, 10-minute response",
        "a person's attestation (--attest on_call)",
    ),
}

ITEM_IDS: tuple[str, ...] = (
    "baseline",
    "contract",
    "instrumentation",
    "alerts",
    "drill",
    "capacity",
    *MANUAL_ITEMS,
)


def _run_meets_targets(run: RunFacts, contract: Contract | None) -> tuple[bool, str]:
    """Whether a stored run met its targets: the contract's SLOs (from its summary) when given, else the run's own
    ``--slo`` verdicts and an error rate ≤ 1 %."""
    summary = run.summary or {}
    if contract is not None and contract.slos:
        data = RunData(id=run.id, kind=run.kind, summary=summary)
        checks = [check_slo(data, s, contract.slos) for s in contract.slos]
        bad = [c.name for c in checks if c.verdict is not Verdict.PASS]
        return (not bad), ("contract SLOs met" if not bad else "not met: " + ", ".join(bad))
    req = summary.get("requests") or {}
    total = req.get("total") or 0
    err = float(req.get("failed", 0)) / total if total else 1.0
    slos = summary.get("slo") or []
    failed = [s.get("slo") for s in slos if not s.get("passed")]
    ok = total > 0 and err <= MAX_ERROR_RATE and not failed
    return ok, f"error rate {err:.1%}" + (f", failed {', '.join(map(str, failed))}" if failed else "")


def _target_rps(facts: ChecklistFacts) -> float | None:
    if facts.target_rps is not None:
        return facts.target_rps
    if facts.contract is not None:
        mins = [s.min for s in facts.contract.slos if s.metric in ("requests_per_s", "goodput_rps") and s.min]
        if mins:
            return max(mins)
    return None


def judge(facts: ChecklistFacts) -> Checklist:
    """Every item of the checklist, judged on ``facts``."""
    unknown = sorted(set(facts.attested) - set(ITEM_IDS))
    if unknown:
        raise ValueError(f"--attest {', '.join(unknown)}: unknown item; items are {', '.join(ITEM_IDS)}")
    items = [
        _baseline(facts),
        _contract(facts),
        _instrumentation(facts),
        _alerts(facts),
        _drill(facts),
        _capacity(facts),
    ]
    for item_id, (title, counts) in MANUAL_ITEMS.items():
        attested = item_id in facts.attested
        items.append(
            ChecklistItem(
                item_id,
                title,
                ATTESTED if attested else MISSING,
                "attested" if attested else "not evidenced by measurements; attest it once done",
                counts,
            )
        )
    # a measurable item may also be attested (evidence kept elsewhere): attested then, not missing
    items = [
        ChecklistItem(i.id, i.title, ATTESTED, i.evidence + " — attested", i.counts)
        if i.status == MISSING and i.id in facts.attested
        else i
        for i in items
    ]
    return Checklist(tuple(items))


def _measured(facts: ChecklistFacts) -> list[RunFacts]:
    return [r for r in facts.runs if r.kind == "bench" and r.status == "complete" and r.probe is None]


def _baseline(facts: ChecklistFacts) -> ChecklistItem:
    good = [r for r in _measured(facts) if _run_meets_targets(r, facts.contract)[0]]
    ok = len(good) >= BASELINE_RUNS
    ids = ", ".join(r.id for r in good[:BASELINE_RUNS])
    return ChecklistItem(
        "baseline",
        "Performance baseline: 3 load-test rounds meeting the P99, QPS and error-rate targets, with a comparison",
        EVIDENCED if ok else MISSING,
        f"{len(good)} complete bench runs met the targets"
        + (f" ({ids}); compare them with `tailscope compare`" if good else ""),
        f"≥ {BASELINE_RUNS} complete bench runs (not probes) whose summaries meet the contract's SLOs (--contract), "
        f"else their own --slo verdicts with an error rate ≤ {MAX_ERROR_RATE:.0%}",
    )  # fmt: skip


def _contract(facts: ChecklistFacts) -> ChecklistItem:
    c = facts.contract
    if c is None:
        evidence = facts.contract_error or "no contract given (--contract FILE)"
        ok = False
    else:
        ok = bool(c.slos) or bool(c.layers)
        evidence = f"contract {c.name!r}: {len(c.slos)} service SLOs, {len(c.layers)} dependency (layers:) SLOs" + (
            ", a regression rule" if c.regression and c.regression.limits else ""
        )
    return ChecklistItem(
        "contract",
        "SLA contract signed: every dependency (vector store, auth, external APIs) has a performance contract",
        EVIDENCED if ok else MISSING,
        evidence,
        "a contract file that validates with at least one SLO; dependencies are its layers: entries (gated on traces)",
    )


def _instrumentation(facts: ChecklistFacts) -> ChecklistItem:
    runs = _measured(facts)
    latest = runs[0] if runs else None
    server = ((latest.summary or {}).get("server") or {}) if latest else {}
    scraped = any(k in server for k in ("queue_depth", "running", "kv_usage"))
    traced = bool(facts.trace_sets)
    ok = scraped and traced
    parts = [
        ("engine metrics scraped in the latest run " + latest.id if scraped else "no engine metrics in the latest run")
        if latest
        else "no bench run",
        f"trace sets: {', '.join(facts.trace_sets)}" if traced else "no trace set in the store",
    ]
    return ChecklistItem(
        "instrumentation",
        "Instrumentation covers the key path: token rate, retrieval time, prompt-length distribution",
        EVIDENCED if ok else MISSING,
        "; ".join(parts),
        "the latest bench run scraped the engine's /metrics (queue, running, KV) and the store holds a trace set "
        "(`tailscope trace ingest`) for the per-layer times",
    )


def _alerts(facts: ChecklistFacts) -> ChecklistItem:
    rules = facts.alert_rules
    ok = rules is not None and len(rules) > 0
    if rules is None:
        evidence = "no alert-rule file given (--alerts rules.yaml, as `tailscope alerts` writes it)"
    else:
        evidence = f"{len(rules)} alert rules in {facts.alerts_path}" + (
            f" (the method's golden set has {GOLDEN_ALERTS})" if len(rules) < GOLDEN_ALERTS else ""
        )
    return ChecklistItem(
        "alerts",
        "Alert thresholds calibrated: the 5 golden alerts configured and tested once",
        EVIDENCED if ok else MISSING,
        evidence,
        "a Prometheus rule file (`tailscope alerts CONTRACT --out rules.yaml`) with at least one alert rule",
    )


def _drill(facts: ChecklistFacts) -> ChecklistItem:
    drills = [r for r in facts.runs if "drill" in r.tags and r.status == "complete"]
    passed = [r for r in drills if _drill_ok(r)]
    ok = bool(passed)
    evidence = (
        f"drill run {passed[0].id} passed"
        if passed
        else f"{len(drills)} drill runs, none passed"
        if drills
        else "no run tagged 'drill'"
    )
    return ChecklistItem(
        "drill",
        "Degradation switch verified: a drill of the fallback path passed",
        EVIDENCED if ok else MISSING,
        evidence,
        "a complete run tagged `drill` (`tailscope runs tag RUN drill`: a bench through the fallback path, e.g. "
        "against `tailscope serve --fail-rate`) whose --slo verdicts all passed",
    )


def _drill_ok(run: RunFacts) -> bool:
    """A drill passes when requests went through and every ``--slo`` verdict of the run passed (errors are the
    drill's point: the fallback must still meet the targets it was given)."""
    summary = run.summary or {}
    req = summary.get("requests") or {}
    return bool(req.get("total")) and all(s.get("passed") for s in summary.get("slo") or [])


def _capacity(facts: ChecklistFacts) -> ChecklistItem:
    target = _target_rps(facts)
    best: tuple[float, str] | None = None
    for r in facts.runs:
        if r.kind != "bench" or r.status != "complete":
            continue
        value = (r.summary or {}).get("requests_per_s")
        rps = float(value) if isinstance(value, int | float) else None
        if rps is not None and (best is None or rps > best[0]) and _run_meets_targets(r, facts.contract)[0]:
            best = (rps, r.id)
    if target is None:
        status, evidence = MISSING, "no forecast rate: give --target-rps (or a requests_per_s/goodput_rps min)"
        if best is not None:
            evidence += f"; best run {best[1]} sustained {best[0]:.2f} req/s within targets"
    elif best is None:
        status, evidence = MISSING, f"no complete run met the targets; forecast {target:g} req/s"
    else:
        headroom = best[0] / target - 1.0
        status = EVIDENCED if headroom >= HEADROOM - 1e-9 else MISSING
        evidence = (
            f"run {best[1]} sustained {best[0]:.2f} req/s within targets vs forecast {target:g} req/s: "
            f"{headroom:+.0%} headroom (needs ≥ {HEADROOM:.0%})"
        )
    return ChecklistItem(
        "capacity",
        "Capacity confirmed: 20 % headroom over the forecast traffic",
        status,
        evidence,
        f"the highest requests/s of a complete bench run (find-max probes included) that met the targets is "
        f"≥ {1 + HEADROOM:.1f} × the forecast (--target-rps, or the contract's requests_per_s/goodput_rps min)",
    )
