"""The SDK adapter without a server: translating JSON-RPC errors, and bounded cursor pagination."""

from __future__ import annotations

from typing import cast

import mcp_types
import pytest
from mcp import ClientSession, MCPError

from subagent.tools.connection import MAX_ITEMS, MAX_PAGES, Failure, failure_from, list_tools
from subagent.tools.http import TRANSPORT_FAILED

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
    ],
)
def test_json_rpc_errors_translate_once_into_failures(code: int, message: str, failure: Failure) -> None:
    assert failure_from(MCPError(code, message)) == failure


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
