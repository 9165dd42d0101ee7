"""Trace sets in the DuckDB store: spans keyed by (set, trace, span), written in bulk, read trace by trace.

Spans are written to batch files (JSON arrays) next to the store and folded in with one ``read_json`` (row-wise
``executemany`` is orders of magnitude slower in DuckDB). Re-ingesting a span already in the set is a no-op (rows
are anti-joined on set, trace and span id). Readers stream traces ordered by trace id, so a set of millions of spans
is never held in memory at once.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import operator
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tailscope.clock import utc_now_iso
from tailscope.errors import NotFoundError, StoreError
from tailscope.records import Span
from tailscope.store.bounds import json_safe
from tailscope.store.db import Database
from tailscope.trace.tree import SpanRow

SPAN_COLUMNS: tuple[tuple[str, str], ...] = (
    ("trace_id", "VARCHAR"),
    ("span_id", "VARCHAR"),
    ("parent_id", "VARCHAR"),
    ("name", "VARCHAR"),
    ("start_ns", "BIGINT"),
    ("end_ns", "BIGINT"),
    ("service", "VARCHAR"),
    ("kind", "VARCHAR"),
    ("status", "VARCHAR"),
    ("layer", "VARCHAR"),
    ("follows_from", "BOOLEAN"),
    ("resend", "INTEGER"),
    ("attributes", "JSON"),
    ("links", "JSON"),
)

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS trace_sets (
    name VARCHAR PRIMARY KEY, created_at VARCHAR, updated_at VARCHAR, source VARCHAR, spans BIGINT, traces BIGINT
);
CREATE TABLE IF NOT EXISTS spans (set_name VARCHAR, {", ".join(f"{n} {t}" for n, t in SPAN_COLUMNS)});
"""

#: Spans per batch file folded in one transaction.
BATCH_SPANS = 250_000


@dataclass(frozen=True, slots=True)
class TraceSet:
    """A named set of spans in the store."""

    name: str
    created_at: str
    updated_at: str
    source: str
    spans: int
    traces: int


_SEQ = itertools.count()


#: Rows per batch file: each file is one JSON array, encoded with one orjson call (encoding row by row cost ~6 µs a
#: row in per-call overhead, ~1 µs in one call), small enough that a file's rows are cheap to hold.
BATCH_FILE_ROWS = 20_000


def write_rows_files(stem: Path, rows: Iterator[dict[str, Any]], *, limit: int | None = None) -> tuple[int, list[Path]]:
    """Write up to ``limit`` rows (:func:`span_row`, or the parsers' ``make_row``) as batch files ``STEM.K.json``.

    Each file is a JSON array of at most :data:`BATCH_FILE_ROWS` rows. Safe to call in worker processes: it touches
    only the files, never the database.

    Returns:
        (rows written, the files).
    """
    n = 0
    paths: list[Path] = []
    while limit is None or n < limit:
        take = BATCH_FILE_ROWS if limit is None else min(BATCH_FILE_ROWS, limit - n)
        chunk = list(itertools.islice(rows, take))
        if not chunk:
            break
        path = stem.with_name(f"{stem.name}.{len(paths)}.json")
        path.write_bytes(encode_rows(chunk))
        paths.append(path)
        n += len(chunk)
        if len(chunk) < take:
            break
    return n, paths


