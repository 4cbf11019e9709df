"""The loop machine end to end, purely: every terminal status, VERIFY, refusals, repeats, levers."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from protocol.result import TerminalStatus as S
from subagent.loop.machine import TurnView, next_action, on_context_overflow
from subagent.loop.state import CallModel, Finish
from subagent.messages import ModelReply, ModelRequest, ToolCall, ToolOutcome, ToolResultMessage, UserMessage
from tests.loop.simulate import call, drive, reply, start

ok = ToolOutcome


def constant(_: ToolCall) -> ToolOutcome:
    return ok("same")


def test_a_final_answer_without_a_contract_completes_with_the_text() -> None:
    run = drive(start(), [reply("the answer is 42")])
    assert run.terminal is not None
    assert run.terminal.status is S.COMPLETED
    assert run.terminal.result == "the answer is 42"
    assert run.state.budgets.used.steps == 1


def test_tool_results_are_fed_back_before_the_final() -> None:
    counter = itertools.count()
    run = drive(
        start(),
        [reply("", call("demo__add", a=1, b=2)), reply("3")],
        {"demo__add": lambda c: ok(str(next(counter)))},
    )
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    second = run.requests[1].messages
    assert isinstance(second[-1], ToolResultMessage) and second[-1].text == "0"
    assert run.state.budgets.used.tool_calls == 1


def test_steps_exhausted_returns_the_latest_text_as_a_partial() -> None:
    counter = itertools.count()
    replies = [reply(f"working {i}", call("t", n=i)) for i in range(10)]
    run = drive(start(limits={"max_steps": 3}), replies, {"t": lambda c: ok(str(next(counter)))})
    assert run.terminal is not None
    assert run.terminal.status is S.EXHAUSTED_STEPS
    assert run.terminal.partial and run.terminal.result == "working 2"


def test_tokens_exhausted_fires_before_a_call_that_would_exceed_the_budget() -> None:
    replies = [reply("", call("t", n=i), usage=(400, 100)) for i in range(10)]
    counter = itertools.count()
    run = drive(start(limits={"max_tokens": 1200}), replies, {"t": lambda c: ok(str(next(counter)))})
    assert run.terminal is not None and run.terminal.status is S.EXHAUSTED_TOKENS
    assert run.state.budgets.used.tokens < 1200 + 500
    assert not run.terminal.partial


def test_deadline_fires_before_the_first_call_when_time_is_up() -> None:
    state = start(limits={"deadline_s": 5})
    action = next_action(state, TurnView(), now=5.0, cancelled=False)
    assert isinstance(action, Finish) and action.terminal.status is S.DEADLINE


def test_cancel_flag_stops_before_the_next_call_and_after_a_turn() -> None:
    run = drive(start(), [reply("", call("t"))] * 5, {"t": constant}, cancel_after_calls=1)
    assert run.terminal is not None and run.terminal.status is S.CANCELLED
    assert len(run.requests) == 1


def test_identical_results_with_changing_arguments_end_as_stalled() -> None:
    replies = [reply("", call("t", n=i)) for i in range(20)]
    run = drive(start(), replies, {"t": constant})
    assert run.terminal is not None and run.terminal.status is S.STALLED
    # Turn 1 sets the signature; turns 2..4 are idle: stalled after 4 model calls.
    assert len(run.requests) == 4


def test_identical_tool_errors_count_as_no_progress() -> None:
    replies = [reply("", call("t", n=i)) for i in range(20)]
    run = drive(start(), replies, {"t": lambda c: ok("boom", is_error=True)})
    assert run.terminal is not None and run.terminal.status is S.STALLED


def test_a_repeated_call_is_refused_after_k_and_loop_detected_past_2k() -> None:
    replies = [reply(f"try {i}", call("t", cid=f"c{i}", x=1)) for i in range(20)]
    run = drive(start(), replies, {"t": constant})
    assert run.terminal is not None and run.terminal.status is S.LOOP_DETECTED
    assert len(run.executed) == 3  # the 4th..7th identical calls were refused, never executed
    assert len(run.requests) == 7
    refusal = run.requests[4].messages[-1]
    assert isinstance(refusal, ToolResultMessage) and refusal.is_error
    assert "4 times with no progress" in refusal.text


def test_a_repeat_that_makes_progress_resets_its_counter() -> None:
    counter = itertools.count()
    replies = [reply(f"poll {i}", call("t", cid=f"c{i}", x=1)) for i in range(8)] + [reply("done")]
    run = drive(start(), replies, {"t": lambda c: ok(f"value {next(counter)}")})
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    assert len(run.executed) == 8


def test_identical_failing_calls_never_reset_and_reach_loop_detected() -> None:
    replies = [reply(f"again {i}", call("t", cid=f"c{i}", x=1)) for i in range(20)]
    errors = itertools.count()
    run = drive(start(), replies, {"t": lambda c: ok(f"error #{next(errors)}", is_error=True)})
    assert run.terminal is not None and run.terminal.status is S.LOOP_DETECTED


def test_a_tool_that_does_not_exist_is_refused_as_no_such_tool_and_not_executed() -> None:
    run = drive(start(), [reply("", call("demo__add")), reply("ok then")], {"t": constant})
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    obs = run.requests[1].messages[-1]
    assert isinstance(obs, ToolResultMessage) and obs.is_error
    assert obs.text == "[agentd] no such tool `demo__add`: it was not run; call one of the tools offered"
    assert run.executed == []


def test_a_listed_tool_outside_the_grant_is_refused_as_not_granted_and_not_executed() -> None:
    replies = [reply("", call("secret__wipe")), reply("ok then")]
    run = drive(start(), replies, {"t": constant}, ungranted=frozenset({"secret__wipe"}))
    obs = run.requests[1].messages[-1]
    assert isinstance(obs, ToolResultMessage) and obs.is_error
    assert obs.text == "[agentd] tool `secret__wipe` is not in this agent's granted scope"
    assert run.executed == []


def test_malformed_tool_arguments_become_an_observation() -> None:
    bad = ToolCall(
        id="c1", name="t", arguments=None, arguments_error="Expecting value", raw_arguments="{oops"
    )
    run = drive(start(), [reply("", bad), reply("fine")], {"t": constant})
    obs = run.requests[1].messages[-1]
    assert isinstance(obs, ToolResultMessage) and "not a valid JSON object" in obs.text
    assert run.executed == []


def test_a_garbage_reply_is_an_observation_and_repeated_garbage_stalls() -> None:
    garbage = ModelReply(malformed="body was not JSON")
    run = drive(start(), [garbage] * 10)
    assert run.terminal is not None and run.terminal.status is S.STALLED
    assert len(run.requests) == 3
    obs = run.requests[1].messages[-1]
    assert isinstance(obs, UserMessage) and "could not be used" in obs.text


def test_provider_refusal_ends_as_refused() -> None:
    run = drive(start(), [ModelReply(refusal="I can't help with that")])
    assert run.terminal is not None and run.terminal.status is S.REFUSED
    assert run.terminal.result == "I can't help with that"


def test_the_refuse_tool_ends_as_refused_with_its_reason() -> None:
    run = drive(start(), [reply("", call("task_refuse", reason="no such file exists"))])
    assert run.terminal is not None and run.terminal.status is S.REFUSED
    assert run.terminal.result == "no such file exists"


def test_a_final_that_mentions_refusal_in_prose_is_not_a_refusal() -> None:
    run = drive(start(), [reply("I cannot refuse this; the answer is 4.")])
    assert run.terminal is not None and run.terminal.status is S.COMPLETED


@pytest.mark.parametrize("empty", ["", " ", ".", "…", "\n"])
def test_a_vacuous_final_is_reasked_once_then_accepted(empty: str) -> None:
    run = drive(start(), [reply(empty), reply("the real answer")])
    assert run.terminal is not None and run.terminal.result == "the real answer"
    run = drive(start(), [reply(empty), reply(empty)])
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    assert len(run.requests) == 2


SCHEMA = {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]}


def test_a_json_contract_final_must_validate_and_a_failure_costs_a_step() -> None:
    contract = {"format": "json", "schema": SCHEMA}
    run = drive(start(output_contract=contract), [reply('{"total": 3}'), reply('```json\n{"sum": 3}\n```')])
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    assert run.terminal.result == {"sum": 3}
    assert run.state.budgets.used.steps == 2
    feedback = run.requests[1].messages[-1]
    assert isinstance(feedback, UserMessage) and "sum" in feedback.text and "required" in feedback.text


def test_a_json_contract_final_that_is_not_json_gets_an_observation() -> None:
    contract = {"format": "json", "schema": SCHEMA}
    run = drive(
        start(output_contract=contract, limits={"max_steps": 2}), [reply("three"), reply("still three")]
    )
    assert run.terminal is not None and run.terminal.status is S.EXHAUSTED_STEPS
    assert not run.terminal.partial


def test_an_invalid_json_candidate_is_kept_as_the_partial() -> None:
    contract = {"format": "json", "schema": SCHEMA}
    run = drive(start(output_contract=contract, limits={"max_steps": 1}), [reply('{"sum": "x"}')])
    assert run.terminal is not None and run.terminal.status is S.EXHAUSTED_STEPS
    assert run.terminal.partial and run.terminal.result == {"sum": "x"}


def test_stale_tool_results_are_stubbed_keeping_the_last_five() -> None:
    counter = itertools.count()
    replies = [reply(f"step {i}", call("t", cid=f"c{i}", n=i)) for i in range(8)] + [reply("done")]
    run = drive(start(), replies, {"t": lambda c: ok(f"body {next(counter)}")})
    results = [m for m in run.requests[-1].messages if isinstance(m, ToolResultMessage)]
    assert len(results) == 8
    assert [m.stubbed for m in results] == [True] * 3 + [False] * 5
    assert 't({"n":0})' in results[0].text and "elided" in results[0].text
    assert results[-1].text == "body 7"


def test_messages_unchanged_by_stubbing_keep_their_identity() -> None:
    counter = itertools.count()
    replies = [reply(f"s{i}", call("t", cid=f"c{i}", n=i)) for i in range(7)] + [reply("done")]
    run = drive(start(), replies, {"t": lambda c: ok(f"b{next(counter)}")})
    before, after = run.requests[-2].messages, run.requests[-1].messages
    shared = [a is b for a, b in zip(before, after, strict=False)]
    # Only the result that aged out of the verbatim window was replaced.
    assert shared.count(False) == 1


def big_reply_factory() -> object:
    counter = itertools.count()

    def respond(request: ModelRequest) -> ModelReply:
        if request.purpose == "compact":
            return reply("SUMMARY: did steps", usage=(100, 10))
        n = next(counter)
        return reply("done") if n >= 6 else reply(f"s{n}", call("t", cid=f"c{n}", n=n))

    return respond


def test_compaction_runs_one_summarize_call_at_the_high_water_mark() -> None:
    state = start(context_window=2048)
    run = drive(state, big_reply_factory(), {"t": lambda c: ok("x" * 2000)})  # type: ignore[arg-type]
    compacts = [r for r in run.requests if r.purpose == "compact"]
    assert compacts, "expected at least one compaction call"
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    after = run.requests[run.requests.index(compacts[0]) + 1]
    summary = after.messages[1]
    assert isinstance(summary, UserMessage) and summary.kind == "summary" and "SUMMARY" in summary.text
    assert after.messages[0].text == "do the thing"  # the instruction survives compaction
    assert run.state.budgets.used.steps == 7  # compaction costs tokens, not a step


def test_a_context_overflow_compacts_and_retries_once_then_is_fatal() -> None:
    first = next_action(start(), TurnView(), now=0, cancelled=False)
    assert isinstance(first, CallModel)
    _, fatal = on_context_overflow(start(), first)
    assert fatal, "nothing to compact on the first call: the overflow cannot be helped"

    mid = drive(start(limits={"max_steps": 10}), [reply("", call("t", n=1))], {"t": constant}).state
    mid = replace(mid, terminal=None)
    turn = next_action(mid, TurnView(), now=0, cancelled=False)
    assert isinstance(turn, CallModel) and turn.request.purpose == "turn"
    retried, fatal = on_context_overflow(mid, turn)
    assert not fatal and retried.force_compaction
    compact = next_action(retried, TurnView(), now=0, cancelled=False)
    assert isinstance(compact, CallModel) and compact.request.purpose == "compact"
    _, fatal_again = on_context_overflow(retried, turn)
    assert fatal_again


def test_json_action_mode_parses_tool_final_and_refuse_actions() -> None:
    counter = itertools.count()
    replies = [
        reply('Sure. {"action": "tool", "tool": "t", "arguments": {"n": 1}}'),
        reply('{"action": "final", "result": "all good"}'),
    ]
    run = drive(start("json"), replies, {"t": lambda c: ok(str(next(counter)))})
    assert run.terminal is not None and run.terminal.result == "all good"
    assert run.requests[0].tools == ()
    assert "## tools" in run.requests[0].system and "\n- t {" in run.requests[0].system
    run = drive(start("json"), [reply('{"action": "refuse", "reason": "impossible"}')])
    assert run.terminal is not None and run.terminal.status is S.REFUSED


def test_json_action_mode_turns_prose_into_a_format_observation() -> None:
    run = drive(start("json"), [reply("I think we should look"), reply('{"action":"final","result":"x"}')])
    obs = run.requests[1].messages[-1]
    assert isinstance(obs, UserMessage) and "not a valid action object" in obs.text
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
