"""Wire names and offered specs (pure): table tests and properties of the assignment."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from subagent.tools.naming import (
    FALLBACK_SCHEMA,
    MAX_DESCRIPTION_CHARS,
    MAX_SCHEMA_BYTES,
    WIRE_NAME,
    ToolRef,
    assign_wire_names,
    cap_description,
    offered_spec,
    plain_name,
)

RESERVED = ("resource_read", "note_write", "note_read")


@pytest.mark.parametrize(
    ("server", "tool", "expected"),
    [
        pytest.param("demo", "add", "demo__add", id="plain"),
        pytest.param("fs.local", "read file", "fs_local__read_file", id="outside-the-set-becomes-underscore"),
        pytest.param("git", "log-graph_v2", "git__log-graph_v2", id="dash-and-underscore-kept"),
        pytest.param("s", "📁", "s___", id="non-ascii"),
        pytest.param("s", "", "s___", id="empty-tool-name"),
    ],
)
def test_plain_names(server: str, tool: str, expected: str) -> None:
    assert plain_name(ToolRef(server, tool)) == expected


def test_a_long_name_is_truncated_with_a_hash_of_its_identity() -> None:
    a = plain_name(ToolRef("srv", "x" * 100))
    b = plain_name(ToolRef("srv", "x" * 101))
    assert len(a) == len(b) == 64
    assert a.startswith("srv__xxx")
    assert a != b


def test_tools_that_sanitise_alike_all_take_hashed_names() -> None:
    names = assign_wire_names([ToolRef("demo", "a.b"), ToolRef("demo", "a b"), ToolRef("demo", "c")])
    assert names["demo__c"] == ToolRef("demo", "c")
    hashed = sorted(n for n in names if n != "demo__c")
    assert len(hashed) == 2
    assert all(n.startswith("demo__a_b_") for n in hashed)


def test_servers_that_sanitise_alike_do_not_collide() -> None:
    names = assign_wire_names([ToolRef("a.b", "t"), ToolRef("a_b", "t")])
    assert set(names.values()) == {ToolRef("a.b", "t"), ToolRef("a_b", "t")}
    assert "a_b__t" not in names


def test_a_reserved_name_is_never_handed_to_a_server_tool() -> None:
    # A server cannot produce `note_read` (its names contain `__`), but a forged hashed form can
    # collide with another tool's name: the assignment stays injective either way.
    names = assign_wire_names([ToolRef("x", "y")], reserved=["x__y"])
    assert "x__y" not in names
    assert list(names.values()) == [ToolRef("x", "y")]


refs = st.lists(
    st.builds(ToolRef, st.sampled_from(["demo", "demo.x", "demo_x", "fs", "a" * 70]), st.text(max_size=80)),
    max_size=30,
)


@given(refs)
def test_every_tool_gets_exactly_one_valid_unique_name(tools: list[ToolRef]) -> None:
    names = assign_wire_names(tools, reserved=RESERVED)
    assert set(names.values()) == set(tools)
    assert len(names) == len(set(tools))
    assert all(WIRE_NAME.match(name) for name in names)
    assert not set(names) & set(RESERVED)


@given(refs, st.randoms())
def test_the_assignment_does_not_depend_on_listing_order(tools: list[ToolRef], rnd: random.Random) -> None:
    shuffled = list(tools)
    rnd.shuffle(shuffled)
    assert assign_wire_names(tools) == assign_wire_names(shuffled)


def test_descriptions_are_capped_with_a_marker() -> None:
    assert cap_description("  short  ") == "short"
    assert cap_description(None) == ""
    long = cap_description("d" * (MAX_DESCRIPTION_CHARS + 50))
    assert long.startswith("d" * MAX_DESCRIPTION_CHARS)
    assert long.endswith("[…description truncated]")


def test_an_oversized_schema_is_replaced_and_the_description_says_so() -> None:
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string"} for i in range(MAX_SCHEMA_BYTES // 10)},
    }
    spec = offered_spec("s__t", "Does t.", schema)
    assert spec.input_schema == FALLBACK_SCHEMA
    assert (
        spec.description
        == f"Does t. (Arguments unchecked: its input schema exceeds {MAX_SCHEMA_BYTES} bytes.)"
    )


def test_a_reasonable_schema_passes_through_unchanged() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert offered_spec("s__t", "Adds.", schema).input_schema == schema
