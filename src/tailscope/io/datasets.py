"""Real prompts from files: ShareGPT, JSONL chat or completion rows, plain text, a CSV column, Parquet.

``FORMAT:PATH`` names a dataset (``sharegpt:data.json``, ``jsonl:rows.jsonl``, ``text:prompts.txt``,
``csv:question:faq.csv``, ``parquet:train-00000.parquet``). Every file is read locally (Parquet with DuckDB; nothing
is downloaded) and every row becomes a :class:`DatasetRow`; a row that cannot be used is an error naming the file,
the line (or row) and the field, before any load is sent.

* ``sharegpt`` — a JSON list (or JSONL) of ``{"conversations": [{"from": "human"|"gpt"|…, "value": …}]}``. The
  first human turn is the prompt and the answer after it the reference; with ``turns="all"`` every human turn of a
  conversation becomes a turn of one session (the model's own answers carry the history, as in a live chat).
* ``jsonl`` — one object per line with ``messages`` (a chat, sent verbatim) or ``prompt`` (text), and optionally
  ``max_tokens``, ``class``, ``session``, ``turn`` and ``timestamp_s`` (a replay with real content).
* ``text`` — one prompt per non-empty line.
* ``csv:COLUMN`` — the column ``COLUMN`` of a CSV file with a header row.
* ``parquet`` — a Hugging Face dataset shard: the first of the columns ``messages``, ``conversations``,
  ``prompt``, ``question``, ``text``, ``instruction`` it has (``parquet:COLUMN:PATH`` to name one).
* ``arrow`` — the same from an Arrow IPC file (a ``datasets`` cache or ``save_to_disk`` shard,
  ``data-00000-of-00001.arrow``; stream or file format), opened with pyarrow (the ``arrow`` extra) and queried with
  DuckDB.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailscope.errors import ProfileError
from tailscope.files import read_user_text

FORMATS = ("sharegpt", "jsonl", "text", "csv", "parquet", "arrow")
_PARQUET_COLUMNS = ("messages", "conversations", "prompt", "question", "text", "instruction")
_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant",
          "bard": "assistant", "bing": "assistant", "system": "system"}  # fmt: skip

Message = tuple[str, str]  # (role, content)


@dataclass(frozen=True, slots=True)
class DatasetRow:
    """One usable row of a dataset.

    Attributes:
        where: ``file:line`` (or ``file:row N``) of the row, for messages.
        prompt: the user text to send (``None`` when ``messages`` is given).
        messages: a whole chat to send verbatim, as ``(role, content)`` pairs.
        reference: the dataset's answer to ``prompt``, whose length sets ``max_tokens`` when nothing else does.
        turns: later user turns of the same conversation (``turns="all"``), each with its reference answer.
        max_tokens: the row's own ``max_tokens``.
        request_class, session, turn, timestamp_s: the row's own class, session id, 0-based turn and send time.
    """

    where: str
    prompt: str | None = None
    messages: tuple[Message, ...] | None = None
    reference: str | None = None
    turns: tuple[tuple[str, str | None], ...] = ()
    max_tokens: int | None = None
    request_class: str | None = None
    session: str | None = None
    turn: int | None = None
    timestamp_s: float | None = None

    def text(self) -> str:
        """All the text this row sends (for length filters and token estimates)."""
        if self.messages is not None:
            return "\n".join(c for _, c in self.messages)
        return self.prompt or ""


@dataclass(frozen=True, slots=True)
class Dataset:
    """A dataset read from a file: its name (``FORMAT:PATH``), format and rows in file order."""

    name: str
    fmt: str
    rows: tuple[DatasetRow, ...]


def parse_dataset_ref(ref: str) -> tuple[str, str | None, Path]:
    """``FORMAT:PATH`` (or ``csv:COLUMN:PATH``, ``parquet:COLUMN:PATH``) → (format, column, path).

    Raises:
        ProfileError: naming the reference and the accepted forms.
    """
    fmt, sep, rest = ref.partition(":")
    fmt = fmt.strip().lower()
    forms = "sharegpt:PATH, jsonl:PATH, text:PATH, csv:COLUMN:PATH, parquet[:COLUMN]:PATH or arrow[:COLUMN]:PATH"
    if not sep or not rest or fmt not in FORMATS:
        raise ProfileError(f"--dataset {ref!r}: expected FORMAT:PATH, one of {forms}")
    column: str | None = None
    if fmt == "csv":
        column, sep, rest = rest.partition(":")
        if not sep or not column or not rest:
            raise ProfileError(f"--dataset {ref!r}: a CSV dataset names its column: csv:COLUMN:PATH")
    elif fmt in ("parquet", "arrow") and ":" in rest and not Path(rest).exists():
        column, _, rest = rest.partition(":")
    return fmt, column, Path(rest)


def read_dataset(ref: str, *, turns: str = "first") -> Dataset:
    """Read a dataset named ``FORMAT:PATH``.

    Args:
        turns: ``first`` (a conversation's first user turn) or ``all`` (every user turn, as one session).

    Raises:
        ProfileError: an unreadable file or a bad row, naming the file, line and field; a file with no usable row.
    """
    if turns not in ("first", "all"):
        raise ProfileError(f"--dataset-turns {turns!r}: use first or all")
    fmt, column, path = parse_dataset_ref(ref)
    if fmt in ("parquet", "arrow"):
        rows = list(_parquet_rows(path, column, turns, fmt))
    else:
        text = read_user_text(path, what="dataset", error=ProfileError)
        if fmt == "sharegpt":
            rows = list(_sharegpt_rows(path, text, turns))
        elif fmt == "jsonl":
            rows = list(_jsonl_rows(path, text))
        elif fmt == "text":
            rows = [DatasetRow(f"{path}:{i}", prompt=line.strip()) for i, line in _lines(text) if line.strip()]
        else:
            assert column is not None
            rows = list(_csv_rows(path, text, column))
    if not rows:
        raise ProfileError(f"{path}: the dataset has no usable prompt (format {fmt})")
    return Dataset(name=ref, fmt=fmt, rows=tuple(rows))


def _lines(text: str) -> Iterator[tuple[int, str]]:
    return ((i, line) for i, line in enumerate(text.splitlines(), 1))


def _json(path: Path, line: int, raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}:{line + exc.lineno - 1}: not JSON ({exc.msg})") from None


def _str(value: Any, where: str, field: str) -> str:
    if not isinstance(value, str):
        raise ProfileError(f"{where}: {field} must be text (got {type(value).__name__})")
    return value


def _conversation(turns: Any, where: str) -> list[Message]:
    if not isinstance(turns, list):
        raise ProfileError(f"{where}: conversations must be a list of {{from, value}} turns")
    out: list[Message] = []
    for k, t in enumerate(turns):
        if not isinstance(t, dict):
            raise ProfileError(f"{where}: conversations[{k}] must be an object with from and value")
        who = str(t.get("from", t.get("role", ""))).lower()
        role = _ROLES.get(who)
        if role is None:
            raise ProfileError(f"{where}: conversations[{k}].from {who!r} is not a known speaker (human, gpt, …)")
        out.append((role, _str(t.get("value", t.get("content")), where, f"conversations[{k}].value")))
    return out


def _from_conversation(conv: list[Message], where: str, turns: str, session: str | None) -> DatasetRow | None:
    """The row of a ShareGPT conversation: its first user turn (and, with ``all``, the later ones)."""
    users = [i for i, (role, _) in enumerate(conv) if role == "user"]
    if not users:
        return None

    def answer(i: int) -> str | None:
        return conv[i + 1][1] if i + 1 < len(conv) and conv[i + 1][0] == "assistant" else None

    first = users[0]
    later = tuple((conv[i][1], answer(i)) for i in users[1:]) if turns == "all" else ()
    return DatasetRow(
        where, prompt=conv[first][1], reference=answer(first), turns=later, session=session if later else None
    )


def _sharegpt_rows(path: Path, text: str, turns: str) -> Iterator[DatasetRow]:
    if text.lstrip().startswith("["):
        doc = _json(path, 1, text)
        if not isinstance(doc, list):
            raise ProfileError(f"{path}: a ShareGPT file is a JSON list of conversations")
        # one JSON document has no useful line numbers: name the conversation's index instead
        located = [(f"{path}: conversation {k}", item) for k, item in enumerate(doc)]
    else:
        located = [(f"{path}:{i}", _json(path, i, line)) for i, line in _lines(text) if line.strip()]
    for where, item in located:
        if not isinstance(item, dict) or "conversations" not in item:
            raise ProfileError(f"{where}: expected an object with conversations")
        conv = _conversation(item["conversations"], where)
        row = _from_conversation(conv, where, turns, str(item.get("id", where)))
        if row is not None:
            yield row


def _opt_int(value: Any, where: str, field: str, lo: int = 1) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ProfileError(f"{where}: {field} must be an integer ≥ {lo} (got {value!r})")
    return value


def _jsonl_rows(path: Path, text: str) -> Iterator[DatasetRow]:
    for i, line in _lines(text):
        if not line.strip():
            continue
        where = f"{path}:{i}"
        obj = _json(path, i, line)
        if not isinstance(obj, dict):
            raise ProfileError(f"{where}: expected a JSON object with messages or prompt")
        messages: tuple[Message, ...] | None = None
        prompt: str | None = None
        if "messages" in obj:
            msgs = obj["messages"]
            if not isinstance(msgs, list) or not msgs:
                raise ProfileError(f"{where}: messages must be a non-empty list of {{role, content}}")
            pairs = []
            for k, m in enumerate(msgs):
                if not isinstance(m, dict) or "role" not in m:
                    raise ProfileError(f"{where}: messages[{k}] must be an object with role and content")
                pairs.append((str(m["role"]), _str(m.get("content"), where, f"messages[{k}].content")))
            messages = tuple(pairs)
        elif "prompt" in obj:
            prompt = _str(obj["prompt"], where, "prompt")
        else:
            raise ProfileError(f"{where}: a row needs messages (a chat) or prompt (text)")
        ts = obj.get("timestamp_s")
        if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts)
                               or ts < 0):  # fmt: skip
            raise ProfileError(f"{where}: timestamp_s must be a number of seconds ≥ 0 (got {ts!r})")
        yield DatasetRow(
            where,
            prompt=prompt,
            messages=messages,
            max_tokens=_opt_int(obj.get("max_tokens"), where, "max_tokens"),
            request_class=None if obj.get("class") is None else str(obj["class"]),
            session=None if obj.get("session") is None else str(obj["session"]),
            turn=_opt_int(obj.get("turn"), where, "turn", lo=0),
            timestamp_s=None if ts is None else float(ts),
        )


def _csv_rows(path: Path, text: str, column: str) -> Iterator[DatasetRow]:
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or column not in reader.fieldnames:
        have = ", ".join(reader.fieldnames or ())
        raise ProfileError(f"{path}:1: no column {column!r} in the header (columns: {have})")
    for row in reader:
        value = (row.get(column) or "").strip()
        if value:
            yield DatasetRow(f"{path}:{reader.line_num}", prompt=value)


def _arrow_table(path: Path) -> Any:
    """An Arrow IPC file (stream format, as ``datasets`` writes its cache, or file format) as a pyarrow table."""
    try:
        import pyarrow as pa
        import pyarrow.ipc
    except ImportError:
        raise ProfileError(
            f"{path}: reading Arrow files needs pyarrow: pip install 'tailscope[arrow]' (or convert the dataset to "
            "Parquet, which needs nothing more: datasets.Dataset.from_file(PATH).to_parquet(OUT))"
        ) from None
    try:
        with pa.memory_map(str(path)) as source:
            try:
                return pyarrow.ipc.open_stream(source).read_all()
            except pa.ArrowInvalid:
                source.seek(0)
                return pyarrow.ipc.open_file(source).read_all()
    except (pa.ArrowException, OSError) as exc:
        raise ProfileError(f"{path}: cannot read it as Arrow ({str(exc).splitlines()[0]})") from None


def _parquet_rows(path: Path, column: str | None, turns: str, fmt: str = "parquet") -> Iterator[DatasetRow]:
    """The rows of a Parquet (or Arrow) file, read with DuckDB."""
    import duckdb

    kind = "Parquet" if fmt == "parquet" else "Arrow"
    if not path.is_file():
        raise ProfileError(f"{path}: no such {kind} file")
    try:
        con = duckdb.connect()
        if fmt == "arrow":
            con.register("arrow_dataset", _arrow_table(path))
            source, params = "arrow_dataset", []
        else:
            source, params = "read_parquet(?)", [str(path)]
        names = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {source}", params).fetchall()]  # noqa: S608
        use = column or next((c for c in _PARQUET_COLUMNS if c in names), None)
        if use is None or use not in names:
            wanted = column or " or ".join(_PARQUET_COLUMNS)
            raise ProfileError(f"{path}: no column {wanted} (columns: {', '.join(names)}); name it: {fmt}:COLUMN:PATH")
        ident = '"' + use.replace('"', '""') + '"'  # a column the file has (checked above), quoted
        values = [r[0] for r in con.execute(f"SELECT {ident} FROM {source}", params).fetchall()]  # noqa: S608
    except duckdb.Error as exc:
        raise ProfileError(f"{path}: cannot read it as {kind} ({str(exc).splitlines()[0]})") from None
    for k, value in enumerate(values):
        where = f"{path}: row {k}"
        if value is None:
            continue
        if isinstance(value, str):
            if value.strip():
                yield DatasetRow(where, prompt=value)
            continue
        if isinstance(value, list) and value and isinstance(value[0], dict):
            if use == "conversations" or "from" in value[0]:
                row = _from_conversation(_conversation(value, where), where, turns, f"row-{k}")
                if row is not None:
                    yield row
                continue
            msgs = tuple((str(m.get("role")), _str(m.get("content"), where, "content")) for m in value)
            yield DatasetRow(where, messages=msgs)
            continue
        raise ProfileError(f"{where}: column {use!r} holds {type(value).__name__}, not text or a chat")


def approx_tokens(text: str) -> int:
    """Tokens of English text without a tokenizer: about 4 characters per token (≥ 1)."""
    return max(1, round(len(text) / 4))


def filter_rows(
    rows: Sequence[DatasetRow], *, min_tokens: int | None, max_tokens: int | None, count: Any = approx_tokens
) -> list[DatasetRow]:
    """The rows whose prompt length (by ``count``) lies within [min_tokens, max_tokens]."""
    out = []
    for r in rows:
        n = count(r.text())
        if (min_tokens is None or n >= min_tokens) and (max_tokens is None or n <= max_tokens):
            out.append(r)
    return out
