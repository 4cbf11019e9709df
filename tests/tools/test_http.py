"""The streamable HTTP transport against a real `MCPServer` process on an ephemeral port.

One server process serves the module (it prints its port once it accepts connections); each
test opens its own router over it. Refusals (`refuse_next`: 503 with `Retry-After: 0`) are
server state, but every test consumes exactly the refusals it asks for.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import AsyncIterator

import anyio
import pytest
from pydantic import JsonValue

from subagent.errors import McpFatal
from subagent.messages import ToolOutcome
from subagent.tools import open_tools
from tests.support.leaks import kill_all, wait_no_descendants
from tests.tools.servers import FIXTURES, TRACEPARENT, EventLog, make_payload, tool_call

pytestmark = pytest.mark.anyio

# Fast backoff: the retry schedule itself is unit-tested; here only the count matters.
FAST_LOOP: JsonValue = {"transport_retries": 3, "backoff_initial_s": 0.01, "backoff_max_s": 0.05}


@pytest.fixture(scope="module")
async def http_port() -> AsyncIterator[int]:
    argv = [sys.executable, str(FIXTURES / "mcp_basic.py"), "--http", "0"]
    async with await anyio.open_process(argv) as server:
        assert server.stdout is not None
        with anyio.fail_after(30):
            line = await server.stdout.receive()
        yield int(line.split()[1])
        server.terminate()
        with anyio.fail_after(10):
            await server.wait()
    strays = wait_no_descendants(timeout_s=10.0)
    kill_all(strays)
    assert not strays


def http_server(name: str, port: int, **spec: JsonValue) -> dict[str, JsonValue]:
    return {"name": name, "transport": "http", "url": f"http://127.0.0.1:{port}/mcp", **spec}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_an_http_server_is_connected_listed_and_called_with_meta(http_port: int) -> None:
    events = EventLog()
    payload = make_payload(http_server("web", http_port, headers={"Authorization": "Bearer s3cret"}))
    async with open_tools(payload, sink=events) as router:
        assert (await router.call(tool_call("web__add", a=20, b=22), timeout_s=10)).text == "42"
        meta = json.loads((await router.call(tool_call("web__meta"), timeout_s=10)).text)
        assert meta["traceparent"] == TRACEPARENT
        assert "demo://readme" in router.resource_catalogue()
    (connected,) = events.named("mcp.connect", server="web")
    assert connected["transport"] == "http"
    assert connected["outcome"] == "ok"
    assert "s3cret" not in json.dumps(events.events)


async def test_refused_requests_are_retried_within_the_budget(http_port: int) -> None:
    payload = make_payload(http_server("web", http_port), loop=FAST_LOOP)
    async with open_tools(payload, sink=EventLog()) as router:
        await router.call(tool_call("web__refuse_next", count=3), timeout_s=10)
        outcome = await router.call(tool_call("web__add", a=1, b=1), timeout_s=10)
    assert outcome == ToolOutcome("2")


async def test_refusals_beyond_the_retry_budget_become_an_observation(http_port: int) -> None:
    payload = make_payload(http_server("web", http_port), loop=FAST_LOOP)
    async with open_tools(payload, sink=EventLog()) as router:
        await router.call(tool_call("web__refuse_next", count=4), timeout_s=10)
        refused = await router.call(tool_call("web__add", a=1, b=1), timeout_s=10)
        assert refused.is_error
        assert refused.text == "tool `web__add` failed: transport error: HTTP 503 after 4 attempts"
        # Nothing is broken for the next call.
        assert (await router.call(tool_call("web__add", a=1, b=2), timeout_s=10)).text == "3"


async def test_an_unreachable_optional_http_server_is_left_out() -> None:
    events = EventLog()
    payload = make_payload(http_server("gone", closed_port(), required=False), loop=FAST_LOOP)
    async with open_tools(payload, sink=events) as router:
        assert not any(spec.name.startswith("gone__") for spec in router.specs())
    (failed,) = events.named("mcp.connect", server="gone")
    assert failed["outcome"] == "failed"
    assert "after 4 attempts" in str(failed["err"])


async def test_an_unreachable_required_http_server_aborts_naming_it() -> None:
    payload = make_payload(http_server("gone", closed_port()), loop=FAST_LOOP)
    with pytest.raises(McpFatal, match="required MCP server `gone` could not connect: ConnectError"):
        async with open_tools(payload, sink=EventLog()):
            pytest.fail("unreachable")
