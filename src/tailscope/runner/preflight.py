"""Preflight: prove the target speaks the OpenAI API, and that the workload fits it, before any load is sent."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tailscope.client.transport import Transport
from tailscope.errors import ConfigError, TargetError
from tailscope.workload.lengths import LengthDist

#: tokens a chat template and special tokens add to a prompt, kept free when checking the context window
TEMPLATE_MARGIN_TOKENS = 16


@dataclass(frozen=True, slots=True)
class PreflightInfo:
    """What the target told us.

    Attributes:
        max_model_len: the served context length of ``model`` (vLLM, SGLang and the built-in engine list it in
            ``/v1/models``), or None when the server does not say.
    """

    models: tuple[str, ...]
    model: str
    max_model_len: int | None = None
    owned_by: str | None = None  # who serves it, as /v1/models says (vllm, sglang, tailscope, …)


@dataclass(frozen=True, slots=True)
class LengthBound:
    """The prompt and output lengths of one part of a workload (the flags, a profile class, a replay).

    Attributes:
        extra_input_tokens: prompt tokens sent on top of ``input_tokens`` by every request of the part (an agent
            step's ``prompt_template`` text), named ``extra_what`` in messages.
    """

    label: str
    input_tokens: LengthDist
    output_tokens: LengthDist
    extra_input_tokens: int = 0
    extra_what: str = ""


def check_context(
    bounds: Sequence[LengthBound], max_model_len: int | None, model: str, *, prompt_scale: float = 1.0
) -> tuple[str, ...]:
    """Refuse a workload whose typical prompt + max_tokens cannot fit the served context; warn when its longest can't.

    ``prompt_scale``: the server's count of a prompt over the load generator's (:func:`server_prompt_scale`); the
    prompts are checked as the server will count them.

    Raises:
        ConfigError: naming the part of the workload, its lengths and the server's context length.

    Returns:
        Warnings for parts whose longest possible request would be refused (the server answers those with HTTP 400).
    """
    if max_model_len is None:
        return ()
    usable = max_model_len - TEMPLATE_MARGIN_TOKENS
    counted = f"; the server counts the prompts ×{prompt_scale:.2f}" if prompt_scale != 1.0 else ""
    warnings: list[str] = []
    for b in bounds:
        extra = f", its {b.extra_what} ≈ {b.extra_input_tokens:,} of them" if b.extra_input_tokens else ""
        typical = (b.input_tokens.mean() + b.extra_input_tokens) * prompt_scale + b.output_tokens.mean()
        if typical > usable:
            fix = f"shorten the {b.extra_what} or lower" if b.extra_input_tokens else "lower"
            raise ConfigError(
                f"{b.label}: a typical request asks for {typical:,.0f} tokens (prompt + max_tokens{extra}{counted}) "
                f"but {model} serves a context of {max_model_len:,}; {fix} --input-tokens/--output-tokens"
            )
        # a server's count of a given estimated length varies from prompt to prompt (vLLM's tiny test model, 1,000-
        # and 1,200-token prompts: −2 … +7 % around the sample's factor, chat template included): the longest are
        # checked with SCALE_SPREAD on top
        spread = SCALE_SPREAD if prompt_scale != 1.0 else 1.0
        longest = (_longest(b.input_tokens) + b.extra_input_tokens) * prompt_scale * spread + _longest(b.output_tokens)
        longest = round(longest)
        if longest > usable:
            warnings.append(
                f"CONTEXT: {b.label}: the longest requests (≈ {longest:,} tokens{extra}) exceed the served context of "
                f"{max_model_len:,} tokens; the server refuses those (HTTP 400). Clamp the lengths with :max=N"
            )
    return tuple(warnings)


#: the prompt length of the sample :func:`server_prompt_scale` has the server count, tokens (the load generator's)
SCALE_SAMPLE_TOKENS = 512
#: a server count this far from the load generator's (either way) is said in the run's warnings
SCALE_TOLERANCE = 0.1
#: the longest prompts of a scaled count are checked this much longer (the count varies from prompt to prompt)
SCALE_SPREAD = 1.05


async def server_prompt_scale(
    transport: Transport, model: str, sample: str, intended: int, *, timeout_s: float = 5.0
) -> tuple[float, int] | None:
    """``(server count ÷ intended, server count)`` of ``sample`` — a prompt the load generator made ``intended``
    tokens long — as the server's ``POST /tokenize`` counts it (vLLM, SGLang's and the built-in engine's endpoint);
    None where the server has no such endpoint or does not answer in time.

    Without ``--tokenizer`` a prompt's length is the load generator's estimate; a model with another tokenizer (a
    small vocabulary, another language) counts the same text as more or fewer tokens, which decides whether a request
    fits the served context.
    """
    body = json.dumps({"model": model, "prompt": sample}).encode()
    try:
        async with asyncio.timeout(timeout_s):
            headers = {"Content-Type": "application/json", PROBE_HEADER: "tokenize"}
            async with transport.post("/tokenize", body, headers) as resp:
                if resp.status != 200:
                    return None
                doc = json.loads(await resp.read_text(4 * 1024 * 1024))
    except Exception:
        return None
    count = doc.get("count") if isinstance(doc, dict) else None
    if not isinstance(count, int) and isinstance(doc, dict) and isinstance(doc.get("tokens"), list):
        count = len(doc["tokens"])
    if not isinstance(count, int) or count <= 0 or intended <= 0:
        return None
    return count / intended, count


def prompt_scale_warning(model: str, scale: float, count: int, intended: int) -> str | None:
    """The run's warning when the server counts prompts far from the load generator (None within the tolerance)."""
    if abs(scale - 1.0) <= SCALE_TOLERANCE:
        return None
    return (
        f"PROMPTS: {model} counts a {intended:,}-token prompt (the load generator's estimate, no --tokenizer) as "
        f"{count:,} tokens (×{scale:.2f}): the server's prompt lengths are what its latencies answer to; give "
        "--tokenizer with the model's tokenizer.json for exact lengths"
    )


def _longest(dist: LengthDist) -> int:
    """The largest length a distribution produces: its bound, or the 99.9th percentile of an unbounded one."""
    bound = dist.max_value()
    if bound is not None:
        return bound
    rng = random.Random(0)
    samples = sorted(dist.sample(rng) for _ in range(4000))
    return samples[int(0.999 * (len(samples) - 1))]


def _max_model_len(doc: Any, model: str) -> int | None:
    for entry in doc.get("data", []) if isinstance(doc, dict) else []:
        if isinstance(entry, dict) and str(entry.get("id")) == model:
            value = entry.get("max_model_len")
            return int(value) if isinstance(value, int | float) and value > 0 else None
    return None


def _looks_html(body: bytes, content_type: str) -> bool:
    head = body.lstrip()[:15].lower()
    return "html" in content_type.lower() or head.startswith((b"<!doctype", b"<html"))


async def preflight(
    transport: Transport, base_url: str, model: str | None, *, api_key_env: str, timeout_s: float = 10.0
) -> PreflightInfo:
    """Check ``GET /v1/models`` and pick the model.

    Raises:
        TargetError: naming the URL and what failed (unreachable, HTML instead of JSON, 401, unknown model).
    """
    url = base_url + "/v1/models"
    try:
        status, headers, body = await transport.get("/v1/models", timeout_s)
    except TimeoutError:
        raise TargetError(f"{url} did not answer within {timeout_s:g} s; is the server up and the URL right?") from None
    except Exception as exc:
        reason = str(exc) or type(exc).__name__
        raise TargetError(f"cannot reach {url}: {reason} — is the server running and the URL right?") from None
    ctype = headers.get("Content-Type", "") if hasattr(headers, "get") else ""
    if status in (401, 403):
        raise TargetError(
            f"{url} answered {status} ({'Unauthorized' if status == 401 else 'Forbidden'}): set a valid API key in "
            f"${api_key_env} (or name another variable with --api-key-env)"
        )
    if _looks_html(body, ctype):
        raise TargetError(
            f"{url} answered with an HTML page (HTTP {status}), not the OpenAI API; point --url at the API root "
            "(e.g. http://127.0.0.1:8000)"
        )
    if status != 200:
        snippet = body[:200].decode("utf-8", "replace")
        raise TargetError(f"{url} answered HTTP {status}: {snippet!r}; is this an OpenAI-compatible server?")
    try:
        doc = json.loads(body)
        models = tuple(str(m["id"]) for m in doc.get("data", []))
    except (ValueError, TypeError, KeyError, AttributeError):
        raise TargetError(f"{url} did not return the OpenAI model list JSON ({body[:120]!r})") from None
    if model is None:
        if not models:
            raise TargetError(f"{url} lists no models; pass --model NAME")
        model = models[0]
    elif models and model not in models:
        raise TargetError(f"model {model!r} is not served by {base_url}; it serves: {', '.join(models)} (use --model)")
    return PreflightInfo(
        models=models, model=model, max_model_len=_max_model_len(doc, model), owned_by=_owned_by(doc, model)
    )


def _owned_by(doc: Any, model: str) -> str | None:
    for m in doc.get("data", []) if isinstance(doc, dict) else []:
        if isinstance(m, dict) and m.get("id") == model and isinstance(m.get("owned_by"), str):
            return str(m["owned_by"])
    return None


#: servers that accept every extension tailscope sends (their ``owned_by`` in /v1/models): not probed
ACCEPTS_EXTENSIONS = frozenset({"vllm", "sglang", "tailscope"})

#: the header that marks the preflight's probe request (so a server's logs can tell it from the load)
PROBE_HEADER = "X-Tailscope-Probe"


async def preflight_template(base_url: str, model: str | None, *, timeout_s: float = 10.0) -> PreflightInfo:
    """A request template's target has no model list to read: check that it accepts connections.

    Raises:
        TargetError: naming the URL and why the connection failed.
    """
    reason = await _connect_problem(base_url, timeout_s)
    if reason is not None:
        raise TargetError(f"cannot connect to {base_url} ({reason}); is the application running and the URL right?")
    return PreflightInfo(models=(), model=model or "")


async def _connect_problem(url: str, timeout_s: float) -> str | None:
    """Why a TCP connection to ``url``'s host and port fails, or None when it opens."""
    import asyncio
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except (OSError, TimeoutError) as exc:
        if isinstance(exc, TimeoutError):
            return f"no answer within {timeout_s:g} s"
        return exc.strerror or str(exc)
    writer.close()
    return None


async def check_reachable(name: str, url: str, *, timeout_s: float = 3.0) -> None:
    """Open (and close) a TCP connection to a mixed-traffic target, so an unreachable one fails before any load.

    Raises:
        ConfigError: naming the target, its URL and why the connection failed.
    """
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"mixed_traffic {name!r}: {url!r} is not an http(s) URL")
    reason = await _connect_problem(url, timeout_s)
    if reason is not None:
        raise ConfigError(
            f"mixed_traffic {name!r}: cannot connect to {url} ({reason}); start it or remove it from the profile"
        )


