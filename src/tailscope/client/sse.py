"""An incremental server-sent-events parser (pure, no IO).

Follows the WHATWG event-stream rules that matter for LLM streaming: lines end in LF, CRLF or CR (a CR at the end of
one network chunk may pair with an LF at the start of the next); a blank line dispatches the event; lines starting
with ``:`` are comments; ``data`` lines of one event are joined with ``\\n``; one space after the colon is dropped;
``event``, ``id`` and ``retry`` fields are kept or ignored; an unknown field is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from tailscope.errors import SSEError


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event: its ``data`` text and ``event`` type (``message`` when unset)."""

    data: str
    event: str = "message"
    id: str | None = None


class SSEParser:
    """Feed raw bytes, get complete events.

    Args:
        max_line_bytes: a line longer than this (without a terminator yet) raises :class:`SSEError`, so a server that
            never ends a line cannot grow memory without bound.
    """

    __slots__ = ("_buf", "_data", "_event", "_id", "max_line_bytes")

    def __init__(self, max_line_bytes: int = 1024 * 1024) -> None:
        self._buf = b""
        self._data: list[bytes] = []
        self._event: bytes | None = None
        self._id: bytes | None = None
        self.max_line_bytes = max_line_bytes

    def _lines(self, chunk: bytes) -> list[bytes]:
        """Complete lines of ``buffer + chunk`` (any line ending); the unfinished rest stays buffered."""
        data = self._buf + chunk if self._buf else chunk
        hold = b""
        if data.endswith(b"\r"):  # may pair with an LF at the start of the next chunk
            data, hold = data[:-1], b"\r"
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = data.split(b"\n")
        self._buf = lines.pop() + hold
        if len(self._buf) > self.max_line_bytes:
            size = len(self._buf)
            self._buf = b""
            raise SSEError(f"an SSE line exceeded {self.max_line_bytes} bytes without ending ({size} bytes so far)")
        return lines

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk`` (any boundaries) and return the events it completed.

        Raises:
            SSEError: on invalid UTF-8 in a field, or a line over ``max_line_bytes``.
        """
        lines = self._lines(chunk)
        out: list[SSEEvent] = []
        for line in lines:
            self._line(line, out)
        return out

    def feed_data(self, chunk: bytes) -> list[bytes]:
        """Fast path for LLM streams: like :meth:`feed` but returns only each event's raw ``data`` bytes.

        Same line rules as :meth:`feed`; the bytes are not decoded (a JSON parser validates them). Use one of the
        two methods per parser, not both.
        """
        if (
            not self._buf
            and not self._data
            and chunk[:6] == b"data: "
            and chunk[-2:] == b"\n\n"
            and chunk.count(b"\n") == 2
            and b"\r" not in chunk
        ):
            return [chunk[6:-2]]  # one whole event in one read: the common case, no line splitting needed
        lines = self._lines(chunk)
        out: list[bytes] = []
        pending = self._data
        for line in lines:
            if not line:
                if pending:
                    out.append(pending[0] if len(pending) == 1 else b"\n".join(pending))
                    pending = []
                self._event = None
            elif line.startswith(b"data:"):
                value = line[5:]
                pending.append(value[1:] if value[:1] == b" " else value)
            elif line == b"data":  # a field name alone means an empty value
                pending.append(b"")
            elif line[0] != 0x3A:
                name, _, value = line.partition(b":")
                if name == b"event":
                    self._event = value[1:] if value[:1] == b" " else value
        self._data = pending
        return out

    def close_data(self) -> list[bytes]:
        """End of stream for :meth:`feed_data`: a final event whose blank line never came."""
        out = self.feed_data(b"\n") if self._buf else []
        if self._data:
            out.append(b"\n".join(self._data))
            self._data = []
        return out

    def close(self) -> list[SSEEvent]:
        """End of stream: dispatch a final event whose blank line never came (lenient)."""
        out: list[SSEEvent] = []
        if self._buf:
            buf, self._buf = self._buf.rstrip(b"\r"), b""
            self._line(buf, out)
        self._line(b"", out)
        return out

    def _line(self, line: bytes, out: list[SSEEvent]) -> None:
        if not line:
            if self._data:
                out.append(self._dispatch())
            else:
                self._event = None
            return
        if line[0] == 0x3A:  # ':' comment
            return
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value
        elif name == b"id":
            self._id = value

    def _dispatch(self) -> SSEEvent:
        try:
            data = b"\n".join(self._data).decode("utf-8")
            event = self._event.decode("utf-8") if self._event else "message"
            ident = self._id.decode("utf-8") if self._id is not None else None
        except UnicodeDecodeError as exc:
            raise SSEError(f"invalid UTF-8 in an SSE event at byte {exc.start}") from None
        finally:
            self._data = []
            self._event = None
        return SSEEvent(data=data, event=event, id=ident)
