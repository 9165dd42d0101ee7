"""A peer's command line as a tailscope workload: ``tailscope translate --from vllm|guidellm|aiperf -- ARGS…``.

Pure: takes the arguments (after ``vllm bench serve``, ``guidellm benchmark`` or ``aiperf profile``) and returns a
profile (a dict in the schema of docs/workload.md), the bench flags a profile cannot hold (``--dataset``, ``--url``)
and every semantic difference between what the peer would have done and what tailscope will do: default rates,
length ranges, warmup, what TTFT is timed from. A flag with no faithful equivalent is refused by name, never
dropped silently; flags that only choose the peer's output files or display are listed as ignored.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tailscope.errors import ConfigError

TOOLS = ("vllm", "guidellm", "aiperf")

_TTFT = {
    "vllm": "vLLM times TTFT from the send (perf_counter before the POST); tailscope from the intended send time, so a "
    "late client (or, closed loop, nothing) adds to it — compare with `runs show --dialect vllm`.",
    "guidellm": "GuideLLM times TTFT from request_start (the backend's send); tailscope from the intended send time — "
    "compare with `runs show --dialect guidellm`.",
    "aiperf": "AIPerf times TTFT from request_start_ns (the send); tailscope from the intended send time — compare "
    "with `runs show --dialect aiperf`.",
}
_ITL = {
    "vllm": "vLLM's ITL is every gap between SSE chunks pooled over requests; tailscope's ITL is per token "
    "(docs/metrics.md) and its ICL per chunk; vLLM's TPOT = tailscope's TPOT.",
    "guidellm": "GuideLLM's TPOT includes the first token ((last token − start)/N) and its ITL is (last − first)/"
    "(N − 1), tailscope's TPOT.",
    "aiperf": "AIPerf's ITL is the per-request (latency − TTFT)/(OSL − 1), tailscope's TPOT; AIPerf's ICL is "
    "tailscope's ICL.",
}


@dataclass(frozen=True, slots=True)
class Translation:
    """A peer's command line as tailscope sees it.

    Attributes:
        profile: a workload profile (docs/workload.md schema) ready to be written as YAML.
        flags: bench flags the profile cannot hold (``--url``, ``--dataset``, ``--no-ignore-eos``).
        differences: every semantic difference between the peer's run and tailscope's.
        ignored: the peer's flags that only choose its output or display (named, with why).
    """

    tool: str
    args: tuple[str, ...]
    profile: dict[str, Any]
    flags: tuple[str, ...] = ()
    differences: tuple[str, ...] = ()
    ignored: tuple[str, ...] = field(default_factory=tuple)

    def command(self, profile_path: str = "profile.yaml") -> str:
        """The tailscope command line that runs the translation."""
        return shlex.join(["tailscope", "bench", "--profile", profile_path, *self.flags])


class _Args:
    """``--flag value`` / ``--flag=value`` / ``-f value`` / bare ``--switch`` pairs in order."""

    def __init__(self, tool: str, argv: list[str], switches: set[str]) -> None:
        self.tool = tool
        self.items: list[tuple[str, str | None]] = []
        i = 0
        while i < len(argv):
            tok = argv[i]
            if not tok.startswith("-"):
                raise ConfigError(
                    f"{tool}: {tok!r}: expected a flag (--name value); positional arguments are not translated"
                )
            if "=" in tok:
                name, value = tok.split("=", 1)
                self.items.append((name, value))
            elif tok in switches or i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                self.items.append((tok, None))
            else:
                self.items.append((tok, argv[i + 1]))
                i += 1
            i += 1
        self.used: set[int] = set()

    def refuse(self, flag: str, why: str) -> ConfigError:
        return ConfigError(f"{self.tool} {flag}: cannot be translated — {why}")

    def get(self, *names: str) -> str | None:
        found = None
        for k, (name, value) in enumerate(self.items):
            if name in names:
                self.used.add(k)
                found = value if value is not None else "true"
        return found

    def num(self, *names: str, cast: Callable[[str], Any] = float) -> Any:
        raw = self.get(*names)
        if raw is None:
            return None
        try:
            return cast(raw)
        except ValueError:
            raise ConfigError(f"{self.tool} {names[0]} {raw!r}: expected a number") from None

    def leftovers(self) -> list[str]:
        return [name for k, (name, _v) in enumerate(self.items) if k not in self.used]


def translate(tool: str, args: list[str]) -> Translation:
    """Translate ``args`` of ``tool`` (vllm, guidellm or aiperf).

    Raises:
        ConfigError: an unknown tool, or ``TOOL --flag: cannot be translated — why`` for the first flag that has no
            faithful tailscope equivalent.
    """
    name = tool.strip().lower()
    if name not in TOOLS:
        raise ConfigError(f"--from {tool!r}: use one of {', '.join(TOOLS)}")
    argv = list(args)
    if name == "vllm" and argv[:2] == ["bench", "serve"]:
        argv = argv[2:]
    if name == "guidellm" and argv[:1] == ["benchmark"]:
        argv = argv[1:]
    if name == "guidellm" and (argv[:1] == ["run"] or any(a.startswith("kind=") for a in argv)):
        argv = _guidellm_specs(argv[1:] if argv[:1] == ["run"] else argv)
    if name == "aiperf" and argv[:1] == ["profile"]:
        argv = argv[1:]
    fn = {"vllm": _vllm, "guidellm": _guidellm, "aiperf": _aiperf}[name]
    return fn(argv)


def _finish(
    tool: str,
    a: _Args,
    argv: list[str],
    profile: dict[str, Any],
    flags: list[str],
    diffs: list[str],
    ignorable: dict[str, str],
) -> Translation:
    ignored = []
    for flag in a.leftovers():
        if flag in ignorable:
            ignored.append(f"{flag}: {ignorable[flag]}")
            continue
        raise a.refuse(flag, "no tailscope equivalent; remove it or set the workload by hand (docs/workload.md)")
    diffs = [_TTFT[tool], _ITL[tool], *diffs]
    return Translation(tool, tuple(argv), profile, tuple(flags), tuple(diffs), tuple(ignored))


def _length(base: float, ratio: float) -> dict[str, Any]:
    if ratio <= 0:
        return {"dist": "fixed", "value": int(base)}
    return {"dist": "uniform", "min": max(1, int(base * (1 - ratio))), "max": int(base * (1 + ratio))}


def _class(inp: dict[str, Any], out: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    cls: dict[str, Any] = {"name": "default", "input_tokens": inp, "output_tokens": out}
    if extra:
        cls["extra_body"] = extra
    return cls


# -------------------------------------------------------------------------------------------------------------- vLLM
_VLLM_IGNORED = {
    f: "output or display only (tailscope keeps every request's record in its store)"
    for f in (
        "--save-result",
        "--save-detailed",
        "--result-dir",
        "--result-filename",
        "--label",
        "--disable-tqdm",
        "--percentile-metrics",
        "--metric-percentiles",
        "--append-result",
        "--metadata",
        "--plot-timeline",
        "--plot-dataset-stats",
    )
}
_VLLM_IGNORED |= {"--trust-remote-code": "tokenizer loading (tailscope reads a local tokenizer.json)"}
_VLLM_SWITCHES = {
    "--save-result",
    "--save-detailed",
    "--disable-tqdm",
    "--ignore-eos",
    "--trust-remote-code",
    "--append-result",
    "--plot-timeline",
    "--plot-dataset-stats",
}


def _vllm(argv: list[str]) -> Translation:
    a = _Args("vllm", argv, _VLLM_SWITCHES)
    diffs: list[str] = []
    flags: list[str] = []
    backend = a.get("--backend") or "openai"
    endpoint_path = a.get("--endpoint") or ("/v1/chat/completions" if "chat" in backend else "/v1/completions")
    if backend not in ("openai", "openai-chat", "vllm"):
        raise a.refuse(
            "--backend", f"{backend!r}: tailscope drives OpenAI-compatible chat/completions (or a --request-template)"
        )
    endpoint = "chat" if "chat" in endpoint_path else "completions"
    if backend == "openai" or backend == "vllm":
        diffs.append(
            "vLLM's default backend is `openai` on /v1/completions; the profile keeps that endpoint "
            "(tailscope's default is chat)."
        )
    profile: dict[str, Any] = {"name": "from-vllm-bench-serve", "endpoint": endpoint}
    base = a.get("--base-url")
    host, port = a.get("--host"), a.get("--port")
    if base or host or port:
        flags += ["--url", base or f"http://{host or '127.0.0.1'}:{port or 8000}"]
    if (model := a.get("--model")) is not None:
        profile["model"] = model
    if (tok := a.get("--tokenizer")) is not None:
        diffs.append(
            f"--tokenizer {tok}: tailscope counts tokens with a local tokenizer.json "
            "(`--tokenizer PATH/tokenizer.json`); without it prompt lengths are approximate."
        )
    if (seed := a.num("--seed", cast=int)) is not None:
        profile["seed"] = seed
    dataset = a.get("--dataset-name") or "random"
    extra: dict[str, Any] = {}
    for flag, key in (
        ("--temperature", "temperature"),
        ("--top-p", "top_p"),
        ("--top-k", "top_k"),
        ("--min-p", "min_p"),
    ):
        if (v := a.num(flag)) is not None:
            extra[key] = v
    in_len = a.num("--random-input-len", cast=int)
    out_len = a.num("--random-output-len", cast=int)
    ratio_raw = a.get("--random-range-ratio")
    prefix = a.num("--random-prefix-len", cast=int)
    if dataset == "random":
        r_in = r_out = 0.0
        if ratio_raw is not None:
            try:
                parsed = json.loads(ratio_raw)
            except json.JSONDecodeError:
                raise a.refuse("--random-range-ratio", f"{ratio_raw!r} is neither a number nor a JSON dict") from None
            if isinstance(parsed, dict):
                r_in, r_out = float(parsed.get("input", 0)), float(parsed.get("output", 0))
            else:
                r_in = r_out = float(parsed)
        if in_len is None:
            diffs.append("vLLM's default --random-input-len is 1024 (kept here).")
        if out_len is None:
            diffs.append("vLLM's default --random-output-len is 128 (kept here).")
        inp = _length(in_len or 1024, r_in)
        out = _length(out_len or 128, r_out)
        diffs.append(
            "--random-range-ratio r: vLLM draws lengths uniformly in [len·(1−r), len·(1+r)]; so does the "
            "profile (integers, both ends included)."
        )
        if prefix:
            profile["shared_prefix"] = {"tokens": prefix, "variants": 1, "share": 1.0}
            diffs.append(
                "--random-prefix-len: one shared prefix in front of every prompt (tailscope's "
                "shared_prefix: the same text across requests, new text per run)."
            )
        profile["classes"] = [_class(inp, out, extra)]
    elif dataset in ("sharegpt", "custom"):
        path = a.get("--dataset-path")
        if path is None:
            raise a.refuse("--dataset-name", f"{dataset} needs --dataset-path (a local file)")
        fmt = "sharegpt" if dataset == "sharegpt" else "jsonl"
        flags += ["--dataset", f"{fmt}:{path}"]
        out_fixed = a.num("--sharegpt-output-len", "--custom-output-len", cast=int)
        out = {"dist": "fixed", "value": out_fixed or 256}
        profile["classes"] = [_class({"dist": "fixed", "value": 256}, out, extra)]
        diffs.append(
            "Prompts come from the dataset (--dataset); output lengths from its reference answers as vLLM "
            "does, unless --sharegpt-output-len/--custom-output-len fixed them."
        )
        if in_len is not None or out_len is not None or ratio_raw is not None:
            raise a.refuse("--random-input-len", "random lengths do not apply to a dataset")
    else:
        raise a.refuse("--dataset-name", f"{dataset!r}: only random, sharegpt and custom (a local JSONL) translate")
    num = a.num("--num-prompts", cast=int)
    if num is None:
        num = 1000
        diffs.append("vLLM's default --num-prompts is 1000 (kept as stop.requests).")
    rate = a.num("--request-rate")
    conc = a.num("--max-concurrency", cast=int)
    burst = a.num("--burstiness")
    arrival: dict[str, Any]
    if rate is None or rate == float("inf"):
        if rate is None:
            diffs.append("vLLM's default --request-rate is inf: every request is sent at once.")
        arrival = {"mode": "closed", "concurrency": min(conc or num, num)}
        diffs.append(
            "request rate inf: tailscope runs it as a closed loop with "
            f"{arrival['concurrency']} in flight (all {num} at once when no --max-concurrency); latencies are "
            "measured from when each request could be sent."
        )
        if burst is not None:
            raise a.refuse("--burstiness", "it shapes arrivals of a finite --request-rate only")
    else:
        arrival = {"mode": "open", "rate": rate}
        if conc is not None:
            arrival["max_concurrency"] = conc
            diffs.append(
                f"--max-concurrency {conc} with a finite rate: an open loop capped at {conc} in flight, as vLLM "
                "does; a request due while every slot is taken waits, and tailscope counts that wait (send lag) in "
                "its latencies while vLLM starts its clock at the actual send."
            )
        if burst is None or burst == 1.0:
            arrival["process"] = "poisson"
        else:
            arrival |= {"process": "gamma", "burstiness": burst}
        diffs.append(
            "Open loop: every send time is drawn before the run (vLLM also precomputes its gamma/Poisson "
            "delays); tailscope measures from those times, vLLM from the actual send."
        )
    for f in ("--ramp-up-strategy", "--ramp-up-start-rps", "--ramp-up-end-rps"):
        if a.get(f) is not None:
            raise a.refuse(f, "write the ramp as arrival.stages (ramp_to) in the profile")
    profile["arrival"] = arrival
    profile["stop"] = {"requests": num}
    warm = a.num("--num-warmups", cast=int)
    if warm:
        profile["warmup"] = {"requests": warm}
        profile["stop"]["requests"] = num + warm
        diffs.append(
            "--num-warmups N: vLLM sends N extra requests before the benchmark and keeps none of them; "
            "tailscope sends them as the run's first N requests, stores them marked warmup and leaves them "
            "out of every statistic."
        )
    else:
        diffs.append("No warmup (vLLM's default --num-warmups 0).")
    if a.get("--ignore-eos") is None:
        flags.append("--no-ignore-eos")
        diffs.append(
            "vLLM sends ignore_eos only with --ignore-eos; tailscope sends it by default, so the "
            "translation adds --no-ignore-eos."
        )
    if (good := a.get("--goodput")) is not None:
        diffs.append(
            f"--goodput {good}: tailscope judges SLOs on percentiles (profile `slo`), not per-request "
            "goodput; set slo by hand."
        )
    return _finish("vllm", a, argv, profile, flags, diffs, _VLLM_IGNORED)


# ---------------------------------------------------------------------------------------------------------- GuideLLM
_GLLM_IGNORED = {
    f: "output or display only"
    for f in (
        "--output-path",
        "--output-sampling",
        "--disable-progress",
        "--display-scheduler-stats",
        "--disable-console-outputs",
        "--outputs",
        "--output-dir",
        "--disable-console",
    )
}
_GLLM_IGNORED |= {
    "--backend-type": "tailscope speaks OpenAI HTTP (openai_http)",
    "--processor": "tokenizer id",
    "--tokenizer": "tokenizer (tailscope: --tokenizer PATH/tokenizer.json)",
    "--output": "output only",
    "--label": "output only",
}


def _synthetic(a: _Args, spec: str) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        kv = json.loads(spec) if spec.strip().startswith("{") else dict(p.split("=", 1) for p in spec.split(","))
    except ValueError:
        raise a.refuse("--data", f"{spec!r}: expected prompt_tokens=N,output_tokens=M or a file") from None

    def dist(prefix: str) -> dict[str, Any]:
        if f"{prefix}_tokens" not in kv:
            raise a.refuse("--data", f"{spec!r} has no {prefix}_tokens")
        mean = float(kv[f"{prefix}_tokens"])
        std = float(kv.get(f"{prefix}_tokens_stdev", 0) or 0)
        d: dict[str, Any] = (
            {"dist": "normal", "mean": mean, "std": std} if std else {"dist": "fixed", "value": int(mean)}
        )
        if std:
            if kv.get(f"{prefix}_tokens_min") is not None:
                d["min"] = int(float(kv[f"{prefix}_tokens_min"]))
            if kv.get(f"{prefix}_tokens_max") is not None:
                d["max"] = int(float(kv[f"{prefix}_tokens_max"]))
        return d

    known = {f"{p}_tokens{s}" for p in ("prompt", "output") for s in ("", "_stdev", "_min", "_max")}
    unknown = sorted(set(kv) - known)
    if unknown:
        raise a.refuse("--data", f"synthetic field {unknown[0]!r} has no tailscope equivalent")
    return dist("prompt"), dist("output")


def _spec(flag: str, value: str) -> dict[str, str]:
    try:
        return dict(part.split("=", 1) for part in value.split(","))
    except ValueError:
        raise ConfigError(f"guidellm {flag} {value!r}: expected kind=…,key=value,…") from None


def _guidellm_specs(argv: list[str]) -> list[str]:
    """GuideLLM ≥ 0.6 ``run`` specs (``--profile kind=constant,rate=6``) as the classic ``benchmark`` flags."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        flag = argv[i]
        value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
        i += 2 if value is not None else 1
        spec = _spec(flag, value) if value is not None and value.startswith("kind=") else {}
        kind = spec.pop("kind", "")
        if flag == "--backend" and kind == "openai_http":
            out += [x for k, f in (("target", "--target"), ("model", "--model")) if k in spec for x in (f, spec[k])]
            if "completions" in spec.get("request_format", "") and "chat" not in spec.get("request_format", ""):
                out += ["--request-type", "text_completions"]
        elif flag == "--profile" and kind in ("constant", "poisson", "concurrent", "synchronous", "throughput",
                                              "sweep"):  # fmt: skip
            out += ["--rate-type", kind]
            if "rate" in spec or "streams" in spec:
                out += ["--rate", spec.get("rate") or spec["streams"]]
        elif flag == "--constraint" and kind == "max_requests" and "count" in spec:
            out += ["--max-requests", spec["count"]]
        elif flag == "--constraint" and kind == "max_duration" and "seconds" in spec:
            out += ["--max-seconds", spec["seconds"]]
        elif flag == "--data" and kind == "synthetic_text":
            out += ["--data", ",".join(f"{k}={v}" for k, v in spec.items())]
        elif flag == "--data" and kind in ("json_file", "text_file") and "path" in spec:
            out += ["--data", spec["path"]]
        elif flag == "--seed" and kind == "static" and "value" in spec:
            out += ["--random-seed", spec["value"]]
        elif flag in ("--tokenizer", "--output", "--disable-progress", "--disable-console", "--label"):
            out.append(flag)  # listed as ignored, its value dropped
        else:
            raise ConfigError(f"guidellm {flag}{' ' + value if value else ''}: cannot be translated — no tailscope "
                              "equivalent; remove it or set the workload by hand (docs/workload.md)")  # fmt: skip
    return out


