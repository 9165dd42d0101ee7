"""The docs run as written: every shell block of docs/*.md a user would paste (the tutorial and python-api.md have
their own tests) runs, block after block, in one temporary folder per page, and each command ends as the text says.

* ``tailscope …`` commands run on the built-in engine: the docs' model server address (port 8000) is a ``tailscope
  serve`` started once for all pages; 18312, where workload.md shows sessions on the scripted test server with a known
  capacity of 20 requests/s (4 slots × 200 ms), is that server. Every other port a page names (8080, 4317, 4318,
  8787, 9000, 9001) is replaced by a free one, and so is the port of each server a page starts.
* The folder starts as a reader's would after the README tour: ``examples/`` copied in, and a store with two bench runs
  (the older tagged ``main``) and the trace sets ``before``, ``after`` and ``prod`` (``tailscope trace demo``'s).
* Bounded: a bench's ``--requests``/``-n``/``--num-prompts`` is cut to 16 and its ``--duration`` to 2 s (6 s with a
  profile: its first stage is slow and its first requests are warmup); a bench without ``--duration`` gets that
  ``--duration`` (a count alone can still take long: sessions replayed from traces keep their real timing). Nothing
  else is rewritten.
* A server a page starts (``serve``, ``app``, ``proxy``, ``ui``, ``trace collect``) runs until ``kill %N`` or the
  end of the page when started with ``&``, until the end of its block otherwise (another terminal); it must be up.
* Each command exits 0 unless the page says otherwise (``<!-- doctest: exit N -->`` above the block, or ``(exit N)``
  under a ``$`` command) and prints no traceback; under ``<!-- doctest: output -->`` it prints the lines the page
  shows. ``<!-- doctest: skip REASON -->`` blocks are not run; ``<!-- doctest: file NAME -->`` blocks are written as
  NAME (ports remapped) before the page's first command. Synopses run without their ``[--options]`` and with
  ``RUN`` as ``latest``; a line still holding a placeholder (``SET``), an alternative (``a|b``), an optional argument
  or ``…`` is not run. Other tools (curl, promtool) run too. Python blocks run in the page's folder.
  Directives and parsing: :mod:`tailscope.testing.docblocks`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tailscope.testing import docblocks
from tailscope.testing.builtin_server import built_in_server
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.beside]  # every docs page: beside the main suite

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
#: pages with their own doc test (test_tutorial.py, test_docs_python_api.py)
OWN_TESTS = {"tutorial.md", "python-api.md"}
PAGES = sorted(p.name for p in DOCS.glob("*.md") if p.name not in OWN_TESTS)

#: the model server's address in the docs
MODEL_PORT = 8000
#: the scripted server of workload.md's captured sessions
SCRIPTED_PORT = 18312
#: every other port the docs name
OTHER_PORTS = {8080, 4317, 4318, 8787, 9000, 9001}
#: servers a page may start: their listening flags and the port they take without one
LISTENERS: dict[tuple[str, ...], tuple[tuple[str, ...], int | None]] = {
    ("serve",): (("--port",), 8000),
    ("app",): (("--port",), 8080),
    ("ui",): (("--port",), 8787),
    ("proxy",): (("--listen", "--admin-port"), None),
    ("trace", "collect"): (("--port", "--grpc-port"), 4318),
}
MAX_REQUESTS = 16
MAX_DURATION_S = 2.0
#: a profile's stages start slow and its first requests are warmup: its runs get a little longer
MAX_PROFILE_DURATION_S = 6.0
COMMAND_TIMEOUT_S = 180


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TAILSCOPE_DB"}
    env["NO_COLOR"] = "1"
    env["COLUMNS"] = "200"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH", "")) if p)
    return env


def _run(argv: list[str], cwd: Path, timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


def _tailscope(*args: str) -> list[str]:
    return [sys.executable, "-m", "tailscope", *args]


@dataclass
class World:
    """The built-in engine every page's model-server address points to, and the folder a page starts from."""

    model_port: int
    scripted_port: int
    template: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    template = tmp_path_factory.mktemp("world")
    shutil.copytree(REPO / "examples", template / "examples")
    scripted = ScriptedServer(ScriptedConfig(ttft_ms=150.0, itl_ms=50.0, capacity=4, log=False))
    with built_in_server(speed=20.0) as url, scripted:
        port = int(url.rsplit(":", 1)[1])
        steps = [
            _tailscope("trace", "demo", "--out", "demo-traces"),
            _tailscope("trace", "ingest", "demo-traces/before.otlp.json", "--set", "before"),
            _tailscope("trace", "ingest", "demo-traces/after.otlp.json", "--set", "after"),
            _tailscope("trace", "ingest", "demo-traces/before.otlp.json", "--set", "prod"),
            _tailscope("bench", "--url", url, "--requests", "16", "--concurrency", "4", "--output-tokens", "8"),
            _tailscope("runs", "tag", "latest", "main"),
            _tailscope("bench", "--url", url, "--requests", "16", "--concurrency", "4", "--output-tokens", "8"),
        ]
        for argv in steps:
            p = _run(argv, template)
            assert p.returncode == 0, f"{argv[3:]}: {p.stdout[-1000:]}{p.stderr[-1000:]}"
        shutil.rmtree(template / "demo-traces")
        yield World(port, scripted.port, template)