#: the OpenAI-API extensions tailscope sends by default, as a server's refusal names them, and what dropping each
#: changes in the measurement
EXTENSIONS: dict[str, str] = {
    "ignore_eos": "outputs may stop before max_tokens, so output lengths are no longer fixed: compare TPOT and E2E "
    "only with runs of the same output lengths",
    "continuous_usage_stats": "token counts per chunk come from --tokenizer (or one per event), not the server",
    "stream_options": "the stream carries no usage: token counts come from --tokenizer (or one per event) and input "
    "tokens are the synthesized lengths",
}


async def probe_dialect(
    transport: Transport,
    path: str,
    body_for: Callable[[frozenset[str]], bytes],
    *,
    timeout_s: float = 30.0,
) -> tuple[frozenset[str], tuple[str, ...]]:
    """Send one tiny request (``max_tokens`` 1) with the extensions a run would send; when the server refuses one
    by name (HTTP 400/422 naming ``ignore_eos``, …), drop it and try again.

    Returns:
        The refused extensions and one warning per refusal (what the server said, what dropping it changes).
        A server that fails the probe for another reason is left to the run, whose records keep its message.
    """
    dropped: frozenset[str] = frozenset()
    warnings: list[str] = []
    for _ in range(len(EXTENSIONS)):
        try:
            async with asyncio.timeout(timeout_s):
                headers = {"Content-Type": "application/json", PROBE_HEADER: "dialect"}
                async with transport.post(path, body_for(dropped), headers) as resp:
                    status = resp.status
                    if status in (400, 422):
                        text = await resp.read_text(2048)
                    else:
                        async for _chunk in resp.iter_chunks():  # a one-token answer: read it to its end
                            pass
        except Exception:
            break  # unreachable or slow: the run says so with its own records
        if status not in (400, 422):
            break
        named = [name for name in EXTENSIONS if name in text and name not in dropped]
        if not named:
            break
        name = named[0]
        dropped = dropped | {name}
        said = " ".join(text.split())[:160]
        warnings.append(
            f"the server refused {name} (HTTP {status}: {said}); requests go without it: {EXTENSIONS[name]}"
        )
    return dropped, tuple(warnings)
