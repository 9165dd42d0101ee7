"""Peers' command lines as tailscope profiles: equivalent fields, every difference stated, refusals by flag."""

from __future__ import annotations

import pytest
import yaml

from tailscope.errors import ConfigError
from tailscope.io.profile import parse_profile
from tailscope.workload.translate import translate


def _valid(profile: dict[str, object]) -> None:
    """The profile loads with tailscope's own profile reader."""
    parse_profile(yaml.safe_dump(profile, sort_keys=False), source="<translated>")


def test_vllm_random_open_loop() -> None:
    t = translate(
        "vllm",
        ["bench", "serve", "--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--model", "m",
         "--base-url", "http://h:8000", "--dataset-name", "random", "--random-input-len", "512",
         "--random-output-len", "128", "--random-range-ratio", "0.25", "--request-rate", "4", "--burstiness", "0.5",
         "--num-prompts", "200", "--num-warmups", "5", "--seed", "3", "--save-result", "--ignore-eos"],
    )  # fmt: skip
    _valid(t.profile)
    cls = t.profile["classes"][0]  # type: ignore[index]
    assert cls["input_tokens"] == {"dist": "uniform", "min": 384, "max": 640}
    assert cls["output_tokens"] == {"dist": "uniform", "min": 96, "max": 160}
    assert t.profile["arrival"] == {"mode": "open", "rate": 4.0, "process": "gamma", "burstiness": 0.5}
    assert t.profile["stop"] == {"requests": 205}
    assert t.profile["warmup"] == {"requests": 5}
    assert t.profile["endpoint"] == "chat"
    assert t.profile["seed"] == 3
    assert t.flags == ("--url", "http://h:8000")  # --ignore-eos given: tailscope's default matches
    text = " ".join(t.differences)
    assert "TTFT from the send" in text
    assert "range-ratio" in text
    assert "--num-warmups" in text
    assert any(i.startswith("--save-result") for i in t.ignored)


def test_vllm_defaults_are_stated() -> None:
    t = translate("vllm", ["--model", "m"])
    _valid(t.profile)
    text = " ".join(t.differences)
    for needle in ("default --request-rate is inf", "--num-prompts is 1000", "--random-input-len is 1024",
                   "/v1/completions", "--no-ignore-eos"):  # fmt: skip
        assert needle in text, needle
    assert t.profile["arrival"] == {"mode": "closed", "concurrency": 1000}
    assert "--no-ignore-eos" in t.flags
    assert t.command("p.yaml").startswith("tailscope bench --profile p.yaml")


def test_vllm_sharegpt_goes_to_dataset_flag() -> None:
    t = translate("vllm", ["--dataset-name", "sharegpt", "--dataset-path", "/d/sg.json", "--max-concurrency", "8"])
    assert t.flags[:2] == ("--dataset", "sharegpt:/d/sg.json")
    assert t.profile["arrival"] == {"mode": "closed", "concurrency": 8}


def test_vllm_rate_with_max_concurrency_is_a_capped_open_loop() -> None:
    t = translate("vllm", ["--request-rate", "10", "--max-concurrency", "4", "--num-prompts", "40"])
    assert t.profile["arrival"] == {"mode": "open", "rate": 10.0, "max_concurrency": 4, "process": "poisson"}
    assert any("capped at 4 in flight" in d for d in t.differences)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--dataset-name", "sonnet"], "--dataset-name"),
        (["--ramp-up-strategy", "linear"], "--ramp-up-strategy"),
        (["--backend", "tgi"], "--backend"),
        (["--frobnicate", "1"], "--frobnicate"),
    ],
)
def test_vllm_refusals_name_the_flag(args: list[str], flag: str) -> None:
    with pytest.raises(ConfigError, match=rf"^vllm {flag}: cannot be translated — "):
        translate("vllm", args)


