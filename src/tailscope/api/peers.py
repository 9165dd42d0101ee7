"""Other tools' results and command lines: ``import_run`` (vLLM bench, GuideLLM, AIPerf result files into runs) and
``translate_command`` (a peer's command line as a tailscope profile and bench flags).

An imported run is a :class:`~tailscope.records.Run` of kind ``import`` with one record per request, so ``runs show``
(in any dialect), ``compare``, ``gate``, ``report`` and ``diagnose`` read it like a bench run. Its settings keep what
the tool itself reported (``settings["import"]["reported"]``) and how it defines its metrics
(``settings["import"]["semantics"]``); the store is written only when ``store=`` is given.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tailscope.api._support import StorePath, open_store, public
from tailscope.io.peers import SEMANTICS, PeerRun, read_peer_results
from tailscope.metrics.dialects import summarize_dialect
from tailscope.metrics.document import build_export
from tailscope.metrics.summary import summarize
from tailscope.records import RequestRecord, Run, RunKind, RunStatus, Target
from tailscope.store.runs import RunStore
from tailscope.workload.translate import Translation, translate


@dataclass(frozen=True, slots=True)
class ImportedRun:
    """One imported run: the run row, its records, tailscope's summary and the tool's figures.

    Attributes:
        summary: tailscope's summary of the records (``runs show``), as a dict.
        dialect: the records summarized the way the tool defines its metrics (``runs show --dialect TOOL``): these
            reproduce the tool's own figures.
        reported: the figures the tool wrote in its file (empty when it wrote none).
    """

    run: Run
    records: tuple[RequestRecord, ...]
    summary: dict[str, Any]
    dialect: dict[str, Any]
    reported: dict[str, Any]

    def export(self) -> dict[str, Any]:
        """The document ``bench --json`` writes for this run."""
        return build_export(self.run, self.summary, list(self.records))


@dataclass(frozen=True, slots=True)
class ImportResult:
    """What ``import_run`` read: one run per benchmark in the file (a GuideLLM sweep gives several)."""

    tool: str
    path: str
    runs: tuple[ImportedRun, ...]
    store_path: str | None = None

    def export(self) -> dict[str, Any]:
        """One run: the ``bench --json`` document; several: ``{"runs": [document, …]}``."""
        docs = [r.export() for r in self.runs]
        return docs[0] if len(docs) == 1 else {"runs": docs}


def _run_id(i: int) -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3) + (f"-{i}" if i else "")


def _to_run(peer: PeerRun, path: str, i: int, sweep_id: str | None) -> Run:
    from tailscope import __version__

    target = Target(
        url=peer.url or f"import:{os.path.basename(path)}",
        model=peer.model or "unknown",
        endpoint=peer.endpoint,
        description=f"imported from {peer.tool} ({os.path.basename(path)})",
    )
    return Run(
        id=_run_id(i),
        kind=RunKind.IMPORT,
        tool_version=__version__,
        started_at=peer.started_at or datetime.now(UTC).isoformat(),
        target=target,
        seed=0,
        settings={
            "import": {
                "tool": peer.tool,
                "file": peer.source,
                "label": peer.label,
                "load": peer.settings,
                "reported": peer.reported,
                "semantics": list(SEMANTICS[peer.tool]),
                "notes": list(peer.notes),
            }
        },
        status=RunStatus.COMPLETE,
        sweep_id=sweep_id,
    )


@public
def import_run(
    path: str | os.PathLike[str], *, tool: str, store: StorePath | RunStore | None = None, tag: str | None = None
) -> ImportResult:
    """Read a vLLM bench (``--save-result --save-detailed``), GuideLLM (``benchmarks.json``) or AIPerf
    (``profile_export.jsonl``) result file as tailscope runs of kind ``import``.

    Args:
        tool: ``vllm``, ``guidellm`` or ``aiperf``.
        store: write the runs (records, summary, the tool's figures) into this store; None writes nothing.
        tag: tag every imported run (only with a store).

    Raises:
        ContractError: the file is not that tool's result (``file:line`` or ``file: field``, and what to do).
    """
    peers = read_peer_results(path, tool=tool)
    sweep_id = f"import-{secrets.token_hex(3)}" if len(peers) > 1 else None
    runs_store = open_store(store)
    out = []
    for i, peer in enumerate(peers):
        run = _to_run(peer, str(path), i, sweep_id)
        records = list(peer.records)
        summary = summarize(records).to_dict()
        if runs_store is not None:
            runs_store.create_run(run)
            runs_store.write_records(run.id, records)
            runs_store.finish_run(run.id, RunStatus.COMPLETE, summary)
            if tag:
                runs_store.tag(run.id, tag)
        out.append(ImportedRun(run, peer.records, summary, summarize_dialect(records, peer.tool), peer.reported))
    return ImportResult(peers[0].tool, str(path), tuple(out), None if runs_store is None else str(runs_store.db.path))


@public
def translate_command(tool: str, args: list[str]) -> Translation:
    """A peer's command line (``vllm bench serve …``, ``guidellm benchmark …``, ``aiperf profile …``; the
    arguments after the subcommand) as a tailscope profile and bench flags, with every semantic difference stated.

    Raises:
        ConfigError: a flag that cannot be translated (named), or an unknown tool.
    """
    return translate(tool, args)
