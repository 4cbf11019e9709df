"""The output-contract check: which schemas are valid, and how a result's failures are reported."""

from __future__ import annotations

import pytest
from hypothesis import given
from pydantic import JsonValue

from protocol.contract import (
    MAX_ERROR_CHARS,
    MAX_REPORTED_ERRORS,
    REMOTE_REF,
    reference_problem,
    result_errors,
    schema_error,
)
from protocol.spawn import OutputContract
from tests.protocol.strategies import json_values

DRAFT_04 = "http://json-schema.org/draft-04/schema#"
OBJECT_N: dict[str, JsonValue] = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n", "m"],
}


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param({}, id="empty"),
        pytest.param(OBJECT_N, id="object"),
        pytest.param({"$schema": DRAFT_04, "minimum": 0, "exclusiveMinimum": True}, id="draft-04-boolean"),
    ],
)
def test_a_valid_schema_has_no_error(schema: dict[str, JsonValue]) -> None:
    assert schema_error(schema) is None


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        pytest.param({"type": "no-such-type"}, "'no-such-type' is not valid", id="unknown-type"),
        pytest.param({"required": "n"}, "'n' is not of type 'array'", id="required-not-a-list"),
        # Without `$schema` the latest draft applies, where exclusiveMinimum is a number.
        pytest.param({"exclusiveMinimum": True}, "True is not of type 'number'", id="latest-draft-applies"),
    ],
)
def test_an_invalid_schema_is_named(schema: dict[str, JsonValue], fragment: str) -> None:
    problem = schema_error(schema)
    assert problem is not None and fragment in problem


@pytest.mark.parametrize(
    ("value", "lines"),
    [
        pytest.param({"n": 1, "m": None}, [], id="valid"),
        pytest.param(
            {"n": "x"},
            ["<root>: 'm' is a required property", "n: 'x' is not of type 'integer'"],
            id="sorted-by-path",
        ),
        pytest.param([1], ["<root>: [1] is not of type 'object'"], id="root"),
    ],
)
def test_result_errors_are_path_and_message_lines(value: JsonValue, lines: list[str]) -> None:
    assert result_errors(value, OBJECT_N) == lines


def test_result_errors_report_the_first_few_then_count_the_rest() -> None:
    schema: dict[str, JsonValue] = {"type": "array", "items": {"type": "integer"}}
    errors = result_errors(["x"] * (MAX_REPORTED_ERRORS + 3), schema)
    assert errors[:MAX_REPORTED_ERRORS] == [f"{i}: 'x' is not of type 'integer'" for i in range(5)]
    assert errors[MAX_REPORTED_ERRORS:] == ["... and 3 more"]


def test_a_long_error_message_is_cut() -> None:
    (line,) = result_errors("y" * 1000, {"type": "integer"})
    assert line.startswith("<root>: ")
    assert len(line) == len("<root>: ") + MAX_ERROR_CHARS


def test_an_invalid_schema_is_one_line_of_result_errors_not_an_exception() -> None:
    assert result_errors({}, {"type": "no-such-type"}) == [
        f"the output schema itself is invalid: {schema_error({'type': 'no-such-type'})}"
    ]


@given(value=json_values)
def test_any_json_value_gets_a_bounded_report(value: JsonValue) -> None:
    assert len(result_errors(value, OBJECT_N)) <= MAX_REPORTED_ERRORS + 1


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        pytest.param({"properties": {"s": {"pattern": "^(a|a)+$"}}}, None, id="a-pattern-is-not-compiled"),
        pytest.param({"type": "no-such-type"}, None, id="validity-is-not-judged"),
        pytest.param(
            {"properties": {"a": {"$ref": "file:///etc/passwd"}}},
            "output_contract.schema.properties.a.$ref: " + REMOTE_REF,
            id="a-remote-ref-is-named",
        ),
    ],
)
def test_the_supervisors_reference_check_evaluates_nothing(
    schema: dict[str, JsonValue], problem: str | None
) -> None:
    assert reference_problem(OutputContract(format="json", schema_=schema)) == problem
