"""`subscriptions/listen` (2026-07-28): the SDK's client of that era hears a task's changes, its
end and the list's change on its stream, over stdio and streamable HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.shared.subscriptions import ResourcesListChanged, ResourceUpdated

from agentd.api.async_port import DaemonPort
from mcp_serve.server import build_server
from tests.support.daemon import Daemon, running_daemon, scripted
from tests.support.mcp_serve import open_client, open_http_client, start_http_server

WAIT_S = 30.0

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


@pytest.fixture
def daemon(tmp_path: Path) -> object:
    brief = scripted("brief", [{"text": "done soon", "delay_s": 2}], tmp_path)
    with running_daemon(tmp_path, brief + '[defaults]\nmodel = "brief"\n') as running:
        yield running


@asynccontextmanager
async def _client(daemon: Daemon, tmp_path: Path, transport: str) -> AsyncIterator[Client]:
    if transport == "stdio":
        async with open_client(daemon.socket, mode="auto") as (client, _):
            yield client
        return
    server = start_http_server(daemon.socket, tmp_path / "token")
    try:
        async with open_http_client(server, mode="auto") as (client, _):
            yield client
    finally:
        assert server.stop() == 0


async def _read(client: Client, uri: str) -> dict[str, object]:
    read = await client.read_resource(uri)
    document: dict[str, object] = json.loads(read.contents[0].text)  # type: ignore[union-attr]
    return document


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_listen_stream_tells_of_each_change_the_end_and_the_list(
    daemon: Daemon, tmp_path: Path, transport: str
) -> None:
    async with _client(daemon, tmp_path, transport) as client:
        assert client.protocol_version == "2026-07-28"
        started = await client.call_tool("submit_task", {"instruction": "a moment"})
        assert started.structured_content is not None
        uri = started.structured_content["uri"]
        asked = [uri, "agentd://approvals", "agentd://tasks/t_nosuch", "file:///etc/passwd"]
        async with client.listen(resource_subscriptions=asked, resources_list_changed=True) as sub:
            assert sub.honored.resource_subscriptions == [uri, "agentd://approvals"]
            assert sub.honored.resources_list_changed is True
            assert not sub.honored.tools_list_changed
            state, list_changed = "", False
            with anyio.fail_after(WAIT_S):
                async for event in sub:
                    if isinstance(event, ResourceUpdated):
                        assert event.uri == uri
                        state = str((await _read(client, uri))["state"])
                    else:
                        assert isinstance(event, ResourcesListChanged)
                        list_changed = True
                    if state == "terminal" and list_changed:
                        break
        result = await _read(client, f"{uri}/result")
        assert (result["status"], result["result"]) == ("completed", "done soon")


async def test_forty_subscribed_tasks_are_each_told_of_their_end_and_leave_the_user_connections(
    daemon: Daemon,
) -> None:
    # More tasks than the daemon's connections for one user (32): one watch stream serves them all.
    server = build_server(DaemonPort(str(daemon.socket)), inside_task=False, version="")
    async with Client(server, mode="auto", read_timeout_seconds=WAIT_S) as client:
        uris = []
        for _ in range(40):
            started = await client.call_tool("submit_task", {"instruction": "a moment"})
            assert started.structured_content is not None
            uris.append(started.structured_content["uri"])
        ended: set[str] = set()
        async with client.listen(resource_subscriptions=uris) as sub:
            assert sub.honored.resource_subscriptions == uris
            listed = await client.call_tool("list_tasks", {"limit": 50})  # the user can still connect
            assert not listed.is_error, listed.content
            for uri in uris:  # those that ended before the stream was open are told by a read
                if (await _read(client, uri))["state"] == "terminal":
                    ended.add(uri)
            with anyio.fail_after(WAIT_S * 4):
                while ended != set(uris):
                    event = await anext(aiter(sub))
                    assert isinstance(event, ResourceUpdated) and event.uri in uris
                    if (await _read(client, event.uri))["state"] == "terminal":
                        ended.add(event.uri)
