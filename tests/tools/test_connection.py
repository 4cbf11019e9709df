"""The SDK adapter without a server: translating JSON-RPC errors, and bounded cursor pagination."""

from __future__ import annotations

from typing import cast

import mcp_types
import pytest
from mcp import ClientSession, MCPError

from subagent.tools.connection import MAX_ITEMS, MAX_PAGES, Failure, failure_from, list_tools
from subagent.tools.http import SESSION_LOST, TRANSPORT_FAILED, session_lost

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("code", "message", "failure"),
    [
        pytest.param(
            -32001, "Request 'tools/call' timed out", Failure("timeout", "Request 'tools/call' timed out")
        ),
        pytest.param(
            -32000, "Connection closed", Failure("lost", "Connection closed"), id="connection-closed"
        ),
        pytest.param(
            -32600,
            "Session terminated",
            Failure("lost", "the server ended the HTTP session"),
            id="http-session-gone",
        ),
        pytest.param(
            TRANSPORT_FAILED, "HTTP 503 after 4 attempts", Failure("transport", "HTTP 503 after 4 attempts")
        ),
        pytest.param(
            -32602, "Unknown tool: x", Failure("protocol", "protocol error -32602: Unknown tool: x")
        ),
        pytest.param(0, "boom\n  trace", Failure("protocol", "protocol error 0: boom trace"), id="one-line"),
        pytest.param(
            -32602,
            "MCP error -32602: Tool x not found",
            Failure("protocol", "protocol error -32602: Tool x not found"),
            id="ts-sdk-prefix-not-doubled",
        ),
        pytest.param(
            SESSION_LOST,
            "the server does not know this session (HTTP 404)",
            Failure("session", "the server does not know this session (HTTP 404)"),
            id="session-lost",
        ),
    ],
)
def test_json_rpc_errors_translate_once_into_failures(code: int, message: str, failure: Failure) -> None:
    assert failure_from(MCPError(code, message)) == failure


@pytest.mark.parametrize(
    ("status", "body", "lost"),
    [
        pytest.param(404, b"", True, id="bare-404"),
        pytest.param(
            404, b'{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"Session not found"}}', True
        ),
        pytest.param(
            400,
            b'{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}',
            True,
            id="server-everything",
        ),
        pytest.param(
            404, b'{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}', False
        ),
        pytest.param(400, b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Bad params"}}', False),
        pytest.param(400, b"bad request", False, id="bare-400"),
        pytest.param(400, b"<html>invalid session</html>", True, id="html-400-naming-the-session"),
        pytest.param(500, b"session", False, id="not-a-refusal"),
    ],
)
def test_a_refusal_naming_the_session_means_the_session_is_lost(status: int, body: bytes, lost: bool) -> None:
    assert session_lost(status, body) is lost


def test_an_enormous_server_error_message_is_bounded() -> None:
    assert len(failure_from(MCPError(1, "x" * 100_000)).detail) < 600


class EndlessPages:
    """A server whose `tools/list` always has another page (a buggy or hostile cursor)."""

    def __init__(self, per_page: int, *, same_cursor: bool = False) -> None:
        self.per_page = per_page
        self.same_cursor = same_cursor
        self.requests = 0

    async def list_tools(
        self, *, params: mcp_types.PaginatedRequestParams | None = None
    ) -> mcp_types.ListToolsResult:
        self.requests += 1
        tools = [
            mcp_types.Tool(name=f"t{self.requests}_{i}", input_schema={"type": "object"})
            for i in range(self.per_page)
        ]
        cursor = "again" if self.same_cursor else str(self.requests)
        return mcp_types.ListToolsResult(tools=tools, next_cursor=cursor)


async def test_listing_stops_after_the_page_bound() -> None:
    server = EndlessPages(per_page=1)
    tools = await list_tools(cast(ClientSession, server))
    assert server.requests == MAX_PAGES
    assert len(tools) == MAX_PAGES


async def test_listing_stops_at_the_item_bound() -> None:
    server = EndlessPages(per_page=3000)
    assert len(await list_tools(cast(ClientSession, server))) == MAX_ITEMS
    assert server.requests == 4


async def test_listing_stops_when_a_cursor_repeats() -> None:
    server = EndlessPages(per_page=2, same_cursor=True)
    assert len(await list_tools(cast(ClientSession, server))) == 4
    assert server.requests == 2
