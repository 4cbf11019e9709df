"""The manager keeps each server's latest catalogue as its watcher reported it, and hands it out
only for the same server configuration; a report without one (too large, listing failed) makes it
forget the older one."""

from __future__ import annotations

import pytest
import structlog

from agentd.journal.store import Journal
from agentd.supervision.task_payloads import same_server
from agentd.triggers.manager import TriggerConfig, TriggerManager
from protocol.mcp_catalogue import CatalogueTool, McpCatalogue
from protocol.spawn import McpServerSpec
from protocol.watch import CatalogueParams, CatalogueReport

pytestmark = pytest.mark.anyio
SPEC = McpServerSpec(name="files", transport="stdio", command=["files-server", "/srv"])
HINT = McpCatalogue(has_tools=True, tools=[CatalogueTool(name="read")])


def test_the_same_server_is_the_same_whatever_a_task_adds_to_its_approval_gate() -> None:
    assert same_server(SPEC, SPEC.model_copy(update={"approval": ["read"], "approval_timeout_s": 5.0}))
    assert not same_server(SPEC, SPEC.model_copy(update={"command": ["files-server", "/other"]}))


async def test_the_latest_catalogue_is_held_per_server_for_its_configuration(journal: Journal) -> None:
    manager = TriggerManager(
        journal, server_spec=lambda name: SPEC, on_fired=lambda: None, log=structlog.get_logger()
    )
    manager.configure([TriggerConfig(name="inbox", index=0, server="files", instruction="x", glob="f:*")])
    assert manager.catalogues.for_spec(SPEC) is None
    server = manager._servers["files"]
    manager.on_catalogue(server, CatalogueReport(params=CatalogueParams(catalogue=HINT)))
    assert manager.catalogues.for_spec(SPEC) == HINT
    assert manager.catalogues.for_spec(SPEC.model_copy(update={"cwd": "/elsewhere"})) is None
    assert manager.catalogues.for_spec(SPEC.model_copy(update={"name": "other"})) is None
    manager.on_catalogue(server, CatalogueReport(params=CatalogueParams(detail="listing failed: x")))
    assert manager.catalogues.for_spec(SPEC) is None
