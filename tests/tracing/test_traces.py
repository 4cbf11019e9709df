"""Traces end to end: a real daemon and its subagents export over OTLP/HTTP to a local receiver;
one task with two tool calls and a nested subagent gives one trace with the expected parent
links, the MCP server receives that trace in `_meta`, and no content is recorded unless the
daemon captures content (docs/tracing.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.result import TerminalStatus as S
from tests.support.daemon import demo_mcp, running_daemon, scripted
from tests.tracing.otlp_receiver import OtlpReceiver, Span

pytestmark = pytest.mark.processes

TURNS: list[dict[str, object]] = [
    {"tool_calls": [{"name": "demo__add", "arguments": {"a": 2, "b": 3}}]},
    {"tool_calls": [{"name": "subagent_spawn", "arguments": {"instruction": "child: say hi"}}]},
    {"tool_calls": [{"name": "demo__meta", "arguments": {}}]},
    {"text": "meta {last_tool_result}"},
]
ROLES = [{"match": "^child:", "turns": [{"text": "hi"}]}]
SECRET_WORDS = "the-plan-is-purple"


def _one_task(tmp_path: Path, *, capture: bool) -> tuple[list[Span], str, dict[str, str]]:
    with OtlpReceiver() as receiver:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_SERVICE_NAME": "",
        }
        body = (
            scripted("m", TURNS, tmp_path, roles=ROLES)
            + demo_mcp()
            + '[defaults]\nmodel = "m"\nmcp = ["demo"]\n'
        )
        lines = "log_content = true\n" if capture else ""
        with running_daemon(tmp_path, body, env=env, daemon_lines=lines) as daemon:
            task_id = daemon.submit(f"add, delegate, then show meta ({SECRET_WORDS})")
            view = daemon.wait(task_id)
            assert view.status is S.COMPLETED, view
            assert isinstance(view.result, str)
            meta = json.loads(view.result.removeprefix("meta "))

            def complete(spans: list[Span]) -> bool:
                names = [s.name for s in spans]
                return names.count("invoke_agent agentd") == 2 and "agentd.task" in names

            spans = receiver.wait_for(complete)
    return spans, task_id, meta


def test_one_task_is_one_trace_with_the_expected_tree(tmp_path: Path) -> None:
    spans, task_id, meta = _one_task(tmp_path, capture=False)
    by_id = {s.span_id: s for s in spans}

    def parent(span: Span) -> Span | None:
        return by_id.get(span.parent_id)

    (task,) = [s for s in spans if s.name == "agentd.task"]
    assert task.service == "agentd"
    assert task.attributes["agentd.task_id"] == task_id
    assert task.attributes["agentd.status"] == "completed"
    assert {s.trace_id for s in spans} == {task.trace_id}
    # The MCP server got the same trace in `_meta` (under the tool call's span).
    assert meta["traceparent"].split("-")[1] == task.trace_id
    assert by_id[meta["traceparent"].split("-")[2]].trace_id == task.trace_id

    agents = {s.attributes["agentd.handle"]: s for s in spans if s.name == "invoke_agent agentd"}
    root, child = agents["0"], agents["0.1"]
    assert parent(root) is task
    assert root.service == "agentd-subagent"
    turns = sorted((s for s in spans if parent(s) is root), key=lambda s: s.attributes["agentd.step"])
    assert [t.name for t in turns] == ["turn 1", "turn 2", "turn 3", "turn 4"]
    for turn in turns:
        (chat,) = [s for s in spans if parent(s) is turn and s.name.startswith("chat ")]
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.system"] == "agentd.scripted"
        assert chat.attributes["gen_ai.usage.input_tokens"] >= 0
    tools = {s.attributes["gen_ai.tool.name"]: s for s in spans if s.name.startswith("execute_tool ")}
    assert set(tools) == {"demo__add", "subagent_spawn", "demo__meta"}
    assert parent(tools["demo__add"]) is turns[0]
    assert parent(tools["subagent_spawn"]) is turns[1]
    assert parent(tools["demo__meta"]) is turns[2]
    assert tools["demo__add"].attributes["agentd.mcp.server"] == "demo"
    # The nested subagent is a child of the delegating tool call.
    assert parent(child) is tools["subagent_spawn"]
    assert [s.name for s in spans if parent(s) is child] == ["turn 1"]
    # No content without capture: no message, argument or result attribute, and no instruction.
    for span in spans:
        assert not any(k in span.attributes for k in ("gen_ai.input.messages", "gen_ai.output.messages"))
        assert "gen_ai.tool.call.arguments" not in span.attributes
        assert SECRET_WORDS not in json.dumps(span.attributes)


def test_content_is_recorded_only_with_capture_on(tmp_path: Path) -> None:
    spans, _, _ = _one_task(tmp_path, capture=True)
    (root,) = [s for s in spans if s.name == "invoke_agent agentd" and s.attributes["agentd.handle"] == "0"]
    assert SECRET_WORDS in root.attributes["gen_ai.input.messages"]
    add = next(s for s in spans if s.attributes.get("gen_ai.tool.name") == "demo__add")
    assert json.loads(add.attributes["gen_ai.tool.call.arguments"]) == {"a": 2, "b": 3}
    assert add.attributes["gen_ai.tool.call.result"] == "5"
