"""Fuzzing the ``tailscope bench`` command line: random flag combinations and profile files through the real CLI.

Where :mod:`tailscope.testing.fuzz_bench` calls the library, this draws what a user types: every bench flag (and its
aliases) with valid, boundary and nonsense values — huge, negative, ``nan``/``inf``, empty, unicode digits, bad and
unwritable paths, conflicting modes, unknown flags — and profile YAML files with random fields and values. A case runs
through :func:`tailscope.cli.main.main` (in-process, passed in by the caller, so thousands are affordable;
:func:`run_cli_subprocess` runs one through a real ``python -m tailscope``) and must:

* exit with a documented code: 0 (passed), 1 (bad input, unreachable target, store error), 2 (usage error), 3 (the
  run failed its verdict);
* never print a Python traceback nor an internal error (an unexpected exception the API wrapped);
* when refused (1 or 2), print exactly one error line (``tailscope: error: …`` or click's ``Error: …``) that says
  something;
* leave the store readable (checked by the caller with :func:`tailscope.testing.fuzz_bench.store_readable`).

Every run is bounded (a few requests or a fraction of a second): the draw always gives a sane ``--requests`` or
``--duration``, and a huge value of one comes with a small value of the other.
Used by ``tests/integration/test_fuzz_cli.py`` (a small sample) and ``benchmarks/fuzz_cli.py`` (thousands).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import random
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tailscope.testing.fuzz_bench import _LENGTHS, _SLOS, _profile

#: the exit codes ``tailscope bench`` documents (docs/metrics.md, ``bench --help``) for a run without signals
DOCUMENTED_EXITS = frozenset({0, 1, 2, 3})

#: the chance that one drawn flag value is a boundary or nonsense value
P_BAD = 0.08

#: nonsense for any flag: empty, blanks, nan/inf, unicode digits, huge, signs, hex, underscores, a control character
_NONSENSE = [
    "", " ", "nan", "NaN", "inf", "-inf", "+inf", "1e309", "-0", "0x10", "1_000", "١٢", "１２", "٣.٥", "9" * 40,
    "1e-320", "3.", ".5", "--", "-", "\u200b5", "5\u00a0", "ä", "🙂", "null", "None", "true", "[]", "{}", "5,5",
    "1/2", "\t7", "1e12", "-1", "0", "2**63",
]  # fmt: skip

#: numeric flags: (flag spellings, good range, integer?)
_NUMERIC: list[tuple[tuple[str, ...], tuple[float, float], bool]] = [
    (("--concurrency", "-c", "--max-concurrency"), (1, 6), True),
    (("--rate", "-r", "--request-rate"), (20, 300), False),
    (("--burstiness",), (0.2, 3), False),
    (("--seed",), (0, 1000), True),
    (("--timeout-connect",), (1, 10), False),
    (("--timeout-first-token",), (1, 30), False),
    (("--timeout-total",), (1, 60), False),
    (("--scrape-interval",), (0.2, 5), False),
    (("--max-rate",), (1, 500), False),
    (("--preopen-connections",), (0, 8), True),
    (("--max-error-rate",), (0, 1), False),
]
_WARMUP = (("--warmup",), (0, 2), True)

_CHOICES: list[tuple[str, list[str], list[str]]] = [
    ("--arrival", ["poisson", "constant", "gamma"], ["weibull", "POISSON", "poisson "]),
    ("--endpoint", ["chat", "completions"], ["embeddings", "Chat", "/v1/chat/completions"]),
    ("--http-client", ["raw", "aiohttp"], ["curl", "RAW"]),
    ("--trace-context", ["off", "on", "0.5", "0", "1"], ["2", "-0.1", "maybe", "nan", "1e-400"]),
    ("--dialect", ["vllm", "aiperf", "guidellm", "sglang", "tailscope"], ["k6", "VLLM"]),
    ("--extra-body", ['{"temperature": 0.5}', '{"top_p": 0.9}'], ['{"stream": false}', "[1,2]", "{bad", '{"model": 1}',
                                                                 "@/nonexistent/body.json", '{"max_tokens": "x"}']),
    ("--header", ["X-A: 1", "X-Tenant: blue"], ["X-A 1", "Host: x", "X-B:\r\nInjected: 1", ": v", "Content-Length: 9"]),
    ("--api-key-env", ["HOME"], ["TAILSCOPE_FUZZ_UNSET_VARIABLE", "", "A=B"]),
    ("--metrics-url", ["off"], ["http://127.0.0.1:1/metrics", "nonsense", "auto"]),
    ("--until-precise", ["ttft_ms.p99=50%"], ["ttft_ms.p99", "x=5%", "ttft_ms.p99=-5%", "ttft_ms.p99=0%"]),
]  # fmt: skip

_UNKNOWN = ["--colour", "--rate=5=5", "--requests=", "extra-positional", "--no-such-flag", "-z", "--debugx", "--"]


@dataclass(frozen=True, slots=True)
class CliCase:
    """One case: the arguments after ``tailscope`` and the files (name → text) to write in the work folder first."""

    argv: tuple[str, ...]
    files: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """The command line as a user would type it (files named, not shown)."""
        return "tailscope " + " ".join(json.dumps(a, ensure_ascii=False) if not a or " " in a else a for a in self.argv)


@dataclass(frozen=True, slots=True)
class CliOutcome:
    """What one case did: its exit code, its stderr and stdout, and the property it broke (``None``: none)."""

    code: int | None
    stderr: str
    stdout: str
    problem: str | None
    refusal: str | None  # the first words of the one error line, for counting refusals by kind


def _value(rng: random.Random, good: tuple[float, float], integer: bool) -> str:
    if rng.random() < P_BAD:
        return rng.choice(_NONSENSE)
    v = rng.uniform(*good)
    return str(round(v)) if integer else f"{v:.3g}"


def _bound(rng: random.Random) -> list[str]:
    """``--requests`` and/or ``--duration``, always bounding the run: a wild value of one comes with a sane other."""
    requests = str(rng.randint(1, 6))
    duration = f"{rng.uniform(0.1, 0.4):.2f}"
    r = rng.random()
    if r < 0.55:
        return [rng.choice(["--requests", "-n", "--num-prompts"]), requests]
    if r < 0.75:
        return ["--duration", duration]
    if r < 0.87:
        return ["--requests", rng.choice([*_NONSENSE, "1000000", "99999999999"]), "--duration", duration]
    return ["--requests", requests, "--duration", rng.choice([*_NONSENSE, "1e9", "86400"])]


def _garbage_profile(rng: random.Random) -> str:
    """A profile YAML that is broken in one of many ways (or is not YAML at all)."""
    return rng.choice(
        [
            "",
            "---\n",
            "just a string\n",
            "- a\n- list\n",
            "classes: 7\n",
            "classes: []\n",
            "name: x\nclasses:\n  - {name: a, input_tokens: '16', output_tokens: '4'\n",  # unclosed
            "name: x\nclasses:\n  - {name: a, input_tokens: 1e400, output_tokens: nan}\n",
            "name: x\nclasses:\n  - {name: a, input_tokens: '16', output_tokens: '4', weight: .inf}\n",
            "name: x\nclasses:\n  - {name: a, input_tokens: '16', output_tokens: '99999999999999'}\n",
            "name: x\nclasses:\n  - {name: 🙂, input_tokens: '١٦', output_tokens: '4'}\n",
            "name: x\nclasses:\n  - &a {name: a, input_tokens: '16', output_tokens: '4'}\n  - *a\n",
            "name: x\nclasses:\n  - {name: a, input_tokens: '16', output_tokens: '4'}\n"
            "arrival: {mode: open, stages: 5}\n",
            "name: x\nclasses:\n  - {name: a, input_tokens: '16', output_tokens: '4'}\nstop: {requests: -5}\n",
            "name: x\nclasses:\n  - {name: a, input_tokens: '16', output_tokens: '4'}\nwarmup: {requests: 1e12}\n",
            "name: x\nclasses:\n  - {name: a, input_tokens: '16', output_tokens: '4'}\n"
            "  - {name: a, input_tokens: '8', output_tokens: '4'}\n",
            "name: x\nclasses:\n  - {name: a, input_tokens: '16', output_tokens: '4', "
            "session: {turns: 100000000, think_time_s: -1}}\n",
            "\x00\x01\x02 binary",
            "name: [unclosed\n",
            "a: b: c\n",
            "? complex key\n: value\n",
            "name: x\n" * 3,
        ]
    )


def _profile_text(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return _garbage_profile(rng)
    text = _profile(rng)
    if rng.random() < 0.15:  # a random extra field or a wrong type at the top level
        text += rng.choice(["colour: red\n", "seed: abc\n", "slo: [1, 2]\n", "classes: null\n", "endpoint: 5\n"])
    return text


def _replay_text(rng: random.Random) -> str:
    rows = [
        json.dumps({"timestamp_s": round(i * rng.uniform(0.005, 0.05), 3), "input_tokens": rng.randint(1, 64),
                    "output_tokens": rng.randint(1, 8)})
        for i in range(rng.randint(1, 5))
    ]  # fmt: skip
    if rng.random() < 0.3:
        rows.insert(
            rng.randint(0, len(rows)),
            rng.choice(
                ['{"timestamp_s": -1, "input_tokens": 4, "output_tokens": 2}', "not json",
                 '{"timestamp_s": 1e12, "input_tokens": 4, "output_tokens": 2}', '{"input_tokens": "x"}', "{}", ""]
            ),
        )  # fmt: skip
    return "\n".join(rows) + "\n"


def draw_cli_case(rng: random.Random, *, url: str, store: Path, workdir: Path) -> CliCase:
    """One random ``tailscope bench`` command line against ``url`` writing ``store`` (files go in ``workdir``).

    About half of the cases run; the others are refused for a bad value, a bad file or a conflict. Paths that should
    not be writable are inside ``workdir`` (a file where a folder is expected), never elsewhere on the machine.
    """
    if rng.random() < 0.01:
        return CliCase(rng.choice([("--version",), ("--help",), ("bench", "--help")]))
    files: dict[str, str] = {}
    argv: list[str] = ["bench"]
    r = rng.random()
    if r < 0.94:
        argv += ["--url", url]
    elif r < 0.98:
        argv += [
            "--url",
            rng.choice(["http://127.0.0.1:1", "notaurl", "ftp://127.0.0.1/", "", "http://[::1", url + "/"]),
        ]
    # else: no --url — the built-in engine in this process (slower, rare)
    argv += (
        ["--db", str(store)] if rng.random() > 0.02 else ["--db", rng.choice([str(workdir), str(workdir / "afile")])]
    )
    files.setdefault("afile", "not a store\n")
    if rng.random() < 0.85:
        argv.append(rng.choice(["-q", "--quiet"]))
    if rng.random() < 0.95:
        argv += ["--metrics-url", "off"]
    argv += _bound(rng)
    mode = rng.random()
    if mode < 0.12:
        files["profile.yaml"] = _profile_text(rng)
        argv += ["--profile", str(workdir / "profile.yaml")]
    elif mode < 0.14:
        argv += ["--profile", rng.choice([str(workdir / "missing.yaml"), str(workdir), str(workdir / "afile") + "/x"])]
    elif mode < 0.18:
        files["trace.jsonl"] = _replay_text(rng)
        argv += ["--replay", str(workdir / "trace.jsonl")]
        if rng.random() < 0.5:
            argv += ["--time-scale", _value(rng, (0.1, 2), False)]
    elif mode < 0.20:
        files["prompts.jsonl"] = "\n".join(json.dumps({"prompt": f"hello {i} ünïcode 🙂"}) for i in range(4)) + "\n"
        argv += ["--dataset", rng.choice([f"jsonl:{workdir / 'prompts.jsonl'}", "jsonl:/nonexistent.jsonl", "nope:x"])]
    for flags, good, integer in _NUMERIC:
        if rng.random() < 0.15:
            argv += [rng.choice(flags), _value(rng, good, integer)]
    if rng.random() < 0.15:
        argv += ["--warmup", _value(rng, _WARMUP[1], True)]
    for name, good_values, bad_values in _CHOICES:
        if rng.random() < 0.08:
            argv += [name, rng.choice(bad_values) if rng.random() < P_BAD * 3 else rng.choice(good_values)]
    for name in ("--input-tokens", "--output-tokens"):
        if rng.random() < 0.4:
            lengths = _LENGTHS[1] if rng.random() < P_BAD else _LENGTHS[0][:-1]
            argv += [name, str(rng.choice(lengths))]
    if rng.random() < 0.1:
        for _ in range(rng.randint(1, 2)):
            argv += ["--slo", str(rng.choice(_SLOS[1] if rng.random() < P_BAD * 3 else _SLOS[0]))]
    if rng.random() < 0.05:
        argv.append(rng.choice(["--ignore-eos", "--no-ignore-eos", "--continuous-usage", "--no-continuous-usage",
                                "--same-prompts", "--no-fail", "--stream-records", "--warm-connections"]))  # fmt: skip
    if rng.random() < 0.03:
        argv += ["--tokenizer", rng.choice([str(workdir / "afile"), str(workdir / "missing.json"), str(workdir)])]
    if rng.random() < 0.04:
        argv += rng.choice(
            [["--workers", rng.choice(["0", "-1", "abc", "1e9", "nan"])], ["--ray", "local"],
             ["--request-template", str(workdir / "afile")], ["--from-traces", "no-such-set"],
             ["--otlp-endpoint", "http://127.0.0.1:1"], ["--tracestate", "a=b"],
             ["--builtin-model", rng.choice(["nope", "llama-3.1-8b"])], ["--builtin-gpu", "nope"]]
        )  # fmt: skip
    if rng.random() < 0.05:  # several runs: a sweep, repeats, or conflicting modes
        argv += rng.choice(
            [["--sweep", "concurrency=1,2"], ["--sweep", rng.choice(["concurrency=", "rate=1:0:3", "x=1,2", "rate=a"])],
             ["--repeat", rng.choice(["2", "0", "-1", "1001", "nan"])], ["--sweep", "concurrency=1,2", "--repeat", "2"],
             ["--find-max", "--sweep", "concurrency=1,2"], ["--find-max"], ["--max-repeats", "0"],
             ["--find-max-tolerance", rng.choice(["0", "-1", "nan", "2"])]]
        )  # fmt: skip
    if rng.random() < 0.08:  # outputs: good, to stdout, unwritable, a folder
        target = rng.choice(["out.json", "-", "afile/x.json", "", "new/deeper/out.json", "."])
        flag = rng.choice(["--json", "--html"])
        if flag == "--html" and target == "-":
            target = "out.html"
        argv += [flag, target if target in ("-", "") else str(workdir / target)]
    if rng.random() < 0.03:
        argv.insert(rng.randint(1, len(argv)), rng.choice(_UNKNOWN))
    return CliCase(tuple(argv), files)


def _error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith(("tailscope: error:", "Error:"))]


def refusal_kind(line: str) -> str:
    """What a refusal is about, for counting them by kind: the flag, the profile field or the usage error."""
    if line.startswith("Error:"):  # click: "Invalid value for '--rate' / '-r' …: …", "No such option: --x"
        m = re.search(r"'(--[a-z-]+)'", line)
        head = line.removeprefix("Error:").strip().split(":")[0].split(" for ")[0]
        return f"usage: {head}" + (f" {m.group(1)}" if m else "")
    text = re.sub(r"/\S*/", "…/", line.removeprefix("tailscope: error:").strip())  # folders differ per run
    m = re.match(r"\S+:\d+: ([\w.]+)", text)  # a file's line and field
    if m:
        return "file field " + re.sub(r"\[\d+\]", "[]", m.group(1))
    m = re.match(r"(--[a-z-]+)", text)
    if m:
        return m.group(1)
    return " ".join(text.split()[:3])[:60]


class CaseTimeout(BaseException):
    """Raised (from a SIGALRM handler the caller installs) into a case that ran far past its bound: a hang."""


def _json_to_stdout(argv: Sequence[str]) -> bool:
    return any(a == "--json" and b == "-" for a, b in itertools.pairwise(argv))


def judge(code: int | None, stderr: str, stdout: str, argv: Sequence[str]) -> CliOutcome:
    """Check one finished case against the properties in the module's docstring."""
    errors = _error_lines(stderr)
    refusal = refusal_kind(errors[0]) if errors else None
    problem: str | None = None
    if "Traceback (most recent call last)" in stderr:
        problem = "a Python traceback on stderr"
    elif "run with --debug for the traceback" in stderr:
        problem = "an internal error (an unexpected exception reached the API)"
    elif code not in DOCUMENTED_EXITS:
        problem = f"exit code {code} is not a documented one"
    elif code in (1, 2) and len(errors) != 1:
        problem = f"exit {code} with {len(errors)} error lines (want exactly one)"
    elif code in (1, 2) and len(errors[0].removeprefix("tailscope: error:").removeprefix("Error:").strip()) < 12:
        problem = f"an error line that says nothing: {errors[0]!r}"
    elif code == 3 and "FAIL" not in stderr:
        problem = "exit 3 without a FAIL line saying which check failed"
    elif code == 0 and argv[:1] == ("bench",) and "--help" not in argv and not stdout.strip():
        problem = "exit 0 but nothing on stdout"
    elif code == 0 and _json_to_stdout(argv):
        try:
            json.loads(stdout)
        except ValueError:
            problem = "--json - wrote something that is not one JSON document on stdout"
    return CliOutcome(code, stderr, stdout, problem, refusal)


