"""The stdio transport at the process boundary: bounded lines, the environment, and PDEATHSIG."""

from __future__ import annotations

import logging
import signal
import sys
import tracemalloc

import anyio
import psutil
import pytest
from mcp.shared.message import SessionMessage
from pydantic import SecretStr

from protocol.spawn import REVEAL_SECRETS, McpServerSpec
from subagent.messages import ToolOutcome
from subagent.tools import open_tools
from subagent.tools.stdio import (
    MAX_LINE_BYTES,
    STDERR_LINE_BYTES,
    StdioNotes,
    open_stdio_transport,
    server_environment,
)
from tests.tools.servers import FIXTURES, EventLog, make_payload, stdio_server, tool_call, wait_until

pytestmark = pytest.mark.anyio


@pytest.mark.processes
async def test_an_over_long_stdout_line_is_dropped_unbuffered_and_the_next_line_still_arrives() -> None:
    size = 2 * MAX_LINE_BYTES + 1
    command = [sys.executable, str(FIXTURES / "stdio_oversize.py"), str(size)]
    spec = McpServerSpec(name="flood", transport="stdio", command=command)
    notes = StdioNotes()
    tracemalloc.start()
    try:
        async with open_stdio_transport(spec, notes) as (read, _write):
            with anyio.fail_after(30):
                first = await read.receive()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The long line never reaches the session: it is counted, with its size as the example.
    assert notes.unreadable is not None
    assert notes.unreadable.total == 1
    assert notes.unreadable.first == f"<a {size}-byte line>"
    assert isinstance(first, SessionMessage)
    assert first.message.method == "notifications/tools/list_changed"  # type: ignore[union-attr]
    # The line was twice the cap; holding it whole would have cost at least that much.
    assert peak < size * 3 // 4


def test_a_server_inherits_only_safe_variables_plus_its_own_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin")
    monkeypatch.setenv("AGENTD_API_KEY", "do-not-leak")
    monkeypatch.setenv("SHELL", "() { :; }; echo pwned")
    spec = McpServerSpec(name="s", transport="stdio", command=["x"], env={"TOKEN": SecretStr("t0ken")})
    env = server_environment(spec)
    assert env["PATH"] == "/usr/bin"
    assert env["TOKEN"] == "t0ken"
    assert "AGENTD_API_KEY" not in env
    assert "SHELL" not in env


@pytest.mark.processes
async def test_a_server_ignoring_eof_and_sigterm_dies_with_a_sigkilled_subagent() -> None:
    payload = make_payload(stdio_server("stubborn", "mcp_basic.py", "--ignore-eof", "--ignore-sigterm"))
    argv = [sys.executable, str(FIXTURES / "hold_tools.py"), payload.model_dump_json(context=REVEAL_SECRETS)]
    async with await anyio.open_process(argv) as helper:
        assert helper.stdout is not None
        with anyio.fail_after(30):
            assert (await helper.stdout.receive()).startswith(b"ready")
        (server,) = psutil.Process(helper.pid).children()
        helper.send_signal(signal.SIGKILL)
        await helper.wait()

    def gone() -> bool:
        try:
            return bool(server.status() == psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return True

    # No shutdown ladder ran (the subagent was SIGKILLed); only PDEATHSIG can have ended it.
    await wait_until(gone, timeout_s=10)


@pytest.mark.processes
async def test_server_stderr_is_forwarded_line_by_line_prefixed_and_capped(
    capfd: pytest.CaptureFixture[str],
) -> None:
    # It answers (a notification) after its stderr, so it is retired politely (EOF) once read.
    script = (
        "import sys; sys.stderr.write('x' * 10000 + '\\nlast words\\n'); sys.stderr.flush(); "
        'print(\'{"jsonrpc": "2.0", "method": "notifications/hello"}\', flush=True); sys.stdin.read()'
    )
    spec = McpServerSpec(name="noisy", transport="stdio", command=[sys.executable, "-c", script])
    async with open_stdio_transport(spec) as (read, _write):
        with anyio.fail_after(30):
            await read.receive()
    lines = capfd.readouterr().err.splitlines()
    assert f"[mcp:noisy] {'x' * STDERR_LINE_BYTES} […{10000 - STDERR_LINE_BYTES} bytes dropped]" in lines
    assert "[mcp:noisy] last words" in lines


@pytest.mark.processes
async def test_a_junk_flood_after_initialize_costs_a_few_log_records_and_the_call_still_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="subagent.tools.stdio")
    payload = make_payload(stdio_server("junk", "mcp_junk.py"))
    async with open_tools(payload, sink=EventLog()) as router:
        with anyio.fail_after(30):
            outcome = await router.call(tool_call("junk__flood", count=100_000), timeout_s=30)
    assert outcome == ToolOutcome("wrote 100000 junk lines")
    records = [r.getMessage() for r in caplog.records if r.name == "subagent.tools.stdio"]
    # The first line at once, then a summary per interval and one at the end: never one per line.
    assert 2 <= len(records) <= 5, records
    assert records[0].endswith("not JSON-RPC (dropped): this is not JSON-RPC")
    assert "(100000 in all; first: this is not JSON-RPC)" in records[-1]
