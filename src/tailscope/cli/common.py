"""What several commands share: option definitions, the store the command line uses, writing outputs."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from tailscope.errors import TailscopeError
from tailscope.files import to_stdout, write_json
from tailscope.files import write_text as write_text  # the commands write files through tailscope.files

if TYPE_CHECKING:
    from tailscope.api._flags import Flag
    from tailscope.store.runs import RunStore

F = TypeVar("F", bound=Callable[..., Any])

# Option sets that several commands share, defined once (typer reads the Annotated metadata; defaults stay in the
# signatures). Kept one option a line, so the formatter is off for the block. The workload of bench, sim and twin
# check and the engine of sim and serve are the library's (tailscope.api._flags, given by `with_flags`).
# fmt: off
Db = Annotated[Path | None, typer.Option("--db", help="Store (default $TAILSCOPE_DB or .tailscope/tailscope.duckdb).")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No live progress (for CI).")]
ExportOut = Annotated[Path | None, typer.Option("--json", metavar="PATH", help=(
    "Write run, summary and every request to PATH (- = stdout, tables to stderr)."))]
HtmlOut = Annotated[Path | None, typer.Option("--html", help="Write a self-contained HTML report to this file.")]
Host = Annotated[str, typer.Option("--host", help="Interface to bind (default: this machine only).")]
Port = Annotated[int, typer.Option("--port", help="Port to listen on (0 = a free one).")]

# the model and engine of plan
Profile = Annotated[Path | None, typer.Option("--profile", help="Workload profile YAML (flags override its fields).")]
Model = Annotated[str, typer.Option("--model", help="Catalog model id or a path to a config.json.")]
Gpu = Annotated[str, typer.Option("--gpu", help="Catalog GPU id (tailscope catalog gpus).")]
Tp = Annotated[int, typer.Option("--tp", help="Tensor-parallel GPUs per replica (per attention-DP rank).")]
Engine = Annotated[str, typer.Option("--engine", help="Serving engine: vllm, sglang or trtllm (costs, defaults).")]
WeightsDtype = Annotated[str | None, typer.Option("--weights-dtype", help=(
    "bf16, fp8, int8, int4, fp4, mxfp4 (default: the checkpoint's own)."))]
KvDtype = Annotated[str, typer.Option("--kv-dtype", help="bf16 or fp8 KV cache.")]
# fmt: on


class MissingInput(TailscopeError):
    """Invalid input or missing data for a command whose exit code 1 means "failed" (gate, drill): exit code 2."""

    exit_code = 2


def store_path(db: Path | None) -> RunStore:
    """The store of the command line: ``--db``, else ``$TAILSCOPE_DB``, else ``.tailscope/tailscope.duckdb``."""
    from tailscope.store.runs import RunStore

    return RunStore(db)


def with_flags(flags: Iterable[Flag]) -> Callable[[F], F]:
    """Give a command the options the library declares (:mod:`tailscope.api._flags`), before its own; their values
    arrive in the command's ``**options`` (typer reads the signature this sets)."""

    def add(command: F) -> F:
        sig = inspect.signature(command, eval_str=True)
        own = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
        head = [p for p in own if p.annotation is typer.Context]
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        made = [inspect.Parameter(f.name, kind, annotation=f.type, default=typer.Option(
            list(f.default) if isinstance(f.default, tuple) else f.default, *f.decls.split(), help=f.help,
            metavar=f.metavar)) for f in flags]  # fmt: skip
        command.__signature__ = sig.replace(parameters=[*head, *made, *own[len(head) :]])  # type: ignore[attr-defined]
        return command

    return add


def typed_params(ctx: typer.Context) -> frozenset[str]:
    """Names of the parameters typed on the command line (not left at their defaults)."""
    given: set[str] = set()
    for name in ctx.params:
        source = ctx.get_parameter_source(name)
        # by name: typer may vendor its own click, whose ParameterSource is a different class
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            given.add(name)
    return frozenset(given)


def json_path_option(what: str) -> Any:
    """``--json PATH``, one meaning across commands: write ``what`` as JSON to PATH, ``-`` for stdout (then instead of
    the table). Never a bare flag: typer cannot parse an option that is both (``--json --db x`` would eat ``--db``)."""
    return typer.Option(
        None, "--json", metavar="PATH", help=f"Write {what} as JSON to PATH (- = stdout, instead of the table)."
    )