def _write_files(case: CliCase, workdir: Path) -> None:
    for name, text in case.files.items():
        path = workdir / name
        if not path.is_dir():
            path.write_text(text, encoding="utf-8", errors="surrogateescape")


def run_cli_case(case: CliCase, workdir: Path, main: Callable[[list[str]], object]) -> CliOutcome:
    """Run one case in this process through ``main`` — :func:`tailscope.cli.main.main`, passed in by the caller (the
    testing package imports no CLI: the import contract) — and judge it."""
    _write_files(case, workdir)
    out, err = io.StringIO(), io.StringIO()
    code: int | None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(case.argv))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except CaseTimeout as exc:
            return CliOutcome(None, err.getvalue(), out.getvalue(), f"a hang: {exc}", None)
        except BaseException as exc:  # what would reach the interpreter: a traceback for the user
            import traceback

            err.write("Traceback (most recent call last):\n" + "".join(traceback.format_exception(exc)))
            code = None
    return judge(code, err.getvalue(), out.getvalue(), case.argv)


def run_cli_subprocess(case: CliCase, workdir: Path, *, timeout_s: float = 120.0) -> CliOutcome:
    """Run one case through a real ``python -m tailscope`` process (the console script's path) and judge it."""
    _write_files(case, workdir)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tailscope", *case.argv],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return CliOutcome(None, "", "", f"a hang: still running after {timeout_s:g} s", None)
    return judge(proc.returncode, proc.stderr, proc.stdout, case.argv)
