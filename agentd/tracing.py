"""The daemon's OpenTelemetry span per task (the `otel` extra; docs/tracing.md).

Off unless the standard `OTEL_*` variables ask for an exporter and the SDK is installed; then
`from_environment` returns a `Tracing` whose task span's `traceparent` goes into the root spawn
payload, so the subagent's spans (and, through `_meta`, its MCP servers') join the task's trace.
Off, `NULL_TRACING` keeps the payload's own random `traceparent` (correlation without traces).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol

FLUSH_TIMEOUT_MS = 3000


class TaskSpan(Protocol):
    @property
    def traceparent(self) -> str | None: ...

    def end(
        self, status: str | None, exit_code: int | None = None, cost_usd: float | None = None
    ) -> None: ...


class Tracing(Protocol):
    def start_task(self, task_id: str, run_id: str, attempt: int) -> TaskSpan: ...

    def close(self) -> None: ...


class _NullSpan:
    traceparent: str | None = None

    def end(self, status: str | None, exit_code: int | None = None, cost_usd: float | None = None) -> None:
        pass


class _NullTracing:
    def start_task(self, task_id: str, run_id: str, attempt: int) -> TaskSpan:
        return _NullSpan()

    def close(self) -> None:
        pass


NULL_TRACING: Tracing = _NullTracing()


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the standard variables ask for traces: an OTLP endpoint or a traces exporter."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return bool(
        exporter
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


class _Span:
    def __init__(self, span: Any) -> None:
        from opentelemetry.trace import format_span_id, format_trace_id

        self._span = span
        context = span.get_span_context()
        flags = f"{int(context.trace_flags):02x}"
        self.traceparent: str | None = (
            f"00-{format_trace_id(context.trace_id)}-{format_span_id(context.span_id)}-{flags}"
        )

    def end(self, status: str | None, exit_code: int | None = None, cost_usd: float | None = None) -> None:
        from opentelemetry.trace import StatusCode

        if status is not None:
            self._span.set_attribute("agentd.status", status)
        if exit_code is not None:
            self._span.set_attribute("agentd.exit_code", exit_code)
        if cost_usd:
            # What the task's model calls cost as priced by the config (docs/budgets.md).
            self._span.set_attribute("agentd.cost_usd", cost_usd)
        if status not in (None, "completed"):
            self._span.set_status(StatusCode.ERROR, status)
        self._span.end()


class OtelTracing:
    def __init__(self, provider: Any) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("agentd.daemon")

    def start_task(self, task_id: str, run_id: str, attempt: int) -> TaskSpan:
        from opentelemetry.trace import SpanKind

        span = self._tracer.start_span(
            "agentd.task",
            kind=SpanKind.INTERNAL,
            attributes={"agentd.task_id": task_id, "agentd.run_id": run_id, "agentd.attempt": attempt},
        )
        return _Span(span)

    def close(self) -> None:
        self._provider.force_flush(FLUSH_TIMEOUT_MS)


def from_environment(environ: Mapping[str, str] = os.environ) -> Tracing:
    """`OtelTracing` when the variables ask for traces and the extra is installed, else the no-op.

    Raises ValueError naming the problem when traces are asked for but cannot be given.
    """
    if not wanted(environ):
        return NULL_TRACING
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise ValueError("OTEL_* asks for traces: install agentd[otel]") from None
    exporter = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if exporter != "otlp":
        raise ValueError(f"OTEL_TRACES_EXPORTER={exporter}: only otlp (http/protobuf) is supported")
    resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME") or "agentd"})
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return OtelTracing(provider)
