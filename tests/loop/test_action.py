"""The JSON-action parser: an action found in prose with stray braces, fences and other objects;
a failure that names what was wrong when there is none."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from pydantic import JsonValue

from subagent.loop import action
from subagent.loop.action import FinalAction, ParseFailure, RefuseAction, ToolAction, parse_action

# Prose that looks like the text around a small model's action: words, braces, brackets, quotes,
# colons, backslashes, newlines and code fences.
prose_pieces = st.sampled_from(
    [
        "{",
        "}",
        "[",
        "]",
        '"',
        "'",
        ":",
        ",",
        "\\",
        "\n",
        " ",
        "```",
        "```json\n",
        "I think",
        "x",
        "{}",
        '{"a"',
    ]
)
prose = st.lists(prose_pieces | st.text(max_size=6), max_size=25).map("".join)

json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=12)
json_values: st.SearchStrategy[JsonValue] = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
tool_names = st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=12)
arguments = st.dictionaries(st.text(max_size=6), json_values, max_size=3)

actions = st.one_of(
    st.builds(
        lambda t, a: ({"action": "tool", "tool": t, "arguments": a}, ToolAction(t, a)), tool_names, arguments
    ),
    st.builds(lambda t, a: ({"name": t, "arguments": a}, ToolAction(t, a)), tool_names, arguments),
    st.builds(lambda r: ({"action": "final", "result": r}, FinalAction(r)), json_values),
    st.builds(lambda r: ({"action": "refuse", "reason": r}, RefuseAction(r)), st.text(max_size=20)),
)

# Words that could make the surrounding prose itself contain (or complete) an action object.
ACTION_WORDS = ("action", "name", "tool")


@given(before=prose, after=prose, pair=actions, indent=st.sampled_from([None, 2]))
def test_an_action_embedded_in_prose_with_braces_is_found(
    before: str, after: str, pair: tuple[dict[str, JsonValue], object], indent: int | None
) -> None:
    assume(not any(word in before + after for word in ACTION_WORDS))
    obj, expected = pair
    assert parse_action(f"{before}{json.dumps(obj, indent=indent)}{after}") == expected


@given(before=prose, pair=actions)
def test_an_action_in_a_code_fence_after_an_unclosed_brace_is_found(
    before: str, pair: tuple[dict[str, JsonValue], object]
) -> None:
    assume(not any(word in before for word in ACTION_WORDS))
    obj, expected = pair
    text = f"I think {{ is odd. {before}\n```json\n{json.dumps(obj)}\n```\nDone."
    assert parse_action(text) == expected


@given(text=st.text(st.characters(blacklist_characters="{"), max_size=200))
def test_text_without_a_brace_fails_saying_there_is_no_object(text: str) -> None:
    failure = parse_action(text)
    assert isinstance(failure, ParseFailure)
    assert "no JSON object" in failure.reason


@given(before=prose, obj=st.dictionaries(st.text(max_size=6), json_values, min_size=1, max_size=4))
def test_an_object_that_is_no_action_fails_naming_the_missing_key(
    before: str, obj: dict[str, JsonValue]
) -> None:
    assume(not any(word in before + json.dumps(obj) for word in ACTION_WORDS))
    failure = parse_action(f"{before}{json.dumps(obj)}")
    assert isinstance(failure, ParseFailure)
    # The reason names the problem: the first object lacks "action", or nothing parsed at all.
    assert 'no "action" key' in failure.reason or "not valid JSON" in failure.reason, failure.reason


@given(pair=actions, cut=st.integers(min_value=1, max_value=1000))
def test_an_action_cut_off_mid_way_fails_saying_so(
    pair: tuple[dict[str, JsonValue], object], cut: int
) -> None:
    encoded = json.dumps(pair[0])
    cut = min(cut, len(encoded) - 1)
    failure = parse_action("Here it is: " + encoded[:cut])
    assert isinstance(failure, ParseFailure)
    assert (
        "cut off" in failure.reason
        or "is not an action" in failure.reason
        or "action object" in failure.reason
    )


@given(st.text(max_size=300))
def test_parse_action_never_raises(text: str) -> None:
    assert isinstance(parse_action(text), ToolAction | FinalAction | RefuseAction | ParseFailure)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            'I think { is odd. {"action": "final", "result": "ok"}', FinalAction("ok"), id="issue-example"
        ),
        pytest.param(
            'Schema: {"type": "object"}. Now: {"action": "tool", "tool": "read", "arguments": {"p": 1}}',
            ToolAction("read", {"p": 1}),
            id="skips-a-non-action-object",
        ),
        pytest.param(
            '<tool_call>\n{"name": "read", "arguments": "{\\"p\\": 1}"}\n</tool_call>',
            ToolAction("read", {"p": 1}),
            id="hermes-call-with-string-arguments",
        ),
        pytest.param(
            '{"action": "read", "action_input": {"p": 1}}', ToolAction("read", {"p": 1}), id="react-style"
        ),
        pytest.param(
            '{"reply": {"action": "final", "result": 3}}', FinalAction(3), id="wrapped-in-another-object"
        ),
        pytest.param(
            '{"action": "final"} then {"action": "final", "result": 1}',
            FinalAction(1),
            id="an-invalid-action-before-a-valid-one",
        ),
        pytest.param(
            '{"action": "final", "result": "line one\nline two"}',
            FinalAction("line one\nline two"),
            id="raw-newline-in-a-string",
        ),
    ],
)
def test_parse_action_finds(text: str, expected: object) -> None:
    assert parse_action(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param("plain words", "no JSON object in the reply", id="prose"),
        pytest.param('{"action": "final"', "is cut off", id="cut-off"),
        pytest.param('{"action": "refuse", "reason": "\\u0007', "is cut off", id="cut-after-an-escape"),
        pytest.param('{"action": "refuse", "reason": nu', "is cut off", id="cut-in-a-literal"),
        pytest.param(
            '{"action": "final", "result": tru}', "not valid JSON: expecting value", id="bad-literal"
        ),
        pytest.param('{"action": "tool", "arguments": {}}', 'needs a "tool" name', id="tool-without-name"),
        pytest.param(
            '{"action": "dance"}', '"action" must be "tool", "final" or "refuse"', id="unknown-verb"
        ),
        pytest.param('{"a": 1}', 'no "action" key (its keys: "a")', id="not-an-action"),
        pytest.param(
            '{"action": "tool", "arguments": {"name": "x", "arguments": {}}}',
            'needs a "tool" name',
            id="a-broken-action-claims-its-inside",
        ),
    ],
)
def test_parse_action_failures_name_the_problem(text: str, reason: str) -> None:
    failure = parse_action(text)
    assert isinstance(failure, ParseFailure)
    assert reason in failure.reason


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('{"a": "x", ' * 100_000, id="many-unclosed-objects"),
        pytest.param("[{" * 300_000, id="many-braces"),
        pytest.param('{"a":' * 200_000, id="deep-nesting"),
    ],
)
def test_hostile_replies_are_parsed_within_the_work_budget(text: str) -> None:
    assert isinstance(parse_action(text), ParseFailure)
    scan = action._Scan(text)
    for _ in scan:
        pass
    # One candidate may overshoot the budget by what it decoded (at most the whole text, twice).
    assert scan.work <= action.MAX_DECODE_WORK + 2 * len(text)


def test_extract_json_object_keeps_returning_the_first_object() -> None:
    assert action.extract_json_object('I think { is odd. {"a": 1} {"b": 2}') == {"a": 1}


@pytest.mark.parametrize("length", [4070, 4085, 4090, 4095, 20_000])
def test_an_action_longer_than_the_decode_window_is_found_whatever_token_the_window_cuts(length: int) -> None:
    result = "a" * length + "\u0007 true -1.5e3 null"
    text = "Here: {\n" + json.dumps({"action": "final", "result": result})[1:]
    assert parse_action(text) == FinalAction(result)
