"""A server's catalogue hint, both ways (pure): an SDK listing → `McpCatalogue` (the resource
watcher, which lists the server over its own session) and `McpCatalogue` → `Listing` (the task,
which offers it until its own connection lists the server; `protocol.mcp_catalogue`)."""

from __future__ import annotations

from collections.abc import Sequence

import mcp_types
from pydantic import ValidationError

from protocol.mcp_catalogue import (
    CatalogueResource,
    CatalogueTemplate,
    CatalogueTool,
    McpCatalogue,
)
from subagent.tools.connection import Listing, brief


def catalogue_of(
    *,
    has_tools: bool,
    tools: Sequence[mcp_types.Tool],
    has_resources: bool,
    resources: Sequence[mcp_types.Resource],
    templates: Sequence[mcp_types.ResourceTemplate],
) -> McpCatalogue | str:
    """The catalogue of what a server listed, or why it cannot be one (too large, a field over its
    bound): all or nothing, because a partial tool list would offer the model a wrong scope."""
    try:
        return McpCatalogue(
            has_tools=has_tools,
            tools=[
                CatalogueTool(
                    name=t.name,
                    description=t.description,
                    input_schema=t.input_schema,
                    task_support=t.execution.task_support if t.execution is not None else None,
                )
                for t in tools
            ],
            has_resources=has_resources,
            resources=[
                CatalogueResource(
                    uri=str(r.uri), name=r.name, description=r.description, mime_type=r.mime_type, size=r.size
                )
                for r in resources
            ],
            templates=[
                CatalogueTemplate(
                    uri_template=t.uri_template, name=t.name, description=t.description, mime_type=t.mime_type
                )
                for t in templates
            ],
        )
    except ValidationError as exc:
        first = exc.errors()[0] if exc.errors() else {"msg": str(exc)}
        return f"the catalogue is not sent: {brief(first.get('msg', exc))}"


def listing_of(catalogue: McpCatalogue) -> Listing:
    """The `Listing` a task offers from a hint until its own `tools/list` replaces it."""
    tools = tuple(
        mcp_types.Tool(
            name=t.name,
            description=t.description,
            input_schema=dict(t.input_schema),
            execution=None
            if t.task_support is None
            else mcp_types.ToolExecution(task_support=t.task_support),
        )
        for t in catalogue.tools
    )
    resources = tuple(
        mcp_types.Resource(
            uri=r.uri, name=r.name, description=r.description, mime_type=r.mime_type, size=r.size
        )
        for r in catalogue.resources
    )
    templates = tuple(
        mcp_types.ResourceTemplate(
            uri_template=t.uri_template, name=t.name, description=t.description, mime_type=t.mime_type
        )
        for t in catalogue.templates
    )
    return Listing(tools, resources, catalogue.has_resources, templates)
