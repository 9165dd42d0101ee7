"""``vllm bench serve`` arguments as a tailscope workload."""

from __future__ import annotations

import json
from typing import Any

from tailscope.workload.peer_cli import PeerArgs, Translation, default_class, finish, length_range

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


def vllm_translation(argv: list[str]) -> Translation:
    """``vllm bench serve`` arguments (after ``bench serve``) as a profile, flags and differences."""
    a = PeerArgs("vllm", argv, _VLLM_SWITCHES)
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
        inp = length_range(in_len or 1024, r_in)
        out = length_range(out_len or 128, r_out)
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
        profile["classes"] = [default_class(inp, out, extra)]
    elif dataset in ("sharegpt", "custom"):
        path = a.get("--dataset-path")
        if path is None:
            raise a.refuse("--dataset-name", f"{dataset} needs --dataset-path (a local file)")
        fmt = "sharegpt" if dataset == "sharegpt" else "jsonl"
        flags += ["--dataset", f"{fmt}:{path}"]
        out_fixed = a.num("--sharegpt-output-len", "--custom-output-len", cast=int)
        out = {"dist": "fixed", "value": out_fixed or 256}
        profile["classes"] = [default_class({"dist": "fixed", "value": 256}, out, extra)]
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
    return finish("vllm", a, argv, profile, flags, diffs, _VLLM_IGNORED)
