"""VERIFY reads a wrapped JSON result the way a person would: fenced, in prose, or inside a string."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import JsonValue

from protocol.result import TerminalStatus as S
from subagent.loop import verify
from subagent.loop.state import Contract
from subagent.messages import UserMessage
from tests.loop.simulate import drive, reply, start

SCHEMA: dict[str, JsonValue] = {
    "type": "object",
    "properties": {"sum": {"type": "integer"}},
    "required": ["sum"],
}
CONTRACT = Contract(format="json", schema=SCHEMA)
INNER = '{"sum": 3}'


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(INNER, id="bare"),
        pytest.param(f"```json\n{INNER}\n```", id="fenced"),
        pytest.param(f"```\n{INNER}\n```", id="fenced-no-language"),
        pytest.param(f"Here is the result:\n\n```json\n{INNER}\n```\nLet me know.", id="fenced-in-prose"),
        pytest.param(json.dumps(INNER), id="a-json-string"),
        pytest.param(json.dumps(json.dumps(INNER)), id="a-string-in-a-string"),
        pytest.param(f"```json\n{json.dumps(INNER)}\n```", id="a-string-in-a-fence"),
        pytest.param(f"The answer is {INNER}.", id="in-prose"),
        pytest.param(f"I think {{ is odd.\n```json\n{INNER}\n```", id="stray-brace-then-fence"),
    ],
)
def test_a_wrapped_object_that_satisfies_the_schema_passes(answer: str) -> None:
    assert verify.verify_final(answer, CONTRACT) == verify.Verified({"sum": 3})


def test_a_json_action_whose_result_is_a_string_holding_the_object_passes() -> None:
    assert verify.verify_final(INNER, CONTRACT) == verify.Verified({"sum": 3})
    assert verify.verify_final(f"```json\n{INNER}\n```", CONTRACT) == verify.Verified({"sum": 3})


def test_a_string_schema_keeps_the_string_instead_of_unwrapping_it() -> None:
    contract = Contract(format="json", schema={"type": "string"})
    assert verify.verify_final(json.dumps(INNER), contract) == verify.Verified(INNER)


def test_the_first_reading_that_validates_wins_over_an_earlier_one_that_does_not() -> None:
    answer = 'Draft: {"total": 1}\n```json\n{"sum": 2}\n```'
    assert verify.verify_final(answer, CONTRACT) == verify.Verified({"sum": 2})


def test_a_rejection_restates_the_schema_and_keeps_the_unwrapped_candidate() -> None:
    verdict = verify.verify_final(json.dumps('{"sum": "x"}'), CONTRACT)
    assert isinstance(verdict, verify.Rejected)
    assert verdict.candidate == {"sum": "x"}
    assert "sum: 'x' is not of type 'integer'" in verdict.observation
    assert json.dumps(SCHEMA, sort_keys=True) in verdict.observation


def test_an_answer_that_is_not_json_is_re_asked_with_the_schema() -> None:
    verdict = verify.verify_final("three", CONTRACT)
    assert isinstance(verdict, verify.Rejected) and verdict.candidate is None
    assert "did not parse as JSON" in verdict.observation
    assert '"required": ["sum"]' in verdict.observation


def test_a_very_large_schema_is_cut_in_the_reminder() -> None:
    big: dict[str, JsonValue] = {"type": "object", "description": "x" * 10_000}
    reminder = verify.schema_reminder(Contract(format="json", schema=big))
    assert len(reminder) < verify.MAX_SCHEMA_CHARS + 100 and "cut" in reminder


json_leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))
json_objects = st.dictionaries(
    st.text(max_size=6),
    st.recursive(json_leaves, lambda c: st.lists(c, max_size=3), max_leaves=6),
    max_size=4,
)


@given(obj=json_objects, prose=st.text(alphabet=st.characters(exclude_characters='`{}"~'), max_size=40))
def test_any_object_fenced_or_string_wrapped_is_read_back(obj: dict[str, JsonValue], prose: str) -> None:
    encoded = json.dumps(obj)
    for wrapped in (f"{prose}\n```json\n{encoded}\n```\n{prose}", json.dumps(encoded)):
        verdict = verify.verify_final(wrapped, Contract(format="json", schema={"type": "object"}))
        assert verdict == verify.Verified(obj)


def test_the_loop_completes_with_a_string_wrapped_result_in_one_step() -> None:
    run = drive(start(output_contract={"format": "json", "schema": SCHEMA}), [reply(json.dumps(INNER))])
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    assert run.terminal.result == {"sum": 3}
    assert run.state.budgets.used.steps == 1


def test_the_loops_re_ask_after_a_schema_failure_restates_the_schema() -> None:
    run = drive(
        start(output_contract={"format": "json", "schema": SCHEMA}),
        [reply('```json\n{"total": 3}\n```'), reply(json.dumps(INNER))],
    )
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    feedback = run.requests[1].messages[-1]
    assert isinstance(feedback, UserMessage) and feedback.kind == "observation"
    assert "The output schema:" in feedback.text and '"sum"' in feedback.text
