"""The `auto` tool mode in the pure loop: when it switches a run to JSON actions, and what the
model is told."""

from __future__ import annotations

import json

from protocol.result import TerminalStatus as S
from protocol.spawn import EndpointSpec
from subagent.intel import tool_memory
from subagent.loop.machine import (
    TurnView,
    initial_state,
    next_action,
    on_model_reply,
    on_tools_rejected,
    with_json_actions,
)
from subagent.loop.prompt import REFUSE_TOOL
from subagent.loop.state import CallModel, LoopState
from subagent.loop.tool_mode import written_tool_call
from subagent.messages import ModelReply, ModelRequest, ToolOutcome, UserMessage
from tests.loop.simulate import call, drive, payload, reply, spec, start

READ = "fs__read_file"
TOOLS = {READ: lambda c: ToolOutcome(f"contents of {c.arguments}")}
FENCED_CALL = f'I will read it.\n```json\n{{"name": "{READ}", "arguments": {{"path": "a.txt"}}}}\n```'
FINAL = '{"action": "final", "result": "the file says hi"}'


def start_auto() -> LoopState:
    """A run on an OpenAI-compatible endpoint in the default `auto` tool mode."""
    endpoint = EndpointSpec(kind="openai", base_url="http://127.0.0.1:9/v1", model="m")
    return initial_state(payload().model_copy(update={"intelligence": [endpoint]}), now=0.0)


def test_auto_is_the_default_and_the_scripted_model_is_never_switched() -> None:
    assert start_auto().config.auto_tool_mode
    run = drive(start("auto"), [reply(FENCED_CALL)], TOOLS)
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    assert run.executed == []


def test_auto_starts_native_and_a_native_model_never_switches() -> None:
    run = drive(start_auto(), [reply("", call(READ, path="a")), reply("done")], TOOLS)
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    assert all(r.tools and not r.json_actions for r in run.requests)
    assert run.state.config.tool_mode == "native"


def test_a_call_written_as_fenced_json_runs_at_once_and_the_run_continues_in_json_actions() -> None:
    run = drive(start_auto(), [reply(FENCED_CALL), reply(FINAL)], TOOLS)
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    assert run.terminal.result == "the file says hi"
    assert [c.arguments for c in run.executed] == [{"path": "a.txt"}]
    first, second = run.requests
    assert first.tools and not first.json_actions
    # The second request carries the JSON-action instructions and the catalogue in its system text.
    assert not second.tools and second.json_actions
    assert '"action": "tool"' in second.system and READ in second.system


def test_a_tool_named_in_prose_gets_the_instructions_once_then_completes() -> None:
    prose = f"To answer, I need to use {READ} on a.txt first."
    action = json.dumps({"action": "tool", "tool": READ, "arguments": {"path": "a.txt"}})
    run = drive(start_auto(), [reply(prose), reply(action), reply(FINAL)], TOOLS)
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    assert len(run.executed) == 1
    instructions = run.requests[1].messages[-1]
    assert isinstance(instructions, UserMessage)
    assert "You described a tool call instead of making one" in instructions.text
    assert sum("You described a tool call" in m.text for m in run.requests[-1].messages) == 1


def test_prose_after_native_tool_calls_is_an_answer_not_a_call() -> None:
    answer = f"I used {READ}; the file says hi."
    run = drive(start_auto(), [reply("", call(READ, path="a")), reply(answer)], TOOLS)
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    assert run.terminal.result == answer
    assert run.state.config.tool_mode == "native"


def test_a_native_run_never_switches_on_prose() -> None:
    run = drive(start("native"), [reply(FENCED_CALL)], TOOLS)
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    assert run.executed == []


def test_an_unparsed_tool_call_switches_auto_to_constrained_json_and_asks_the_same_turn_again() -> None:
    unparsed = ModelReply(
        malformed="the server could not parse the model's tool call", unparsed_tool_call=True
    )
    action = json.dumps({"action": "tool", "tool": READ, "arguments": {"path": "a.txt"}})
    run = drive(start_auto(), [unparsed, reply(action), reply(FINAL)], TOOLS)
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    first, again = run.requests[:2]
    # The same turn again: the same messages, now as JSON actions under the action schema.
    assert again.messages == first.messages
    assert again.json_actions and not again.tools
    assert again.response_schema is not None and again.response_schema.name == "agentd_action"
    assert run.state.budgets.used.steps == 2  # the unparsed reply spent no step
    assert run.state.budgets.used.model_calls == 3  # but it was a model call
    kinds = [n.fields["kind"] for n in run.notes if n.event == "loop.error"]
    assert kinds == ["tool_call_unparsed"]


