"""The subagent's tools: granted MCP servers (stdio and streamable HTTP) plus agentd's self-tools.

`open_tools` connects every granted server concurrently and yields a `ToolRouter`, the one
surface the loop uses: `specs()` (wire-named), `resource_catalogue()`, `version` and `call()`.
On exit every server is shut down (stdio: stdin EOF, then SIGTERM, then SIGKILL to its group).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from protocol.spawn import SpawnPayload
from subagent.telemetry import EventSink
from subagent.tools.router import ToolRouter
from subagent.tools.selftools import SupervisorLink

__all__ = ["SupervisorLink", "ToolRouter", "open_tools"]


def _sole_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one real exception inside task-group wrapping, or the group itself if there are several."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else group


@asynccontextmanager
async def open_tools(
    payload: SpawnPayload, *, sink: EventSink, supervisor: SupervisorLink | None = None
) -> AsyncIterator[ToolRouter]:
    """Connect the granted MCP servers and yield the router over them and the self-tools.

    Raises:
        McpFatal: a required server could not connect (at entry) or died for good (from `call`).
    """
    router = ToolRouter(payload, sink=sink, supervisor=supervisor)
    try:
        async with anyio.create_task_group() as tg:
            for link in router.links:
                tg.start_soon(link.run)
            try:
                await router.connect_all()
                yield router
            finally:
                # Retires every connection; each transport's shutdown ladder runs shielded.
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The task group wraps whatever crossed it (McpFatal, or the caller's own error): hand
        # callers the exception they would have seen without it.
        raise _sole_error(group) from None
