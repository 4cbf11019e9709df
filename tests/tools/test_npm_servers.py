"""The tool layer against the npm reference servers (real Node processes, over stdio, streamable
HTTP and legacy HTTP+SSE), and the era each kind of server is spoken to in."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import JsonValue

from subagent.messages import ToolOutcome
from subagent.tools import open_tools
from tests.support.npm_servers import everything_argv, everything_over_http, free_port, node, server_script
from tests.tools.servers import EventLog, make_payload, stdio_server, tool_call

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

# A 1×1 PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c63f8ffff3f0005fe02fea7"
    "d6a4b80000000049454e44ae426082"
)


def http_spec(port: int, transport: str = "http", path: str = "/mcp") -> dict[str, object]:
    return {"name": "ev", "transport": transport, "url": f"http://127.0.0.1:{port}{path}"}


async def test_each_server_is_spoken_to_in_its_newest_era() -> None:
    events = EventLog()
    node_server = {"name": "ev", "transport": "stdio", "command": everything_argv()}
    payload = make_payload(node_server, stdio_server("py", "mcp_basic.py"))  # type: ignore[arg-type]
    async with open_tools(payload, sink=events) as router:
        assert (await router.call(tool_call("ev__echo", message="hi"), timeout_s=10)).text == "Echo: hi"
        assert (await router.call(tool_call("py__add", a=1, b=2), timeout_s=10)).text == "3"
    # server-everything (TS SDK) has no server/discover: the SDK falls back to the handshake.
    (ev,) = events.named("mcp.connect", server="ev")
    assert ev["protocol"] == "2025-11-25"
    # A Python SDK server answers server/discover.
    (py,) = events.named("mcp.connect", server="py")
    assert py["protocol"] == "2026-07-28"


async def test_a_streamable_http_session_is_deleted_on_the_server_when_the_task_ends() -> None:
    with everything_over_http("streamableHttp") as (port, log):
        async with open_tools(make_payload(http_spec(port)), sink=EventLog()) as router:  # type: ignore[arg-type]
            assert (await router.call(tool_call("ev__echo", message="x"), timeout_s=10)).text == "Echo: x"
            session = log.wait_for("Session initialized with ID:").rsplit(" ", 1)[-1]
        # Leaving cancels the connection's tasks; the DELETE still goes out, shielded and bounded.
        log.wait_for(f"Received session termination request for session {session}", timeout_s=10)


async def test_a_restarted_http_server_gets_a_new_session_and_the_refused_call_is_sent_again() -> None:
    port = free_port()
    events = EventLog()
    payload = make_payload(http_spec(port))  # type: ignore[arg-type]
    with everything_over_http("streamableHttp", port) as (_, first_log):
        tools = open_tools(payload, sink=events)
        router = await tools.__aenter__()
        try:
            assert (await router.call(tool_call("ev__echo", message="1"), timeout_s=10)).text == "Echo: 1"
            first_log.wait_for("Session initialized")
        except BaseException:
            await tools.__aexit__(None, None, None)
            raise
    try:
        with everything_over_http("streamableHttp", port) as (_, second_log):
            # The new process does not know the session: 400, a new session, the call once more.
            outcome = await router.call(tool_call("ev__echo", message="2"), timeout_s=20)
            assert outcome == ToolOutcome("Echo: 2")
            assert second_log.count("Session initialized") == 1
            reconnected = events.named("mcp.connect", server="ev", outcome="reconnected")
            assert len(reconnected) == 1
            (result,) = [f for f in events.named("tool.result") if f["call_id"] == "call-1"][-1:]
            assert result["err"] is None
    finally:
        await tools.__aexit__(None, None, None)


async def test_a_legacy_sse_server_is_reached_with_transport_sse() -> None:
    events = EventLog()
    with everything_over_http("sse") as (port, _log):
        payload = make_payload(http_spec(port, "sse", "/sse"))  # type: ignore[arg-type]
        async with open_tools(payload, sink=events) as router:
            outcome = await router.call(tool_call("ev__get-sum", a=2, b=3), timeout_s=10)
            assert "5" in outcome.text and not outcome.is_error
    (connected,) = events.named("mcp.connect", server="ev")
    assert (connected["transport"], connected["protocol"]) == ("sse", "2025-11-25")


async def test_a_legacy_sse_server_reached_as_streamable_http_fails_saying_sse() -> None:
    events = EventLog()
    with everything_over_http("sse") as (port, _log):
        spec = {**http_spec(port, "http", "/sse"), "required": False}
        async with open_tools(make_payload(spec), sink=events) as router:  # type: ignore[arg-type]
            assert not any(s.name.startswith("ev__") for s in router.specs())
    (failed,) = events.named("mcp.connect", server="ev")
    assert 'transport = "sse"' in str(failed["err"])


async def test_server_log_messages_at_the_configured_level_become_mcp_log_events() -> None:
    events = EventLog()
    node_server = {"name": "ev", "transport": "stdio", "command": everything_argv(), "log_level": "debug"}
    async with open_tools(make_payload(node_server), sink=events) as router:  # type: ignore[arg-type]
        await router.call(tool_call("ev__toggle-simulated-logging"), timeout_s=10)
        logged = await events.wait_for("mcp.log", server="ev", timeout_s=15)
    assert logged["level"] in (
        "debug",
        "info",
        "notice",
        "warning",
        "error",
        "critical",
        "alert",
        "emergency",
    )
    assert "message" in str(logged["message"]).lower()
    assert logged["dropped"] == 0


async def test_progress_of_a_long_tool_call_becomes_mcp_progress_events() -> None:
    events = EventLog()
    node_server = {"name": "ev", "transport": "stdio", "command": everything_argv()}
    async with open_tools(make_payload(node_server), sink=events) as router:  # type: ignore[arg-type]
        call = tool_call("ev__trigger-long-running-operation", call_id="long-1", duration=0.6, steps=3)
        outcome = await router.call(call, timeout_s=20)
    assert not outcome.is_error
    progress = events.named("mcp.progress", server="ev", call_id="long-1")
    assert sorted((p["progress"], p["total"]) for p in progress) == [(1, 3), (2, 3), (3, 3)]
    assert {p["tool"] for p in progress} == {"trigger-long-running-operation"}


async def test_a_tool_that_needs_mcp_tasks_is_not_offered_and_the_catalogue_says_why() -> None:
    node_server = {"name": "ev", "transport": "stdio", "command": everything_argv()}
    async with open_tools(make_payload(node_server), sink=EventLog()) as router:  # type: ignore[arg-type]
        offered = {spec.name for spec in router.specs()}
        assert "ev__echo" in offered
        assert "ev__simulate-research-query" not in offered
        assert (
            "Not offered: `ev/simulate-research-query` — they need MCP Tasks (task-augmented execution), "
            "which agentd does not support yet."
        ) in router.resource_catalogue()
        outcome = await router.call(tool_call("ev__simulate-research-query", topic="x"), timeout_s=5)
        assert outcome.is_error and "not in this agent's granted scope" in outcome.text


async def test_the_filesystem_and_memory_reference_servers_work_through_the_router(tmp_path: Path) -> None:
    (tmp_path / "pixel.png").write_bytes(PNG)
    filesystem = {
        "name": "fs",
        "transport": "stdio",
        "command": [node(), str(server_script("server-filesystem")), str(tmp_path)],
    }
    memory = {
        "name": "mem",
        "transport": "stdio",
        "command": [node(), str(server_script("server-memory"))],
        "env": {"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")},
    }
    async with open_tools(make_payload(filesystem, memory), sink=EventLog()) as router:  # type: ignore[arg-type]
        path = str(tmp_path / "notes.txt")
        wrote = await router.call(tool_call("fs__write_file", path=path, content="hello"), timeout_s=10)
        assert not wrote.is_error, wrote.text
        assert (await router.call(tool_call("fs__read_text_file", path=path), timeout_s=10)).text == "hello"
        media = await router.call(
            tool_call("fs__read_media_file", path=str(tmp_path / "pixel.png")), timeout_s=10
        )
        assert [(i.mime_type, i.size_bytes) for i in media.images] == [("image/png", len(PNG))]
        entity: dict[str, JsonValue] = {
            "name": "agentd",
            "entityType": "daemon",
            "observations": ["supervises agents"],
        }
        created = await router.call(tool_call("mem__create_entities", entities=[entity]), timeout_s=10)
        assert not created.is_error, created.text
        graph = await router.call(tool_call("mem__read_graph"), timeout_s=10)
        assert "supervises agents" in graph.text
