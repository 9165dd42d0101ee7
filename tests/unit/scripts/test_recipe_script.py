"""``scripts/inferencex_recipes.py`` reads a launch script's TensorRT-LLM batch waiting for one run (rule 10)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).parents[3] / "scripts" / "inferencex_recipes.py"

# the shape of InferenceX's launch scripts: branches on the run's lengths, TP and clients, here-documents, arithmetic
LAUNCH = """#!/usr/bin/env bash
if [[ -n "$SLURM_JOB_ID" ]]; then
  echo "JOB $SLURM_JOB_ID running on $SLURMD_NODENAME"
fi
DELAY_BATCHING="false"
if [[ "$ISL" == "1024" && "$OSL" == "1024" ]]; then
    if [[ $CONC -ge 64 ]]; then
        DELAY_BATCHING="true"
    fi
elif [[ "$ISL" == "8192" && "$OSL" == "1024" ]]; then
    DELAY_BATCHING="false"
fi
cat > cfg.yml << EOF
stream_interval: 10
EOF
if [[ "$DELAY_BATCHING" == "true" ]]; then
    cat << EOF >> cfg.yml
batch_wait_timeout_iters: 40
batch_wait_max_tokens_ratio: 0.8
EOF
fi
MAX_NUM_TOKENS=$(( ($CONC+$ISL+64+63)/64*64 ))
MAX_NUM_TOKENS=$(( MAX_NUM_TOKENS > 8192 ? MAX_NUM_TOKENS : 8192 ))
trtllm-serve $MODEL --tp_size $TP --max_num_tokens $MAX_NUM_TOKENS --extra_llm_api_options cfg.yml
"""


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("inferencex_recipes", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _env(isl: int, osl: int, conc: int, tp: int = 8) -> dict[str, str]:
    return {"ISL": str(isl), "OSL": str(osl), "TP": str(tp), "CONC": str(conc), "EP_SIZE": "1", "DP_ATTENTION": "false"}


def test_launch_script_branches_are_evaluated_for_the_run() -> None:
    read = _script().launch_options
    waiting = {"batch_wait_iters": "40", "batch_wait_ratio": "0.8", "max_num_tokens": "8192"}
    assert read(LAUNCH, _env(1024, 1024, 128)) == waiting
    assert read(LAUNCH, _env(1024, 1024, 16)) == {}  # below 64 clients: no waiting (nor a budget kept for it)
    assert read(LAUNCH, _env(8192, 1024, 128)) == {}
    # a literal budget, and a condition on TP
    llama = LAUNCH.replace("$CONC -ge 64", "${TP} -lt 8").replace("$MAX_NUM_TOKENS --extra", "16384 --extra")
    assert read(llama, _env(1024, 1024, 4, tp=4)) == waiting | {"max_num_tokens": "16384"}
    assert read(llama, _env(1024, 1024, 4, tp=8)) == {}


def test_sglang_and_vllm_options_single_brackets_and_equals_signs() -> None:
    read = _script().launch_options
    sglang = """if [[ $CONC -ge 16 ]]; then
  SCHEDULER_RECV_INTERVAL=30
else
  SCHEDULER_RECV_INTERVAL=10
fi
if [ "$ISL" = "8192" ] || [ "$OSL" = "8192" ]; then
  MAX_RUNNING_REQUESTS=64
else
  MAX_RUNNING_REQUESTS=128
fi
python3 -m sglang.launch_server --model-path $MODEL --tp $TP \\
  --max-running-requests $MAX_RUNNING_REQUESTS --scheduler-recv-interval $SCHEDULER_RECV_INTERVAL
"""
    assert read(sglang, _env(1024, 1024, 64)) == {"recv_interval": "30", "max_running": "128"}
    assert read(sglang, _env(1024, 8192, 4)) == {"recv_interval": "10", "max_running": "64"}
    assert read("vllm serve $MODEL --max-num-seqs=$CONC\n", _env(1024, 1024, 32)) == {"max_running": "32"}


def test_a_branch_that_cannot_be_evaluated_is_not_guessed() -> None:
    read = _script().launch_options
    unknown = LAUNCH.replace("$CONC -ge 64", "$MOE_BACKEND == TRTLLM")
    assert read(unknown, _env(1024, 1024, 128)) is None
    assert read("vllm serve $MODEL --max-num-seqs $MAX_SEQS\n", _env(1024, 1024, 32)) is None
    # the test on $SLURM_JOB_ID decides nothing the options depend on: harmless
    assert read(LAUNCH, _env(1024, 1024, 128)) is not None


def test_attention_dp_balancing_is_read_only_where_enabled() -> None:
    """TensorRT-LLM's ``attention_dp_config``: its ``timeout_iters`` where the script enables the balancing (under
    attention DP only, as InferenceX's DeepSeek-R1 scripts write it); nothing where it does not enable it."""
    read = _script().launch_options
    dsr1 = """cat > cfg.yml << EOF
enable_attention_dp: $DP_ATTENTION
EOF
if [[ "$DP_ATTENTION" == "true" ]]; then
    cat << EOF >> cfg.yml
attention_dp_config:
    batching_wait_iters: 0
    enable_balance: true
    timeout_iters: 60
EOF
fi
trtllm-serve $MODEL --tp_size $TP --extra_llm_api_options cfg.yml
"""
    dp = {"DP_ATTENTION": "true"}
    assert read(dsr1, _env(1024, 1024, 64) | dp) == {"dp_balance_iters": "60"}
    assert read(dsr1, _env(1024, 1024, 64)) == {}
    assert read(dsr1.replace("enable_balance: true", "enable_balance: false"), _env(1024, 1024, 64) | dp) == {}
