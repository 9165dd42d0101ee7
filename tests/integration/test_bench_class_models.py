"""Per-class ``model`` in a profile: one run splits its traffic across the models (or LoRA adapters) a server serves;
each class's requests carry its model, the others the run's, over real sockets."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import tailscope
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer

pytestmark = pytest.mark.integration


def test_classes_send_their_own_model(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "name: two-models\n"
        "classes:\n"
        "  - {name: small, weight: 1, input_tokens: 8, output_tokens: 2, model: tiny-lora-sql}\n"
        "  - {name: big, weight: 1, input_tokens: 8, output_tokens: 2, model: big-model, extra_body: {seed: 3}}\n"
        "  - {name: base, weight: 1, input_tokens: 8, output_tokens: 2}\n"
        "arrival: {mode: closed, concurrency: 2}\n"
        "stop: {requests: 30}\n"
    )
    with ScriptedServer(ScriptedConfig(ttft_ms=2, itl_ms=1)) as srv:
        res = tailscope.bench(srv.url, profile=profile, model="scripted", metrics_url="off")
        bodies = list(srv.truth.bodies)
    assert res.summary.requests.completed == 30
    sent = Counter(b["model"] for b in bodies)
    per_class = Counter(r.request_class for r in res.records)
    assert sent == {"tiny-lora-sql": per_class["small"], "big-model": per_class["big"], "scripted": per_class["base"]}
    assert all(b.get("seed") == 3 for b in bodies if b["model"] == "big-model")
    assert res.run.settings["class_models"] == {"small": "tiny-lora-sql", "big": "big-model"}
    assert res.run.target.model == "scripted"
