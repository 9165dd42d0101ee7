"""``tailscope app``'s bad input: one line naming the flag or file, exit 1, before anything starts or listens."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import pytest

from tailscope.app.tracing import AppTracer, otlp_traces_url
from tailscope.errors import ConfigError


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from tailscope.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["app", "--fix", "bogus"], "--fix 'bogus': unknown; use all or any of"),
        (["app", "--incident", "fire"], "--incident 'fire': unknown"),
        (["app", "--preset", "nope"], "--preset 'nope': no such preset"),
        (["app", "--time-scale", "0"], "--time-scale must be > 0"),
    ],
)
def test_bad_flags_fail_in_one_line(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(argv, capsys)
    assert code == 1
    assert needle in err
    assert len(err.strip().splitlines()) == 1
    assert "serving" not in out


def test_a_bad_preset_file_names_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "mine.yaml"
    f.write_text("name: mine\nretrieval:\n  top_k: 0\n  searches: []\n")
    code, _, err = run_main(["app", "--preset", str(f)], capsys)
    assert code == 1
    assert f"{f}:3: retrieval.top_k must be ≥ 1" in err


def test_export_without_the_sdk_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_otel(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("opentelemetry"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_otel)
    assert not AppTracer(None).enabled  # no endpoint: no spans, nothing imported
    with AppTracer(None).span("x", "gateway") as s:
        s.set("k", 1)
        assert s.context is None
    with pytest.raises(ConfigError, match=r"pip install 'tailscope\[otel\]'"):
        AppTracer("http://127.0.0.1:4318")


def test_otlp_url_gets_its_path() -> None:
    assert otlp_traces_url("http://h:4318") == "http://h:4318/v1/traces"
    assert otlp_traces_url("http://h:4318/v1/traces/") == "http://h:4318/v1/traces"