@dataclass
class Job:
    proc: subprocess.Popen[str]
    text: str


@dataclass
class Page:
    """One page's run: its folder, the port map, and the servers it started."""

    name: str
    cwd: Path
    ports: dict[int, int]
    shared: frozenset[int]  # the servers of every page (never taken over by a page's own server)
    jobs: list[Job] = field(default_factory=list)  # started with & (live until kill %N or the page's end)
    block_jobs: list[Job] = field(default_factory=list)  # foreground servers: live until the block's end
    block_numbering: list[Job | None] = field(default_factory=list)  # %1, %2 … of the current block
    log: list[str] = field(default_factory=list)

    def where(self, line: int) -> str:
        return f"docs/{self.name}:{line}"

    def remap(self, text: str) -> str:
        return re.sub(r"(?<![\d.])(\d{4,5})(?!\d)", lambda m: str(self.ports.get(int(m.group(1)), m.group(1))), text)


def _stop(job: Job) -> str:
    if job.proc.poll() is None:
        job.proc.send_signal(signal.SIGTERM)
    try:
        out, err = job.proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        job.proc.kill()
        out, err = job.proc.communicate()
    return (out or "") + (err or "")


def _bounded(tokens: list[str]) -> list[str]:
    """A bench's load cut to at most MAX_REQUESTS requests and MAX_DURATION_S seconds (the module's docstring)."""
    if tokens[:2] != ["tailscope", "bench"]:
        return tokens
    out = list(tokens)
    longest = MAX_PROFILE_DURATION_S if "--profile" in tokens else MAX_DURATION_S
    has_duration = False
    for i, t in enumerate(out[:-1]):
        if t in ("--requests", "-n", "--num-prompts"):
            out[i + 1] = str(min(int(out[i + 1]), MAX_REQUESTS))
        elif t == "--duration":
            out[i + 1] = f"{min(float(out[i + 1]), longest):g}"
            has_duration = True
    if not has_duration:  # a request count alone may still take long (sessions replayed from traces in real time)
        out += ["--duration", f"{longest:g}"]
    return out


def _listener(tokens: list[str]) -> tuple[tuple[str, ...], int | None] | None:
    for words, spec in LISTENERS.items():
        if tuple(tokens[1 : 1 + len(words)]) == words:
            return spec
    return None


