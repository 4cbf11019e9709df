"""A queued task's root payload is built in one place: a trigger's task carries the catalogues the
watchers listed for its servers (only for the same server configuration), any other task none."""

from __future__ import annotations

import time

from agentd.journal.records import TaskRecord
from agentd.supervision.task_payloads import CatalogueBoard, TaskPayloads
from protocol.api import TaskSpec
from protocol.mcp_catalogue import CatalogueTool, McpCatalogue
from protocol.spawn import EndpointSpec, Limits, McpServerSpec, SpawnPayload

FS = McpServerSpec(name="fs", transport="stdio", command=["fs-server"])
HINT = McpCatalogue(has_tools=True, tools=[CatalogueTool(name="read_file")])


def base(record: TaskRecord) -> SpawnPayload:
    return SpawnPayload(
        task_id=record.task_id,
        run_id=record.run_id,
        instruction=record.spec.instruction,
        intelligence=[EndpointSpec(kind="openai", base_url="http://127.0.0.1:9/v1", model="m")],
        mcp_servers=[FS],
        limits=Limits(max_steps=4, max_tokens=1000, deadline_s=60.0, remaining_depth=0),
    )


def record(trigger: str | None) -> TaskRecord:
    spec = TaskSpec(instruction="look", mcp=["fs"])
    return TaskRecord("t_1", "r_1", 1000, None, spec, "queued", time.time(), trigger=trigger)


def test_only_a_trigger_task_carries_the_catalogue_listed_for_its_server() -> None:
    board = CatalogueBoard()
    payloads = TaskPayloads(base, board)
    assert payloads(record("inbox")).mcp_catalogues == {}
    board.put(FS, HINT)
    assert payloads(record("inbox")).mcp_catalogues == {"fs": HINT}
    assert payloads(record(None)).mcp_catalogues == {}


def test_a_catalogue_listed_under_another_configuration_or_forgotten_is_not_offered() -> None:
    board = CatalogueBoard()
    payloads = TaskPayloads(base, board)
    board.put(FS.model_copy(update={"command": ["fs-server", "/elsewhere"]}), HINT)
    assert payloads(record("inbox")).mcp_catalogues == {}
    board.put(FS, HINT)
    board.forget("fs")
    assert payloads(record("inbox")).mcp_catalogues == {}
    board.put(FS, HINT)
    board.put(FS, None)  # a listing without a catalogue: the older one may be stale
    assert payloads(record("inbox")).mcp_catalogues == {}