def test_unparsed_tool_calls_in_a_native_run_are_re_asked_until_stalled() -> None:
    unparsed = ModelReply(
        malformed="the server could not parse the model's tool call", unparsed_tool_call=True
    )
    run = drive(start("native"), [unparsed] * 10, TOOLS)
    assert run.terminal is not None and run.terminal.status is S.STALLED
    assert not any(r.json_actions for r in run.requests)


def test_a_rejected_tools_field_switches_auto_to_json_without_spending_a_step() -> None:
    state = start_auto()
    view = TurnView(tools=(spec(READ),))
    action = next_action(state, view, now=0, cancelled=False)
    assert isinstance(action, CallModel) and action.request.tools
    switched, fatal = on_tools_rejected(state, action, "the endpoint rejected the request's tools (HTTP 400)")
    assert not fatal
    assert switched.budgets.used.steps == 0
    again = next_action(switched, view, now=0, cancelled=False)
    assert isinstance(again, CallModel)
    assert again.request.json_actions and not again.request.tools
    [note] = [n for n in switched.notes if n.event == "loop.error"]
    assert note.fields["kind"] == "tools_rejected"


def test_a_rejected_tools_field_is_fatal_in_native_and_json_modes() -> None:
    for mode in ("native", "json"):
        state = start(mode)
        action = next_action(state, TurnView(tools=(spec(READ),)), now=0, cancelled=False)
        assert isinstance(action, CallModel)
        assert on_tools_rejected(state, action, "rejected")[1]


def test_written_tool_call_judgement() -> None:
    tools = frozenset({READ, "note_write"})
    assert written_tool_call("The answer is 42.", tools) is None
    assert written_tool_call('Result: {"n": 42}', tools) is None
    assert written_tool_call(f"Let me call {READ} now", tools) == READ
    assert written_tool_call(f"Let me call my_{READ}_x now", tools) is None
    found = written_tool_call(
        f'<tool_call>{{"name": "{READ}", "arguments": {{"path": "x"}}}}</tool_call>', tools
    )
    assert found is not None and not isinstance(found, str) and found.arguments == {"path": "x"}
    assert written_tool_call(f"I could {REFUSE_TOOL}", frozenset()) is None


def test_a_switched_request_is_still_well_formed_for_the_model() -> None:
    run = drive(start_auto(), [reply(FENCED_CALL), reply(FINAL)], TOOLS)
    second: ModelRequest = run.requests[1]
    # The native-mode reply that carried the written call is kept as the assistant's text.
    assert any(FENCED_CALL in m.text for m in second.messages)


def test_on_model_reply_without_switching_keeps_native_calls_seen() -> None:
    state = start_auto()
    action = next_action(state, TurnView(tools=(spec(READ),)), now=0, cancelled=False)
    assert isinstance(action, CallModel)
    after = on_model_reply(state, action, reply("", call(READ, path="a")), now=0, cancelled=False)
    assert after.native_calls_seen


def test_an_endpoint_switched_once_is_remembered_for_the_process() -> None:
    endpoint = EndpointSpec(kind="openai", base_url="http://127.0.0.1:9/v1", model="m")
    other = EndpointSpec(kind="openai", base_url="http://127.0.0.1:9/v1", model="another")
    tool_memory.forget_all()
    try:
        assert not tool_memory.needs_json_actions(endpoint)
        tool_memory.remember_json_actions(endpoint)
        assert tool_memory.needs_json_actions(endpoint)
        assert not tool_memory.needs_json_actions(other)
    finally:
        tool_memory.forget_all()
    state = with_json_actions(start_auto())
    action = next_action(state, TurnView(tools=(spec(READ),)), now=0, cancelled=False)
    assert isinstance(action, CallModel) and action.request.json_actions and not action.request.tools