def _guidellm(argv: list[str]) -> Translation:
    a = _Args("guidellm", argv, {"--disable-progress", "--display-scheduler-stats", "--disable-console-outputs"})
    diffs: list[str] = []
    flags: list[str] = []
    profile: dict[str, Any] = {"name": "from-guidellm-benchmark"}
    if (target := a.get("--target")) is not None:
        flags += ["--url", target]
    if (model := a.get("--model")) is not None:
        profile["model"] = model
    rtype = a.get("--rate-type", "--profile") or "sweep"
    req_type = a.get("--request-type") or "chat_completions"
    profile["endpoint"] = "completions" if req_type.startswith("text") else "chat"
    if (seed := a.num("--random-seed", cast=int)) is not None:
        profile["seed"] = seed
    rate_raw = a.get("--rate")
    rates = [float(x) for x in rate_raw.split(",")] if rate_raw else []
    if len(rates) > 1:
        raise a.refuse(
            "--rate",
            "several rates are several benchmarks: use `tailscope bench --sweep "
            "rate=…` or translate one rate at a time",
        )
    rate = rates[0] if rates else None
    if rtype == "sweep":
        raise a.refuse(
            "--rate-type",
            "sweep (GuideLLM's default) measures synchronous and throughput, then "
            "interpolates rates: use `tailscope bench --find-max` or `--sweep rate=A:B:N`",
        )
    if rtype == "throughput":
        raise a.refuse(
            "--rate-type",
            "throughput sends as fast as the scheduler allows (unbounded); give tailscope an explicit --concurrency",
        )
    if rtype == "synchronous":
        arrival: dict[str, Any] = {"mode": "closed", "concurrency": 1}
    elif rtype == "concurrent":
        if rate is None:
            raise a.refuse("--rate-type", "concurrent needs --rate N (streams)")
        arrival = {"mode": "closed", "concurrency": int(rate)}
    elif rtype in ("constant", "poisson"):
        if rate is None:
            raise a.refuse("--rate-type", f"{rtype} needs --rate R (requests/s)")
        arrival = {"mode": "open", "process": rtype, "rate": rate}
    else:
        raise a.refuse("--rate-type", f"{rtype!r}: only synchronous, concurrent, constant and poisson translate")
    profile["arrival"] = arrival
    data = a.get("--data")
    if data is None:
        raise a.refuse("--data", "missing: GuideLLM needs it (prompt_tokens=N,output_tokens=M or a file)")
    if "=" in data or data.strip().startswith("{"):
        inp, out = _synthetic(a, data)
    elif data.endswith((".jsonl", ".json")):
        flags += ["--dataset", f"jsonl:{data}"]
        inp, out = {"dist": "fixed", "value": 256}, {"dist": "fixed", "value": 256}
    elif data.endswith(".txt"):
        flags += ["--dataset", f"text:{data}"]
        inp, out = {"dist": "fixed", "value": 256}, {"dist": "fixed", "value": 256}
    else:
        raise a.refuse(
            "--data",
            f"{data!r}: a Hugging Face id or this file type; give a local .jsonl/.txt/.parquet "
            "to `tailscope bench --dataset`",
        )
    profile["classes"] = [_class(inp, out, {})]
    max_req = a.num("--max-requests", cast=int)
    max_s = a.num("--max-seconds")
    if max_req is None and max_s is None:
        raise a.refuse("--max-requests", "missing: give --max-requests or --max-seconds (tailscope runs are bounded)")
    profile["stop"] = {k: v for k, v in (("requests", max_req), ("duration_s", max_s)) if v is not None}
    warm = a.num("--warmup-percent", "--warmup")
    if warm:
        if warm < 1:
            profile["warmup"] = {"requests": round(warm * max_req)} if max_req else {"duration_s": warm * (max_s or 0)}
        else:
            profile["warmup"] = {"requests": int(warm)}
        diffs.append(
            "GuideLLM's warmup is a share of the run whose requests it drops; tailscope marks the same "
            "share as warmup (stored, excluded from statistics)."
        )
    cool = a.num("--cooldown-percent", "--cooldown")
    if cool:
        raise a.refuse("--cooldown-percent", "tailscope has no cooldown window; requests at the end are counted")
    diffs.append(
        "GuideLLM percentiles take the smallest value whose cumulative share is ≥ q (summed in floating point); "
        "`runs show --dialect guidellm` recomputes them GuideLLM's way."
    )
    diffs.append(
        "GuideLLM (0.8) sends ignore_eos with max_completion_tokens for synthetic data; tailscope sends ignore_eos and "
        "max_tokens by default — with a dataset file GuideLLM lets the model stop: add --no-ignore-eos to match."
    )
    return _finish("guidellm", a, argv, profile, flags, diffs, _GLLM_IGNORED)


