"""The wrap-up turn: when a budget is about to run out, the last call has no tools and its answer
is the labeled partial (docs/loop.md, "Stop checks")."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import replace

import pytest

from protocol.result import TerminalStatus as S
from subagent.loop import wrapup
from subagent.loop.machine import TurnView, next_action, on_context_overflow, on_model_reply
from subagent.loop.state import CallModel
from subagent.messages import ModelReply, ModelRequest, ToolOutcome, UserMessage
from tests.loop.simulate import ToolFn, call, drive, reply, start

SCHEMA = {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]}


def counter_tool() -> dict[str, ToolFn]:
    n = itertools.count()
    return {"t": lambda c: ToolOutcome(f"result {next(n)}")}


def busy_then(final_text: str, *, usage: tuple[int, int] = (10, 5)) -> Callable[[ModelRequest], ModelReply]:
    """A model that keeps calling tools while it has them, and answers `final_text` without."""

    def respond(request: ModelRequest) -> ModelReply:
        if not request.tools and request.purpose == "wrap_up":
            return reply(final_text, usage=usage)
        n = len(request.messages)
        return reply(f"working {n}", call("t", cid=f"c{n}", n=n), usage=usage)

    return respond


def is_wrap_up(request: ModelRequest) -> bool:
    last = request.messages[-1]
    return (
        request.purpose == "wrap_up"
        and request.tools == ()
        and isinstance(last, UserMessage)
        and "last turn" in last.text
    )


def test_the_last_step_is_a_wrap_up_without_tools_and_its_answer_is_the_partial() -> None:
    run = drive(start(limits={"max_steps": 4}), busy_then("what I found so far"), counter_tool())
    assert run.terminal is not None
    assert run.terminal.status is S.EXHAUSTED_STEPS
    assert run.terminal.result == "what I found so far" and run.terminal.partial
    assert [is_wrap_up(r) for r in run.requests] == [False, False, False, True]
    assert all(r.tools for r in run.requests[:3])
    assert run.state.budgets.used.steps == 4
    assert "step budget" in run.requests[-1].messages[-1].text


def test_the_token_budget_keeps_a_reserve_for_the_wrap_up_call() -> None:
    usage = (400, 40)
    run = drive(start(limits={"max_tokens": 2000}), busy_then("token partial", usage=usage), counter_tool())
    assert run.terminal is not None and run.terminal.status is S.EXHAUSTED_TOKENS
    assert run.terminal.result == "token partial" and run.terminal.partial
    assert is_wrap_up(run.requests[-1]) and not any(is_wrap_up(r) for r in run.requests[:-1])
    assert "token budget" in run.requests[-1].messages[-1].text
    assert run.state.budgets.used.tokens <= 2000
    cap = run.requests[-1].max_output_tokens
    assert cap is not None and wrapup.MIN_WRAP_UP_OUTPUT_TOKENS <= cap <= 2000 // 8


def test_no_wrap_up_is_made_when_not_even_a_small_one_fits() -> None:
    run = drive(
        start(limits={"max_tokens": 3000}), [reply("", call("t", n=1), usage=(2900, 50))], counter_tool()
    )
    assert run.terminal is not None and run.terminal.status is S.EXHAUSTED_TOKENS
    assert len(run.requests) == 1


def test_a_vacuous_wrap_up_answer_keeps_the_earlier_partial() -> None:
    run = drive(start(limits={"max_steps": 3}), busy_then("  .  "), counter_tool())
    assert run.terminal is not None and run.terminal.status is S.EXHAUSTED_STEPS
    assert run.terminal.partial and str(run.terminal.result).startswith("working")


def test_a_final_answer_before_the_last_step_still_completes() -> None:
    run = drive(start(limits={"max_steps": 2}), [reply("done early")])
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    assert run.terminal.result == "done early"


def test_a_single_step_run_gets_an_ordinary_turn_not_a_wrap_up() -> None:
    action = next_action(start(limits={"max_steps": 1}), TurnView(), now=0, cancelled=False)
    assert isinstance(action, CallModel) and action.wrap_up is None and action.request.purpose == "turn"


def test_a_json_contract_wrap_up_is_read_as_json() -> None:
    contract = {"format": "json", "schema": SCHEMA}
    run = drive(
        start(output_contract=contract, limits={"max_steps": 2}),
        busy_then('Partial:\n```json\n{"sum": 4}\n```'),
        counter_tool(),
    )
    assert run.terminal is not None and run.terminal.status is S.EXHAUSTED_STEPS
    assert run.terminal.result == {"sum": 4} and run.terminal.partial
    assert "JSON value" in run.requests[-1].messages[-1].text


@pytest.mark.parametrize(
    ("text", "result", "partial"),
    [
        pytest.param('{"action": "final", "result": "json partial"}', "json partial", True, id="final"),
        pytest.param('{"action": "tool", "tool": "t", "arguments": {}}', None, False, id="tool-ignored"),
        pytest.param("plain prose answer", "plain prose answer", True, id="prose"),
    ],
)
def test_json_action_mode_wrap_up(text: str, result: object, partial: bool) -> None:
    def respond(request: ModelRequest) -> ModelReply:
        if request.purpose == "wrap_up":
            return reply(text)
        n = len(request.messages)
        return reply(json.dumps({"action": "tool", "tool": "t", "arguments": {"n": n}}))

    run = drive(start("json", limits={"max_steps": 3}), respond, counter_tool())
    assert run.terminal is not None and run.terminal.status is S.EXHAUSTED_STEPS
    assert run.terminal.result == result and run.terminal.partial is partial
    assert '"action": "final"' in run.requests[-1].messages[-1].text


def test_a_provider_refusal_at_the_wrap_up_is_a_refusal() -> None:
    def respond(request: ModelRequest) -> ModelReply:
        if request.purpose == "wrap_up":
            return reply("", refusal="no")
        return reply("", call("t", cid="c", n=len(request.messages)))

    run = drive(start(limits={"max_steps": 2}), respond, counter_tool())
    assert run.terminal is not None and run.terminal.status is S.REFUSED


def test_the_wrap_up_cap_respects_a_small_budget_and_the_endpoints_limit() -> None:
    assert wrapup.output_cap(start().config) == wrapup.WRAP_UP_OUTPUT_TOKENS
    assert wrapup.output_cap(start(limits={"max_tokens": 800}).config) == 100
    assert wrapup.output_cap(start(limits={"max_tokens": 100}).config) == wrapup.MIN_WRAP_UP_OUTPUT_TOKENS


def test_an_overflowing_wrap_up_compacts_then_wraps_up() -> None:
    mid = drive(start(limits={"max_steps": 3}), [reply("", call("t", n=1))], counter_tool()).state
    used = mid.budgets.used.model_copy(update={"steps": 2})
    mid = replace(mid, terminal=None, budgets=replace(mid.budgets, used=used))
    wrap = next_action(mid, TurnView(), now=0, cancelled=False)
    assert isinstance(wrap, CallModel) and wrap.wrap_up is S.EXHAUSTED_STEPS
    retried, fatal = on_context_overflow(mid, wrap)
    assert not fatal
    compact = next_action(retried, TurnView(), now=0, cancelled=False)
    assert isinstance(compact, CallModel) and compact.request.purpose == "compact"
    after = on_model_reply(retried, compact, reply("SUMMARY"), now=0, cancelled=False)
    again = next_action(after, TurnView(), now=0, cancelled=False)
    assert isinstance(again, CallModel) and again.wrap_up is S.EXHAUSTED_STEPS
