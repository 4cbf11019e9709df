"""The spans of one traced run, made from the subagent's events (docs/tracing.md).

Imported only when traces are on (`subagent/tracing.py` decides), so it imports the `otel`
extra freely. The events are on the turn's path, so this does the least there (docs/tracing.md
"Overhead"; docs/decisions.md): a span is not the SDK's live `Span` — whose start and end alone
were ≈100 Python calls, a third of a scripted turn's own work for a turn's three spans — but a
small record of ids, times and attributes, handed at its end as the SDK's `ReadableSpan` to the
SDK's `BatchSpanProcessor`, which only queues it; encoding and sending happen on the processor's
thread, with the official OTLP exporter configured by the `OTEL_*` variables. The sampler is
asked once per run, before any span exists; constant attributes are built once per run; a
span's context is made current only for calls that pass it on (MCP tools and delegation).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision, Sampler
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from pydantic import JsonValue

from protocol.events import EventName
from protocol.spawn import SpawnPayload

FLUSH_TIMEOUT_MS = 3000  # at exit: spans not exported by then are dropped, the exit is not held
SYSTEMS = {"openai": "openai", "anthropic": "anthropic", "scripted": "agentd.scripted"}
# The batch processor's delay for a subagent, unless `OTEL_BSP_SCHEDULE_DELAY` says otherwise: a
# span costs ≈0.1 ms to encode whenever it is sent, but one OTLP/HTTP request costs ≈2–3 ms of
# CPU however few spans it carries, so at the SDK's 5 s a run of real-model turns paid a request
# every turn or two. At 30 s (or 512 spans, the batch size) it is spread over many turns; the
# run's end flushes the rest.
SCHEDULE_DELAY_MS = 30_000
# Tools whose span must be the current one while they run: an MCP call sends it in `_meta`, a
# delegation hands it to the supervisor as the nested run's parent. A self-tool passes nothing on.
DELEGATING_TOOLS = frozenset({"subagent_spawn"})
SCOPE = InstrumentationScope("agentd.subagent")
ERROR, UNSET = Status(StatusCode.ERROR), Status(StatusCode.UNSET)
_ids = RandomIdGenerator()


class _Resource(Resource):
    """A resource hashed once. The exporter groups every span by its resource, and the SDK's hash
    JSON-encodes the attributes each time it is asked: ≈20 µs a span, a fifth of its encoding."""

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource.attributes, resource.schema_url)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True, slots=True)
class Export:
    """Where a run's spans go: the resource, the configured sampler, the batch processor."""

    resource: Resource
    sampler: Sampler
    processor: SpanProcessor

    @classmethod
    def from_environment(
        cls, service: str, environ: dict[str, str] | os._Environ[str] = os.environ
    ) -> Export:
        resource = _Resource(Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME") or service}))
        # A provider is made only for the sampler the OTEL_TRACES_SAMPLER* variables configure.
        sampler = TracerProvider(resource=resource, shutdown_on_exit=False).sampler
        delay = None if environ.get("OTEL_BSP_SCHEDULE_DELAY") else SCHEDULE_DELAY_MS
        return cls(resource, sampler, BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=delay))

    def flush(self) -> None:
        self.processor.force_flush(FLUSH_TIMEOUT_MS)

    def shutdown(self) -> None:
        self.processor.shutdown()


def parent_of(payload: SpawnPayload) -> tuple[Any, SpanContext | None]:
    """The spawn payload's `traceparent` as an OpenTelemetry context, and its span context."""
    carrier = {"traceparent": payload.telemetry.traceparent} if payload.telemetry.traceparent else {}
    parent_context = TraceContextTextMapPropagator().extract(carrier)
    parent = trace.get_current_span(parent_context).get_span_context()
    return parent_context, parent if parent.is_valid else None


def run_context(payload: SpawnPayload, sampler: Sampler) -> SpanContext | None:
    """The context of the run's span, or None when the sampler drops the run.

    Asked once, before any span exists, with the spawn payload's parent. The standard samplers
    decide a span under the run as they decide the run (by the parent's flag, by the trace id,
    or always the same), so a dropped run would have dropped every span in it.
    """
    parent_context, parent = parent_of(payload)
    trace_id = parent.trace_id if parent is not None else _ids.generate_trace_id()
    decision = sampler.should_sample(parent_context, trace_id, "invoke_agent agentd").decision
    if decision is not Decision.RECORD_AND_SAMPLE:  # RECORD_ONLY spans are not exported either
        return None
    flags = TraceFlags((parent.trace_flags if parent is not None else 0) | TraceFlags.SAMPLED)
    return SpanContext(trace_id, _ids.generate_span_id(), is_remote=False, trace_flags=flags)


