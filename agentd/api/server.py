"""The daemon's API server: accepts unix-socket connections and answers them from a `Backend`.

Owns the contract of DESIGN §9/§14 at the socket: every connection is identified by
`SO_PEERCRED`, admitted against per-uid and global caps, and served by `agentd.api.connection.Connection`
(bounded reads, deadlines, in-order answers). Bad input is answered with an error that never
echoes it; a backend bug becomes an internal error; nothing a client sends ends the serve loop.
"""

from __future__ import annotations

import builtins
import errno
import itertools
import os
import socket
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Protocol

import anyio
import structlog

from agentd.api.connection import Connection, send_all
from agentd.api.frames import error_frame
from agentd.api.peercred import Caller, caller_from_socket
from agentd.errors import ApiError
from protocol.api import (
    MAX_API_FRAME,
    NOT_FOUND,
    TOO_MANY_CONNECTIONS,
    CancelParams,
    DaemonStatus,
    EventsParams,
    EventView,
    ListParams,
    NodeView,
    SubmitParams,
    SubmitResult,
    TaskRef,
    TaskView,
    WaitParams,
)

__all__ = ["ApiError", "ApiLimits", "Backend", "Caller", "check_owner", "serve_api", "task_not_found"]

_log = structlog.get_logger("agentd.api")

# Log events (with agentd/api/connection.py's), part of the vocabulary in protocol/events.py.
EV_REJECT = "api.reject"
EV_ACCEPT = "api.accept"

ACCEPT_BACKOFF_S = 0.1  # after EMFILE & co: give open connections a moment to close
FAREWELL_WRITE_S = 1.0  # bound on the courtesy error frame sent before closing a connection
_ACCEPT_TRANSIENT = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class Backend(Protocol):
    """What the daemon implements behind the socket. It enforces the ownership rule: `check_owner`
    on every task it is asked about, and `list` filtered to the caller's tasks unless `is_admin`.

    Raise `ApiError` to refuse a request; any other exception is answered as an internal error.
    `events` yields a task's events after `after_seq`; with `follow` it keeps yielding until the
    task is terminal. It is closed (`aclose`) as soon as the client goes away.
    """

    async def submit(self, caller: Caller, params: SubmitParams) -> SubmitResult: ...
    async def get(self, caller: Caller, params: TaskRef) -> TaskView: ...
    async def list(self, caller: Caller, params: ListParams) -> builtins.list[TaskView]: ...
    async def cancel(self, caller: Caller, params: CancelParams) -> TaskView: ...
    async def wait(self, caller: Caller, params: WaitParams) -> TaskView: ...
    def events(self, caller: Caller, params: EventsParams) -> AsyncIterator[EventView]: ...
    async def tree(self, caller: Caller, params: TaskRef) -> builtins.list[NodeView]: ...
    async def status(self, caller: Caller) -> DaemonStatus: ...


@dataclass(frozen=True, slots=True)
class ApiLimits:
    """Bounds on what one client can cost the daemon."""

    max_frame: int = MAX_API_FRAME
    # Once a frame's first byte has been read, the rest must arrive within this.
    frame_deadline_s: float = 10.0
    # A connection with no partial frame and no request in flight is closed after this.
    idle_timeout_s: float = 300.0
    # Each frame written must be taken by the client within this, or the client is dropped.
    write_deadline_s: float = 10.0
    max_connections_per_uid: int = 32
    max_connections: int = 1024
    # Invalid frames in a row before the connection is closed (a peer speaking another protocol).
    max_consecutive_faults: int = 64
    max_response_bytes: int = 64 * 1024 * 1024
    # Frames read ahead while one is being answered; beyond this the reader stops reading.
    max_pipelined_frames: int = 8


def task_not_found(task_id: str | None = None) -> ApiError:
    """The one NOT_FOUND error for a task, whether it is missing or belongs to someone else."""
    what = f"no task {task_id!r}" if task_id is not None else "no such task"
    return ApiError(NOT_FOUND, what)


