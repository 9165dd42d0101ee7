"""The README's tour runs as written: every command of its block, in order, against the built-in engine served at the
tour's address (remapped to a free port) and a plain HTTP service for the profile's mixed traffic.

Each command must end as the tour says and print no traceback: exit 0, or the exit code its comment states
(``# exit N`` on its line: the gate of a candidate of the same build passes, the gate of one on a slower GPU fails);
a bench with SLOs (``--slo`` or a profile's) may exit 3 and the checklist 1; a gate never exits 2 (missing data: the
tour would gate the wrong run or a contract it cannot check). Whether a gate passes is a judgement on measured
latencies: on a busy machine a gate that ends otherwise than stated is reported as not judged (the ``judgement``
fixture), not failed. ``RUN_A``/``RUN_B`` stand for two run ids, as the README says.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tailscope.testing import docblocks
from tailscope.testing.builtin_server import built_in_server

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


#: the exit code a tour line states in its comment
STATED_EXIT = re.compile(r"#\s*exit (\d+)\b")


def tour_steps(readme: str) -> list[tuple[str, int | None]]:
    """The commands of the README's tour block (the first block after "## A tour"), split as every doc test splits
    them (:func:`tailscope.testing.docblocks.commands`: continuations joined, comments dropped, ``;``/``&&`` split),
    each with the exit code its line's comment states (``# exit N``; None when it states none)."""
    block = docblocks.blocks(readme.split("## A tour", 1)[1])[0]
    lines = block.text.splitlines()
    steps: list[tuple[str, int | None]] = []
    for c in docblocks.commands(block.text):
        stated = STATED_EXIT.search(lines[c.line - 1])
        steps.append((c.text, int(stated.group(1)) if stated else None))
    return steps


def tour_commands(readme: str) -> list[str]:
    return [cmd for cmd, _ in tour_steps(readme)]


def test_the_tour_parses_into_commands() -> None:
    steps = tour_steps((REPO / "README.md").read_text())
    commands = [cmd for cmd, _ in steps]
    assert all(c.startswith("tailscope ") for c in commands), [c for c in commands if not c.startswith("tailscope ")]
    assert len(commands) >= 25
    # the verify part gates a candidate against a baseline (not a run against itself): one gate passes, one fails
    gates = [(cmd, stated) for cmd, stated in steps if cmd.startswith("tailscope gate ")]
    assert sorted(stated for _, stated in gates) == [0, 1], gates
    assert "tailscope runs tag latest main" in commands
    passing = next(cmd for cmd, stated in gates if stated == 0)
    assert commands.index(passing) > commands.index("tailscope runs tag latest main") + 1  # a later run: the candidate


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def _plain_service() -> Iterator[int]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


def _expected_codes(cmd: str) -> set[int]:
    if cmd.startswith("tailscope checklist "):
        return {0, 1}  # 1 while an item is neither evidenced nor attested, as the README says
    if cmd.startswith("tailscope gate "):
        return {0, 1}  # pass or fail for a stated reason; 2 (missing data) would mean the tour gates the wrong run
    if cmd.startswith("tailscope bench ") and ("--slo" in cmd or "--profile" in cmd):
        return {0, 3}  # exit 3: an SLO (of the command or the profile) missed
    return {0}


def _run_ids(cwd: Path, env: dict[str, str]) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "tailscope", "runs", "list", "--json", "-"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    import json

    return [r["run"]["id"] for r in json.loads(out.stdout)]


@pytest.mark.timeout(1500)
@pytest.mark.beside  # ≈ 4 minutes: run beside the main suite, with the real-server tests (scripts/run_suite.sh)
def test_the_readme_tour_runs_as_written(tmp_path: Path, judgement: Any) -> None:
    steps = tour_steps((REPO / "README.md").read_text())
    env = {k: v for k, v in os.environ.items() if k != "TAILSCOPE_DB"}
    with built_in_server(speed=20.0, served_model_name="tiny") as url, _plain_service() as svc:
        shutil.copytree(REPO / "examples", tmp_path / "examples")
        for f in (tmp_path / "examples").glob("*.yaml"):
            f.write_text(f.read_text().replace("127.0.0.1:9000", f"127.0.0.1:{svc}"))
        timings: list[str] = []
        for cmd, stated in steps:
            line = cmd.replace("http://127.0.0.1:8000", url)
            if "RUN_A" in line or "RUN_B" in line:
                ids = _run_ids(tmp_path, env)
                line = line.replace("RUN_A", ids[1]).replace("RUN_B", ids[0])
            argv = [sys.executable, "-m", "tailscope", *shlex.split(line)[1:]]
            t0 = time.monotonic()
            if line.strip() == "tailscope ui":
                proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)  # fmt: skip
                time.sleep(4)
                assert proc.poll() is None, f"`{cmd}` ended at once: {proc.communicate()[1][-800:]}"
                proc.terminate()
                proc.communicate(timeout=20)
                continue
            p = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
            timings.append(f"{time.monotonic() - t0:6.1f} s  exit {p.returncode}  {cmd[:90]}")
            print(timings[-1], file=sys.stderr, flush=True)
            assert "Traceback" not in p.stderr, f"`{cmd}`:\n{p.stderr[-2000:]}"
            assert p.returncode in _expected_codes(cmd) | ({stated} if stated is not None else set()), (
                f"`{cmd}` exited {p.returncode}:\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}"
            )
            if stated is not None and p.returncode != stated:
                verdict = (p.stdout.strip().splitlines() or [""])[-1]
                print(p.stdout[-2500:], file=sys.stderr)  # shown when the judgement fails
                judgement.holds(False, f"`{cmd}` exited {p.returncode}, the README states {stated}: {verdict}")
        print("\n".join(timings))