def encode_rows(rows: list[dict[str, Any]]) -> bytes:
    """Rows as one JSON array, encoded by orjson in one call (values it has no encoding for become strings)."""
    try:
        return orjson.dumps(rows, default=str, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # an int beyond 64 bits or a lone surrogate (from a caller's own Span attributes)
        return orjson.dumps(json_safe(rows), default=str, option=orjson.OPT_NON_STR_KEYS)


def encode_row(row: dict[str, Any]) -> bytes:
    """One batch row as a JSON line (with the newline), by :func:`encode_rows`."""
    return encode_rows([row])[1:-1] + b"\n"


def span_row(span: Span) -> dict[str, Any]:
    """One span as a batch-file row: the store's columns (``resend`` from the attributes; empty ones as None)."""
    attrs = span.attributes
    resend = attrs.get("http.request.resend_count") if attrs else None
    return {
        "trace_id": span.trace_id,
        "span_id": span.span_id,
        "parent_id": span.parent_id,
        "name": span.name,
        "start_ns": span.start_ns,
        "end_ns": span.end_ns,
        "service": span.service,
        "kind": span.kind,
        "status": span.status,
        "layer": span.layer,
        "follows_from": span.follows_from,
        "resend": resend if isinstance(resend, int) and 0 <= resend < 2**31 else None,
        "attributes": attrs or None,
        "links": span.links or None,
    }


_ROW_COLUMNS = (
    "trace_id, span_id, parent_id, name, start_ns, end_ns, service, kind, status, layer, follows_from, resend"
)
_TRACE_KEY = operator.itemgetter(0)


def rows_to_spans(rows: Iterable[SpanRow]) -> list[Span]:
    """Spans from store rows (attributes only ``http.request.resend_count`` when set; no links)."""
    return [
        Span(t, s, p, n, st, en, sv, k, ss, {"http.request.resend_count": rs} if rs else {}, (), ly, bool(ff))
        for t, s, p, n, st, en, sv, k, ss, ly, ff, rs in rows
    ]


def _columns_sql() -> str:
    return "{" + ", ".join(f"'{n}': '{t}'" for n, t in SPAN_COLUMNS) + "}"


class SpanStore:
    """Trace sets and their spans in one store.

    Args:
        db: a :class:`Database` or a path (``None`` = ``$TAILSCOPE_DB`` or the default store).
    """

    def __init__(self, db: Database | str | os.PathLike[str] | None = None) -> None:
        self.db = db if isinstance(db, Database) else Database(db)
        self._ready = False

    def ensure_schema(self) -> None:
        """Create the store and the span tables when missing."""
        if self._ready:
            return
        self.db.ensure_schema()
        with self.db.write() as con:
            con.execute(_SCHEMA)
        self._ready = True

    # -- writing ---------------------------------------------------------------------------------------------
    def batch_path(self, tag: str = "") -> Path:
        """A fresh batch-file stem in the store's ``pending`` folder (for :func:`write_rows_files` in workers)."""
        self.ensure_schema()
        folder = self.db.path.parent / "pending"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create {folder}: {exc.strerror}") from None
        return folder / f"spans-{os.getpid()}-{id(self):x}-{tag}{next(_SEQ)}"

    def write(self, set_name: str, spans: Iterable[Span], *, source: str = "") -> int:
        """Append spans to a set (created when missing); return how many spans were read from ``spans``.

        Spans are batched into JSON-lines files of :data:`BATCH_SPANS` and folded in one transaction each. Spans
        already in the set before this call are skipped (re-ingesting a file is a no-op); duplicates within one call
        are kept and counted by the tree builder.
        """
        return self.write_rows(set_name, map(span_row, spans), source=source)

    def write_rows(self, set_name: str, rows: Iterable[dict[str, Any]], *, source: str = "") -> int:
        """:meth:`write` for spans already made batch rows (:func:`span_row`)."""
        dedupe = self.span_count(set_name) > 0
        total = 0
        it = iter(rows)
        while True:
            files: list[Path] = []
            try:
                n, files = write_rows_files(self.batch_path(), it, limit=BATCH_SPANS)
                if n or total == 0:
                    self.fold(set_name, files, source=source, dedupe=dedupe)
            finally:
                for f in files:
                    with contextlib.suppress(FileNotFoundError):
                        f.unlink()
            total += n
            if n < BATCH_SPANS:
                return total

    def span_count(self, set_name: str) -> int:
        """Spans in a set (0 when it does not exist)."""
        for s in self.list_sets():
            if s.name == set_name:
                return s.spans
        return 0

    def fold(self, set_name: str, paths: Iterable[Path], *, source: str = "", dedupe: bool | None = None) -> None:
        """Load batch files into a set in one statement and transaction (the caller deletes the files).

        Args:
            set_name: the set.
            paths: batch files written by :func:`write_rows_files` (JSON arrays of rows).
            source: a description of where the spans came from.
            dedupe: skip spans whose (trace, span) id is already in the set; default: when the set has rows.
        """
        self.ensure_schema()
        now = utc_now_iso()
        files = [str(p).replace("'", "''") for p in paths if p.stat().st_size > 0]
        with self.db.write() as con:
            if files:
                if dedupe is None:
                    dedupe = bool(
                        con.execute("SELECT count(*) FROM spans WHERE set_name = ?", [set_name]).fetchone()[0]
                    )
                listed = "[" + ", ".join(f"'{f}'" for f in files) + "]"
                reader = f"read_json({listed}, format='array', columns={_columns_sql()})"
                if dedupe:
                    con.execute(
                        f"INSERT INTO spans SELECT ? AS set_name, b.* FROM {reader} b ANTI JOIN "  # noqa: S608
                        "(SELECT trace_id, span_id FROM spans WHERE set_name = ?) e "
                        "ON b.trace_id = e.trace_id AND b.span_id = e.span_id",
                        [set_name, set_name],
                    )
                else:
                    con.execute(f"INSERT INTO spans SELECT ? AS set_name, * FROM {reader}", [set_name])  # noqa: S608
            n_spans, n_traces = con.execute(
                "SELECT count(*), count(DISTINCT trace_id) FROM spans WHERE set_name = ?", [set_name]
            ).fetchone()
            con.execute(
                "INSERT INTO trace_sets VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
                "updated_at = excluded.updated_at, spans = excluded.spans, traces = excluded.traces",
                [set_name, now, now, source, n_spans, n_traces],
            )

    def delete_set(self, set_name: str) -> None:
        """Remove a set and its spans (no error when it does not exist)."""
        self.ensure_schema()
        with self.db.write() as con:
            con.execute("DELETE FROM spans WHERE set_name = ?", [set_name])
            con.execute("DELETE FROM trace_sets WHERE name = ?", [set_name])

    # -- reading ---------------------------------------------------------------------------------------------
    def _has_tables(self, con: Any) -> bool:
        row = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name IN ('spans', 'trace_sets')"
        ).fetchone()
        return bool(row and row[0] == 2)

    def list_sets(self) -> list[TraceSet]:
        """All trace sets, newest first (empty when the store has none)."""
        if not self.db.exists:
            return []
        with self.db.read() as con:
            if not self._has_tables(con):
                return []
            rows = con.execute("SELECT * FROM trace_sets ORDER BY updated_at DESC, name").fetchall()
        return [TraceSet(*row) for row in rows]

    def get_set(self, set_name: str) -> TraceSet:
        """One set by name.

        Raises:
            NotFoundError: naming the sets that exist.
        """
        sets = self.list_sets()
        for s in sets:
            if s.name == set_name:
                return s
        known = ", ".join(s.name for s in sets) or "none yet — run `tailscope trace ingest FILES --set NAME`"
        raise NotFoundError(f"no trace set {set_name!r} in {self.db.path} (sets: {known})")

    def iter_trace_rows(
        self,
        set_name: str,
        *,
        chunk: int = 100_000,
        partition: tuple[int, int] | None = None,
        buckets: tuple[int, int, int] | None = None,
    ) -> Iterator[list[SpanRow]]:
        """The set's traces one by one as raw rows (see :data:`SpanRow`), each sorted by (start, end, span id).

        Args:
            set_name: the set.
            chunk: rows fetched per round trip.
            partition: ``(k, n)`` reads only traces with ``hash(trace_id) % n == k`` (for parallel readers).
            buckets: ``(lo, hi, n)`` reads only traces with ``lo <= hash(trace_id) % n < hi`` (unequal shares).
        """
        where = "set_name = ?"
        params: list[Any] = [set_name]
        if partition is not None:
            buckets = (partition[0], partition[0] + 1, partition[1])
        if buckets is not None:
            where += " AND hash(trace_id) % ? >= ? AND hash(trace_id) % ? < ?"
            params += [buckets[2], buckets[0], buckets[2], buckets[1]]
        known = False
        if self.db.exists:
            with self.db.read() as con:  # one connection for the check and the rows (opening one costs ~0.1 s)
                known = self._has_tables(con) and bool(
                    con.execute("SELECT count(*) FROM trace_sets WHERE name = ?", [set_name]).fetchone()[0]
                )
                if known:
                    if buckets is not None:
                        # Parallel readers (one per process, each also computing): DuckDB's own threads per reader
                        # would only oversubscribe the cores.
                        con.execute("SET threads = 1")
                    cur = con.execute(
                        f"SELECT {_ROW_COLUMNS} FROM spans WHERE {where} "  # noqa: S608 - constant columns
                        "ORDER BY trace_id, start_ns, end_ns, span_id",
                        params,
                    )
                    rows = itertools.chain.from_iterable(iter(lambda: cur.fetchmany(chunk), []))
                    for _, group in itertools.groupby(rows, key=_TRACE_KEY):
                        yield list(group)
        if not known:
            self.get_set(set_name)  # raises NotFoundError naming the sets that exist

    def iter_traces(
        self,
        set_name: str,
        *,
        chunk: int = 100_000,
        partition: tuple[int, int] | None = None,
        buckets: tuple[int, int, int] | None = None,
    ) -> Iterator[list[Span]]:
        """The set's traces one by one (spans without attributes except ``http.request.resend_count``).

        Spans come sorted by (start, end, span id); see :meth:`iter_trace_rows` for the arguments.
        """
        for rows in self.iter_trace_rows(set_name, chunk=chunk, partition=partition, buckets=buckets):
            yield rows_to_spans(rows)

    def inference_trace_ids(self, set_name: str, limit: int) -> list[str]:
        """The ids of the set's first ``limit`` traces that hold an LLM call (a span of the inference layer), in the
        set's trace order — what ``bench``/``sim --from-traces`` replay.

        Raises:
            NotFoundError: naming the sets that exist, when there is no set ``set_name``.
        """
        self.get_set(set_name)
        ids: list[str] = []
        for spans in self.iter_traces(set_name):
            if any(sp.layer == "inference" for sp in spans):
                ids.append(spans[0].trace_id)
                if len(ids) >= limit:
                    break
        return ids

    def load_traces(self, set_name: str, trace_ids: Iterable[str]) -> dict[str, list[Span]]:
        """The spans, with full attributes, of the traces among ``trace_ids`` that ``set_name`` holds (by trace id).

        Raises:
            NotFoundError: naming the sets that exist, when there is no set ``set_name``.
        """
        self.get_set(set_name)
        ids = sorted({t.strip().lower() for t in trace_ids})
        out: dict[str, list[Span]] = {}
        if not ids:
            return out
        with self.db.read() as con:
            rows = con.execute(
                f"SELECT {_FULL_COLUMNS} FROM spans WHERE set_name = ? "  # noqa: S608 - constant columns
                "AND trace_id IN (SELECT unnest(?)) ORDER BY trace_id, start_ns",
                [set_name, ids],
            ).fetchall()
        for span in _full_spans(rows):
            out.setdefault(span.trace_id, []).append(span)
        return out

    def load_trace(self, set_name: str | None, trace_id: str) -> tuple[str, list[Span]]:
        """One trace with full attributes, by id or unique id prefix; searches every set when ``set_name`` is None.

        Returns:
            (set name, spans).

        Raises:
            NotFoundError: when no trace (or more than one) matches.
        """
        if set_name is not None:
            self.get_set(set_name)
        elif not self.list_sets():
            raise NotFoundError("no trace sets yet — run `tailscope trace ingest FILES --set NAME` first")
        tid = trace_id.strip().lower()
        with self.db.read() as con:
            where = "starts_with(trace_id, ?)" + (" AND set_name = ?" if set_name is not None else "")
            params: list[Any] = [tid] + ([set_name] if set_name is not None else [])
            sql = f"SELECT DISTINCT set_name, trace_id FROM spans WHERE {where} LIMIT 5"  # noqa: S608 - constant
            matches = con.execute(sql, params)
            found = matches.fetchall()
            if not found:
                raise NotFoundError(f"no trace {trace_id!r}" + (f" in set {set_name!r}" if set_name else ""))
            if len(found) > 1:
                listed = ", ".join(f"{s}/{t}" for s, t in found)
                raise NotFoundError(f"trace id {trace_id!r} is ambiguous ({listed}); give more digits or --set")
            found_set, found_id = found[0]
            rows = con.execute(
                f"SELECT {_FULL_COLUMNS} FROM spans WHERE set_name = ? AND trace_id = ? "  # noqa: S608 - constant
                "ORDER BY start_ns",
                [found_set, found_id],
            ).fetchall()
        return found_set, _full_spans(rows)

    def dependency_rows(self, set_name: str) -> dict[str, list[tuple[str, dict[str, Any], list[Any]]]]:
        """Per trace, ``(span id, attributes, links)`` of the spans that can mark a dependency: spans with links, and
        every span of a trace where some span names a tool call id or parallel tool calls (what
        :func:`tailscope.trace.dependency.marks_from` reads). Traces without any are left out.
        """
        self.get_set(set_name)
        sql = (
            "SELECT trace_id, span_id, attributes, links FROM spans WHERE set_name = ? AND (links IS NOT NULL OR "
            "trace_id IN (SELECT trace_id FROM spans WHERE set_name = ? AND (CAST(attributes AS VARCHAR) LIKE "
            "'%call%id%' OR CAST(attributes AS VARCHAR) LIKE '%parallel_tool_calls%')))"
        )
        out: dict[str, list[tuple[str, dict[str, Any], list[Any]]]] = {}
        with self.db.read() as con:
            for tid, sid, attrs, links in con.execute(sql, [set_name, set_name]).fetchall():
                parsed = json.loads(attrs) if attrs else {}
                out.setdefault(tid, []).append(
                    (sid, parsed if isinstance(parsed, dict) else {}, json.loads(links) if links else [])
                )
        return out

    def attribute_values(self, set_name: str, key: str) -> dict[str, dict[str, str]]:
        """Per trace, ``{span id: value as text}`` of the spans whose attributes carry ``key`` (a full attribute
        name, dots included, e.g. ``tailscope.request.class``); traces without it are left out."""
        self.get_set(set_name)
        path = '$."' + key.replace('"', '\\"') + '"'
        sql = (
            "SELECT trace_id, span_id, json_extract_string(attributes, ?) AS v FROM spans "
            "WHERE set_name = ? AND attributes IS NOT NULL AND v IS NOT NULL"
        )
        out: dict[str, dict[str, str]] = {}
        with self.db.read() as con:
            for tid, sid, value in con.execute(sql, [path, set_name]).fetchall():
                out.setdefault(tid, {})[sid] = value
        return out

    def operation_rows(self, set_name: str) -> list[tuple[str, str | None, str | None]]:
        """The set's distinct ``(span name, service, layer)`` (what a what-if checks its changes' operations against).

        Raises:
            NotFoundError: no such set.
        """
        self.get_set(set_name)
        with self.db.read() as con:
            rows = con.execute(
                "SELECT DISTINCT name, service, layer FROM spans WHERE set_name = ?", [set_name]
            ).fetchall()
        return [(str(n), s, layer) for n, s, layer in rows]

    def iter_call_rows(self, set_name: str, *, chunk: int = 100_000) -> Iterator[tuple[str, int, int, str | None]]:
        """Every span of the set as ``(name, start ns, duration ns, attributes as JSON text or None)``, in no
        particular order (what the cacheability score reads)."""
        self.get_set(set_name)
        with self.db.read() as con:
            cur = con.execute(
                "SELECT name, start_ns, end_ns - start_ns, CAST(attributes AS VARCHAR) FROM spans WHERE set_name = ?",
                [set_name],
            )
            for rows in iter(lambda: cur.fetchmany(chunk), []):
                yield from rows


_FULL_COLUMNS = (
    "trace_id, span_id, parent_id, name, start_ns, end_ns, service, kind, status, attributes, links, layer, "
    "follows_from"
)


def _full_spans(rows: Iterable[Any]) -> list[Span]:
    """Spans from rows of :data:`_FULL_COLUMNS` (attributes and links decoded)."""
    return [
        Span(
            t,
            s,
            p,
            n,
            st,
            en,
            sv,
            k,
            ss,
            json.loads(a) if a else {},
            tuple((str(x[0]), str(x[1])) for x in json.loads(lk)) if lk else (),
            ly,
            bool(ff),
        )
        for t, s, p, n, st, en, sv, k, ss, a, lk, ly, ff in rows
    ]