def check_owner(caller: Caller, owner_uid: int, *, task_id: str | None = None) -> None:
    """Refuse `caller` a task owned by another uid unless the caller is an admin.

    Raises NOT_FOUND, not FORBIDDEN, with the same message as a missing task (`task_not_found`),
    so a caller cannot probe which task ids exist.
    """
    if owner_uid != caller.uid and not caller.is_admin:
        raise task_not_found(task_id)


async def serve_api(
    listener: socket.socket,
    backend: Backend,
    *,
    limits: ApiLimits = ApiLimits(),
    admin_gid: int | None = None,
    stop_accepting: anyio.Event | None = None,
) -> None:
    """Accept and serve API connections on `listener` until cancelled.

    `listener` is a bound, listening AF_UNIX socket (`open_listener` / `listener_from_fd`); it
    stays the caller's to close. `admin_gid` members may see and cancel every task. Once
    `stop_accepting` is set (a drain began), new clients are left in the listen backlog — with
    socket activation the next daemon serves them — while open connections are still served.
    """
    listener.setblocking(False)
    daemon_uid = os.geteuid()
    table = _ConnectionTable(limits.max_connections_per_uid, limits.max_connections)
    numbers = itertools.count(1)
    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as accepting:
            if stop_accepting is not None:
                tg.start_soon(_cancel_when_set, stop_accepting, accepting)
            await _accept_forever(listener, tg, daemon_uid, admin_gid, backend, limits, table, numbers)
        await anyio.sleep_forever()


async def _cancel_when_set(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _accept_forever(
    listener: socket.socket,
    tg: anyio.abc.TaskGroup,
    daemon_uid: int,
    admin_gid: int | None,
    backend: Backend,
    limits: ApiLimits,
    table: _ConnectionTable,
    numbers: Iterator[int],
) -> None:
    while True:
        await anyio.wait_readable(listener)
        try:
            conn, _ = listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            continue  # another waiter won, or the client gave up in the backlog
        except OSError as exc:
            if exc.errno not in _ACCEPT_TRANSIENT:
                raise
            _log.warning(EV_ACCEPT, comp="supervisor", err=exc.strerror)
            await anyio.sleep(ACCEPT_BACKOFF_S)
            continue
        caller = _identify(conn, daemon_uid=daemon_uid, admin_gid=admin_gid)
        if caller is not None:
            tg.start_soon(_serve_connection, conn, caller, next(numbers), backend, limits, table)


def _identify(conn: socket.socket, *, daemon_uid: int, admin_gid: int | None) -> Caller | None:
    try:
        return caller_from_socket(conn, daemon_uid=daemon_uid, admin_gid=admin_gid)
    except OSError as exc:
        _log.warning(EV_REJECT, comp="supervisor", err=f"no peer credentials: {exc.strerror}")
        conn.close()
        return None


class _ConnectionTable:
    """Open connections per uid, admitted against a per-uid and a global cap."""

    def __init__(self, per_uid: int, total: int) -> None:
        self._per_uid = per_uid
        self._total = total
        self._open: Counter[int] = Counter()

    def admit(self, uid: int) -> str | None:
        """Count a new connection in, or return why it is refused."""
        if self._open[uid] >= self._per_uid:
            return f"too many connections for uid {uid} (limit {self._per_uid})"
        if self._open.total() >= self._total:
            return f"too many connections (limit {self._total})"
        self._open[uid] += 1
        return None

    def release(self, uid: int) -> None:
        self._open[uid] -= 1
        if self._open[uid] <= 0:
            del self._open[uid]


async def _serve_connection(
    conn: socket.socket,
    caller: Caller,
    number: int,
    backend: Backend,
    limits: ApiLimits,
    table: _ConnectionTable,
) -> None:
    conn.setblocking(False)
    log = _log.bind(comp="supervisor", conn=number, uid=caller.uid, pid=caller.pid)
    with conn:
        refusal = table.admit(caller.uid)
        if refusal is not None:
            log.warning(EV_REJECT, err=refusal)
            with anyio.move_on_after(FAREWELL_WRITE_S):
                try:
                    await send_all(conn, error_frame(None, TOO_MANY_CONNECTIONS, refusal, retryable=True))
                except OSError:
                    pass  # it left already; nothing to tell
            return
        try:
            await Connection(conn, caller, backend, limits, log).run()
        finally:
            table.release(caller.uid)
