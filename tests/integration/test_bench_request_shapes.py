"""Request shapes over real sockets: extra body fields, per-class fields and headers arrive as given, and a request
template drives a non-OpenAI streaming API with the same TTFT/ITL as the server's own clock says."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

import tailscope
from tailscope.metrics.request import e2e_ms, ttft_ms
from tailscope.testing.judgement import Judgement
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer

pytestmark = pytest.mark.integration


def test_extra_body_and_headers_arrive_verbatim() -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    extra = {"temperature": 0.3, "top_p": 0.9, "stop": ["\n\n"], "tools": tools, "response_format": {"type": "text"}}
    with ScriptedServer(ScriptedConfig(ttft_ms=2, itl_ms=1)) as srv:
        res = tailscope.bench(srv.url, requests=4, output_tokens=3, extra_body=extra,
                              headers=["X-Tenant: blue", "X-Trace-Me:1"], metrics_url="off")  # fmt: skip
        bodies, headers = list(srv.truth.bodies), list(srv.truth.headers)
    assert res.summary.requests.completed == 4
    for b in bodies:
        assert {k: b[k] for k in extra} == extra
        assert b["stream"] is True
        assert b["max_tokens"] == 3
    assert all(h["X-Tenant"] == "blue" and h["X-Trace-Me"] == "1" for h in headers)
    assert res.run.settings["extra_body"] == extra
    assert res.run.settings["headers"] == ["X-Tenant", "X-Trace-Me"]  # names only: values may be credentials


def test_profile_classes_carry_their_own_body_fields(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "name: shapes\n"
        "classes:\n"
        "  - {name: creative, weight: 1, input_tokens: 8, output_tokens: 2, extra_body: {temperature: 1.2}}\n"
        "  - {name: exact, weight: 1, input_tokens: 8, output_tokens: 2, extra_body: {temperature: 0, seed: 7}}\n"
        "arrival: {mode: closed, concurrency: 2}\n"
        "stop: {requests: 20}\n"
    )
    with ScriptedServer(ScriptedConfig(ttft_ms=2, itl_ms=1)) as srv:
        res = tailscope.bench(srv.url, profile=profile, extra_body={"top_p": 0.5}, metrics_url="off")
        bodies = list(srv.truth.bodies)
    by_class = {r.id: r.request_class for r in res.records}
    assert set(by_class.values()) == {"creative", "exact"}
    temps = sorted({b["temperature"] for b in bodies})
    assert temps == [0, 1.2]
    assert all(b["top_p"] == 0.5 for b in bodies)  # the run's fields under the class's own
    assert all(b.get("seed") == 7 for b in bodies if b["temperature"] == 0)
    assert res.run.settings["class_extra_body"] == {
        "creative": {"temperature": 1.2},
        "exact": {"temperature": 0, "seed": 7},
    }


TEMPLATE = """\
path: /api/generate{query}
headers: {{X-App: demo}}
body:
  query: "{{{{prompt}}}}"
  history: "{{{{messages}}}}"
  limit: "{{{{max_tokens}}}}"
  note: "model={{{{model}}}} limit={{{{max_tokens}}}}"
