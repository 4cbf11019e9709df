"""Opening the watcher's MCP session: the subagent's transports (stdio, streamable HTTP, SSE, OAuth,
the server's environment, stderr capping, the Node address-space fix) and the SDK's era policy.

Only connecting lives here; `run.py` decides what to do with the session.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
import mcp_types
from mcp import ClientSession, MCPError
from mcp.client._probe import negotiate_auto  # the policy `Client(mode="auto")` runs, for a bare session
from mcp.client.session import MessageHandlerFnT
from pydantic import ValidationError

from protocol.spawn import LoopKnobs, McpServerSpec
from subagent.tools.connection import (
    CLIENT_INFO,
    EXIT_SEEN_WITHIN_S,
    brief,
    connect_error,
    failure_from,
    open_transport,
    start_error,
)
from subagent.tools.http import oauth_auth
from subagent.tools.stdio import StdioNotes


async def open_session(
    spec: McpServerSpec, stack: AsyncExitStack, notes: StdioNotes, on_message: MessageHandlerFnT
) -> ClientSession | str:
    """Open the transport and negotiate the server's newest era, within `connect_timeout_s`.

    Returns the session (its transport and session are on `stack`), or why it failed.
    """
    try:
        opened = open_transport(spec, LoopKnobs(), notes, oauth_auth(spec))
        read, write = await stack.enter_async_context(opened)
    except OSError as exc:
        return brief(start_error(exc))
    # Every request of the watcher (list, subscribe, a listen's acknowledgment) is bounded by it.
    session = ClientSession(
        read,
        write,
        read_timeout_seconds=spec.connect_timeout_s,
        message_handler=on_message,
        client_info=CLIENT_INFO,
        log_level=spec.log_level,
    )
    await stack.enter_async_context(session)
    try:
        with anyio.fail_after(spec.connect_timeout_s):
            await negotiate_auto(session)
    except TimeoutError:
        return connect_error(f"no answer to the handshake within {spec.connect_timeout_s:g} s", notes)
    except MCPError as exc:
        failure = failure_from(exc)
        if failure.kind == "lost" and spec.transport == "stdio":
            with anyio.move_on_after(EXIT_SEEN_WITHIN_S):
                await notes.exited.wait()
        return connect_error(failure.detail, notes)
    except (RuntimeError, ValidationError) as exc:
        return f"invalid handshake: {brief(exc)}"
    return session


async def why_lost(spec: McpServerSpec, notes: StdioNotes, fallback: str) -> str:
    """The best account of a lost session: a stdio server's exit (and last stderr line), if it exited."""
    if spec.transport == "stdio":
        with anyio.move_on_after(EXIT_SEEN_WITHIN_S):
            await notes.exited.wait()
        exited = notes.exit_text()
        if exited is not None:
            return f"the server {exited}"
    return fallback


def is_connection_loss(exc: MCPError) -> bool:
    return exc.code == mcp_types.CONNECTION_CLOSED or failure_from(exc).kind in (
        "lost",
        "session",
        "transport",
    )
