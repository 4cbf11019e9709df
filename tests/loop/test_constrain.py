"""Constrained decoding in the pure loop: which requests carry a response schema, and what the
action union allows."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from pydantic import JsonValue

from protocol.result import TerminalStatus as S
from subagent.loop import constrain
from subagent.loop.machine import TurnView, next_action
from subagent.loop.state import CallModel, Contract
from subagent.messages import ToolOutcome, ToolSpec
from tests.loop.simulate import drive, reply, spec, start

ADD = ToolSpec(
    name="demo__add",
    description="add two numbers",
    input_schema={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)
# A pydantic-style schema: its own `$defs`, referred to from inside.
PUT = ToolSpec(
    name="kv__put",
    description="store an item",
    input_schema={
        "type": "object",
        "properties": {"item": {"$ref": "#/$defs/Item"}},
        "required": ["item"],
        "$defs": {"Item": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}},
    },
)
READ = {"fs__read": lambda _call: ToolOutcome("text")}
SUM: dict[str, JsonValue] = {
    "type": "object",
    "properties": {"sum": {"type": "integer"}},
    "required": ["sum"],
}


def valid(schema: dict[str, Any], value: Any) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def test_the_action_union_admits_each_tools_call_a_final_and_a_refusal_and_nothing_else() -> None:
    schema = constrain.action_schema((ADD, PUT), Contract()).schema
    jsonschema.Draft202012Validator.check_schema(schema)
    assert valid(schema, {"action": "tool", "tool": "demo__add", "arguments": {"a": 1, "b": 2}})
    assert valid(schema, {"action": "tool", "tool": "kv__put", "arguments": {"item": {"key": "k"}}})
    assert valid(schema, {"action": "final", "result": "three"})
    assert valid(schema, {"action": "refuse", "reason": "no such file"})
    # Each tool's arguments are held to its own input schema, its `$defs` included.
    assert not valid(schema, {"action": "tool", "tool": "demo__add", "arguments": {"a": "one", "b": 2}})
    assert not valid(schema, {"action": "tool", "tool": "kv__put", "arguments": {"item": {"key": 5}}})
    assert not valid(schema, {"action": "tool", "tool": "other__tool", "arguments": {}})
    assert not valid(schema, {"action": "final", "result": ""})
    assert not valid(schema, {"action": "refuse", "reason": ""})
    assert not valid(schema, {"action": "final"})
    assert not valid(schema, {"final": "three"})


def test_a_json_contracts_schema_constrains_the_final_result() -> None:
    schema = constrain.action_schema((ADD,), Contract(format="json", schema=SUM)).schema
    assert valid(schema, {"action": "final", "result": {"sum": 3}})
    assert not valid(schema, {"action": "final", "result": {"total": 3}})
    assert not valid(schema, {"action": "final", "result": "3"})


def test_a_tool_schema_that_refers_outside_its_defs_is_constrained_to_any_object() -> None:
    recursive = ToolSpec(
        name="tree__walk",
        description="walk",
        input_schema={"type": "object", "properties": {"child": {"$ref": "#"}}},
    )
    schema = constrain.action_schema((recursive,), Contract()).schema
    assert valid(schema, {"action": "tool", "tool": "tree__walk", "arguments": {"anything": [1]}})
    assert not valid(schema, {"action": "tool", "tool": "tree__walk", "arguments": "not an object"})


def test_a_request_without_tools_allows_only_a_final_or_a_refusal() -> None:
    schema = constrain.action_schema((ADD,), Contract(), tools_allowed=False).schema
    assert valid(schema, {"action": "final", "result": "done"})
    assert not valid(schema, {"action": "tool", "tool": "demo__add", "arguments": {"a": 1, "b": 2}})


@pytest.mark.parametrize(
    ("schema", "strict"),
    [
        pytest.param(
            {
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "required": ["n"],
                "additionalProperties": False,
            },
            True,
            id="closed-and-all-required",
        ),
        pytest.param(SUM, False, id="extra-properties-allowed"),
        pytest.param(
            {
                "type": "object",
                "properties": {"n": {"type": "integer"}, "m": {"type": "string"}},
                "required": ["n"],
                "additionalProperties": False,
            },
            False,
            id="an-optional-property",
        ),
        pytest.param({"type": "array", "items": {"oneOf": [{"type": "string"}]}}, False, id="oneOf"),
        pytest.param({"type": "array", "items": {"type": "string"}}, True, id="array-of-strings"),
    ],
)
def test_strict_mode_is_asked_only_for_schemas_inside_its_subset(
    schema: dict[str, Any], strict: bool
) -> None:
    assert constrain.is_strict_compatible(schema) is strict
    output = constrain.output_schema(Contract(format="json", schema=schema))
    assert output is not None and output.strict is strict


def test_a_text_contract_or_a_schemaless_json_contract_has_no_output_schema() -> None:
    assert constrain.output_schema(Contract()) is None
    assert constrain.output_schema(Contract(format="json")) is None


def test_every_json_action_turn_carries_the_action_union() -> None:
    state = start("json")
    action = next_action(state, TurnView(tools=(spec("fs__read"),)), now=0, cancelled=False)
    assert isinstance(action, CallModel)
    schema = action.request.response_schema
    assert schema is not None and schema.name == "agentd_action" and not schema.strict
    assert "fs__read" in json.dumps(schema.schema)


def test_a_native_turn_with_tools_carries_no_response_schema() -> None:
    # A server that constrains the reply to a schema stops parsing tool calls.
    state = start("native", output_contract={"format": "json", "schema": SUM})
    action = next_action(state, TurnView(tools=(spec("fs__read"),)), now=0, cancelled=False)
    assert isinstance(action, CallModel)
    assert action.request.tools and action.request.response_schema is None


def test_the_wrap_up_is_constrained_to_the_output_schema_in_native_mode() -> None:
    state = start("native", output_contract={"format": "json", "schema": SUM}, limits={"max_steps": 2})
    # An empty answer is re-asked, which leaves one step: the wrap-up's.
    run = drive(state, [reply(""), reply('{"sum": 3}')], READ)
    assert run.terminal is not None and run.terminal.status is S.EXHAUSTED_STEPS
    wrap = run.requests[-1]
    assert wrap.purpose == "wrap_up" and wrap.response_schema is not None
    assert wrap.response_schema.schema == SUM


def test_the_wrap_up_in_json_actions_allows_a_final_or_a_refusal_only() -> None:
    state = start("json", limits={"max_steps": 2})
    first = json.dumps({"action": "tool", "tool": "fs__read", "arguments": {}})
    run = drive(state, [reply(first), reply('{"action": "final", "result": "partly read"}')], READ)
    wrap = run.requests[-1]
    assert wrap.purpose == "wrap_up" and wrap.response_schema is not None
    assert not valid(wrap.response_schema.schema, {"action": "tool", "tool": "fs__read", "arguments": {}})
    assert run.terminal is not None and run.terminal.result == "partly read"
