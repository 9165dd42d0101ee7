"""Random `tailscope bench` command lines (flags, aliases, nonsense values, profile and replay files, conflicting
modes) through the real CLI against a live built-in engine: a documented exit code, no traceback, one error line
when refused, and the store still opens (the long run: benchmarks/fuzz_cli.py)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tailscope.cli.main import main as cli_main
from tailscope.testing.builtin_server import built_in_server
from tailscope.testing.fuzz_bench import store_readable
from tailscope.testing.fuzz_cli import CaseTimeout, CliCase, draw_cli_case, run_cli_case, run_cli_subprocess

pytestmark = pytest.mark.integration

CASES = int(os.environ.get("TAILSCOPE_FUZZ_CLI_CASES", "80"))


def test_random_command_lines_exit_documented_and_never_break_the_store(tmp_path: Path) -> None:
    rng = random.Random(20261203)
    store = tmp_path / "fuzz.duckdb"
    bad: list[str] = []
    codes: dict[int | None, int] = {}
    with built_in_server(speed=50.0) as url:
        for i in range(CASES):
            case = draw_cli_case(rng, url=url, store=store, workdir=tmp_path)
            out = run_cli_case(case, tmp_path, cli_main)
            codes[out.code] = codes.get(out.code, 0) + 1
            if out.problem is not None:
                bad.append(f"case {i}: {out.problem}: {case.describe()}\n{out.stderr[-800:]}")
        # a few through a real process: the console script's path, real stderr
        for i in range(3):
            case = draw_cli_case(rng, url=url, store=store, workdir=tmp_path)
            out = run_cli_subprocess(case, tmp_path)
            if out.problem is not None:
                bad.append(f"subprocess case {i}: {out.problem}: {case.describe()}\n{out.stderr[-800:]}")
    assert not bad, "\n".join(bad[:5])
    assert store_readable(store) is None
    assert codes.get(0, 0) + codes.get(3, 0) >= CASES // 5, f"too few cases ran: {codes}"
    assert codes.get(1, 0) + codes.get(2, 0) >= CASES // 10, f"too few cases were refused: {codes}"


def test_the_judge_catches_what_the_fuzz_looks_for(tmp_path: Path) -> None:
    """The properties themselves: an internal error, two error lines, an undocumented code are all caught."""
    bench = ("bench", "--requests", "1")
    from tailscope.testing.fuzz_cli import judge

    assert judge(1, "tailscope: error: --rate x: not a number\n", "", bench).problem is None
    assert judge(
        1, "tailscope: error: f failed: ValueError: x (run with --debug for the traceback)\n", "", bench
    ).problem
    assert judge(1, "tailscope: error: one thing wrong\nError: another\n", "", bench).problem
    assert judge(2, "Usage: …\n\nError: No such option: -z\n", "", bench).problem is None
    assert judge(4, "", "", bench).problem
    assert judge(None, "Traceback (most recent call last):\n", "", bench).problem
    assert judge(3, "", "table", bench).problem  # exit 3 must say which check failed
    assert judge(0, "", "", ("bench", "--json", "-")).problem
    out = run_cli_case(
        CliCase(("bench", "--requests", "1", "--rate", "nan", "--db", str(tmp_path / "s.duckdb"))), tmp_path, cli_main
    )
    assert (out.code, out.problem, out.refusal) == (1, None, "--rate")

    def stuck(argv: list[str]) -> None:
        raise CaseTimeout("still running after 120 s")

    assert (run_cli_case(CliCase(bench), tmp_path, stuck).problem or "").startswith("a hang")