def write_export(path: Path, doc: dict[str, Any]) -> None:
    """Write an export document (run, summary, every request) as JSON (``-`` = stdout), then :func:`wrote`."""
    write_json(path, doc, "--json", indent=1, end="")
    wrote(path)


def wrote(path: Path | str) -> None:
    """Say on stderr that ``path`` was written (nothing for ``-``, which is stdout)."""
    if not to_stdout(path):
        err_console().print(f"wrote {path}")


def write_report_html(path: Path, runs: Any) -> None:
    """``--html PATH``: the HTML report of ``runs`` (its modules load only when asked for), then :func:`wrote`."""
    from tailscope.api.report import write_report

    write_report(path, runs)
    wrote(path)


def emit_json(doc: Any, path: Path | None, flag: str = "--json") -> bool:
    """Write a JSON document to ``path`` (``-`` = stdout). Returns True when it went to stdout."""
    return write_json(path, doc, flag) and to_stdout(path)


def json_or_render(doc: Any, path: Path | None, render: Callable[[], None]) -> None:
    """``--json PATH`` then the table: ``-`` prints only the JSON; a path is written, the table printed and the path
    named on stderr; no path prints the table."""
    if emit_json(doc, path):
        return
    render()
    if path is not None:
        wrote(path)


def emit_answer(doc: dict[str, Any], path: Path | None, render: Callable[[Any], None]) -> None:
    """A planner's answer: the table on a stdout console (or only the JSON with ``--json -``), then the JSON written
    to ``path`` when one is given."""
    from tailscope.report.console import stdout_console

    if not to_stdout(path):
        render(stdout_console())
    write_json(path, doc, "--json", indent=1, end="", default=str)


def err_console() -> Any:
    """A rich console on stderr (progress, notes, 'wrote …' lines)."""
    from rich.console import Console

    return Console(stderr=True)


def warn_exposed(command: str, host: str, why: str) -> None:
    """Warn on stderr when ``--host`` is not loopback: ``why`` says what else that exposes."""
    from tailscope.serve.server import is_loopback

    if not is_loopback(host):
        print(f"tailscope {command}: warning: --host {host} accepts connections from other machines{why}. Use --host "
              "127.0.0.1 unless you mean it.", file=sys.stderr)  # fmt: skip


class _CommandApp(typer.Typer):
    """A Typer whose commands' help keeps its example command lines as written (see :func:`keep_examples`) and whose
    options are coerced by :class:`~tailscope.cli.plain_coercion.PlainCommand`."""

    def command(self, *args: Any, help: str | None = None, **kwargs: Any) -> Any:
        from tailscope.cli.plain_coercion import PlainCommand

        register = super().command
        kwargs.setdefault("cls", PlainCommand)

        def decorate(f: Any) -> Any:
            text = help if help is not None else inspect.getdoc(f)
            return register(*args, help=keep_examples(text) if text else text, **kwargs)(f)

        return decorate


def command_app(**kwargs: Any) -> typer.Typer:
    """A command module's Typer: plain (not rich-markup) help like the root app, no shell-completion options, and
    example command lines printed as written."""
    return _CommandApp(rich_markup_mode=None, add_completion=False, pretty_exceptions_enable=False, **kwargs)


def keep_examples(text: str) -> str:
    """Mark with click's ``\\b`` every help paragraph that holds an example command line (a line that starts a
    ``tailscope``/``curl`` command or ends in a ``\\`` continuation), so click prints it as written: re-wrapping breaks
    continuations, paths and aligned comments. Prose paragraphs still wrap; a marked paragraph stays as it is."""

    def example(p: str) -> bool:
        lines = p.strip("\n").splitlines()
        return not p.startswith("\b") and any(
            ln.rstrip().endswith("\\") or ln.lstrip().startswith(("tailscope ", "curl ", "$ ")) for ln in lines
        )

    return "\n\n".join("\b\n" + p if example(p) else p for p in text.split("\n\n"))


def verbatim(text: str) -> str:
    """Help text whose paragraphs click prints as written (no re-wrapping that would break ``\\`` continuations,
    paths and aligned comments): each paragraph is marked with click's ``\\b``."""
    paragraphs = [p for p in text.strip("\n").split("\n\n")]
    return "\n\n".join("\b\n" + p if p.strip() else p for p in paragraphs)
