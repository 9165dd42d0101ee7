"""Preflight: prove the target speaks the OpenAI API before any load is sent."""

from __future__ import annotations

import json
from dataclasses import dataclass

from tailscope.client.transport import Transport
from tailscope.errors import TargetError


@dataclass(frozen=True, slots=True)
class PreflightInfo:
    """What the target told us."""

    models: tuple[str, ...]
    model: str


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
        return PreflightInfo(models=models, model=models[0])
    if models and model not in models:
        raise TargetError(f"model {model!r} is not served by {base_url}; it serves: {', '.join(models)} (use --model)")
    return PreflightInfo(models=models, model=model)
