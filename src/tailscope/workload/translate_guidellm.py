"""``guidellm benchmark`` (and ≥ 0.6 ``guidellm run`` spec) arguments as a tailscope workload."""

from __future__ import annotations

import json
from typing import Any

from tailscope.errors import ConfigError
from tailscope.workload.peer_cli import PeerArgs, Translation, default_class, finish

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


def _synthetic(a: PeerArgs, spec: str) -> tuple[dict[str, Any], dict[str, Any]]:
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


def guidellm_specs(argv: list[str]) -> list[str]:
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


def guidellm_translation(argv: list[str]) -> Translation:
    """``guidellm benchmark`` arguments (after ``benchmark``, run specs already rewritten by :func:`guidellm_specs`)
    as a profile, flags and differences."""
    a = PeerArgs("guidellm", argv, {"--disable-progress", "--display-scheduler-stats", "--disable-console-outputs"})
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
    profile["classes"] = [default_class(inp, out, {})]
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
    return finish("guidellm", a, argv, profile, flags, diffs, _GLLM_IGNORED)