response:
  format: {fmt}
  text: {text}
  output_tokens: usage.output_tokens
  input_tokens: usage.input_tokens
{done}"""


def _template(tmp_path: Path, fmt: str) -> Path:
    p = tmp_path / f"{fmt}.yaml"
    if fmt == "sse":
        text = TEMPLATE.format(query="", fmt="sse", text="delta.text", done="")
    elif fmt == "ndjson":
        text = TEMPLATE.format(query="?format=ndjson", fmt="ndjson", text="delta.text", done="  done: done\n")
    else:
        text = TEMPLATE.format(query="?format=json", fmt="json", text="answer", done="")
    p.write_text(text)
    return p


@pytest.mark.parametrize("fmt", ["sse", "ndjson"])
def test_a_template_drives_a_non_openai_streaming_api(tmp_path: Path, fmt: str, judgement: Judgement) -> None:
    with ScriptedServer(ScriptedConfig(ttft_ms=40, itl_ms=8)) as srv:
        res = tailscope.bench(srv.url, request_template=_template(tmp_path, fmt), model="app-v1", requests=6,
                              concurrency=2, output_tokens=10, input_tokens=12, metrics_url="off")  # fmt: skip
        bodies, headers, truth = list(srv.truth.bodies), list(srv.truth.headers), srv.truth
    assert res.summary.requests.completed == 6, res.summary.errors
    for b in bodies:
        assert b["limit"] == 10
        assert isinstance(b["limit"], int)
        assert b["history"] == [{"role": "user", "content": b["query"]}]
        assert b["note"] == "model=app-v1 limit=10"
    assert all(h["X-App"] == "demo" for h in headers)
    records = sorted(res.records, key=lambda r: r.id)
    assert all(r.output_tokens == 10 and len(r.chunk_times_ns) == 10 for r in records)
    assert all(r.input_tokens == len(b["query"].split()) for r, b in zip(records, bodies, strict=False))
    assert res.run.settings["request_template"]["format"] == fmt
    # the server's own clock: TTFT ≈ 40 ms and ITL ≈ 8 ms; the client sees the same within loopback noise
    ttft = statistics.median(t for r in records if (t := ttft_ms(r)) is not None)
    itl = statistics.median((r.chunk_times_ns[-1] - r.chunk_times_ns[0]) / 9e6 for r in records)
    server_itl = statistics.median((t[-1] - t[0]) / 9e6 for t in truth.token_ns.values())
    judgement.holds(
        35 <= ttft <= 80 and abs(itl - server_itl) < 2.0,
        f"the template's TTFT {ttft:.1f} ms (35–80) and ITL {itl:.2f} vs the server's {server_itl:.2f} ms (± 2)",
    )


def test_a_plain_json_api_is_one_event(tmp_path: Path) -> None:
    with ScriptedServer(ScriptedConfig(ttft_ms=20, itl_ms=2)) as srv:
        res = tailscope.bench(srv.url, request_template=_template(tmp_path, "json"), requests=3, output_tokens=5,
                              metrics_url="off")  # fmt: skip
    assert res.summary.requests.completed == 3
    for r in res.records:
        assert r.output_tokens == 5
        assert len(r.chunk_times_ns) == 1
        assert ttft_ms(r) == pytest.approx(e2e_ms(r), abs=0.5)  # one body: the first token is the whole answer


def test_template_errors_name_the_file_line_and_field_before_any_load(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("path: /api/generate\nbody: {query: '{{prompt}}'}\nresponse:\n  format: xml\n  text: delta.text\n")
    with ScriptedServer(ScriptedConfig(ttft_ms=2, itl_ms=1)) as srv:
        out = subprocess.run(
            [sys.executable, "-m", "tailscope", "bench", "--url", srv.url, "--request-template", str(bad), "-n", "2"],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,  # its store, not the checkout's .tailscope/
        )  # fmt: skip
        received = len(srv.truth.bodies)
    assert out.returncode == 1
    line = out.stderr.strip().splitlines()[-1]
    assert f"{bad}:4: response.format" in line, line
    assert received == 0


def test_extra_body_file_and_json_output(tmp_path: Path) -> None:
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps({"reasoning_effort": "low"}))
    out_json = tmp_path / "run.json"
    with ScriptedServer(ScriptedConfig(ttft_ms=2, itl_ms=1)) as srv:
        out = subprocess.run(
            [sys.executable, "-m", "tailscope", "bench", "--url", srv.url, "--extra-body", f"@{extra}", "-n", "2",
             "-q", "--metrics-url", "off", "--json", str(out_json)],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,  # its store, not the checkout's .tailscope/
        )  # fmt: skip
        bodies = list(srv.truth.bodies)
    assert out.returncode == 0, out.stderr
    assert all(b["reasoning_effort"] == "low" for b in bodies)
    assert json.loads(out_json.read_text())["run"]["settings"]["extra_body"] == {"reasoning_effort": "low"}
