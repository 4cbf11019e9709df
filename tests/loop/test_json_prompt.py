"""The JSON-action system prompt: each tool on one line with its arguments as the object to send,
the action format, where facts come from, and a worked exchange; echoes of it are parrots."""

from __future__ import annotations

import pytest
from pydantic import JsonValue

from subagent.loop import feedback
from subagent.loop.action import GROUNDING
from subagent.loop.json_prompt import EXAMPLE, arguments_shape, json_tools_section
from subagent.messages import ToolSpec

READ = ToolSpec(
    name="fs__read_text_file",
    description="Read a file as text.",
    input_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "head": {"type": "number", "description": "first N lines"},
        },
        "required": ["path"],
    },
)


@pytest.mark.parametrize(
    ("schema", "shape"),
    [
        pytest.param({"type": "object", "properties": {}}, "{}", id="no-arguments"),
        pytest.param({"type": "object"}, "{}", id="any-object"),
        pytest.param(
            {"type": "object", "properties": {"mode": {"enum": ["append", "replace"]}}},
            '{"mode"?: "append"|"replace"}',
            id="enum",
        ),
        pytest.param(
            {
                "type": "object",
                "properties": {"paths": {"type": "array", "items": {"type": "string"}}},
                "required": ["paths"],
            },
            '{"paths": array of string}',
            id="array",
        ),
        pytest.param(
            {"type": "object", "properties": {"edit": {"type": "object", "properties": {"a": {}}}}},
            '{"properties":{"edit":{"properties":{"a":{}},"type":"object"}},"type":"object"}',
            id="nested-object-as-json",
        ),
        pytest.param(
            {"anyOf": [{"type": "object"}, {"type": "string"}]},
            '{"anyOf":[{"type":"object"},{"type":"string"}]}',
            id="not-an-object-as-json",
        ),
    ],
)
def test_arguments_are_laid_out_as_the_object_to_send(schema: dict[str, JsonValue], shape: str) -> None:
    assert arguments_shape(schema) == shape


def test_each_tool_is_one_line_then_the_format_the_grounding_rule_and_the_example() -> None:
    section = json_tools_section((READ,))
    assert '- fs__read_text_file {"path": string, "head"?: number}: Read a file as text.' in section
    assert section.index('{"action": "tool"') < section.index(GROUNDING) < section.index(EXAMPLE)


def test_without_tools_the_section_says_so() -> None:
    assert "No tools are offered for this task." in json_tools_section(())


@pytest.mark.parametrize(
    "echo",
    [
        pytest.param(GROUNDING, id="grounding"),
        pytest.param("Never guess or invent them. Take a tool's result over what you expected.", id="piece"),
    ],
)
def test_an_answer_that_repeats_the_grounding_rule_is_a_parrot(echo: str) -> None:
    assert feedback.parrots(echo, ())


def test_an_answer_that_only_mentions_files_is_not_a_parrot() -> None:
    assert not feedback.parrots("The file a.txt holds 3 lines; its first says hello.", ())
