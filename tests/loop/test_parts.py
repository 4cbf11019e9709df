"""Pure parts of the loop: the JSON-action parser, VERIFY, signatures, repeat keys, stop checks."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import JsonValue

from protocol.result import RunUsage
from protocol.result import TerminalStatus as S
from subagent.loop import action, progress, stop, verify
from subagent.loop.state import Budgets, Contract, RepeatEntry
from subagent.messages import ToolOutcome
from tests.loop.simulate import start

json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param('{"a": 1}', {"a": 1}, id="bare"),
        pytest.param('Here you go: {"a": {"b": "}"}} thanks', {"a": {"b": "}"}}, id="brace-in-string"),
        pytest.param('noise {not json} then {"ok": true}', {"ok": True}, id="skips-unparseable"),
        pytest.param('{"s": "quote \\" and brace {"}', {"s": 'quote " and brace {'}, id="escaped-quote"),
        pytest.param("no object here", None, id="none"),
        pytest.param('{"unterminated": ', None, id="unterminated"),
    ],
)
def test_extract_json_object_tolerates_prose(text: str, expected: object) -> None:
    assert action.extract_json_object(text) == expected


@given(obj=st.dictionaries(st.text(max_size=8), json_values, max_size=5), before=st.text(max_size=30))
def test_extract_json_object_finds_an_embedded_object(obj: dict[str, object], before: str) -> None:
    before = before.replace("{", "(")
    assert action.extract_json_object(f"{before} {json.dumps(obj)} trailing") == obj


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        pytest.param('{"action":"tool","tool":"x","arguments":{"a":1}}', action.ToolAction, id="tool"),
        pytest.param('{"action":"final","result":{"v":1}}', action.FinalAction, id="final"),
        pytest.param(
            '{"action":"final","refused":true,"reason":"no"}', action.RefuseAction, id="final-refused"
        ),
        pytest.param('{"action":"refuse","reason":"no"}', action.RefuseAction, id="refuse"),
        pytest.param('{"action":"tool","arguments":{}}', action.ParseFailure, id="tool-without-name"),
        pytest.param(
            '{"action":"tool","tool":"x","arguments":[1]}', action.ParseFailure, id="args-not-object"
        ),
        pytest.param('{"action":"final"}', action.ParseFailure, id="final-without-result"),
        pytest.param('{"action":"dance"}', action.ParseFailure, id="unknown-action"),
        pytest.param("plain words", action.ParseFailure, id="prose"),
    ],
)
def test_parse_action(text: str, kind: type) -> None:
    assert isinstance(action.parse_action(text), kind)


@given(st.text(max_size=200))
def test_parse_action_never_raises(text: str) -> None:
    action.parse_action(text)


@pytest.mark.parametrize(
    ("text", "vacuous"),
    [("", True), ("  ", True), (".", True), ("…", True), ("ok", False), ("0", False), ("-", True)],
)
def test_is_vacuous(text: str, vacuous: bool) -> None:
    assert verify.is_vacuous(text) is vacuous


def test_verify_reports_schema_errors_by_path() -> None:
    schema: dict[str, JsonValue] = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n", "m"],
    }
    verdict = verify.verify_final('{"n": "x"}', Contract(format="json", schema=schema))
    assert isinstance(verdict, verify.Rejected)
    assert "n: 'x' is not of type 'integer'" in verdict.observation
    assert "'m' is a required property" in verdict.observation
    assert verdict.candidate == {"n": "x"}


def test_verify_rejects_an_invalid_schema_without_crashing() -> None:
    verdict = verify.verify_final("{}", Contract(format="json", schema={"type": "no-such-type"}))
    assert isinstance(verdict, verify.Rejected) and "schema itself is invalid" in verdict.observation


def test_verify_accepts_structured_results_from_a_json_action() -> None:
    verdict = verify.verify_final({"n": 1}, Contract(format="json", schema={"type": "object"}))
    assert verdict == verify.Verified({"n": 1})


@given(args=st.dictionaries(st.text(max_size=6), json_values, max_size=5))
def test_repeat_key_ignores_argument_order(args: dict[str, object]) -> None:
    reordered = dict(reversed(list(args.items())))
    assert progress.repeat_key("t", args) == progress.repeat_key("t", reordered)  # type: ignore[arg-type]


def test_repeat_key_separates_tools_and_arguments() -> None:
    keys = {
        progress.repeat_key("a", {"x": 1}),
        progress.repeat_key("b", {"x": 1}),
        progress.repeat_key("a", {"x": 2}),
    }
    assert len(keys) == 3


def test_settle_resets_only_on_a_changed_successful_result() -> None:
    repeats = {"k": RepeatEntry(count=3, last_digest=progress.outcome_digest(ToolOutcome("a")))}
    assert progress.settle_repeat(repeats, "k", ToolOutcome("b"))["k"].count == 1
    assert progress.settle_repeat(repeats, "k", ToolOutcome("a"))["k"].count == 3
    assert progress.settle_repeat(repeats, "k", ToolOutcome("b", is_error=True))["k"].count == 3


def test_signature_changes_with_any_observation_or_the_text() -> None:
    base = progress.turn_signature("t", ["0:a"])
    assert base == progress.turn_signature("t", ["0:a"])
    assert base != progress.turn_signature("t", ["1:a"])
    assert base != progress.turn_signature("u", ["0:a"])


@pytest.mark.parametrize(
    ("budgets", "now", "cancelled", "estimate", "expected"),
    [
        pytest.param(Budgets(), 0.0, True, 0, S.CANCELLED, id="cancel-wins"),
        pytest.param(Budgets(), 600.0, False, 0, S.DEADLINE, id="deadline"),
        pytest.param(Budgets(), 600.0, True, 0, S.CANCELLED, id="cancel-beats-deadline"),
        pytest.param(
            Budgets(used=RunUsage(tokens_in=199_000)), 0.0, False, 1000, S.EXHAUSTED_TOKENS, id="tokens"
        ),
        pytest.param(Budgets(used=RunUsage(tokens_in=100)), 0.0, False, 1000, None, id="fine"),
    ],
)
def test_pre_call_stop(
    budgets: Budgets, now: float, cancelled: bool, estimate: int, expected: S | None
) -> None:
    state = replace(start(), budgets=budgets)
    assert stop.pre_call_stop(state, now=now, cancelled=cancelled, estimate=estimate) == expected


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param({"budgets": Budgets(used=RunUsage(steps=40))}, S.EXHAUSTED_STEPS, id="steps"),
        pytest.param({"idle_turns": 3}, S.STALLED, id="stalled"),
        pytest.param({"repeats": {"k": RepeatEntry(count=7)}}, S.LOOP_DETECTED, id="loop"),
        pytest.param({"repeats": {"k": RepeatEntry(count=6)}}, None, id="at-2k-still-fine"),
        pytest.param({}, None, id="fine"),
    ],
)
def test_post_call_stop(changes: dict[str, object], expected: S | None) -> None:
    state = replace(start(), **changes)  # type: ignore[arg-type]
    assert stop.post_call_stop(state, now=0.0, cancelled=False) == expected


@pytest.mark.parametrize(
    ("steps", "now", "cancelled", "expected"),
    [
        pytest.param(0, 600.0, False, S.DEADLINE, id="deadline"),
        pytest.param(0, 600.0, True, S.CANCELLED, id="cancel-beats-deadline"),
        pytest.param(40, 0.0, True, S.CANCELLED, id="cancel-beats-steps"),
        pytest.param(40, 600.0, False, S.EXHAUSTED_STEPS, id="steps-beat-deadline"),
    ],
)
def test_post_call_stop_ranks_a_cancel_first_and_the_deadline_last(
    steps: int, now: float, cancelled: bool, expected: S
) -> None:
    state = replace(start(), budgets=Budgets(used=RunUsage(steps=steps)))
    assert stop.post_call_stop(state, now=now, cancelled=cancelled) == expected


def test_estimate_uses_chars_over_four_plus_an_eighth_of_the_last_prompt() -> None:
    assert stop.estimate_next(4000, None) == 1000
    assert stop.estimate_next(4000, 800) == 1100
