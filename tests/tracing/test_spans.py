"""The subagent's span driver in process: the events of a run become the expected spans (exported
through the SDK's processor to its in-memory exporter), a span is current only while a call that
passes it on runs, and a run the sampler drops does no tracing work at all."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased
from opentelemetry.trace import StatusCode

from protocol.spawn import EndpointSpec, SpawnPayload, Telemetry
from subagent import spans, tracing

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"


def _payload(flags: str = "01", *, capture: bool = False) -> SpawnPayload:
    return SpawnPayload(
        task_id="t_1",
        run_id="r_1",
        handle="0.2",
        depth=1,
        instruction="secret instruction",
        intelligence=[
            EndpointSpec(name="main", kind="openai", model="gpt-x", base_url="http://127.0.0.1:1"),
            EndpointSpec(name="spare", kind="anthropic", model="claude-y", base_url="http://127.0.0.1:1"),
        ],
        telemetry=Telemetry(traceparent=f"00-{TRACE_ID}-{PARENT_ID}-{flags}", capture_content=capture),
    )


@pytest.fixture
def memory() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


def _export(memory: InMemorySpanExporter) -> spans.Export:
    sampler = TracerProvider(shutdown_on_exit=False).sampler  # the default: parent-based, always on
    return spans.Export(Resource.create({"service.name": "test"}), sampler, SimpleSpanProcessor(memory))


def _run_two_turns(driver: spans.SpanDriver) -> dict[str, str | None]:
    """Drive a run: a failed attempt and a good one, an MCP call and a self-tool call, then a
    final turn. Returns the `traceparent` current inside each tool call."""
    seen: dict[str, str | None] = {}
    driver("loop.start", {})
    driver("intel.call", {"endpoint": "main", "attempt": 1, "last_message": "hello"})
    driver("intel.result", {"endpoint": "main", "attempt": 1, "outcome": "error", "err": "timeout"})
    driver("intel.call", {"endpoint": "spare", "attempt": 2})
    driver(
        "intel.result",
        {"endpoint": "spare", "attempt": 2, "outcome": "ok", "tokens_in": 120, "tokens_out": 7,
         "finish_reason": "tool_calls", "reply": "calling"},
    )  # fmt: skip
    driver("tool.call", {"tool": "fs__read", "server": "fs", "call_id": "c1", "args": '{"p":1}'})
    seen["mcp"] = tracing.current_traceparent()
    driver("tool.result", {"tool": "fs__read", "server": "fs", "call_id": "c1", "err": "server_error"})
    seen["after"] = tracing.current_traceparent()
    driver("tool.call", {"tool": "note_read", "server": None, "call_id": "c2"})
    seen["self"] = tracing.current_traceparent()
    driver("tool.result", {"tool": "note_read", "server": None, "call_id": "c2", "err": None})
    driver("loop.step", {"step": 1, "kind": "tools", "tool_calls": 2})
    driver("intel.call", {"endpoint": "main", "attempt": 1})
    driver(
        "intel.result", {"endpoint": "main", "attempt": 1, "outcome": "ok", "tokens_in": 200, "tokens_out": 3}
    )
    driver("loop.step", {"step": 2, "kind": "final"})
    driver("loop.final", {"status": "completed", "steps": 2, "tokens": 330})
    return seen


def _by_name(finished: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in finished:
        found.setdefault(span.name, []).append(span)
    return found


def _id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def test_a_run_becomes_the_expected_span_tree(memory: InMemorySpanExporter) -> None:
    payload = _payload()
    export = _export(memory)
    run = spans.run_context(payload, export.sampler)
    assert run is not None
    seen = _run_two_turns(spans.SpanDriver(payload, export, run))
    finished = memory.get_finished_spans()
    names = _by_name(finished)
    assert sorted(names) == sorted(
        ["invoke_agent agentd", "turn 1", "turn 2", "chat gpt-x", "chat claude-y", "execute_tool fs__read",
         "execute_tool note_read"]
    )  # fmt: skip
    (agent,) = names["invoke_agent agentd"]
    assert agent.context is not None and agent.parent is not None
    assert f"{agent.context.trace_id:032x}" == TRACE_ID and f"{agent.parent.span_id:016x}" == PARENT_ID
    assert {f"{s.context.trace_id:032x}" for s in finished if s.context} == {TRACE_ID}
    assert dict(agent.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "agentd",
        "gen_ai.agent.id": "t_1/0.2",
        "agentd.task_id": "t_1",
        "agentd.run_id": "r_1",
        "agentd.handle": "0.2",
        "agentd.depth": 1,
        "agentd.status": "completed",
        "agentd.steps": 2,
        "agentd.tokens": 330,
    }
    turn1, turn2 = names["turn 1"][0], names["turn 2"][0]
    assert turn1.parent is not None and turn1.parent.span_id == _id(agent)
    assert dict(turn1.attributes or {}) == {"agentd.step": 1, "agentd.kind": "tools", "agentd.tool_calls": 2}
    failed, good = sorted(names["chat gpt-x"], key=lambda s: s.start_time or 0)[0], names["chat claude-y"][0]
    assert failed.parent is not None and failed.parent.span_id == _id(turn1)
    assert (
        failed.status.status_code is StatusCode.ERROR and (failed.attributes or {})["error.type"] == "timeout"
    )
    assert dict(good.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": "anthropic",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-y",
        "agentd.endpoint": "spare",
        "agentd.attempt": 2,
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.response.finish_reasons": ("tool_calls",),
    }
    assert good.status.status_code is StatusCode.UNSET
    (mcp,) = names["execute_tool fs__read"]
    assert mcp.parent is not None and mcp.parent.span_id == _id(turn1)
    assert (mcp.attributes or {})["gen_ai.tool.type"] == "extension"
    assert (mcp.attributes or {})["agentd.mcp.server"] == "fs"
    assert mcp.status.status_code is StatusCode.ERROR
    (local,) = names["execute_tool note_read"]
    assert (local.attributes or {})["gen_ai.tool.type"] == "function"
    assert local.status.status_code is StatusCode.UNSET
    (last_chat,) = [s for s in names["chat gpt-x"] if s is not failed]
    assert last_chat.parent is not None and last_chat.parent.span_id == _id(turn2)
    # Only the MCP call's span is current while it runs (it goes out in `_meta`); after it, none.
    assert seen["mcp"] == f"00-{TRACE_ID}-{_id(mcp):016x}-01"
    assert seen["self"] is None and seen["after"] is None
    # No content without capture.
    for span in finished:
        assert not {k for k in span.attributes or {} if k.endswith(("messages", "arguments", "result"))}


def test_content_is_recorded_only_when_captured(memory: InMemorySpanExporter) -> None:
    payload = _payload(capture=True)
    export = _export(memory)
    run = spans.run_context(payload, export.sampler)
    assert run is not None
    _run_two_turns(spans.SpanDriver(payload, export, run))
    names = _by_name(memory.get_finished_spans())
    assert "secret instruction" in str(
        (names["invoke_agent agentd"][0].attributes or {})["gen_ai.input.messages"]
    )
    assert "calling" in str((names["chat claude-y"][0].attributes or {})["gen_ai.output.messages"])
    assert (names["execute_tool fs__read"][0].attributes or {})["gen_ai.tool.call.arguments"] == '{"p":1}'


def test_a_delegation_is_current_while_it_runs_and_a_cut_run_still_ends_its_spans(
    memory: InMemorySpanExporter,
) -> None:
    payload = _payload()
    export = _export(memory)
    run = spans.run_context(payload, export.sampler)
    assert run is not None
    driver = spans.SpanDriver(payload, export, run)

    def cut_short() -> str | None:
        driver("loop.start", {})
        driver("intel.call", {"endpoint": "main", "attempt": 1})
        driver("tool.call", {"tool": "subagent_spawn", "server": None, "call_id": "d1"})
        return tracing.current_traceparent()

    # As in a subagent, the call runs in a task's own context, which ends with the task.
    current = contextvars.copy_context().run(cut_short)
    assert tracing.current_traceparent() is None
    driver.close()  # cancelled mid-call: the run ends with what is open
    names = _by_name(memory.get_finished_spans())
    assert set(names) == {"invoke_agent agentd", "turn 1", "chat gpt-x", "execute_tool subagent_spawn"}
    assert current == f"00-{TRACE_ID}-{_id(names['execute_tool subagent_spawn'][0]):016x}-01"


@pytest.mark.parametrize(
    ("flags", "sampler", "traced"),
    [
        pytest.param("01", ParentBased(ALWAYS_ON), True, id="sampled-parent"),
        pytest.param("00", ParentBased(ALWAYS_ON), False, id="unsampled-parent"),
        pytest.param("01", ALWAYS_OFF, False, id="always-off"),
    ],
)
def test_the_sampler_is_asked_once_before_any_span(flags: str, sampler: object, traced: bool) -> None:
    payload = _payload(flags)
    assert (spans.run_context(payload, sampler) is not None) is traced  # type: ignore[arg-type]


def test_a_dropped_run_does_no_tracing_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
    with tracing.tracing(_payload("00")) as observer:
        assert observer is None  # the channel then calls nothing per event
    with tracing.tracing(_payload("01")) as observer:
        assert isinstance(observer, spans.SpanDriver)


def _delay_ms(export: spans.Export) -> float:
    return float(export.processor._batch_processor._schedule_delay_millis)  # type: ignore[attr-defined]


def test_the_batch_delay_is_the_subagent_default_unless_the_variable_sets_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_BSP_SCHEDULE_DELAY", raising=False)
    quiet = spans.Export.from_environment("s")
    assert _delay_ms(quiet) == spans.SCHEDULE_DELAY_MS
    quiet.shutdown()
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    told = spans.Export.from_environment("s")
    assert _delay_ms(told) == 100
    told.shutdown()
