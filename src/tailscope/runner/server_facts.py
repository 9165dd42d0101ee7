"""What a real server says about itself, for the twin: its KV geometry from ``/metrics``
(``vllm:cache_config_info``: block size, KV blocks, prefix caching) and ``max_model_len`` from ``/v1/models``, read
live (:func:`server_facts`) or from a stored run's scraped samples (:func:`stored_cache_labels`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from tailscope.client.prometheus import PromSample, parse_prometheus_text
from tailscope.client.rawhttp import RawHttpTransport
from tailscope.engine.twin import ServerFacts
from tailscope.errors import TargetError
from tailscope.records import ServerSample

__all__ = ["facts_from_labels", "server_facts", "stored_cache_labels"]


async def server_facts(
    url: str, *, max_num_seqs: int, max_num_batched_tokens: int, block_size: int | None, num_blocks: int | None
) -> ServerFacts:
    """Block size and KV blocks from ``vllm:cache_config_info`` (flags override), ``max_model_len`` from /v1/models.

    Raises:
        TargetError: when the server does not expose its KV capacity and no flags give it.
    """
    t = RawHttpTransport(url)
    try:
        status, _, body = await t.get("/metrics", 10)
        labels: dict[str, str] = {}
        if status == 200:
            for s in parse_prometheus_text(body.decode("utf-8", "replace"), source=url + "/metrics"):
                if s.name == "vllm:cache_config_info":
                    labels = s.label_dict()
                    break
        status, _, body = await t.get("/v1/models", 10)
        model, max_len = "", None
        if status == 200:
            data = json.loads(body).get("data") or [{}]
            model = str(data[0].get("id", ""))
            max_len = data[0].get("max_model_len")
    except (OSError, ValueError, TimeoutError) as exc:
        raise TargetError(f"cannot read the server facts from {url}: {exc}") from None
    finally:
        await t.close()
    facts = facts_from_labels(
        labels,
        url=url,
        model=model,
        max_model_len=int(max_len) if max_len else None,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        block_size=block_size,
        num_blocks=num_blocks,
    )
    if facts is None:
        raise TargetError(
            f"{url}/metrics does not expose vllm:cache_config_info (block size, KV blocks); pass --block-size and "
            "--num-blocks to calibrate against this server"
        )
    return facts


def facts_from_labels(
    labels: Mapping[str, str],
    *,
    url: str,
    model: str,
    max_model_len: int | None,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    block_size: int | None,
    num_blocks: int | None,
) -> ServerFacts | None:
    """Server facts from the labels of ``vllm:cache_config_info`` (flags override); None when the KV geometry is
    in neither."""
    bs = block_size or (int(labels["block_size"]) if labels.get("block_size", "").isdigit() else None)
    nb = num_blocks or (int(labels["num_gpu_blocks"]) if labels.get("num_gpu_blocks", "").isdigit() else None)
    if bs is None or nb is None:
        return None
    return ServerFacts(
        block_size=bs,
        num_blocks=nb,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        enable_prefix_caching=labels.get("enable_prefix_caching", "True") == "True",
        model=model,
        url=url,
    )


def stored_cache_labels(samples: Sequence[ServerSample]) -> dict[str, str]:
    """The labels of the last ``vllm:cache_config_info`` a run scraped ({} when it scraped none)."""
    for s in reversed(samples):
        if s.name == "vllm:cache_config_info":
            return PromSample(s.name, s.labels, s.value).label_dict()
    return {}