def test_guidellm_constant_rate_with_synthetic_data() -> None:
    t = translate(
        "guidellm",
        ["benchmark", "--target", "http://h:8000", "--model", "m", "--rate-type", "poisson", "--rate", "5",
         "--data", "prompt_tokens=256,prompt_tokens_stdev=32,prompt_tokens_min=128,output_tokens=64",
         "--max-requests", "300", "--warmup-percent", "0.1", "--output-path", "out.json"],
    )  # fmt: skip
    _valid(t.profile)
    cls = t.profile["classes"][0]  # type: ignore[index]
    assert cls["input_tokens"] == {"dist": "normal", "mean": 256.0, "std": 32.0, "min": 128}
    assert cls["output_tokens"] == {"dist": "fixed", "value": 64}
    assert t.profile["arrival"] == {"mode": "open", "process": "poisson", "rate": 5.0}
    assert t.profile["warmup"] == {"requests": 30}
    assert "GuideLLM's TPOT includes the first token" in " ".join(t.differences)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--rate-type", "sweep", "--data", "prompt_tokens=1,output_tokens=1", "--max-requests", "9"], "--rate-type"),
        (["--rate-type", "concurrent", "--rate", "4", "--data", "org/dataset", "--max-requests", "9"], "--data"),
        (
            [
                "--rate-type",
                "constant",
                "--rate",
                "2",
                "--data",
                "prompt_tokens=1,output_tokens=1",
                "--max-requests",
                "9",
                "--cooldown-percent",
                "0.1",
            ],
            "--cooldown-percent",
        ),
    ],
)
def test_guidellm_refusals(args: list[str], flag: str) -> None:
    with pytest.raises(ConfigError, match=rf"^guidellm {flag}: cannot be translated"):
        translate("guidellm", args)


def test_aiperf_concurrency_profile() -> None:
    t = translate(
        "aiperf",
        ["profile", "-m", "m", "--url", "h:8000", "--endpoint-type", "chat", "--streaming", "--concurrency", "8",
         "--isl", "512", "--isl-stddev", "50", "--osl", "128", "--request-count", "100",
         "--warmup-request-count", "4", "--extra-inputs", "ignore_eos:true", "--extra-inputs", "temperature:0.5"],
    )  # fmt: skip
    _valid(t.profile)
    assert t.profile["arrival"] == {"mode": "closed", "concurrency": 8}
    assert t.profile["stop"] == {"requests": 104}
    cls = t.profile["classes"][0]  # type: ignore[index]
    assert cls["extra_body"] == {"temperature": 0.5}
    assert t.flags == ("--url", "http://h:8000", "--ignore-eos")
    with pytest.raises(ConfigError, match=r"^aiperf --input-file: cannot be translated"):
        translate("aiperf", ["--input-file", "x.jsonl", "--osl", "5"])


def test_guidellm_run_specs_of_current_versions() -> None:
    """GuideLLM ≥ 0.6 `run --profile kind=…` specs (the command that wrote tests/fixtures/peers/guidellm_real_*)."""
    t = translate(
        "guidellm",
        ["run", "--backend", "kind=openai_http,target=http://127.0.0.1:18432,model=tiny",
         "--profile", "kind=constant,rate=6", "--constraint", "kind=max_requests,count=20",
         "--data", "kind=synthetic_text,prompt_tokens=64,output_tokens=24", "--tokenizer", "kind=hf_auto,model=/m",
         "--output", "kind=json,path=/tmp/b.json", "--seed", "kind=static,value=7", "--disable-progress"],
    )  # fmt: skip
    _valid(t.profile)
    assert t.profile["arrival"] == {"mode": "open", "process": "constant", "rate": 6.0}
    assert t.profile["stop"] == {"requests": 20}
    assert t.profile["seed"] == 7
    assert t.flags == ("--url", "http://127.0.0.1:18432")
    with pytest.raises(ConfigError, match=r"^guidellm --data kind=huggingface,path=x: cannot be translated"):
        translate("guidellm", ["run", "--data", "kind=huggingface,path=x"])
