"""Result files of other benchmark tools, read into tailscope's records (``tailscope runs import``).

* ``vllm``: the JSON of ``vllm bench serve --save-result --save-detailed`` (``benchmarks/benchmark_serving.py`` wrote
  the same keys): per request ``start_times`` (the client's ``perf_counter`` at send), ``ttfts``, ``itls`` (every gap
  between SSE events with a choice), ``latencies``, ``input_lens``, ``output_lens``, ``errors``; and the aggregates
  (``completed``, ``median_ttft_ms``, ``p99_itl_ms`` …). Several documents (``--append-result``) are several runs.
* ``guidellm``: ``benchmarks.json`` of ``guidellm benchmark``: ``benchmarks[].requests.{successful,errored,
  incomplete}[]`` with ``info.timings`` (``request_start``, ``first_token_iteration``, ``last_token_iteration``,
  ``token_iterations``, ``request_end``; Unix seconds) and ``benchmarks[].metrics``. One run per benchmark (a sweep
  keeps its benchmarks together as one tailscope sweep). GuideLLM keeps no per-token times: the token iterations are
  spaced evenly between the first and the last, as GuideLLM itself does.
* ``aiperf``: ``profile_export.jsonl`` of ``aiperf profile``: one record per line with ``metadata``
  (``request_start_ns``, ``benchmark_phase``, ``x_correlation_id``, ``turn_index``, ``was_cancelled``) and
  ``metrics`` (``time_to_first_token``, ``request_latency``, ``inter_chunk_latency``, ``output_sequence_length``,
  ``input_sequence_length``, each ``{value, unit}``), ``error``. A ``profile_export_aiperf.json`` beside it gives the
  tool's own aggregates and the endpoint.

Each request becomes a :class:`~tailscope.records.RequestRecord` whose times reproduce the tool's own figures when the
same records are summarized in that tool's dialect (``runs show --dialect vllm``). Every error names the file and the
line (JSON lines) or the field (JSON documents) and what to do.
"""

from __future__ import annotations

import os
from pathlib import Path

from tailscope.errors import ContractError
from tailscope.files import read_user_text
from tailscope.io.peers._common import _json_docs
from tailscope.io.peers._run import PEER_TOOLS, SEMANTICS, PeerRun
from tailscope.io.peers.aiperf import _aiperf
from tailscope.io.peers.guidellm import _guidellm
from tailscope.io.peers.vllm import _vllm

__all__ = ["PEER_TOOLS", "SEMANTICS", "PeerRun", "read_peer_results"]


def read_peer_results(path: str | os.PathLike[str], *, tool: str) -> list[PeerRun]:
    """The runs in a result file written by ``tool`` (vllm, guidellm or aiperf).

    Raises:
        ContractError: an unknown tool, a file that cannot be read, or content that is not that tool's result
            (``file:line: …`` or ``file: field: …``).
    """
    name = tool.strip().lower()
    if name not in PEER_TOOLS:
        raise ContractError(f"--from {tool!r}: use one of {', '.join(PEER_TOOLS)}")
    text = read_user_text(path, what=f"{name} result", error=ContractError)
    src = str(path)
    if name == "vllm":
        return [_vllm(doc, f"{src}:{line}" if line else src) for line, doc in _json_docs(text, src)]
    if name == "guidellm":
        docs = _json_docs(text, src)
        if len(docs) != 1:
            raise ContractError(f"{src}: expected one JSON document (GuideLLM's benchmarks.json)")
        return _guidellm(docs[0][1], src)
    return [_aiperf(text, Path(path))]
