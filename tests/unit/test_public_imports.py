"""Benchmarks and docs use only the public API (issue 18): no ``tailscope.<submodule>`` imports in benchmarks/*.py or
in the python blocks of README.md and docs/*.md — ``tailscope`` itself (its ``__all__``) and the optional test kit
``tailscope.testing`` aside.

Code kept in strings (a benchmark's ``python -c`` script) is checked too. A few benchmarks still reach internals; they
are listed below with exactly what they import, so each new internal import is a decision, not an accident.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailscope.testing import docblocks

ROOT = Path(__file__).resolve().parents[2]

#: module prefixes anyone may import: the public facade and the optional test kit (servers, fixtures, fuzzing)
PUBLIC = ("tailscope", "tailscope.testing")

#: benchmarks that still import internals, and what each may import; each is to be converted to the public API (a file
#: may import less than its entry, never more; drop the entry once it imports none)
ALLOWED: dict[str, frozenset[str]] = {
    # the trace pipeline's stages one by one (demo traces as OTLP, the pure re-timing, the span store); owned by the
    # trace work of this session, to be moved onto write_demo_traces/ingest_traces/whatif or into tailscope.testing
    "benchmarks/trace_scale.py": frozenset({"tailscope.records", "tailscope.trace.demo"}),
    "benchmarks/trace_whatif.py": frozenset(
        {
            "tailscope.store.spans",
            "tailscope.trace.changes",
            "tailscope.trace.demo",
            "tailscope.trace.tree",
            "tailscope.trace.whatif",
        }
    ),
    # the command-line fuzz: the CLI entry is its subject (tailscope.testing may not import the CLI, so the benchmark
    # hands it in)
    "benchmarks/fuzz_cli.py": frozenset({"tailscope.cli.main"}),
}


def _is_public(module: str) -> bool:
    return module == "tailscope" or any(module.startswith(p + ".") or module == p for p in PUBLIC[1:])


def _imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, module) of every import of a tailscope module, also inside strings that parse as code."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "tailscope" in node.value:
            try:
                inner = ast.parse(node.value)
            except SyntaxError:
                continue
            for line, module in _imports(inner):
                yield node.lineno + line - 1, module


def _internal(tree: ast.AST) -> list[tuple[int, str]]:
    return [(line, m) for line, m in _imports(tree) if m.split(".")[0] == "tailscope" and not _is_public(m)]


def _benchmarks() -> list[Path]:
    return sorted((ROOT / "benchmarks").glob("*.py"))


def _doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", _benchmarks(), ids=lambda p: p.name)
def test_benchmark_imports_only_the_public_api(path: Path) -> None:
    rel = path.relative_to(ROOT).as_posix()
    found = _internal(ast.parse(path.read_text(encoding="utf-8"), filename=rel))
    allowed = ALLOWED.get(rel, frozenset())
    extra = [f"{rel}:{line}: {m}" for line, m in found if m not in allowed]
    assert not extra, "import these through `tailscope` (add a public name in api/ if it has none): " + "; ".join(extra)


def test_doc_python_blocks_import_only_the_public_api() -> None:
    bad: list[str] = []
    checked = 0
    for page in _doc_pages():
        for block in docblocks.blocks(page.read_text(encoding="utf-8")):
            if block.lang not in ("python", "py", "pycon"):
                continue
            checked += 1
            text = "\n".join(ln.removeprefix(">>> ").removeprefix("... ") for ln in block.text.splitlines())
            try:
                tree = ast.parse(text)
            except SyntaxError as exc:
                bad.append(f"{page.name}:{block.line + (exc.lineno or 0)}: not Python ({exc.msg})")
                continue
            bad += [f"{page.name}:{block.line + line}: {m}" for line, m in _internal(tree)]
    assert checked >= 10  # the check saw the pages' examples
    assert not bad, "docs import internals (use `tailscope.X`): " + "; ".join(bad)


def test_the_check_sees_imports_in_code_and_in_strings() -> None:
    code = (
        "import tailscope\nfrom tailscope.testing import docblocks\nfrom tailscope.sim import run\n"
        'S = """\nimport tailscope.cli.common as c\n"""\n'
    )
    assert _internal(ast.parse(code)) == [(3, "tailscope.sim"), (5, "tailscope.cli.common")]


def test_allowed_files_exist() -> None:
    missing = [rel for rel in ALLOWED if not (ROOT / rel).is_file()]
    assert not missing, f"drop these from ALLOWED: {missing}"
