"""The daemon's API served on a loop of its own (docs/decisions.md, "API reads on a loop of their own").

`serve_api_on_own_loop` runs `serve_api` in the API's thread (`agentd.api.loop_bridge`) with a
`Split`: `READ_METHODS` are answered there by `ReadSide`, from the API loop's own journal read pool
and the supervisor's `LiveFigures`; every other method is answered by the daemon's `DaemonBackend`
on the daemon's loop. The listener, every connection's limits, deadlines and accounting stay on
the API's loop, exactly as `serve_api` keeps them.
"""

from __future__ import annotations

import socket

import anyio

from agentd.api.connection import Split
from agentd.api.daemon_backend import DaemonBackend
from agentd.api.limits import ApiLimits
from agentd.api.loop_bridge import LoopBridge, serve_on_own_loop
from agentd.api.read_side import LiveMirror, ReadSide
from agentd.api.server import serve_api

# Read-only journal connections of the API's loop (the daemon's loop keeps its own).
API_READ_CONNECTIONS = 2


async def serve_api_on_own_loop(
    listener: socket.socket,
    backend: DaemonBackend,
    *,
    limits: ApiLimits,
    admin_gid: int | None,
    stop_accepting: anyio.Event,
) -> None:
    """`serve_api` on the API's own loop until cancelled (called on the daemon's loop)."""
    first = backend.live_figures()

    async def serve(bridge: LoopBridge) -> None:
        async with backend.journal.open_reads(API_READ_CONNECTIONS) as reads:
            live = LiveMirror(bridge, backend.live_figures, first)
            split = Split(bridge, ReadSide(reads, live, backend.started), live.handed_off)
            stop = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(live.serve)
                tg.start_soon(bridge.relay, stop_accepting, stop)
                await serve_api(
                    listener, backend, limits=limits, admin_gid=admin_gid, stop_accepting=stop, split=split
                )

    await serve_on_own_loop(serve)
