"""``tailscope serve`` as a process: starts, answers, stops on SIGINT; bad flags fail with one line."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

pytestmark = pytest.mark.integration


def test_serve_process_answers_and_stops_on_sigint() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailscope", "serve", "--port", "0", "--speed", "10", "--model", "llama-3.1-8b",
         "--gpu", "h100-sxm", "--max-num-seqs", "32", "--stall-prob", "0.5", "--seed", "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        url = None
        lines = []
        while time.monotonic() < deadline and url is None:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"at (http://127\.0\.0\.1:\d+)/v1", line)
            if m:
                url = m.group(1)
        assert url is not None, lines
        assert any("llama-3.1-8b on h100-sxm" in x for x in lines)
        assert any("fault injection on" in x for x in lines)
        with urllib.request.urlopen(url + "/health", timeout=10) as r:
            assert r.status == 200
        req = urllib.request.Request(
            url + "/v1/completions",
            data=json.dumps({"prompt": "hello", "max_tokens": 3, "ignore_eos": True}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            assert json.loads(r.read())["usage"]["completion_tokens"] == 3
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert "stopped" in err
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fail-rate", "2"], "--fail-rate must be a probability"),
        (["--gpu", "h900"], "h900"),
        (["--speed", "0"], "--speed must be > 0"),
    ],
)
def test_bad_flags_fail_with_one_line(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from tailscope.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(["serve", "--port", "0", *args])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