# ------------------------------------------------------------------------------------------------------------ AIPerf
_AIPERF_IGNORED = {
    f: "output or display only"
    for f in (
        "--artifact-dir",
        "--profile-export-file",
        "--ui-type",
        "--ui",
        "--record-processors",
        "--gpu-telemetry",
        "--log-level",
        "-v",
        "--verbose",
    )
}
_AIPERF_IGNORED |= {
    "--streaming": "tailscope always streams",
    "--tokenizer": "tokenizer id (tailscope: --tokenizer PATH/tokenizer.json)",
}


def _aiperf(argv: list[str]) -> Translation:
    a = _Args("aiperf", argv, {"--streaming", "-v", "--verbose"})
    diffs: list[str] = []
    flags: list[str] = []
    profile: dict[str, Any] = {"name": "from-aiperf-profile"}
    if (model := a.get("--model", "-m", "--model-names")) is not None:
        profile["model"] = model
    if (url := a.get("--url", "-u")) is not None:
        flags += ["--url", url if url.startswith("http") else f"http://{url}"]
    etype = a.get("--endpoint-type") or "chat"
    if etype not in ("chat", "completions"):
        raise a.refuse("--endpoint-type", f"{etype!r}: only chat and completions translate")
    profile["endpoint"] = etype
    if (seed := a.num("--random-seed", cast=int)) is not None:
        profile["seed"] = seed
    if a.get("--input-file") is not None:
        raise a.refuse(
            "--input-file",
            "AIPerf's custom datasets (single_turn, multi_turn, mooncake_trace): use "
            "`tailscope bench --dataset jsonl:PATH` or `--replay PATH` after converting",
        )
    for f in ("--conversation-num", "--conversation-turn-mean", "--num-sessions", "--session-turns-mean"):
        if a.get(f) is not None:
            raise a.refuse(f, "write multi-turn sessions as a profile class `session` (docs/workload.md)")

    def dist(mean_flags: tuple[str, ...], std_flags: tuple[str, ...], default: int, what: str) -> dict[str, Any]:
        mean = a.num(*mean_flags)
        std = a.num(*std_flags)
        if mean is None:
            diffs.append(f"AIPerf's default {what} mean is {default} (kept here).")
            mean = default
        return {"dist": "normal", "mean": mean, "std": std, "min": 1} if std else {"dist": "fixed", "value": int(mean)}

    inp = dist(
        ("--synthetic-input-tokens-mean", "--isl"),
        ("--synthetic-input-tokens-stddev", "--isl-stddev"),
        550,
        "input length",
    )
    out = dist(("--output-tokens-mean", "--osl"), ("--output-tokens-stddev", "--osl-stddev"), 0, "output length")
    if out.get("value") == 0:
        raise a.refuse(
            "--output-tokens-mean",
            "missing: AIPerf then lets the server decide the output length; tailscope needs one (e.g. --osl 128)",
        )
    extra: dict[str, Any] = {}
    for k, raw in enumerate(a.items):
        if raw[0] == "--extra-inputs" and raw[1] is not None:
            a.used.add(k)
            key, _, value = raw[1].partition(":")
            try:
                extra[key] = json.loads(value)
            except json.JSONDecodeError:
                extra[key] = value
    if "ignore_eos" in extra:
        flags.append("--ignore-eos" if extra.pop("ignore_eos") in (True, "true") else "--no-ignore-eos")
    else:
        flags.append("--no-ignore-eos")
        diffs.append(
            "AIPerf does not send ignore_eos unless given --extra-inputs ignore_eos:true; the translation "
            "adds --no-ignore-eos."
        )
    profile["classes"] = [_class(inp, out, extra)]
    conc = a.num("--concurrency", cast=int)
    rate = a.num("--request-rate")
    mode = a.get("--request-rate-mode", "--arrival-pattern")
    if rate is not None:
        process = "constant" if mode in ("constant",) else "poisson"
        profile["arrival"] = {"mode": "open", "process": process, "rate": rate}
        if conc is not None:
            profile["arrival"]["max_concurrency"] = conc
            diffs.append(
                f"--concurrency {conc} with --request-rate: an open loop capped at {conc} in flight, as AIPerf "
                "does; tailscope counts a request's wait for a slot (send lag) in its latencies."
            )
    else:
        profile["arrival"] = {"mode": "closed", "concurrency": conc or 1}
        if conc is None:
            diffs.append("AIPerf's default is concurrency 1 (kept here).")
    n = a.num("--request-count", "--num-requests", cast=int)
    dur = a.num("--benchmark-duration")
    if n is None and dur is None:
        n = 10
        diffs.append("AIPerf's default --request-count is 10 (kept as stop.requests).")
    profile["stop"] = {k: v for k, v in (("requests", n), ("duration_s", dur)) if v is not None}
    warm = a.num("--warmup-request-count", cast=int)
    if warm:
        profile["warmup"] = {"requests": warm}
        if n is not None:
            profile["stop"]["requests"] = n + warm
        diffs.append(
            "--warmup-request-count: AIPerf drops them; tailscope sends them first, stores them marked "
            "warmup and leaves them out of every statistic."
        )
    return _finish("aiperf", a, argv, profile, flags, diffs, _AIPERF_IGNORED)
