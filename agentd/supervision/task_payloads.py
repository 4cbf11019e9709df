"""A queued task's root spawn payload, built in one place for its run and for its prestart.

The configuration's part (endpoints, servers, limits) comes from a builder the daemon passes in
(`agentd.root_payload`, a room above this one). A trigger's task also carries its servers'
catalogues as the resource watchers last listed them (`CatalogueBoard`, written by the trigger
manager, read here), so its first model request need not wait for its own MCP connects.
"""

from __future__ import annotations

from collections.abc import Callable

from agentd.errors import AgentdError
from agentd.journal.records import TaskRecord
from agentd.supervision.payloads import with_catalogues
from protocol.mcp_catalogue import McpCatalogue
from protocol.spawn import McpServerSpec, SpawnPayload


class PayloadError(AgentdError):
    """A queued task can no longer be built into a spawn payload (e.g. the config changed)."""


def same_server(a: McpServerSpec, b: McpServerSpec) -> bool:
    """Whether two specs reach the same server the same way (a task's approval gates aside)."""
    ignore = {"approval": [], "approval_timeout_s": 1.0}
    return a.model_copy(update=ignore) == b.model_copy(update=ignore)


class CatalogueBoard:
    """The latest catalogue listed per MCP server, with the spec it was listed under."""

    def __init__(self) -> None:
        self._listed: dict[str, tuple[McpServerSpec, McpCatalogue]] = {}

    def put(self, spec: McpServerSpec, catalogue: McpCatalogue | None) -> None:
        """`spec`'s server listed `catalogue`; None forgets the older one (it may be stale)."""
        if catalogue is None:
            self._listed.pop(spec.name, None)
        else:
            self._listed[spec.name] = (spec, catalogue)

    def forget(self, server: str) -> None:
        """The server is no longer watched: its catalogue is not offered any more."""
        self._listed.pop(server, None)

    def for_spec(self, spec: McpServerSpec) -> McpCatalogue | None:
        """The catalogue listed for the server `spec` reaches, or None (none listed, or the
        server's configuration changed since)."""
        listed = self._listed.get(spec.name)
        if listed is None:
            return None
        listed_with, catalogue = listed
        return catalogue if same_server(listed_with, spec) else None


class TaskPayloads:
    """Builds a queued task's root payload: `base`'s, with catalogue hints for a trigger's task.

    Raises `PayloadError` (from `base`) when the configuration no longer allows the task.
    """

    def __init__(self, base: Callable[[TaskRecord], SpawnPayload], catalogues: CatalogueBoard) -> None:
        self._base = base
        self.catalogues = catalogues

    def __call__(self, record: TaskRecord) -> SpawnPayload:
        payload = self._base(record)
        return with_catalogues(payload, self.catalogues.for_spec) if record.trigger is not None else payload
