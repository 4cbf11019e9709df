"""A small MCP server for the agentd demo, written with the official `mcp` SDK.

It serves a "field notes" library: read-only notes you can list and read, tools that search and
measure them, and one resource that changes, `notes://inbox`, which the `post` tool appends to.
A client may subscribe to the inbox (`resources/subscribe` on a 2025-11-25 connection, a
`subscriptions/listen` stream on a 2026-07-28 one) and is told when a post changes it, so a
reactive trigger can watch it (docs/triggers.md).

    python mcp_demo_server.py              # stdio: each client starts its own copy
    python mcp_demo_server.py --port 8765  # streamable HTTP on http://127.0.0.1:8765/mcp, shared

A subscriber hears only of posts made to the same server process: a trigger's watcher and the
tasks that post must share one server, which is what `--port` is for. `agentd demo` grants the
stdio form to a scripted task. Shipped as package data (never imported by agentd), so an
installed agentd runs it too.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated

NOTES = {
    "readme": (
        "agentd runs each AI agent task as its own supervised process. A supervisor that never talks "
        "to the model enforces budgets, liveness and the kill ladder, and records exactly one terminal "
        "status per task, so you always know why a run ended."
    ),
    "ladder": (
        "The kill ladder: ask the child to cancel, wait five seconds, send SIGTERM to its process "
        "group, wait two seconds, send SIGKILL, then reap it through its pidfd."
    ),
    "budgets": (
        "Every task has a step budget, a token budget and a deadline. Nested subagents share a tree "
        "budget: a child's grant is a reservation against its parent's remaining budget."
    ),
}

INBOX_URI = "notes://inbox"
INBOX_CAP = 100  # posts kept; the oldest go first
inbox: list[str] = []

# 2026-07-28 clients listen on this bus; 2025-11-25 clients subscribe per URI (below).
bus = InMemorySubscriptionBus()
server = MCPServer(
    "field-notes",
    version="1.1.0",
    instructions="Field notes about agentd, and an inbox that `post` appends to.",
    subscriptions=bus,
)
# The 2025 subscribers of the inbox: one session per connection (a session object is per request).
subscribers: dict[object, ServerSession] = {}


def _note(name: str) -> str:
    try:
        return NOTES[name]
    except KeyError:
        raise ToolError(f"no note named {name!r}; available: {', '.join(sorted(NOTES))}") from None


@server.resource("notes://readme", name="readme", description="What agentd is, in three sentences.")
def readme() -> str:
    return NOTES["readme"]


@server.resource("notes://ladder", name="ladder", description="How agentd stops a child process.")
def ladder() -> str:
    return NOTES["ladder"]


@server.resource("notes://budgets", name="budgets", description="Step, token and deadline budgets.")
def budgets() -> str:
    return NOTES["budgets"]


@server.resource(INBOX_URI, name="inbox", description="Messages posted with the `post` tool; it changes.")
def read_inbox() -> str:
    return "\n".join(inbox) if inbox else "(the inbox is empty)"


@server.tool()
async def post(text: str) -> str:
    """Append `text` to the inbox (notes://inbox); its subscribers are told it changed."""
    inbox.append(text)
    del inbox[:-INBOX_CAP]
    await bus.publish(ResourceUpdated(uri=INBOX_URI))
    for key, session in list(subscribers.items()):
        try:
            await session.send_resource_updated(INBOX_URI)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, MCPError):
            subscribers.pop(key, None)  # its connection closed: forget it
    return f"posted; the inbox has {len(inbox)} message(s)"


async def _subscribe(
    ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams
) -> types.EmptyResult:
    if params.uri == INBOX_URI:
        subscribers[ctx.session._connection] = ctx.session  # keyed by its connection
    return types.EmptyResult()


async def _unsubscribe(
    ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams
) -> types.EmptyResult:
    if params.uri == INBOX_URI:
        subscribers.pop(ctx.session._connection, None)
    return types.EmptyResult()


# MCPServer has no public hook for 2025 subscriptions; registering these advertises
# `resources.subscribe` to 2025 clients.
server._lowlevel_server.add_request_handler("resources/subscribe", types.SubscribeRequestParams, _subscribe)
server._lowlevel_server.add_request_handler(
    "resources/unsubscribe", types.UnsubscribeRequestParams, _unsubscribe
)


@server.tool()
def word_count(text: str) -> int:
    """Count the words in `text`."""
    return len(re.findall(r"\b[\w'-]+\b", text))


@server.tool()
def search_notes(term: str) -> list[str]:
    """Names of the notes that mention `term` (case-insensitive)."""
    needle = term.lower()
    return sorted(name for name, text in NOTES.items() if needle in text.lower())


@server.tool()
def read_note(name: str) -> str:
    """The full text of the note `name`."""
    return _note(name)


def main() -> None:
    parser = argparse.ArgumentParser(description="The agentd example MCP server (field notes).")
    parser.add_argument(
        "--port",
        type=int,
        help="serve streamable HTTP on 127.0.0.1:PORT (path /mcp), shared by every client; default: stdio",
    )
    args = parser.parse_args()
    if args.port is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
