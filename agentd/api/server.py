"""The daemon's API server: accepts unix-socket connections and answers them from a `Backend`.

Owns the contract of docs/design.md §9/§14 at the socket: every connection is identified by
`SO_PEERCRED`, admitted against per-uid and global caps, and served by `agentd.api.connection.Connection`
(bounded reads, deadlines, in-order answers). Bad input is answered with an error that never
echoes it; a backend bug becomes an internal error; nothing a client sends ends the serve loop.
"""

from __future__ import annotations

import errno
import itertools
import os
import socket
from collections import Counter
from collections.abc import Iterator

import anyio
import anyio.lowlevel
import structlog

from agentd.api.backend import Backend
from agentd.api.connection import Connection, Split
from agentd.api.frames import error_frame
from agentd.api.limits import ApiLimits
from agentd.api.peercred import Caller, caller_from_socket
from protocol.api import TOO_MANY_CONNECTIONS, build_all

_log = structlog.get_logger("agentd.api")

# Log events (with agentd/api/connection.py's), part of the vocabulary in protocol/events.py.
EV_REJECT = "api.reject"
EV_ACCEPT = "api.accept"

ACCEPT_BACKOFF_S = 0.1  # after EMFILE & co: give open connections a moment to close
ACCEPT_BATCH = 256  # connections accepted per wake-up before yielding to the ones being served
_ACCEPT_TRANSIENT = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_DEFAULT_LIMITS = ApiLimits()


async def serve_api(
    listener: socket.socket,
    backend: Backend,
    *,
    limits: ApiLimits = _DEFAULT_LIMITS,
    admin_gid: int | None = None,
    stop_accepting: anyio.Event | None = None,
    split: Split | None = None,
) -> None:
    """Accept and serve API connections on `listener` until cancelled.

    `listener` is a bound, listening AF_UNIX socket (`open_listener` / `listener_from_fd`); it
    stays the caller's to close. `admin_gid` members may see and cancel every task. Once
    `stop_accepting` is set (a drain began), new clients are left in the listen backlog — with
    socket activation the next daemon serves them — while open connections are still served.
    With `split`, this runs on the API's own loop and hands what it does not answer there to the
    daemon's (`agentd.api.api_loop`).
    """
    build_all()  # the API's models are built at first use (protocol/api.py): all of them now, once
    listener.setblocking(False)
    daemon_uid = os.geteuid()
    table = ConnectionTable(limits.max_connections_per_uid, limits.max_connections)
    numbers = itertools.count(1)
    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as accepting:
            if stop_accepting is not None:
                tg.start_soon(_cancel_when_set, stop_accepting, accepting)
            await _accept_forever(listener, tg, daemon_uid, admin_gid, backend, limits, table, numbers, split)
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
    table: ConnectionTable,
    numbers: Iterator[int],
    split: Split | None,
) -> None:
    while True:
        await anyio.wait_readable(listener)
        # Empty the backlog (up to a batch) per wake-up: a flood of connections must not keep it
        # full, or a normal client could not even get in line. Refusals cost no task.
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                break  # the backlog is empty (or another waiter won)
            except ConnectionAbortedError:
                continue  # the client gave up in the backlog
            except OSError as exc:
                if exc.errno not in _ACCEPT_TRANSIENT:
                    raise
                _log.warning(EV_ACCEPT, comp="supervisor", err=exc.strerror)
                await anyio.sleep(ACCEPT_BACKOFF_S)
                break
            caller = _identify(conn, daemon_uid=daemon_uid, admin_gid=admin_gid)
            if caller is None:
                continue
            refusal = table.admit(caller.uid, admin=caller.is_admin)
            if refusal is not None:
                _refuse(conn, caller, refusal)
                continue
            tg.start_soon(_serve_connection, conn, caller, next(numbers), backend, limits, table, split)
        await anyio.lowlevel.checkpoint()  # a full batch: let the connections being served run


def _identify(conn: socket.socket, *, daemon_uid: int, admin_gid: int | None) -> Caller | None:
    try:
        return caller_from_socket(conn, daemon_uid=daemon_uid, admin_gid=admin_gid)
    except OSError as exc:
        _log.warning(EV_REJECT, comp="supervisor", err=f"no peer credentials: {exc.strerror}")
        conn.close()
        return None


class ConnectionTable:
    """Open connections per uid, admitted against a per-uid and a global cap.

    An admin (the daemon's uid, root, the admin group) is held to its per-uid cap only: other
    users together filling the global cap must not lock the operator out of their own daemon.
    """

    def __init__(self, per_uid: int, total: int) -> None:
        self._per_uid = per_uid
        self._total = total
        self._open: Counter[int] = Counter()

    def admit(self, uid: int, *, admin: bool = False) -> str | None:
        """Count a new connection in, or return why it is refused."""
        if self._open[uid] >= self._per_uid:
            return f"too many connections for uid {uid} (limit {self._per_uid})"
        if not admin and self._open.total() >= self._total:
            return f"too many connections (limit {self._total})"
        self._open[uid] += 1
        return None

    def release(self, uid: int) -> None:
        self._open[uid] -= 1
        if self._open[uid] <= 0:
            del self._open[uid]


def _refuse(conn: socket.socket, caller: Caller, refusal: str) -> None:
    """Tell a connection over a cap why (one non-blocking write into the fresh socket's empty
    buffer, so it never waits), then close it."""
    _log.warning(EV_REJECT, comp="supervisor", uid=caller.uid, pid=caller.pid, err=refusal)
    with conn:
        conn.setblocking(False)
        try:
            conn.send(error_frame(None, TOO_MANY_CONNECTIONS, refusal, retryable=True))
        except OSError:
            pass  # it left already, or will not read: nothing to tell


async def _serve_connection(
    conn: socket.socket,
    caller: Caller,
    number: int,
    backend: Backend,
    limits: ApiLimits,
    table: ConnectionTable,
    split: Split | None,
) -> None:
    """Serve an admitted connection; its place in `table` is released when it ends."""
    conn.setblocking(False)
    log = _log.bind(comp="supervisor", conn=number, uid=caller.uid, pid=caller.pid)
    with conn:
        try:
            await Connection(conn, caller, backend, limits, log, split).run()
        finally:
            table.release(caller.uid)
