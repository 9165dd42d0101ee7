"""The examples of docs/python-api.md run as written (each ```python block in its own fresh namespace)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"


def blocks() -> list[tuple[int, str]]:
    text = DOC.read_text(encoding="utf-8")
    out = []
    for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
        out.append((text[: m.start()].count("\n") + 1, m.group(1)))
    return out


def test_the_page_has_examples() -> None:
    assert len(blocks()) >= 4


@pytest.mark.parametrize(("line", "code"), blocks(), ids=[f"line{n}" for n, _ in blocks()])
def test_example_runs(line: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # files an example writes land in a temporary folder
    exec(compile(code, f"{DOC}:{line}", "exec"), {"__name__": "__docs__"})  # noqa: S102 - our own docs
    stores = [p.name for p in tmp_path.rglob("*") if p.suffix == ".duckdb" or p.name == ".tailscope"]
    if "store=" not in code:
        assert not stores, f"an example without store= wrote a store: {stores}"
