"""The method's pre-launch checklist from the store's evidence: :func:`checklist` (``tailscope checklist``).

Reads the store (runs, tags, trace sets), a contract and a generated alert-rule file; never writes. What counts as
evidence for each item is :mod:`tailscope.verify.checklist`'s to say (and docs/gates.md's to document).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from tailscope.api._support import StorePath, default_store, open_store, public
from tailscope.errors import ConfigError, ContractError
from tailscope.store.runs import RunStore
from tailscope.verify.checklist import Checklist, ChecklistFacts, RunFacts, judge

#: how many stored runs the checklist reads (newest first)
RUN_LIMIT = 500


@public
def checklist(
    *,
    contract: str | os.PathLike[str] | None = None,
    alerts: str | os.PathLike[str] | None = None,
    target_rps: float | None = None,
    attest: Sequence[str] = (),
    store: StorePath | RunStore | None = None,
) -> Checklist:
    """The method's pre-launch checklist (12 items), each shown as evidenced by the store, attested, or missing.

    Args:
        contract: the service's contract file (the "SLA contract" item; its SLOs judge the baseline runs).
        alerts: a Prometheus rule file as ``tailscope alerts`` writes it (the "alerts" item).
        target_rps: the forecast request rate the capacity item wants 20 % headroom over (default: the contract's
            ``requests_per_s``/``goodput_rps`` minimum).
        attest: ids of items a person vouches for (``emergency_plan``, ``canary``, ``logging``, ``security``,
            ``compliance``, ``on_call``, or any other item whose evidence lives elsewhere).
        store: the store to read (default ``$TAILSCOPE_DB`` or ``./.tailscope/tailscope.duckdb``); only read.

    Returns:
        ``result.items`` (each with ``status``: evidenced, attested or missing, ``evidence`` and what ``counts``),
        ``result.missing``, ``result.exit_code`` (1 while any item is missing) and ``result.to_dict()``.

    Raises:
        ConfigError: an unknown ``attest`` id, a negative target, an unreadable alert file.
    """
    from tailscope.io.contracts import load_contract

    if target_rps is not None and not target_rps > 0:
        raise ConfigError(f"--target-rps must be > 0 requests/s (got {target_rps})")
    rs = open_store(store) or default_store()
    runs: list[RunFacts] = []
    sets: list[str] = []
    if rs.db.exists:
        for stored in rs.list_runs(limit=RUN_LIMIT):
            runs.append(
                RunFacts(
                    id=stored.run.id,
                    kind=stored.run.kind.value,
                    status=stored.run.status.value,
                    probe=stored.run.probe,
                    tags=tuple(stored.tags),
                    summary=stored.summary,
                    started_at=stored.run.started_at,
                )
            )
        from tailscope.store.spans import SpanStore

        sets = [s.name for s in SpanStore(rs.db).list_sets()]
    spec = None
    contract_error = None
    if contract is not None:
        try:
            spec = load_contract(contract)
        except ContractError as exc:
            contract_error = f"the contract does not validate: {exc}"
    rules = _alert_names(alerts) if alerts is not None else None
    facts = ChecklistFacts(
        runs=runs,
        trace_sets=sets,
        contract=spec,
        contract_error=contract_error,
        alert_rules=rules,
        alerts_path=str(alerts) if alerts is not None else None,
        target_rps=target_rps,
        attested=frozenset(attest),
    )
    try:
        return judge(facts)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _alert_names(path: str | os.PathLike[str]) -> list[str]:
    """The ``alert:`` names of a Prometheus rule file."""
    import yaml

    from tailscope.files import read_user_text

    text = read_user_text(path, what="alert-rule file", error=ConfigError)
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not YAML ({exc}); give the file `tailscope alerts --out` wrote") from None
    groups = doc.get("groups") if isinstance(doc, dict) else None
    if not isinstance(groups, list):
        raise ConfigError(f"{path}: no 'groups:' list; give a Prometheus rule file (`tailscope alerts --out`)")
    return [
        str(rule["alert"])
        for g in groups
        if isinstance(g, dict)
        for rule in g.get("rules") or []
        if isinstance(rule, dict) and "alert" in rule
    ]