@dataclass(slots=True)
class _Open:
    """A span begun and not yet ended."""

    name: str
    context: SpanContext
    parent: SpanContext | None
    start_ns: int
    attributes: dict[str, Any]


class SpanDriver:
    """Turns the subagent's events into spans. Called on the emitting task, so the tool-call span
    it makes current is what the MCP SDK and a `subagent_spawn` request see as the parent."""

    def __init__(self, payload: SpawnPayload, export: Export, run: SpanContext) -> None:
        self._export = export
        self._payload = payload
        self._capture = payload.telemetry.capture_content
        self._run = run
        self._run_parent = parent_of(payload)[1]
        # Built once: a chat span's name and constant attributes per endpoint.
        self._chat = {
            e.name: _chat(e.name, e.model, SYSTEMS.get(e.kind, e.kind)) for e in payload.intelligence
        }
        self._agent: _Open | None = None
        self._turn: _Open | None = None
        self._turns = 0
        self._calls: dict[tuple[JsonValue, JsonValue], _Open] = {}
        self._tools: dict[str, tuple[_Open, object]] = {}

    # ---- spans -------------------------------------------------------------------------------

    def _open(self, name: str, parent: _Open, attributes: dict[str, Any]) -> _Open:
        up = parent.context
        context = SpanContext(
            up.trace_id, _ids.generate_span_id(), is_remote=False, trace_flags=up.trace_flags
        )
        return _Open(name, context, up, time.time_ns(), attributes)

    def _close(self, span: _Open, ending: dict[str, Any] | None = None, *, error: bool = False) -> None:
        """End `span` and hand it to the batch processor (which only queues it)."""
        if ending:
            span.attributes.update(ending)
        finished = ReadableSpan(
            span.name,
            context=span.context,
            parent=span.parent,
            resource=self._export.resource,
            attributes=span.attributes,
            status=ERROR if error else UNSET,
            start_time=span.start_ns,
            end_time=time.time_ns(),
            instrumentation_scope=SCOPE,
        )
        self._export.processor.on_end(finished)

    def _start_agent(self) -> None:
        p = self._payload
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "agentd",
            "gen_ai.agent.id": f"{p.task_id}/{p.handle}",
            "agentd.task_id": p.task_id,
            "agentd.run_id": p.run_id,
            "agentd.handle": p.handle,
            "agentd.depth": p.depth,
        }
        if self._capture:
            attributes["gen_ai.input.messages"] = _messages("user", p.instruction)
        self._agent = _Open("invoke_agent agentd", self._run, self._run_parent, time.time_ns(), attributes)

    def _turn_span(self, agent: _Open) -> _Open:
        """The open turn, opened at its first model or tool call."""
        if self._turn is None:
            self._turns += 1
            self._turn = self._open(f"turn {self._turns}", agent, {"agentd.step": self._turns})
        return self._turn

    def _end_turn(self, fields: dict[str, JsonValue]) -> None:
        if self._turn is None:
            return
        ending: dict[str, Any] = {}
        for key in ("kind", "tool_calls"):
            value = fields.get(key)
            if isinstance(value, str | int):
                ending[f"agentd.{key}"] = value
        self._close(self._turn, ending)
        self._turn = None

    def _start_call(self, agent: _Open, fields: dict[str, JsonValue]) -> None:
        endpoint = str(fields.get("endpoint"))
        known = self._chat.get(endpoint)
        if known is None:  # not in the payload: described from the event, and remembered
            known = self._chat[endpoint] = _chat(endpoint, str(fields.get("model") or ""), "unknown")
        name, constant = known
        attributes = {**constant, "agentd.attempt": _int(fields.get("attempt"))}
        if self._capture and isinstance(fields.get("last_message"), str):
            attributes["gen_ai.input.messages"] = _messages("user", str(fields["last_message"]))
        span = self._open(name, self._turn_span(agent), attributes)
        self._calls[(fields.get("endpoint"), fields.get("attempt"))] = span

    def _end_call(self, fields: dict[str, JsonValue]) -> None:
        span = self._calls.pop((fields.get("endpoint"), fields.get("attempt")), None)
        if span is None:
            return
        ending: dict[str, Any] = {}
        tokens_in, tokens_out = fields.get("tokens_in"), fields.get("tokens_out")
        if isinstance(tokens_in, int):
            ending["gen_ai.usage.input_tokens"] = tokens_in
        if isinstance(tokens_out, int):
            ending["gen_ai.usage.output_tokens"] = tokens_out
        finish = fields.get("finish_reason")
        if isinstance(finish, str):
            ending["gen_ai.response.finish_reasons"] = (finish,)
        if self._capture and isinstance(fields.get("reply"), str):
            ending["gen_ai.output.messages"] = _messages("assistant", str(fields["reply"]))
        failed = fields.get("outcome") not in ("ok", "malformed")
        if failed:
            ending["error.type"] = str(fields.get("err") or fields.get("outcome"))
        self._close(span, ending, error=failed)

    def _start_tool(self, agent: _Open, fields: dict[str, JsonValue]) -> None:
        tool = str(fields.get("tool"))
        server = fields.get("server")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": str(fields.get("call_id")),
            "gen_ai.tool.type": "extension" if server is not None else "function",
        }
        if server is not None:
            attributes["agentd.mcp.server"] = str(server)
        if self._capture and isinstance(fields.get("args"), str):
            attributes["gen_ai.tool.call.arguments"] = str(fields["args"])
        span = self._open(f"execute_tool {tool}", self._turn_span(agent), attributes)
        token = None
        if server is not None or tool in DELEGATING_TOOLS:
            # Current for the rest of the call: the MCP request and a delegated spawn are its children.
            token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(span.context)))
        self._tools[str(fields.get("call_id"))] = (span, token)

    def _end_tool(self, fields: dict[str, JsonValue]) -> None:
        found = self._tools.pop(str(fields.get("call_id")), None)
        if found is None:
            return
        span, token = found
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]
        ending: dict[str, Any] = {}
        if self._capture and isinstance(fields.get("result"), str):
            ending["gen_ai.tool.call.result"] = str(fields["result"])
        err = fields.get("err")
        if err is not None:
            ending["error.type"] = str(err)
        self._close(span, ending, error=err is not None)

    def _end_agent(self, fields: dict[str, JsonValue]) -> None:
        if self._turn is not None:
            self._close(self._turn)
            self._turn = None
        if self._agent is None:
            return
        ending: dict[str, Any] = {}
        for key in ("status", "steps", "tokens"):
            value = fields.get(key)
            if isinstance(value, str | int):
                ending[f"agentd.{key}"] = value
        error = fields.get("error")
        if error is not None:
            ending["error.type"] = str(error)
        self._close(self._agent, ending, error=error is not None)
        self._agent = None

    # ---- the event sink ----------------------------------------------------------------------

    def __call__(self, event: EventName, fields: dict[str, JsonValue]) -> None:
        # Every event passes here: only the run's start and end and these five make spans.
        agent = self._agent
        if event == "loop.start":
            self._start_agent()
        elif agent is None:
            return
        elif event == "intel.call":
            self._start_call(agent, fields)
        elif event == "intel.result":
            self._end_call(fields)
        elif event == "tool.call":
            self._start_tool(agent, fields)
        elif event == "tool.result":
            self._end_tool(fields)
        elif event == "loop.step":
            self._end_turn(fields)
        elif event == "loop.final":
            self._end_agent(fields)

    def close(self) -> None:
        """End whatever is still open (a run cut short), so it is still exported."""
        for span in self._calls.values():
            self._close(span)
        for span, _token in self._tools.values():
            self._close(span)
        self._calls.clear()
        self._tools.clear()
        self._end_agent({})


def _chat(endpoint: str, model: str, system: str) -> tuple[str, dict[str, Any]]:
    """A chat span's name and constant attributes."""
    return (
        f"chat {model}",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": system,
            "gen_ai.provider.name": system,
            "gen_ai.request.model": model,
            "agentd.endpoint": endpoint,
        },
    )


def _int(value: JsonValue) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}], ensure_ascii=False)


def warm() -> None:
    """For the zygote: the exporter imports its HTTP stack (`requests`, ≈0.1 s of CPU) only when
    one is built, so one is built and dropped; it opens no connection and starts no thread."""
    OTLPSpanExporter().shutdown()  # type: ignore[no-untyped-call]
