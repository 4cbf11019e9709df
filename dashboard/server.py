"""Serving the dashboard: the listening socket (bound before the URL is printed, so `--listen
127.0.0.1:0` can name its port) and uvicorn on it until SIGINT or SIGTERM."""

from __future__ import annotations

import signal
import socket

import anyio
import uvicorn

from dashboard.app import Gate
from dashboard.fanout import TaskStreams

STOP_GRACE_S = 1


def configured(app: Gate) -> uvicorn.Config:
    """uvicorn's settings for the dashboard (loaded now, so nothing is imported while serving)."""
    # An open page holds its event stream open: a stop waits this long for it, then closes it.
    config = uvicorn.Config(
        app, lifespan="off", log_level="warning", access_log=False, timeout_graceful_shutdown=STOP_GRACE_S
    )
    config.load()
    return config


async def serve(config: uvicorn.Config, sock: socket.socket, streams: TaskStreams) -> None:
    """Serve on `sock` until SIGINT or SIGTERM (a graceful stop, then a clean exit); the shared
    event streams' pumps run in a task group of the server's."""
    previous = signal.signal(signal.SIGTERM, _after_graceful_stop)
    try:
        async with anyio.create_task_group() as group:
            streams.attach(group)
            await uvicorn.Server(config).serve(sockets=[sock])
            group.cancel_scope.cancel()
    finally:
        signal.signal(signal.SIGTERM, previous)


def _after_graceful_stop(signum: int, frame: object) -> None:
    """SIGTERM once uvicorn has stopped serving: nothing is left to do."""
