"""The reference application's spans: OpenTelemetry SDK spans exported over OTLP/HTTP, or nothing.

Every span carries a ``layer`` attribute (network, gateway, retrieval, agent, inference, business, other), which
``tailscope trace`` honours, plus the GenAI or database attributes of what it does. The SDK is optional (the
``otel`` extra): without ``--otlp-endpoint`` no span is made, and asking for export without the SDK is a
:class:`~tailscope.errors.ConfigError` that says what to install.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from tailscope.errors import ConfigError

AttrValue = str | int | float | bool | Sequence[str]


class SpanRef:
    """A started span (or a stand-in when tracing is off): set attributes, mark errors, link to it."""

    __slots__ = ("_span",)

    def __init__(self, span: Any = None) -> None:
        self._span = span

    def set(self, key: str, value: AttrValue) -> None:
        if self._span is not None:
            self._span.set_attribute(key, value)

    def error(self, message: str) -> None:
        if self._span is not None:
            from opentelemetry.trace import Status, StatusCode

            self._span.set_status(Status(StatusCode.ERROR, message))

    @property
    def context(self) -> Any:
        """The span's context (for links), or None when tracing is off."""
        return None if self._span is None else self._span.get_span_context()


def otlp_traces_url(endpoint: str) -> str:
    """``endpoint`` with ``/v1/traces`` appended unless it already names a path."""
    base = endpoint.rstrip("/")
    return base if base.endswith("/v1/traces") else f"{base}/v1/traces"


class AppTracer:
    """Spans of one application instance.

    Args:
        endpoint: OTLP/HTTP collector (``http://127.0.0.1:4318`` or its ``/v1/traces`` URL); None: no spans.
        service: the ``service.name`` resource attribute.

    Raises:
        ConfigError: ``endpoint`` given but the OpenTelemetry SDK or its OTLP/HTTP exporter is not installed.
    """

    def __init__(self, endpoint: str | None, *, service: str = "tailscope-app") -> None:
        self.endpoint = otlp_traces_url(endpoint) if endpoint else None
        self._provider: Any = None
        self._tracer: Any = None
        if self.endpoint is None:
            return
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            raise ConfigError(
                "--otlp-endpoint needs the OpenTelemetry SDK: pip install 'tailscope[otel]' "
                "(opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http)"
            ) from None
        self._provider = TracerProvider(resource=Resource.create({"service.name": service}))
        self._provider.add_span_processor(
            BatchSpanProcessor(
                OTLPSpanExporter(endpoint=self.endpoint, timeout=10), max_queue_size=65536, schedule_delay_millis=200
            )
        )
        self._tracer = self._provider.get_tracer("tailscope.app")

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    def extract(self, headers: Mapping[str, str]) -> Any:
        """The parent context of an incoming request (its W3C ``traceparent``), or None."""
        if self._tracer is None or "traceparent" not in headers:
            return None
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        return TraceContextTextMapPropagator().extract(carrier=dict(headers))

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        layer: str,
        attributes: Mapping[str, AttrValue] | None = None,
        *,
        kind: str = "internal",
        links: Sequence[Any] = (),
        parent: Any = None,
    ) -> Iterator[SpanRef]:
        """A span around the ``with`` body, the current span inside it (children nest under it)."""
        if self._tracer is None:
            yield SpanRef()
            return
        from opentelemetry.trace import Link, SpanKind

        kinds = {"server": SpanKind.SERVER, "client": SpanKind.CLIENT, "internal": SpanKind.INTERNAL}
        attrs: dict[str, Any] = {"layer": layer}
        if attributes:
            attrs.update(attributes)
        with self._tracer.start_as_current_span(
            name,
            context=parent,
            kind=kinds[kind],
            attributes=attrs,
            links=[Link(c) for c in links if c is not None],
            record_exception=True,
            set_status_on_exception=True,
        ) as s:
            yield SpanRef(s)

    def flush(self, timeout_s: float = 5.0) -> None:
        """Export what is buffered (blocking; call it from a thread in an event loop)."""
        if self._provider is not None:
            self._provider.force_flush(int(timeout_s * 1000))

    def shutdown(self) -> None:
        """Flush and stop the exporter (blocking)."""
        if self._provider is not None:
            self._provider.shutdown()
            self._provider = None
            self._tracer = None
