"""Driving a real API server in tests: `serving` runs one, `RawConnection` speaks bytes to it.

`RawConnection` is deliberately not the product client: it sends whatever bytes a test wants and
reads whatever comes back, every wait bounded.
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
from anyio.abc import UNIXSocketStream

from agentd.api.connection import Split
from agentd.api.limits import ApiLimits
from agentd.api.listener import open_listener
from agentd.api.loop_bridge import LoopBridge, serve_on_own_loop
from agentd.api.server import serve_api
from protocol.framing import LineSplitter, Oversize
from tests.api.in_memory_backend import InMemoryBackend

# Parsed JSON from the wire; tests index into it freely.
Message = dict[str, Any]

WAIT_S = 5.0
DEFAULT_LIMITS = ApiLimits()


@dataclass(frozen=True)
class Server:
    path: Path
    backend: InMemoryBackend
    # Set once the server saw `stop_accepting` (on its own loop, that takes a hop).
    stopped_accepting: anyio.Event


_own_loop = [False]


@contextlib.contextmanager
def serving_on_own_loop(own_loop: bool) -> Iterator[None]:
    """`serving`'s default for `own_loop` within the block."""
    before, _own_loop[0] = _own_loop[0], own_loop
    try:
        yield
    finally:
        _own_loop[0] = before


@contextlib.asynccontextmanager
async def serving(
    path: Path,
    backend: InMemoryBackend | None = None,
    *,
    limits: ApiLimits = DEFAULT_LIMITS,
    admin_gid: int | None = None,
    group: int | None = None,
    stop_accepting: anyio.Event | None = None,
    own_loop: bool | None = None,
) -> AsyncIterator[Server]:
    """Run `serve_api` on a fresh listener at `path` for the duration of the block; with
    `own_loop` (by default `serving_on_own_loop`'s), on a loop of its own as the daemon runs it,
    reads answered there by `backend` (`Split`) and every other method handed to this loop."""
    backend = backend if backend is not None else InMemoryBackend()
    own_loop = _own_loop[0] if own_loop is None else own_loop
    serve = functools.partial(serve_api, limits=limits, admin_gid=admin_gid)
    stopped = anyio.Event()
    with open_listener(path, group=group) as sock:
        async with anyio.create_task_group() as tg:
            if own_loop:
                split = functools.partial(_serve_split, serve, sock, backend, stop_accepting, stopped)
                tg.start_soon(serve_on_own_loop, split)
            else:
                tg.start_soon(functools.partial(serve, sock, backend, stop_accepting=stop_accepting))
                if stop_accepting is not None:
                    tg.start_soon(_tell_when_seen, stop_accepting, stopped)
            try:
                yield Server(path, backend, stopped)
            finally:
                tg.cancel_scope.cancel()


async def _serve_split(
    serve: Callable[..., Awaitable[None]],
    sock: socket.socket,
    backend: InMemoryBackend,
    stop_accepting: anyio.Event | None,
    stopped: anyio.Event,
    bridge: LoopBridge,
) -> None:
    """`serve_api` on the API's loop; `stop_accepting` (this test's loop's) relayed to it."""
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        if stop_accepting is not None:
            tg.start_soon(_relay_then_tell, bridge, stop_accepting, stop, stopped)
        await serve(sock, backend, stop_accepting=stop, split=Split(bridge, backend, lambda: None))


async def _tell_when_seen(stop_accepting: anyio.Event, stopped: anyio.Event) -> None:
    await stop_accepting.wait()
    await anyio.lowlevel.checkpoint()  # the accept loop's waiter, woken first, has seen it
    stopped.set()


async def _relay_then_tell(
    bridge: LoopBridge, stop_accepting: anyio.Event, stop: anyio.Event, stopped: anyio.Event
) -> None:
    await bridge.relay(stop_accepting, stop)
    await anyio.lowlevel.checkpoint()  # the accept loop's waiter, woken first, has seen it

    async def tell() -> None:
        stopped.set()

    await bridge.on_main(tell)


def request_line(method: str, params: dict[str, Any] | None = None, *, request_id: int | str = 1) -> bytes:
    frame: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        frame["params"] = params
    return json.dumps(frame).encode() + b"\n"


class RawConnection:
    """One client connection that writes raw bytes and reads JSON lines."""

    def __init__(self, stream: UNIXSocketStream) -> None:
        self._stream = stream
        self._splitter = LineSplitter(64 * 1024 * 1024)
        self._lines: deque[bytes] = deque()
        self.raw_received = bytearray()

    @classmethod
    async def open(cls, path: Path) -> RawConnection:
        return cls(await anyio.connect_unix(path))

    async def __aenter__(self) -> RawConnection:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def send(self, data: bytes) -> None:
        await self._stream.send(data)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def request(
        self, method: str, params: dict[str, Any] | None = None, *, request_id: int | str = 1
    ) -> Message:
        await self.send(request_line(method, params, request_id=request_id))
        return await self.receive()

    async def receive(self, timeout_s: float = WAIT_S) -> Message:
        """The next message; fails the test if none comes within `timeout_s` or the peer closes."""
        message = await self.receive_or_eof(timeout_s)
        assert message is not None, "the server closed the connection"
        return message

    async def receive_or_eof(self, timeout_s: float = WAIT_S) -> Message | None:
        with anyio.fail_after(timeout_s):
            while not self._lines:
                try:
                    data = await self._stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return None
                self.raw_received += data
                for line in self._splitter.feed(data):
                    assert not isinstance(line, Oversize)
                    self._lines.append(line)
        message = json.loads(self._lines.popleft())
        assert isinstance(message, dict)
        return message

    async def receive_until_closed(self, timeout_s: float = WAIT_S) -> list[Message]:
        """Every message until the server closes the connection (bounded by `timeout_s`)."""
        messages: list[Message] = []
        with anyio.fail_after(timeout_s):
            while (message := await self.receive_or_eof(timeout_s)) is not None:
                messages.append(message)
        return messages
