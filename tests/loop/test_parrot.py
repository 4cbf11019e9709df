"""Answers that only repeat agentd's own messages are no result, and refusals are the model's own."""

from __future__ import annotations

import json

import pytest

from protocol.result import TerminalStatus as S
from subagent.loop import feedback
from subagent.loop.action import ACTION_FORMAT
from subagent.loop.final import VACUOUS_REASK
from subagent.messages import ToolResultMessage, UserMessage
from tests.loop.simulate import call, drive, reply, start

NOT_AN_ACTION = "Your reply was not a valid action object (no JSON object in the reply (it contains no '{'))."
SENT = feedback.remembered((), f"{NOT_AN_ACTION} {ACTION_FORMAT}")


@pytest.mark.parametrize(
    ("answer", "parrot"),
    [
        pytest.param("Your reply was not a valid action object.", True, id="the-feedback-sentence"),
        pytest.param("your reply was NOT a valid action object", True, id="case-and-punctuation"),
        pytest.param("[agentd] anything at all", True, id="the-mark"),
        pytest.param("<your answer>", True, id="a-placeholder"),
        pytest.param("Reply with exactly one JSON object and nothing else.", True, id="the-instructions"),
        pytest.param("was not a valid action object (no JSON object in the", False, id="a-short-piece"),
        pytest.param("5", False, id="a-number"),
        pytest.param("The file has 3 lines.", False, id="an-answer"),
        pytest.param("The task cannot be done: the file does not exist.", False, id="a-reasoned-answer"),
        pytest.param(
            "Your reply was not a valid action object, says agentd, but the sum is 5 and the file has "
            "three lines in it, as the tool showed.",
            False,
            id="a-quote-inside-a-real-answer",
        ),
    ],
)
def test_parrot_judgement(answer: str, parrot: bool) -> None:
    assert feedback.parrots(answer, SENT) is parrot


def test_details_in_parentheses_and_schema_listings_are_not_remembered() -> None:
    said = feedback.sentences(
        "Your final result does not satisfy the output schema:\n- 'x' is not of type 'integer'\n"
        '{"type": "integer"}\nVerify against the environment (the model said: 42), fix the result.'
    )
    assert all("integer" not in s and "42" not in s for s in said)
    assert "your final result does not satisfy the output schema" in said


def test_every_observation_agentd_writes_is_marked() -> None:
    run = drive(start("json"), [reply("no action here"), reply('{"action": "final", "result": "ok"}')])
    [observation] = [
        m for m in run.requests[1].messages if isinstance(m, UserMessage) and m.kind == "observation"
    ]
    assert observation.text.startswith(feedback.MARK)


def test_a_refused_call_is_marked_as_agentds() -> None:
    run = drive(start(), [reply("", call("other__tool")), reply("done")], {})
    [result] = [m for m in run.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert result.is_error and result.text.startswith(feedback.MARK)


def test_a_parroted_final_is_re_asked_once_then_completes_with_the_real_answer() -> None:
    parrot = json.dumps({"action": "final", "result": "Your reply was not a valid action object."})
    real = json.dumps({"action": "final", "result": "the sum is 5"})
    run = drive(start("json"), [reply("I think the sum is 5"), reply(parrot), reply(real)])
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    assert run.terminal.result == "the sum is 5"
    re_ask = run.requests[2].messages[-1]
    assert isinstance(re_ask, UserMessage) and re_ask.text == feedback.mark(feedback.REASK)
    kinds = [n.fields["kind"] for n in run.notes if n.event == "loop.error"]
    assert kinds == ["malformed_action", "parroted_feedback"]


def test_a_second_parrot_ends_the_run_stalled_saying_so_without_taking_it_as_the_result() -> None:
    run = drive(start(), [reply(""), reply(VACUOUS_REASK), reply(feedback.REASK)])
    assert run.terminal is not None and run.terminal.status is S.STALLED
    assert run.terminal.error_kind == "parroted_feedback"
    assert run.terminal.reason is not None and "repeated agentd's own message" in run.terminal.reason
    assert run.terminal.result is None and not run.terminal.partial
    assert len(run.requests) == 3


def test_a_parrot_keeps_the_earlier_partial() -> None:
    contract = {"format": "json", "schema": {"type": "object", "required": ["sum"]}}
    echo = "Your final result does not satisfy the output schema."
    run = drive(start(output_contract=contract), [reply('{"total": 5}'), reply(echo), reply("<your answer>")])
    assert run.terminal is not None and run.terminal.status is S.STALLED
    assert run.terminal.error_kind == "parroted_feedback"
    assert run.terminal.result == {"total": 5} and run.terminal.partial


@pytest.mark.parametrize(
    "refusal",
    [
        pytest.param('{"action": "refuse", "reason": "<why>"}', id="json-placeholder"),
        pytest.param(
            json.dumps({"action": "refuse", "reason": "Your reply was not a valid action object."}),
            id="json-echo",
        ),
    ],
)
def test_a_refusal_whose_reason_parrots_agentd_is_not_a_refusal(refusal: str) -> None:
    run = drive(start("json"), [reply("hmm"), reply(refusal), reply('{"action": "final", "result": "42"}')])
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    assert run.terminal.result == "42"


def test_a_refusal_with_the_models_own_reason_is_refused() -> None:
    run = drive(start("json"), [reply('{"action": "refuse", "reason": "the file is not in my scope"}')])
    assert run.terminal is not None and run.terminal.status is S.REFUSED
    assert run.terminal.result == "the file is not in my scope"


def test_a_native_refusal_tool_whose_reason_parrots_is_re_asked() -> None:
    parrot = call("task_refuse", reason=feedback.mark(feedback.REASK))
    run = drive(start(), [reply("", parrot), reply("the answer is 7")])
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    assert run.terminal.result == "the answer is 7"
