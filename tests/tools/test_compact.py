"""The compact tool catalogue: annotation-only schema keywords dropped, boilerplate said once,
descriptions cut to a length that scales with the context window."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import JsonValue

from subagent.messages import ToolSpec
from subagent.tools.compact import (
    MAX_DESCRIPTION_CHARS,
    MIN_DESCRIPTION_CHARS,
    compact_catalogue,
    compact_schema,
    cut,
    description_limit,
)

ZOD_LIKE: dict[str, JsonValue] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "title": "read_fileArguments",
    "properties": {
        "path": {"type": "string", "title": "Path"},
        "title": {"type": "string", "title": "Title", "description": "A property really named title."},
        "head": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None, "title": "Head"},
        "mode": {"anyOf": [{"type": "integer"}, {"type": "string"}], "default": None},
        "tags": {"type": "array", "items": {"type": "string", "title": "Tag"}},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def test_annotation_only_keywords_go_and_constraints_stay() -> None:
    assert compact_schema(ZOD_LIKE) == {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "title": {"type": "string", "description": "A property really named title."},
            "head": {"type": "integer"},
            "mode": {"anyOf": [{"type": "integer"}, {"type": "string"}], "default": None},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["path"],
    }


def test_additional_properties_with_a_schema_is_kept() -> None:
    schema: dict[str, JsonValue] = {
        "type": "object",
        "additionalProperties": {"type": "integer", "title": "N"},
    }
    assert compact_schema(schema) == {"type": "object", "additionalProperties": {"type": "integer"}}


@pytest.mark.parametrize(
    ("window", "limit"),
    [
        pytest.param(1024, MIN_DESCRIPTION_CHARS, id="tiny"),
        pytest.param(4096, 256, id="4k"),
        pytest.param(8192, 512, id="8k"),
        pytest.param(128_000, MAX_DESCRIPTION_CHARS, id="128k"),
    ],
)
def test_the_description_budget_scales_with_the_window(window: int, limit: int) -> None:
    assert description_limit(window) == limit


def spec(name: str, description: str, arg_description: str = "The path.") -> ToolSpec:
    schema: dict[str, JsonValue] = {
        "type": "object",
        "properties": {"path": {"type": "string", "description": arg_description}},
    }
    return ToolSpec(name=name, description=description, input_schema=schema)


def test_a_sentence_repeated_across_tools_is_kept_only_in_the_first() -> None:
    tail = "Only works within allowed directories."
    specs = [spec(f"t{i}", f"Does thing {i} with a file. {tail}") for i in range(4)]
    specs.append(spec("other", "Unrelated tool."))
    out = compact_catalogue(specs, 128_000)
    assert out[0].description == f"Does thing 0 with a file. {tail}"
    assert [s.description for s in out[1:4]] == [f"Does thing {i} with a file." for i in range(1, 4)]
    assert out[4].description == "Unrelated tool."


def test_an_argument_description_repeated_across_tools_is_kept_only_in_the_first() -> None:
    same = "The absolute path of the file or directory to operate on."
    specs = [spec(f"t{i}", f"Tool {i}.", same) for i in range(3)] + [spec("x", "X.", "Something else.")]
    out = compact_catalogue(specs, 128_000)
    described = ["description" in json.dumps(s.input_schema) for s in out]
    assert described == [True, False, False, True]


def test_a_sentence_in_only_two_tools_is_not_boilerplate() -> None:
    specs = [spec("a", "Reads. Careful with large files."), spec("b", "Writes. Careful with large files.")]
    assert [s.description for s in compact_catalogue(specs, 128_000)] == [s.description for s in specs]


def test_long_descriptions_are_cut_at_a_word_with_an_ellipsis() -> None:
    out = compact_catalogue([spec("a", "word " * 200)], 4096)
    assert len(out[0].description) <= 256 and out[0].description.endswith("word…")


@given(text=st.text(max_size=400), limit=st.integers(min_value=10, max_value=300))
def test_cut_never_exceeds_its_limit(text: str, limit: int) -> None:
    assert len(cut(text, limit)) <= max(limit, len(text.strip()) if len(text.strip()) <= limit else limit)


def test_the_catalogue_of_the_fixture_server_shrinks() -> None:
    from tests.fixtures import mcp_many_tools  # imported lazily: it builds an MCP server

    tools = mcp_many_tools.server._tool_manager.list_tools()
    specs = [ToolSpec(t.name, t.description or "", dict(t.parameters)) for t in tools]
    before = sum(len(s.description) + len(json.dumps(s.input_schema)) for s in specs)
    after = sum(len(s.description) + len(json.dumps(s.input_schema)) for s in compact_catalogue(specs, 4096))
    assert after < 0.8 * before
