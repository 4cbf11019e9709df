"""A server's catalogue as last listed elsewhere: what a task may offer before it has connected.

A resource watcher holds a live session with the very server a trigger's task is granted; it lists
that server's tools and resources when it arms and again on each list change, and reports them
(`ev/catalogue`, `protocol.watch`). The daemon keeps the latest per server and puts it in the spawn
payload of the trigger's tasks (`SpawnPayload.mcp_catalogues`), so the task's first model request
does not wait for its own connection to the server (docs/decisions.md). It is a hint: the task's
own `tools/list` replaces it as soon as that connection is up.

Only what the first request needs crosses: a tool's name, description, input schema and whether
it needs MCP Tasks; a resource's or template's catalogue line. Every text came from a server
(untrusted). One catalogue is at most `MAX_CATALOGUE_BYTES` as JSON — all or nothing: a partial
tool list would offer the model a wrong scope, so an oversize one is not sent at all.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

MAX_CATALOGUE_BYTES = 1024 * 1024
# At most this many catalogues ride in one spawn payload (each bounded above): 4 MiB of a 16 MiB frame.
MAX_PAYLOAD_CATALOGUES = 4
MAX_CATALOGUE_ITEMS = 10_000
MAX_TEXT = 64 * 1024
MAX_NAME = 512
MAX_URI = 4096


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _object_schema() -> dict[str, JsonValue]:
    return {"type": "object"}


class CatalogueTool(_Wire):
    name: str = Field(min_length=1, max_length=MAX_NAME)
    description: str | None = Field(default=None, max_length=MAX_TEXT)
    input_schema: dict[str, JsonValue] = Field(default_factory=_object_schema)
    # MCP Tasks' `execution.taskSupport`: a `required` tool is withheld (agentd has no MCP Tasks).
    task_support: Literal["forbidden", "optional", "required"] | None = None


class CatalogueResource(_Wire):
    uri: str = Field(min_length=1, max_length=MAX_URI)
    name: str = Field(default="", max_length=MAX_NAME)
    description: str | None = Field(default=None, max_length=MAX_TEXT)
    mime_type: str | None = Field(default=None, max_length=MAX_NAME)
    size: int | None = Field(default=None, ge=0)


class CatalogueTemplate(_Wire):
    uri_template: str = Field(min_length=1, max_length=MAX_URI)
    name: str = Field(default="", max_length=MAX_NAME)
    description: str | None = Field(default=None, max_length=MAX_TEXT)
    mime_type: str | None = Field(default=None, max_length=MAX_NAME)


class McpCatalogue(_Wire):
    """One server's tools and resources as listed (paginated) over someone else's session.

    `has_tools`/`has_resources`: the server declared the capability (a task offers `resource_read`
    only for servers that have something to read).
    """

    has_tools: bool = False
    tools: list[CatalogueTool] = Field(default_factory=list, max_length=MAX_CATALOGUE_ITEMS)
    has_resources: bool = False
    resources: list[CatalogueResource] = Field(default_factory=list, max_length=MAX_CATALOGUE_ITEMS)
    templates: list[CatalogueTemplate] = Field(default_factory=list, max_length=MAX_CATALOGUE_ITEMS)

    @model_validator(mode="after")
    def _bounded(self) -> McpCatalogue:
        size = catalogue_bytes(self)
        if size > MAX_CATALOGUE_BYTES:
            raise ValueError(f"a catalogue is at most {MAX_CATALOGUE_BYTES} bytes as JSON, not {size}")
        return self


def catalogue_bytes(catalogue: McpCatalogue) -> int:
    """Its size as it travels (compact JSON)."""
    return len(catalogue.model_dump_json())
