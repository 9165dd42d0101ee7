"""``aiperf profile`` arguments as a tailscope workload."""

from __future__ import annotations

import json
from typing import Any

from tailscope.workload.peer_cli import PeerArgs, Translation, default_class, finish

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


def aiperf_translation(argv: list[str]) -> Translation:
    """``aiperf profile`` arguments (after ``profile``) as a profile, flags and differences."""
    a = PeerArgs("aiperf", argv, {"--streaming", "-v", "--verbose"})
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
    profile["classes"] = [default_class(inp, out, extra)]
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
    return finish("aiperf", a, argv, profile, flags, diffs, _AIPERF_IGNORED)
