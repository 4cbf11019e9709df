"""The catalogue hint both ways (pure): what the watcher lists becomes a bounded `McpCatalogue`,
and a task offers it back as a `Listing` with what the first request needs."""

from __future__ import annotations

import mcp_types

from subagent.tools.connection import Listing
from subagent.tools.hint import catalogue_of, listing_of

SCHEMA = {"type": "object", "properties": {"uri": {"type": "string"}}, "required": ["uri"]}
TOOLS = [
    mcp_types.Tool(name="bump", description="Change it.", input_schema=SCHEMA),
    mcp_types.Tool(
        name="slow",
        input_schema={"type": "object"},
        execution=mcp_types.ToolExecution(task_support="required"),
    ),
]
RESOURCES = [
    mcp_types.Resource(uri="watch://item/0", name="0", description="zero", mime_type="text/plain", size=7)
]
TEMPLATES = [mcp_types.ResourceTemplate(uri_template="watch://item/{n}", name="item", mime_type="text/plain")]


def test_a_listing_survives_the_trip_through_a_catalogue() -> None:
    catalogue = catalogue_of(
        has_tools=True, tools=TOOLS, has_resources=True, resources=RESOURCES, templates=TEMPLATES
    )
    assert not isinstance(catalogue, str)
    listing = listing_of(catalogue)
    assert [(t.name, t.description, t.input_schema) for t in listing.tools] == [
        ("bump", "Change it.", SCHEMA),
        ("slow", None, {"type": "object"}),
    ]
    assert listing.tools[1].execution is not None and listing.tools[1].execution.task_support == "required"
    assert listing.tools[0].execution is None
    assert listing == Listing(listing.tools, tuple(RESOURCES), True, tuple(TEMPLATES))
    assert listing.readable


def test_a_listing_too_large_for_a_catalogue_is_refused_whole_saying_why() -> None:
    many = [mcp_types.Tool(name=f"t{i}", description="d" * 60_000, input_schema={}) for i in range(20)]
    refused = catalogue_of(has_tools=True, tools=many, has_resources=False, resources=(), templates=())
    assert isinstance(refused, str) and refused.startswith("the catalogue is not sent: ")
    assert "at most 1048576 bytes" in refused


def test_a_field_over_its_bound_refuses_the_catalogue() -> None:
    long_name = [mcp_types.Tool(name="x" * 600, input_schema={})]
    refused = catalogue_of(has_tools=True, tools=long_name, has_resources=False, resources=(), templates=())
    assert isinstance(refused, str) and "at most 512 characters" in refused
