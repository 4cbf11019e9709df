"""`agentd mcp serve --http`: the SDK's client over streamable HTTP against a real daemon, and the
requests the server refuses."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import anyio
import httpx2
import psutil
import pytest
from mcp import MCPDeprecationWarning

from tests.support.daemon import Daemon, running_daemon, scripted
from tests.support.leaks import wait_no_descendants
from tests.support.mcp_serve import HttpServer, open_http_client, start_http_server

WAIT_S = 30.0

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


def _body(tmp_path: Path) -> str:
    fast = scripted("fast", [{"text": "forty-two"}], tmp_path)
    slow = scripted("slow", [{"text": "late", "delay_s": 60}], tmp_path)
    return fast + slow + '[defaults]\nmodel = "fast"\n'


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    with running_daemon(tmp_path, _body(tmp_path)) as running:
        yield running


@pytest.fixture
def server(daemon: Daemon, tmp_path: Path) -> Iterator[HttpServer]:
    running = start_http_server(daemon.socket, tmp_path / "conf" / "token")
    try:
        yield running
    finally:
        if running.proc.poll() is None:
            assert running.stop() == 0


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025-11-25", "2026-07-28"])
async def test_over_http_the_tools_are_listed_and_run_task_completes_with_progress(
    server: HttpServer, tmp_path: Path, mode: str
) -> None:
    token_file = tmp_path / "conf" / "token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert any(server.token in line for line in server.lines)  # shown once, when made
    lines: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        lines.append(message)

    async with open_http_client(server, mode=mode) as (client, _):
        listed = await client.list_tools()
        assert "run_task" in {tool.name for tool in listed.tools}
        done = await client.call_tool("run_task", {"instruction": "answer"}, progress_callback=on_progress)
    assert not done.is_error, done.content
    assert done.structured_content is not None
    assert (done.structured_content["status"], done.structured_content["result"]) == (
        "completed",
        "forty-two",
    )
    assert "ended completed" in lines, lines


async def test_over_http_a_subscribed_task_tells_of_its_end(server: HttpServer) -> None:
    async with open_http_client(server) as (client, heard):
        started = await client.call_tool("submit_task", {"instruction": "take your time", "model": "slow"})
        assert started.structured_content is not None
        uri, task_id = started.structured_content["uri"], started.structured_content["task_id"]
        with pytest.warns(MCPDeprecationWarning):  # the 2025-11-25 era's subscription
            await client.session.subscribe_resource(uri)
        cancelled = await client.call_tool("cancel_task", {"task_id": task_id})
        assert not cancelled.is_error, cancelled.content
        state = ""
        with anyio.fail_after(WAIT_S):
            while state != "terminal":
                assert await heard.next_update() == uri
                read = await client.read_resource(uri)
                state = json.loads(read.contents[0].text)["state"]  # type: ignore[union-attr]


def _initialize(server: HttpServer, **headers: str) -> httpx2.Response:
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    sent = {"Accept": "application/json, text/event-stream", **headers}
    return httpx2.post(server.url, json=hello, headers=sent, timeout=WAIT_S)


async def test_requests_without_the_token_with_a_wrong_one_or_from_a_foreign_origin_are_refused(
    server: HttpServer,
) -> None:
    port = server.url.split(":")[2].split("/")[0]
    assert _initialize(server).status_code == 401
    wrong = _initialize(server, Authorization="Bearer " + "x" * 43)
    assert wrong.status_code == 401 and "wrong" in wrong.text
    assert wrong.headers["www-authenticate"].startswith("Bearer")
    token = server.headers()
    foreign = _initialize(server, Origin="http://evil.example", **token)
    assert foreign.status_code == 403 and "evil.example" in foreign.text
    rebound = _initialize(server, Host=f"evil.example:{port}", **token)
    assert rebound.status_code == 421
    sessions = {_initialize(server, Origin=f"http://localhost:{port}", **token) for _ in range(2)}
    assert {answer.status_code for answer in sessions} == {200}
    ids = {answer.headers["mcp-session-id"] for answer in sessions}
    assert len(ids) == 2 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


async def test_a_client_that_disconnects_mid_run_leaves_nothing_running(
    daemon: Daemon, server: HttpServer
) -> None:
    started = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        started.set()

    async with open_http_client(server) as (client, _), anyio.create_task_group() as group:
        arguments = {"instruction": "take your time", "model": "slow"}
        group.start_soon(partial(client.call_tool, "run_task", arguments, progress_callback=on_progress))
        with anyio.fail_after(WAIT_S):
            await started.wait()
        group.cancel_scope.cancel()
    tasks = daemon.call("task.list", {})
    assert isinstance(tasks, list) and len(tasks) == 1 and isinstance(tasks[0], dict)
    assert daemon.wait(str(tasks[0]["task_id"]), timeout_s=WAIT_S).status == "cancelled"
    assert server.stop() == 0
    daemons = {daemon.pid, *(p.pid for p in psutil.Process(daemon.pid).children(recursive=True))}
    assert [p.cmdline() for p in wait_no_descendants(timeout_s=0.5) if p.pid not in daemons] == []


def _refused(tmp_path: Path, *flags: str) -> str:
    command = [sys.executable, "-m", "agentd", "mcp", "serve", "--socket", str(tmp_path / "s"), *flags]
    done = subprocess.run(command, capture_output=True, text=True, timeout=WAIT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    return done.stderr


def test_a_remote_address_needs_allow_remote_and_a_token_file_only_its_owner_reads(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    assert "--allow-remote" in _refused(tmp_path, "--http", "0.0.0.0:0", "--token-file", str(token_file))
    assert not token_file.exists()
    token_file.write_text("a-token-of-sufficient-length\n")
    os.chmod(token_file, 0o644)
    refused = _refused(tmp_path, "--http", "127.0.0.1:0", "--token-file", str(token_file))
    assert "--token-file" in refused and "chmod 600" in refused
    assert "HOST:PORT" in _refused(tmp_path, "--http", "8765")
