"""Connections that fail, die and change: each test owns its servers (real processes, leak-checked).

Covers the connect bound (a server that never answers `initialize`), required vs. optional
servers, a server crashing mid-call (restarted once; the call is not repeated), a restart that
fails, `tools/list_changed` refreshing the offered tools, and the shutdown ladder's last rung.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import psutil
import pytest

from subagent.errors import McpFatal
from subagent.tools import ToolRouter, open_tools
from subagent.tools.stdio import FORCE_KILL_TIMEOUT_S, KILL_REAP_TIMEOUT_S, PROCESS_TERMINATION_TIMEOUT_S
from tests.tools.servers import POISON_ENV, SENTINEL_ENV, EventLog, make_payload, stdio_server, tool_call

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

LADDER_S = PROCESS_TERMINATION_TIMEOUT_S + FORCE_KILL_TIMEOUT_S + KILL_REAP_TIMEOUT_S


def names(router: ToolRouter) -> set[str]:
    return {spec.name for spec in router.specs()}


async def test_a_required_server_that_never_answers_initialize_aborts_within_its_connect_bound() -> None:
    payload = make_payload(stdio_server("mute", "mcp_silent.py", connect_timeout_s=0.5))
    with anyio.fail_after(0.5 + LADDER_S), pytest.raises(McpFatal) as raised:
        async with open_tools(payload, sink=EventLog()):
            pytest.fail("open_tools must not yield when a required server cannot connect")
    assert "`mute`" in str(raised.value)
    assert "0.5 s" in str(raised.value)


async def test_an_optional_server_that_never_answers_is_left_out_and_reported() -> None:
    events = EventLog()
    payload = make_payload(stdio_server("mute", "mcp_silent.py", connect_timeout_s=0.5, required=False))
    async with open_tools(payload, sink=events) as router:
        assert not any(spec.name.startswith("mute__") for spec in router.specs())
        assert router.resource_catalogue() == ""
    (failed,) = events.named("mcp.connect", server="mute")
    assert failed["outcome"] == "failed"
    assert failed["transport"] == "stdio"


async def test_a_required_server_whose_command_cannot_start_aborts_naming_it() -> None:
    payload = make_payload({"name": "ghost", "transport": "stdio", "command": ["/nonexistent/mcp-server"]})
    with pytest.raises(
        McpFatal,
        match="required MCP server `ghost` could not connect: could not start the server: "
        "No such file or directory: /nonexistent/mcp-server",
    ):
        async with open_tools(payload, sink=EventLog()):
            pytest.fail("unreachable")


async def test_a_required_server_that_crashes_mid_call_is_restarted_and_the_call_not_repeated() -> None:
    events = EventLog()
    async with open_tools(make_payload(stdio_server("demo", "mcp_basic.py")), sink=events) as router:
        first = await router.call(tool_call("demo__counter"), timeout_s=10)
        crashed = await router.call(tool_call("demo__crash"), timeout_s=10)
        assert crashed.is_error
        assert "MCP server `demo` crashed during the call and was restarted" in crashed.text
        assert "not retried" in crashed.text
        # A fresh process: its counter starts over, and the restart was reported.
        assert (await router.call(tool_call("demo__counter"), timeout_s=10)).text == first.text == "1"
    outcomes = [f["outcome"] for f in events.named("mcp.connect", server="demo")]
    assert outcomes == ["ok", "reconnected"]
    # One disconnect for the crashed connection, one for the restarted one at exit.
    assert len(events.named("mcp.disconnect", server="demo")) == 2


async def test_a_required_server_that_cannot_be_restarted_aborts_the_run(tmp_path: Path) -> None:
    server = stdio_server("demo", "mcp_basic.py", env={POISON_ENV: str(tmp_path / "poison")})

    async def crash_for_good() -> None:
        async with open_tools(make_payload(server), sink=EventLog()) as router:
            await router.call(tool_call("demo__crash", poison=True), timeout_s=10)

    with pytest.raises(McpFatal, match="required MCP server `demo` died and could not be restarted"):
        await crash_for_good()


async def test_an_optional_server_that_cannot_be_restarted_loses_its_tools(tmp_path: Path) -> None:
    server = stdio_server("demo", "mcp_basic.py", env={POISON_ENV: str(tmp_path / "poison")}, required=False)
    async with open_tools(make_payload(server), sink=EventLog()) as router:
        before = router.version
        outcome = await router.call(tool_call("demo__crash", poison=True), timeout_s=10)
        assert outcome.is_error
        assert "could not be restarted" in outcome.text
        assert "no longer available" in outcome.text
        assert router.version > before
        assert not any(name.startswith("demo__") for name in names(router))
        assert router.resource_catalogue() == ""
        again = await router.call(tool_call("demo__add", a=1, b=2), timeout_s=10)
        assert again.text == "no such tool `demo__add`: it was not run; call one of the tools offered"


async def test_tools_list_changed_refreshes_the_offered_tools_and_bumps_the_version() -> None:
    events = EventLog()
    async with open_tools(make_payload(stdio_server("demo", "mcp_basic.py")), sink=events) as router:
        before = router.version
        assert "demo__fresh" not in names(router)
        await router.call(tool_call("demo__add_tool", name="fresh"), timeout_s=10)
        refreshed = await events.wait_for("mcp.connect", server="demo", outcome="refreshed")
        (connected,) = events.named("mcp.connect", server="demo", outcome="ok")
        assert isinstance(connected["tools"], int)
        assert refreshed["tools"] == connected["tools"] + 1
        assert router.version > before
        assert "demo__fresh" in names(router)
        assert (await router.call(tool_call("demo__fresh"), timeout_s=10)).text == "I am fresh"


async def test_a_server_ignoring_eof_and_sigterm_is_killed_at_the_last_rung(tmp_path: Path) -> None:
    server = stdio_server(
        "stubborn",
        "mcp_silent.py",
        "--stubborn",
        env={SENTINEL_ENV: str(tmp_path)},
        connect_timeout_s=0.5,
        required=False,
    )
    with anyio.fail_after(0.5 + LADDER_S + 2.0):
        async with open_tools(make_payload(server), sink=EventLog()):
            (started,) = [path async for path in anyio.Path(tmp_path).glob("silent-*")]
            pid = int(started.name.removeprefix("silent-"))
    # open_tools returns only once the ladder is done: the server is gone (and reaped).
    assert not psutil.pid_exists(pid)


async def test_a_server_that_exits_before_initialize_is_reported_with_its_status_and_last_words() -> None:
    script = "import sys; sys.stderr.write('missing API_TOKEN\\n'); sys.exit(3)"
    payload = make_payload({"name": "dies", "transport": "stdio", "command": [sys.executable, "-c", script]})
    with anyio.fail_after(LADDER_S + 10), pytest.raises(McpFatal) as raised:
        async with open_tools(payload, sink=EventLog()):
            pytest.fail("unreachable")
    assert str(raised.value) == (
        "required MCP server `dies` could not connect: the server exited with status 3 "
        "(last stderr: missing API_TOKEN) before answering initialize"
    )


async def test_resource_read_is_not_offered_when_no_server_lists_a_resource_or_template() -> None:
    events = EventLog()
    payload = make_payload(stdio_server("bare", "mcp_junk.py", "--empty-resources"))
    async with open_tools(payload, sink=events) as router:
        assert "bare__flood" in names(router)
        # It declares the resources capability, lists nothing and has no templates listing (-32601).
        assert "resource_read" not in names(router)
        assert router.resource_catalogue() == ""
    (connected,) = events.named("mcp.connect", server="bare")
    assert connected["outcome"] == "ok"


async def test_an_allow_list_entry_naming_no_tool_is_a_warning_at_connect(
    caplog: pytest.LogCaptureFixture,
) -> None:
    payload = make_payload(stdio_server("junk", "mcp_junk.py", tools=["flood", "no_such_tool"]))
    async with open_tools(payload, sink=EventLog()) as router:
        assert "junk__flood" in names(router)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert (
        "MCP server junk: the tools allow-list names no_such_tool, which the server does not list" in warnings
    )
