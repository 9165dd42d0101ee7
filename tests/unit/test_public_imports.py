"""Benchmarks, examples and docs use only the public API (issue 18): no ``tailscope.<submodule>`` in benchmarks/*.py,
examples/**/*.py or the code blocks of README.md and docs/*.md — ``tailscope`` itself (its ``__all__``) and the
optional test kit ``tailscope.testing`` aside.

What counts as using a module: ``import``/``from … import`` (also in code kept in strings, such as a benchmark's
``python -c`` script), ``importlib.import_module("…")``, and running it with ``python -m`` (a ``"-m", "…"`` pair in a
command list, or ``python -m …`` in a shell block or string). The developer tools in ``scripts/`` (fitting the step
model and the like) may reach internals and are not checked.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailscope.testing import docblocks

ROOT = Path(__file__).resolve().parents[2]

#: ``python -m MODULE`` in shell text
_DASH_M = re.compile(r"\bpython[\d.]*\s+(?:-\w+\s+)*-m\s+([\w.]+)")


def _is_public(module: str) -> bool:
    """``tailscope`` and its optional test kit; other packages are not this test's business."""
    return module.split(".")[0] != "tailscope" or module == "tailscope" or module.startswith("tailscope.testing")


def _constant(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _modules(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, module) of every module the code imports or runs."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
        elif isinstance(node, (ast.List, ast.Tuple)):  # [sys.executable, "-m", "tailscope.cli.main", …]
            for flag, value in zip(node.elts, node.elts[1:], strict=False):
                if _constant(flag) == "-m" and (module := _constant(value)) is not None:
                    yield node.lineno, module
        elif isinstance(node, ast.Call) and node.args and (module := _constant(node.args[0])) is not None:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__", "run_module"):
                yield node.lineno, module
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "tailscope" in node.value:
            for m in _DASH_M.finditer(node.value):  # "python -m tailscope.x" in a shell string
                yield node.lineno + node.value.count("\n", 0, m.start()), m.group(1)
            try:
                inner = ast.parse(node.value)
            except SyntaxError:
                continue
            for line, module in _modules(inner):
                yield node.lineno + line - 1, module


def _internal(tree: ast.AST) -> list[tuple[int, str]]:
    return sorted({(line, m) for line, m in _modules(tree) if not _is_public(m)})


def _code_files() -> list[Path]:
    return sorted([*(ROOT / "benchmarks").glob("*.py"), *(ROOT / "examples").rglob("*.py")])


def _doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", _code_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_benchmark_imports_only_the_public_api(path: Path) -> None:
    rel = path.relative_to(ROOT).as_posix()
    found = _internal(ast.parse(path.read_text(encoding="utf-8"), filename=rel))
    bad = [f"{rel}:{line}: {m}" for line, m in found]
    assert not bad, (
        "use these through `tailscope` (add a typed public function in api/ and to tailscope._EXPORTS if it has "
        "none; servers and fixtures belong in tailscope.testing): " + "; ".join(bad)
    )


def test_doc_code_blocks_import_only_the_public_api() -> None:
    bad: list[str] = []
    checked = 0
    for page in _doc_pages():
        for block in docblocks.blocks(page.read_text(encoding="utf-8")):
            if block.lang in ("python", "py", "pycon"):
                checked += 1
                text = "\n".join(ln.removeprefix(">>> ").removeprefix("... ") for ln in block.text.splitlines())
                try:
                    tree = ast.parse(text)
                except SyntaxError as exc:
                    bad.append(f"{page.name}:{block.line + (exc.lineno or 0)}: not Python ({exc.msg})")
                    continue
                bad += [f"{page.name}:{block.line + line}: {m}" for line, m in _internal(tree)]
            elif docblocks.is_shell_block(block):
                for k, text in enumerate(block.text.splitlines(), 1):
                    bad += [f"{page.name}:{block.line + k}: {m}" for m in _DASH_M.findall(text) if not _is_public(m)]
    assert checked >= 10  # the check saw the pages' examples
    assert not bad, "docs use internals (use `tailscope.X`): " + "; ".join(bad)


def test_the_check_sees_every_way_of_using_a_module() -> None:
    code = (
        "import tailscope\nfrom tailscope.testing import docblocks\nfrom tailscope.sim import run\n"
        'S = """\nimport tailscope.cli.common as c\n"""\n'
        'cmd = [sys.executable, "-m", "tailscope.cli.main", "--help"]\n'
        'ok = [sys.executable, "-m", "tailscope", "--help"]\n'
        'm = importlib.import_module("tailscope.trace.demo")\n'
        'sh = "python -m tailscope.testing.scripted_server && python3 -u -m tailscope.serve.app"\n'
    )
    assert _internal(ast.parse(code)) == [
        (3, "tailscope.sim"),
        (5, "tailscope.cli.common"),
        (7, "tailscope.cli.main"),
        (9, "tailscope.trace.demo"),
        (10, "tailscope.serve.app"),
    ]
