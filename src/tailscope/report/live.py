"""The live progress display of a running bench (rich, refreshed from its own thread)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.live import Live
from rich.text import Text

from tailscope.runner.progress import Progress


class _View:
    def __init__(self, p: Progress) -> None:
        self.p = p

    def __rich__(self) -> Text:
        p = self.p
        if p.total is not None:
            head = f"{p.done}/{p.total} done"
        elif p.duration_s is not None:
            head = f"{p.elapsed_s:5.1f}/{p.duration_s:g} s"
        else:
            head = f"{p.done} done"
        t = Text(f"{head} · in flight {p.in_flight} · {p.tokens_per_s_now():,.0f} output tok/s now · errors {p.failed}")
        if p.errors:
            t.append("  (" + ", ".join(f"{k}={v}" for k, v in sorted(p.errors.items())) + ")", style="red")
        return t


@contextmanager
def live_progress(progress: Progress, *, quiet: bool, console: Console | None = None) -> Iterator[None]:
    """Show live counters on stderr while the body runs (nothing with ``quiet``)."""
    if quiet:
        yield
        return
    con = console or Console(stderr=True)
    with Live(_View(progress), console=con, refresh_per_second=2, transient=True):
        yield