def _wait_listening(job: Job, port: int, where: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert job.proc.poll() is None, f"{where}: `{job.text}` ended at once:\n{_stop(job)[-2000:]}"
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    pytest.fail(f"{where}: `{job.text}` did not listen on {port} within 60 s")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _listen_port(page: Page, doc_port: int) -> int:
    """The port a server the page starts on ``doc_port`` listens on: the page's own for that port while it is free
    (the files the page showed name it), a fresh one when an earlier server of the page holds it."""
    mine = page.ports.get(doc_port)
    port = mine if mine is not None and mine not in page.shared and _bindable(mine) else _free_port()
    page.ports[doc_port] = port
    return port


def _start_server(
    page: Page, cmd: docblocks.Command, tokens: list[str], spec: tuple[tuple[str, ...], int | None]
) -> None:
    flags, default = spec
    listened: list[int] = []
    for i, t in enumerate(tokens[:-1]):
        if t in flags:
            port = _listen_port(page, int(tokens[i + 1]))
            tokens[i + 1] = str(port)
            listened.append(port)
    if not listened and default is not None:
        port = _listen_port(page, default)
        tokens += [flags[0], str(port)]
        listened.append(port)
    tokens = [page.remap(t) for t in tokens]
    proc = subprocess.Popen(_tailscope(*tokens[1:]), cwd=page.cwd, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    job = Job(proc, cmd.text)
    (page.jobs if cmd.background else page.block_jobs).append(job)
    page.block_numbering.append(job if cmd.background else None)
    _wait_listening(job, listened[0], page.where(cmd.line))
    page.log.append(f"  started  {cmd.text[:100]}")


def _normalised(line: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[┃│━╇┡┏┓┗┛┳┻╋─┼╸╺]", " ", line)).strip()


def _check_output(page: Page, cmd: docblocks.Command, printed: str) -> None:
    got = _normalised(printed)  # one line: the console wraps long lines where the page does not
    for shown in cmd.output:
        want = _normalised(docblocks.EXIT_NOTE.sub("", shown))
        if not want or "…" in want:
            continue
        assert want in got, (
            f"{page.where(cmd.line)}: `{cmd.text}` does not print the page's line\n  {want}\nit printed:\n{printed}"
        )


def _run_command(page: Page, block: docblocks.Block, cmd: docblocks.Command) -> None:
    where = page.where(cmd.line)
    text = docblocks.runnable_form(cmd.text)
    if text is None:
        page.log.append(f"  synopsis {cmd.text[:100]}")
        return
    kill = re.fullmatch(r"kill %(\d+)", text)
    if kill:
        job = page.block_numbering[int(kill.group(1)) - 1]
        assert job is not None, f"{where}: %{kill.group(1)} is not a background job"
        _stop(job)
        page.log.append(f"  stopped  {job.text[:100]}")
        return
    tokens = shlex.split(text)
    expect = cmd.expect
    if expect is None:
        given = block.directive("exit")
        expect = int(given) if given else 0
    if tokens[0] == "tailscope":
        spec = _listener(tokens)
        if spec is not None:
            _start_server(page, cmd, tokens, spec)
            return
        argv = _tailscope(*[page.remap(t) for t in _bounded(tokens)][1:])
    else:
        if shutil.which(tokens[0]) is None:
            # promtool comes with `make prometheus`, which `make test` runs: under CI a missing tool is a failure
            if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
                pytest.fail(f"{where}: `{tokens[0]}` is not installed (or mark the block <!-- doctest: skip … -->)")
            page.log.append(f"  not run  {cmd.text[:80]} (`{tokens[0]}` is not installed)")
            return
        argv = ["bash", "-c", page.remap(text)]
    assert not cmd.background, f"{where}: only servers run in the background in the docs: `{cmd.text}`"
    t0 = time.monotonic()
    p = _run(argv, page.cwd)
    page.log.append(f"  {time.monotonic() - t0:5.1f} s exit {p.returncode}  {cmd.text[:100]}")
    assert "Traceback" not in p.stderr, f"{where}: `{cmd.text}`:\n{p.stderr[-3000:]}"
    assert p.returncode == expect, (
        f"{where}: `{cmd.text}` exited {p.returncode}, the page says {expect}:\n{p.stdout[-2500:]}\n{p.stderr[-2500:]}"
    )
    if block.directive("output") is not None:
        _check_output(page, cmd, p.stdout + p.stderr)


def _run_python(page: Page, block: docblocks.Block) -> None:
    t0 = time.monotonic()
    p = _run([sys.executable, "-c", page.remap(block.text)], page.cwd)
    page.log.append(f"  {time.monotonic() - t0:5.1f} s exit {p.returncode}  python block")
    assert p.returncode == 0, (
        f"{page.where(block.line)}: the Python block failed:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    )


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", PAGES)
def test_page_runs_as_written(name: str, world: World, tmp_path: Path) -> None:
    cwd = tmp_path / "reader"
    shutil.copytree(world.template, cwd)
    ports = {MODEL_PORT: world.model_port, SCRIPTED_PORT: world.scripted_port} | {p: _free_port() for p in OTHER_PORTS}
    page = Page(name, cwd, ports, frozenset({world.model_port, world.scripted_port}))
    failures: list[str] = []  # every command that did not end as the page says, not just the first
    t0 = time.monotonic()
    page_blocks = docblocks.blocks((DOCS / name).read_text(encoding="utf-8"))
    for block in page_blocks:  # the files a page shows exist before its first command (some show them after it)
        file = block.directive("file")
        if file:
            (cwd / file).write_text(page.remap(block.text), encoding="utf-8")
    try:
        for block in page_blocks:
            skip = block.directive("skip")
            if block.directive("file"):
                continue
            if skip is not None:
                assert skip, f"{page.where(block.line)}: a skip needs its reason"
                page.log.append(f"  skipped  block at line {block.line}: {skip}")
                continue
            if block.lang == "python":
                try:
                    _run_python(page, block)
                except AssertionError as exc:
                    failures.append(str(exc))
            elif docblocks.is_shell_block(block):
                page.block_numbering = []
                try:
                    for cmd in docblocks.commands(block.text, block.line + 1):
                        try:
                            _run_command(page, block, cmd)
                        except AssertionError as exc:
                            failures.append(str(exc).split("\nassert ")[0])
                finally:
                    for job in page.block_jobs:
                        _stop(job)
                    page.block_jobs = []
    finally:
        for job in page.jobs:
            _stop(job)
        print(f"docs/{name}: {time.monotonic() - t0:.1f} s\n" + "\n".join(page.log))
    assert not failures, "\n\n".join(failures)


def test_every_page_is_covered() -> None:
    """A new page is run by this test or by its own."""
    assert set(PAGES) | OWN_TESTS == {p.name for p in DOCS.glob("*.md")}
    assert len(PAGES) >= 10
