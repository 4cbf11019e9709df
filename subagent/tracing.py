"""OpenTelemetry traces of one subagent (the `otel` extra; docs/tracing.md).

Off unless the standard `OTEL_*` variables ask for an exporter (the supervisor passes them on)
and the SDK is installed. Then every event the subagent reports also drives its spans: one
`invoke_agent` span for the run, a span per turn, and under it a `chat` span per model call and
an `execute_tool` span per tool call, with the OpenTelemetry GenAI `gen_ai.*` attributes. No
prompt, reply or tool payload is recorded unless the task captures content. The run's span is
the child of the spawn payload's `traceparent`, so a task's spans, its nested subagents' (children
of the delegating tool call) and its MCP servers' (the SDK sends the current span in `_meta`)
form one trace.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue

from protocol.events import EventName
from protocol.spawn import SpawnPayload

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

FLUSH_TIMEOUT_MS = 3000  # at exit: spans not exported by then are dropped, the exit is not held
SYSTEMS = {"openai": "openai", "anthropic": "anthropic", "scripted": "agentd.scripted"}


def wanted(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
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


def current_traceparent() -> str | None:
    """The W3C `traceparent` of the current span, or None (no SDK, or no span)."""
    try:
        from opentelemetry.propagate import inject
    except ImportError:
        return None
    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier.get("traceparent")


def _provider(service: str) -> TracerProvider | None:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        sys.stderr.write("agentd: OTEL_* asks for traces but the otel extra is not installed\n")
        return None
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if exporter != "otlp":  # stdout is the control channel: no console exporter here
        sys.stderr.write(f"agentd: OTEL_TRACES_EXPORTER={exporter} is not supported; use otlp\n")
        return None
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or service})
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


class SpanDriver:
    """Turns the subagent's events into spans. Called on the emitting task, so the tool-call span
    it makes current is what the MCP SDK and a `subagent_spawn` request see as the parent."""

    def __init__(self, payload: SpawnPayload, provider: TracerProvider) -> None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._payload = payload
        self._capture = payload.telemetry.capture_content
        self._tracer = provider.get_tracer("agentd.subagent")
        self._systems = {e.name: SYSTEMS.get(e.kind, e.kind) for e in payload.intelligence}
        self._models = {e.name: e.model for e in payload.intelligence}
        carrier = {"traceparent": payload.telemetry.traceparent} if payload.telemetry.traceparent else {}
        self._parent = TraceContextTextMapPropagator().extract(carrier)
        self._agent: Any = None
        self._turn: Any = None
        self._turns = 0
        self._calls: dict[str, Any] = {}
        self._tools: dict[str, tuple[Any, object]] = {}

    # ---- spans -------------------------------------------------------------------------------

    def _child_of(self, parent: Any) -> Any:
        from opentelemetry.trace import set_span_in_context

        return set_span_in_context(parent) if parent is not None else self._parent

    def _start_agent(self, fields: dict[str, JsonValue]) -> None:
        p = self._payload
        self._agent = self._tracer.start_span(
            "invoke_agent agentd",
            context=self._parent,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "agentd",
                "gen_ai.agent.id": f"{p.task_id}/{p.handle}",
                "agentd.task_id": p.task_id,
                "agentd.run_id": p.run_id,
                "agentd.handle": p.handle,
                "agentd.depth": p.depth,
            },
        )
        if self._capture:
            self._agent.set_attribute("gen_ai.input.messages", _messages("user", p.instruction))

    def _ensure_turn(self) -> Any:
        if self._turn is None:
            self._turns += 1
            self._turn = self._tracer.start_span(
                f"turn {self._turns}",
                context=self._child_of(self._agent),
                attributes={"agentd.step": self._turns},
            )
        return self._turn

    def _end_turn(self, fields: dict[str, JsonValue] | None = None) -> None:
        if self._turn is None:
            return
        if fields:
            for key in ("kind", "tool_calls"):
                value = fields.get(key)
                if isinstance(value, str | int):
                    self._turn.set_attribute(f"agentd.{key}", value)
        self._turn.end()
        self._turn = None

    def _start_call(self, fields: dict[str, JsonValue]) -> None:
        endpoint = str(fields.get("endpoint"))
        model = fields.get("model") or self._models.get(endpoint) or ""
        span = self._tracer.start_span(
            f"chat {model}",
            context=self._child_of(self._ensure_turn()),
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.system": self._systems.get(endpoint, "unknown"),
                "gen_ai.provider.name": self._systems.get(endpoint, "unknown"),
                "gen_ai.request.model": str(model),
                "agentd.endpoint": endpoint,
                "agentd.attempt": _int(fields.get("attempt")),
            },
        )
        if self._capture and isinstance(fields.get("last_message"), str):
            span.set_attribute("gen_ai.input.messages", _messages("user", str(fields["last_message"])))
        self._calls[f"{endpoint}/{fields.get('attempt')}"] = span

    def _end_call(self, fields: dict[str, JsonValue]) -> None:
        from opentelemetry.trace import StatusCode

        span = self._calls.pop(f"{fields.get('endpoint')}/{fields.get('attempt')}", None)
        if span is None:
            return
        for attribute, key in (
            ("gen_ai.usage.input_tokens", "tokens_in"),
            ("gen_ai.usage.output_tokens", "tokens_out"),
        ):
            if isinstance(fields.get(key), int):
                span.set_attribute(attribute, fields[key])
        if isinstance(fields.get("finish_reason"), str):
            span.set_attribute("gen_ai.response.finish_reasons", [str(fields["finish_reason"])])
        if self._capture and isinstance(fields.get("reply"), str):
            span.set_attribute("gen_ai.output.messages", _messages("assistant", str(fields["reply"])))
        outcome = fields.get("outcome")
        if outcome not in ("ok", "malformed"):
            span.set_attribute("error.type", str(fields.get("err") or outcome))
            span.set_status(StatusCode.ERROR)
        span.end()

    def _start_tool(self, fields: dict[str, JsonValue]) -> None:
        from opentelemetry import context, trace

        tool = str(fields.get("tool"))
        server = fields.get("server")
        span = self._tracer.start_span(
            f"execute_tool {tool}",
            context=self._child_of(self._ensure_turn()),
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": str(fields.get("call_id")),
                "gen_ai.tool.type": "extension" if server is not None else "function",
                **({"agentd.mcp.server": str(server)} if server is not None else {}),
            },
        )
        if self._capture and isinstance(fields.get("args"), str):
            span.set_attribute("gen_ai.tool.call.arguments", str(fields["args"]))
        # Current for the rest of the call: the MCP request and a delegated spawn are its children.
        token = context.attach(trace.set_span_in_context(span))
        self._tools[str(fields.get("call_id"))] = (span, token)

    def _end_tool(self, fields: dict[str, JsonValue]) -> None:
        from opentelemetry import context
        from opentelemetry.trace import StatusCode

        found = self._tools.pop(str(fields.get("call_id")), None)
        if found is None:
            return
        span, token = found
        with contextlib.suppress(ValueError, RuntimeError):  # ended on another task than it began
            context.detach(token)  # type: ignore[arg-type]
        if self._capture and isinstance(fields.get("result"), str):
            span.set_attribute("gen_ai.tool.call.result", str(fields["result"]))
        if fields.get("err") is not None:
            span.set_attribute("error.type", str(fields["err"]))
            span.set_status(StatusCode.ERROR)
        span.end()

    def _end_agent(self, fields: dict[str, JsonValue]) -> None:
        from opentelemetry.trace import StatusCode

        self._end_turn()
        if self._agent is None:
            return
        for key in ("status", "steps", "tokens"):
            value = fields.get(key)
            if isinstance(value, str | int):
                self._agent.set_attribute(f"agentd.{key}", value)
        if fields.get("error") is not None:
            self._agent.set_attribute("error.type", str(fields["error"]))
            self._agent.set_status(StatusCode.ERROR)
        self._agent.end()
        self._agent = None

    # ---- the event sink ----------------------------------------------------------------------

    def __call__(self, event: EventName, fields: dict[str, JsonValue]) -> None:
        if event == "loop.start":
            self._start_agent(fields)
        elif self._agent is None:
            return
        elif event == "intel.call":
            self._start_call(fields)
        elif event == "intel.result":
            self._end_call(fields)
        elif event == "tool.call":
            self._start_tool(fields)
        elif event == "tool.result":
            self._end_tool(fields)
        elif event == "loop.step":
            self._end_turn(fields)
        elif event == "loop.final":
            self._end_agent(fields)

    def close(self) -> None:
        """End whatever is still open (a run cut short), so it is still exported."""
        for span in self._calls.values():
            span.end()
        for span, _token in self._tools.values():
            span.end()
        self._calls.clear()
        self._tools.clear()
        self._end_agent({})


def _int(value: JsonValue) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}], ensure_ascii=False)


@contextlib.contextmanager
def tracing(payload: SpawnPayload) -> Iterator[SpanDriver | None]:
    """The run's `SpanDriver` while the block runs (None when traces are off); flushed at the end."""
    provider = _provider("agentd-subagent") if wanted() else None
    if provider is None:
        yield None
        return
    driver = SpanDriver(payload, provider)
    try:
        yield driver
    finally:
        driver.close()
        provider.force_flush(FLUSH_TIMEOUT_MS)
