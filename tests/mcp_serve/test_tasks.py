"""MCP task handles: a client that asks for one (the 2025-11-25 `task` field, or the 2026-07-28
`io.modelcontextprotocol/tasks` extension) gets `run_task`'s task as a handle, polls it with
`tasks/get`, reads its result and cancels it, over stdio and streamable HTTP; the handle is the
agentd task, so it outlives the `agentd mcp serve` that made it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim

from protocol.api import GetRequest, TaskRef
from tests.support.daemon import Daemon, running_daemon, scripted
from tests.support.mcp_serve import HttpServer, open_client, open_http_client, start_http_server

WAIT_S = 30.0
ERAS = pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025-11-25", "2026-07-28"])
TRANSPORTS = pytest.mark.parametrize("transport", ["stdio", "http"])

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


class ModernTask(types.Result):
    """The extension's task as a 2026-07-28 client reads it (a handle, or `tasks/get`'s answer)."""

    result_type: Literal["task", "complete"] = "task"
    task_id: str
    status: types.TaskStatus
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class TaskHandle(ModernTask):
    result_type: Literal["task"] = "task"


class TasksExtension(ClientExtension):
    """The client half of the extension: declares it and takes the handle as it comes."""

    identifier = "io.modelcontextprotocol/tasks"

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=_unresolved)]


async def _unresolved(handle: TaskHandle, ctx: ClaimContext) -> types.CallToolResult:
    raise AssertionError("the tests take the handle itself (allow_claimed)")


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    brief = scripted("brief", [{"text": "done soon", "delay_s": 1}], tmp_path)
    slow = scripted("slow", [{"text": "late", "delay_s": 60}], tmp_path)
    with running_daemon(tmp_path, brief + slow + '[defaults]\nmodel = "brief"\n') as running:
        yield running


@asynccontextmanager
async def _client(daemon: Daemon, server: HttpServer | None, mode: str) -> AsyncIterator[Client]:
    extensions = {"extensions": [TasksExtension()]} if mode == "auto" else {}
    if server is None:
        async with open_client(daemon.socket, mode=mode, **extensions) as (client, _):
            yield client
    else:
        async with open_http_client(server, mode=mode, **extensions) as (client, _):
            yield client


@asynccontextmanager
async def _server(daemon: Daemon, tmp_path: Path, transport: str) -> AsyncIterator[HttpServer | None]:
    if transport == "stdio":
        yield None  # each client starts its own `agentd mcp serve`
        return
    server = start_http_server(daemon.socket, tmp_path / "token")
    try:
        yield server
    finally:
        assert server.stop() == 0


async def _start(client: Client, model: str) -> str:
    """`run_task` as a task: the handle's id, checked for its shape."""
    arguments = {"instruction": "answer", "model": model}
    if client.protocol_version == "2026-07-28":
        handle = await client.session.call_tool("run_task", arguments, allow_claimed=True)
        assert isinstance(handle, TaskHandle), handle
        assert (handle.status, handle.ttl_ms, handle.poll_interval_ms) == ("working", None, 500)
        return handle.task_id
    # The SDK's 2025-11-25 client checks every tools/call answer against CallToolResult, so the
    # handle is asked for on its dispatcher, as a client of that era's tasks would.
    params = {"name": "run_task", "arguments": arguments, "task": {"ttl": 60_000}}
    raw = await client.session._dispatcher.send_raw_request("tools/call", params, {"timeout": WAIT_S})
    created = types.CreateTaskResult.model_validate(raw, by_name=False)
    assert (created.task.status, created.task.ttl, created.task.poll_interval) == ("working", None, 500)
    return created.task.task_id


async def _get(client: Client, task_id: str) -> ModernTask | types.GetTaskResult:
    request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
    if client.protocol_version == "2026-07-28":
        return await client.session.send_request(request, ModernTask)
    return await client.session.send_request(request, types.GetTaskResult)


async def _until_ended(client: Client, task_id: str) -> ModernTask | types.GetTaskResult:
    with anyio.fail_after(WAIT_S):
        while True:
            got = await _get(client, task_id)
            if got.status not in ("working", "input_required"):
                return got
            await anyio.sleep(0.1)  # the client's poll interval


@ERAS
@TRANSPORTS
async def test_a_declared_client_gets_a_handle_polls_it_to_its_end_and_reads_the_result(
    daemon: Daemon, tmp_path: Path, mode: str, transport: str
) -> None:
    async with _server(daemon, tmp_path, transport) as server, _client(daemon, server, mode) as client:
        capabilities = client.server_capabilities
        assert capabilities is not None
        if mode == "legacy":
            assert capabilities.tasks is not None and capabilities.tasks.requests is not None
        else:
            assert "io.modelcontextprotocol/tasks" in (capabilities.extensions or {})
        task_id = await _start(client, "brief")
        assert task_id.startswith("t_")
        ended = await _until_ended(client, task_id)
        assert ended.status == "completed"
        assert ended.status_message is not None and ended.status_message.startswith("ended completed")
        if isinstance(ended, ModernTask):
            assert ended.result is not None
            structured = ended.result["structuredContent"]
        else:
            request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
            result = await client.session.send_request(request, types.CallToolResult)
            assert not result.is_error
            structured = result.structured_content
        assert structured is not None
        assert (structured["task_id"], structured["status"], structured["result"]) == (
            task_id,
            "completed",
            "done soon",
        )


@ERAS
@TRANSPORTS
async def test_tasks_cancel_cancels_the_agentd_task(
    daemon: Daemon, tmp_path: Path, mode: str, transport: str
) -> None:
    async with _server(daemon, tmp_path, transport) as server, _client(daemon, server, mode) as client:
        task_id = await _start(client, "slow")
        request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
        if mode == "legacy":
            cancelled = await client.session.send_request(request, types.CancelTaskResult)
            assert cancelled.status == "cancelled"
        else:
            await client.session.send_request(request, types.EmptyResult)
        assert (await _until_ended(client, task_id)).status == "cancelled"
        with daemon.client() as api:
            assert api.call(GetRequest(params=TaskRef(task_id=task_id))).status == "cancelled"
        with pytest.raises(MCPError) as refused:
            await client.session.send_request(request, types.EmptyResult)
        assert refused.value.code == types.INVALID_PARAMS
        assert "already ended cancelled" in refused.value.message


@ERAS
@TRANSPORTS
async def test_a_handle_outlives_a_restart_of_the_server(
    daemon: Daemon, tmp_path: Path, mode: str, transport: str
) -> None:
    async with _server(daemon, tmp_path, transport) as server, _client(daemon, server, mode) as client:
        task_id = await _start(client, "brief")
    # The first server is gone (stdio: its client closed it; HTTP: stopped); a new one is asked.
    async with _server(daemon, tmp_path, transport) as server, _client(daemon, server, mode) as client:
        assert (await _until_ended(client, task_id)).status == "completed"


@ERAS
async def test_an_unknown_handle_is_invalid_params(daemon: Daemon, tmp_path: Path, mode: str) -> None:
    async with _client(daemon, None, mode) as client:
        with pytest.raises(MCPError) as unknown:
            await _get(client, "t_nosuchtask")
    assert unknown.value.code == types.INVALID_PARAMS
