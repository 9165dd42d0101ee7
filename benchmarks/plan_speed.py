"""How long ``tailscope plan capacity`` takes: a search over 4 TP options (up to 64 replicas; 1,024 for the issue-23
fleet at 10,000 req/s), each answer re-checked by simulation — for the MoE model of the last row each TP degree also
as attention-DP ranks (``DPn``). Aim (shared/TARGETS.md): < 10 s.

    .venv/bin/python benchmarks/plan_speed.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCENARIOS = [
    ("llama-3.1-8b", "h100-sxm", 20, ["ttft_p99=1.5s", "tpot_p99=50ms"], 64),
    ("llama-3.1-8b", "h100-sxm", 150, ["ttft_p99=1.5s", "tpot_p99=50ms"], 64),
    ("llama-3.1-70b", "h100-sxm", 30, ["ttft_p99=2s", "tpot_p99=60ms"], 64),
    ("qwen2.5-7b", "l40s", 40, ["ttft_p99=1s", "tpot_p99=40ms"], 64),
    ("llama-3.1-8b", "h100-sxm", 10000, ["ttft_p99=1s"], 1024),
    ("deepseek-r1", "gb200", 50, ["ttft_p99=2s", "tpot_p99=50ms"], 64),
]
#: the flags a scenario adds (the MoE one: FP4 weights, SGLang's costs, 1,024-token prompts)
EXTRA = {"deepseek-r1": ["--weights-dtype", "fp4", "--engine", "sglang", "--input-tokens", "1024"]}


def main() -> None:
    print(f"{'model':<16} {'gpu':<10} {'target':>7} {'answer':<24} {'sims':>5} {'search s':>9} {'wall s':>7}")
    for model, gpu, rps, slos, max_replicas in SCENARIOS:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "cap.json"
            args = [
                sys.executable,
                "-m",
                "tailscope",
                "plan",
                "capacity",
                "--model",
                model,
                "--gpu",
                gpu,
                "--target-rps",
                str(rps),
                "--tp",
                "1,2,4,8",
                "--max-replicas",
                str(max_replicas),
                "--json",
                str(out),
            ]
            for s in slos:
                args += ["--slo", s]
            args += EXTRA.get(model, [])
            t = time.perf_counter()
            subprocess.run(args, check=True, capture_output=True)
            wall = time.perf_counter() - t
            doc = json.loads(out.read_text())
        best = doc["best"]
        answer = f"{best['replicas']} × {best['shape']} = {best['gpus']} GPUs" if best else "none"
        sims = sum(o["simulations"] for o in doc["options"])
        print(f"{model:<16} {gpu:<10} {rps:>7} {answer:<24} {sims:>5} {doc['search_seconds']:>9.2f} {wall:>7.2f}")


if __name__ == "__main__":
    main()
