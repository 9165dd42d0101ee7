"""The curated public API: sorted, complete for the core modules, and lazy."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import tailscope

CORE_MODULES = ("tailscope.errors", "tailscope.records")


def test_all_is_sorted_and_resolves() -> None:
    names = [n for n in tailscope.__all__ if n != "__version__"]
    assert names == sorted(names)
    for name in tailscope.__all__:
        assert getattr(tailscope, name) is not None


def test_core_modules_are_fully_exported() -> None:
    for mod_name in CORE_MODULES:
        mod = importlib.import_module(mod_name)
        public = {
            n
            for n, obj in vars(mod).items()
            if not n.startswith("_")
            and (inspect.isclass(obj) or inspect.isfunction(obj))
            and obj.__module__ == mod_name
        }
        missing = public - set(tailscope.__all__)
        assert not missing, f"{mod_name} defines public names not exported by tailscope: {sorted(missing)}"


def test_import_is_lazy() -> None:
    code = "import sys, tailscope; print(any(m in sys.modules for m in ('numpy', 'aiohttp', 'duckdb', 'rich')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_one_list_of_exports() -> None:
    """__all__, the lazy-import table and the typing imports name the same objects."""
    import ast
    from pathlib import Path

    assert set(tailscope.__all__) == {*tailscope._EXPORTS, "__version__"}
    tree = ast.parse(Path(tailscope.__file__).read_text(encoding="utf-8"))
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom)
                for alias in imp.names:
                    typed[alias.name] = imp.module or ""
    assert typed == tailscope._EXPORTS


def test_run_sync_never_formats_the_result() -> None:
    """The sync API's result is handed back without being repr'd: on Python 3.11 the event-loop runner's SIGINT
    bookkeeping formats the main task's repr (result included), which for a bench result meant every record (issue
    20: ~80 ms of client CPU at 256 streams)."""
    from tailscope.api._support import run_sync

    class Result:
        reprs = 0

        def __repr__(self) -> str:
            Result.reprs += 1
            return "Result()"

    async def make() -> Result:
        return Result()

    got = run_sync(make())
    assert isinstance(got, Result)
    assert Result.reprs == 0
