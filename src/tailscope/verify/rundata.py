"""What the gate, compare and diagnose read about one run: records, server samples, summary — from any source.

A run comes from the store (bench, sim or trace runs alike), from a bench ``--json`` export or from a result object of
the API (:func:`tailscope.load_run` makes one from any of them). The export loader here is pure (a parsed JSON dict in,
records out); reading the file is :mod:`tailscope.io.exports`'s job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tailscope.errors import ContractError
from tailscope.records import ErrorClass, RequestRecord, ServerSample, Status, TokensSource
from tailscope.units import s_to_ns


@dataclass(frozen=True, slots=True)
class RunData:
    """One run's raw data.

    Attributes:
        id: the run id (or the export file name when the export carries none).
        kind: ``bench``, ``sim`` or ``trace``.
        records: every request record (warmup ones included; the gate ignores them).
        samples: scraped server metric samples (may be empty).
        summary: the stored JSON summary when one exists (used only when records are absent).
        settings: the run's settings (requested rate, concurrency, …) when known.
        status: the run's lifecycle status (``complete``, ``running``, ``incomplete``, ``degraded``).
        run: the run's metadata as the export's ``run`` object (target, settings, sweep id, …; may be partial).
        tags: the run's tags in the store.
    """

    id: str
    kind: str = "bench"
    records: tuple[RequestRecord, ...] = ()
    samples: tuple[ServerSample, ...] = ()
    summary: Mapping[str, Any] | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    status: str = "complete"
    run: Mapping[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()


def _opt_ns(value: Any) -> int | None:
    if value is None:
        return None
    return s_to_ns(float(value))


def _enum_or(value: Any, enum: Any, default: Any) -> Any:
    if value is None or value == "":
        return default
    try:
        return enum(value)
    except ValueError:
        return default


def record_from_export(row: Mapping[str, Any], *, source: str = "<export>", index: int = 0) -> RequestRecord:
    """One request of a bench ``--json`` export (times in seconds since the run start) as a :class:`RequestRecord`.

    Raises:
        ContractError: naming the file, the request index and the field when a required field is missing or bad.
    """
    where = f"{source}: requests[{index}]"
    try:
        status = Status(row.get("status", "ok"))
    except ValueError:
        raise ContractError(f"{where}.status: expected ok, error or incomplete (got {row.get('status')!r})") from None
    try:
        scheduled = _opt_ns(row["scheduled_s"])
        chunk_times = tuple(s_to_ns(float(t)) for t in row.get("chunk_times_s") or ())
        chunk_tokens = tuple(int(t) for t in row.get("chunk_tokens") or ())
        error = row.get("error")
        return RequestRecord(
            id=int(row.get("id", index)),
            scheduled_ns=scheduled if scheduled is not None else 0,
            sent_ns=_opt_ns(row.get("sent_s")),
            first_token_ns=_opt_ns(row.get("first_token_s")),
            end_ns=_opt_ns(row.get("end_s")),
            status=status,
            request_class=str(row.get("class") or row.get("request_class") or "default"),
            session_id=row.get("session_id"),
            turn=row.get("turn"),
            input_tokens=None if row.get("input_tokens") is None else int(row["input_tokens"]),
            output_tokens=None if row.get("output_tokens") is None else int(row["output_tokens"]),
            tokens_source=_enum_or(row.get("tokens_source"), TokensSource, TokensSource.CHUNKS),
            error=_enum_or(error, ErrorClass, ErrorClass.OTHER) if error else None,
            http_status=None if row.get("http_status") is None else int(row["http_status"]),
            server_request_id=row.get("server_request_id"),
            chunk_times_ns=chunk_times,
            chunk_tokens=chunk_tokens,
            warmup=bool(row.get("warmup", False)),
            shared_prefix=bool(row.get("shared_prefix", False)),
        )
    except KeyError as exc:
        raise ContractError(
            f"{where}: missing field {exc.args[0]!r}; re-export with `tailscope bench --json`"
        ) from None
    except (TypeError, ValueError) as exc:
        raise ContractError(f"{where}: bad value ({exc}); re-export with `tailscope bench --json`") from None


def run_from_export(doc: Any, *, source: str = "<export>") -> RunData:
    """A bench ``--json`` export (``{run, summary, requests, samples?}``) as :class:`RunData`.

    Raises:
        ContractError: when the document is not such an export.
    """
    if not isinstance(doc, Mapping) or ("requests" not in doc and "summary" not in doc):
        raise ContractError(
            f"{source}: not a tailscope export (expected an object with 'run', 'summary' and 'requests'); "
            "write one with `tailscope bench --json FILE`"
        )
    run = doc.get("run") or {}
    rows = doc.get("requests") or []
    if not isinstance(rows, Sequence):
        raise ContractError(f"{source}: 'requests' must be a list")
    records = tuple(record_from_export(r, source=source, index=i) for i, r in enumerate(rows))
    samples: list[ServerSample] = []
    for i, s in enumerate(doc.get("samples") or doc.get("server_samples") or ()):
        try:
            t_ns = int(s["t_ns"]) if "t_ns" in s else s_to_ns(float(s["t_s"]))
            samples.append(
                ServerSample(t_ns=t_ns, name=str(s["name"]), value=float(s["value"]), labels=s.get("labels", ""))
            )
        except (KeyError, TypeError, ValueError):
            raise ContractError(f"{source}: samples[{i}]: expected {{t_s, name, value, labels}}") from None
    summary = doc.get("summary")
    return RunData(
        id=str(run.get("id") or source),
        kind=str(run.get("kind") or "bench"),
        records=records,
        samples=tuple(samples),
        summary=summary if isinstance(summary, Mapping) else None,
        settings=run.get("settings") or {},
        status=str(run.get("status") or "complete"),
        run=run if isinstance(run, Mapping) else {},
    )
