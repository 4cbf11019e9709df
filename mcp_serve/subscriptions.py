"""Telling a client what changed: that a subscribed task's state changed (its terminal one
included), that the waiting approvals changed, and that the caller's tasks appeared or ended.

`Changes` holds one subscriber's interests and the watchers behind them; where the news goes is
a `Sink`: a connection's standalone channel for 2025-11-25 subscriptions (`SessionSink`), a
`subscriptions/listen` stream for 2026-07-28 ones (`mcp_serve.listen`). A subscribed task is
followed through its event stream while one of the server's `FOLLOW_SLOTS` is free (a stream holds
one of the daemon's connections for the user, who has a few dozen); beyond those, its state is
polled every `STATE_POLL_S` with the others in one `task.list`. The list (and the waiting
approvals, once subscribed) is looked at once a subscriber wants it, then every `LIST_POLL_S`, and
at once after this server started a task (`Pulse`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError

from agentd.errors import ApiClientError
from mcp_serve.daemon_port import DaemonPort
from mcp_serve.views import APPROVALS_URI, list_signature, parse_task_uri
from protocol.api import (
    NOT_FOUND,
    ApprovalListRequest,
    GetRequest,
    ListParams,
    ListRequest,
    TaskRef,
    TaskView,
)

LIST_POLL_S = 1.0
LIST_WINDOW = 100  # the newest tasks whose appearing or ending is announced
# Event streams this server holds for subscriptions at once: a third of the daemon's default
# connections per user (32), so the user's other clients and this server's calls still connect.
FOLLOW_SLOTS = 10
STATE_POLL_S = 0.05
STATE_WINDOW = 200  # the newest tasks one poll reads; an older polled task is read on its own

CLIENT_GONE = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)


class Sink(Protocol):
    """Where one subscriber's news goes. Each method raises one of `CLIENT_GONE` once it is gone."""

    async def updated(self, uri: str) -> None: ...

    async def list_changed(self) -> None: ...


class SessionSink:
    """A 2025-11-25 connection's standalone channel."""

    def __init__(self, session: ServerSession) -> None:
        self._session = session

    async def updated(self, uri: str) -> None:
        await self._session.send_resource_updated(uri)

    async def list_changed(self) -> None:
        await self._session.send_resource_list_changed()


class FollowSlots:
    """The event streams this server may hold for subscriptions (one event loop: no lock)."""

    def __init__(self, slots: int = FOLLOW_SLOTS) -> None:
        self._free = slots

    def take(self) -> bool:
        if self._free == 0:
            return False
        self._free -= 1
        return True

    def give(self) -> None:
        self._free += 1


class Pulse:
    """A server-wide "look now": set when this server started a task, heard by every list poll."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def poke(self) -> None:
        self._event.set()
        self._event = anyio.Event()

    async def wait(self, timeout_s: float) -> None:
        """Return at the next poke, or after `timeout_s`."""
        with anyio.move_on_after(timeout_s):
            await self._event.wait()


@dataclass(slots=True)
class _Seen:
    """What the last look at the list saw (None: not looked yet)."""

    tasks: frozenset[tuple[str, bool]] | None = None
    approvals: frozenset[str] | None = None


def _state(view: TaskView) -> tuple[str, str | None]:
    return view.state, view.status


def watched_task(uri: str) -> str:
    """The task id a subscribable URI names.

    Raises:
        MCPError: not a resource of ours.
    """
    parsed = parse_task_uri(uri)
    if parsed is None:
        raise MCPError(types.INVALID_PARAMS, f"no resource {uri!r}: agentd serves agentd://tasks/{{id}}")
    return parsed[0]


class Changes:
    """One subscriber's interests and the watchers behind them.

    Watchers run in `group` (which outlives any one request), each under a cancel scope of this
    subscriber's, so `close()` ends them all when the subscriber goes.
    """

    def __init__(self, port: DaemonPort, group: TaskGroup, pulse: Pulse, slots: FollowSlots) -> None:
        self._port = port
        self._group = group
        self._pulse = pulse
        self._slots = slots
        self._sink: Sink | None = None
        # Invariant: a task id is in `_watched` while a watcher for it runs.
        self._uris: dict[str, set[str]] = {}
        self._watched: set[str] = set()
        # Invariant: the watched tasks without an event stream, with their last state seen.
        self._polled: dict[str, tuple[str, str | None]] = {}
        self._approvals = False
        self._list_wanted = False
        self._polling = False
        self._scopes: set[anyio.CancelScope] = set()
        self._closed = False

    def attach(self, sink: Sink, *, list_changes: bool = True) -> None:
        """Remember where news goes; with `list_changes`, start announcing list changes."""
        self._sink = sink
        self._list_wanted = self._list_wanted or list_changes
        if list_changes:
            self._start_polling()

    def close(self) -> None:
        """The subscriber is gone: end its watchers."""
        self._closed = True
        for scope in list(self._scopes):
            scope.cancel()

    async def subscribe(self, uri: str) -> None:
        """Raises: MCPError: not a resource of ours, or not the caller's task."""
        if self._closed:
            return
        if uri == APPROVALS_URI:
            self._approvals = True
            self._start_polling()
            return
        task_id = watched_task(uri)
        try:
            view = await self._port.call(GetRequest(params=TaskRef(task_id=task_id)))
        except ApiClientError as exc:
            code = types.INVALID_PARAMS if exc.code == NOT_FOUND else types.INTERNAL_ERROR
            raise MCPError(code, str(exc)) from None
        self._uris.setdefault(task_id, set()).add(uri)
        if task_id not in self._watched and view.state != "terminal":
            self._watched.add(task_id)
            if self._slots.take():
                self._spawn(self._watch, task_id, _state(view))
            else:
                self._poll(task_id, _state(view))

    def unsubscribe(self, uri: str) -> None:
        if uri == APPROVALS_URI:
            self._approvals = False
            return
        parsed = parse_task_uri(uri)
        if parsed is not None:
            self._uris.get(parsed[0], set()).discard(uri)

    def _start_polling(self) -> None:
        if not self._polling:
            self._polling = True
            self._spawn(self._poll_list)

    def _spawn(self, function: Callable[..., Awaitable[None]], *args: object) -> None:

        async def guarded() -> None:
            with anyio.CancelScope() as scope:
                self._scopes.add(scope)
                try:
                    await function(*args)
                finally:
                    self._scopes.discard(scope)

        self._group.start_soon(guarded)

    async def _watch(self, task_id: str, last: tuple[str, str | None]) -> None:
        try:
            unfollowed = await self._follow(task_id, last)
        finally:
            self._slots.give()
        if unfollowed is None:
            self._watched.discard(task_id)
        else:
            self._poll(task_id, unfollowed)  # the stream failed (the daemon's connection cap): poll it

    async def _follow(self, task_id: str, last: tuple[str, str | None]) -> tuple[str, str | None] | None:
        """Announce the task's changes until it ends (None), or the last state seen if the stream
        could not be read."""
        async with self._port.open_follow(task_id) as items:
            async for item in items:
                if isinstance(item, ApiClientError):
                    return last
                view = item if isinstance(item, TaskView) else await self._view(task_id)
                if view is None or _state(view) == last:
                    continue
                last = _state(view)
                uris = self._uris.get(task_id, set())
                if not uris or not await self._updated(uris) or view.state == "terminal":
                    return None  # unsubscribed, the client is gone, or the task ended
        return None

    def _poll(self, task_id: str, last: tuple[str, str | None]) -> None:
        if not self._polled:
            self._spawn(self._poll_states)
        self._polled[task_id] = last

    async def _poll_states(self) -> None:
        """Compare the polled tasks' states every `STATE_POLL_S` until none is left."""
        try:
            while self._polled:
                # A look takes part of the period (a task.list): the next starts a period after this one.
                next_look = anyio.current_time() + STATE_POLL_S
                if not await self._look_at_states():
                    return  # the client is gone
                await anyio.sleep_until(next_look)
        finally:
            for task_id in self._polled:
                self._watched.discard(task_id)
            self._polled.clear()

    async def _look_at_states(self) -> bool:
        try:
            listed = await self._port.call(ListRequest(params=ListParams(limit=STATE_WINDOW)))
        except ApiClientError:
            return True  # the daemon is away; the next look tries again
        seen = {view.task_id: view for view in listed if view.task_id in self._polled}
        for task_id in [t for t in self._polled if t not in seen]:
            view = await self._view(task_id)
            if view is not None:
                seen[task_id] = view
        for task_id, view in seen.items():
            if _state(view) == self._polled[task_id]:
                continue
            self._polled[task_id] = _state(view)
            uris = self._uris.get(task_id, set())
            if view.state == "terminal" or not uris:
                del self._polled[task_id]
                self._watched.discard(task_id)
            if uris and not await self._updated(uris):
                return False
        return True

    async def _view(self, task_id: str) -> TaskView | None:
        try:
            return await self._port.call(GetRequest(params=TaskRef(task_id=task_id)))
        except ApiClientError:
            return None

    async def _updated(self, uris: set[str]) -> bool:
        """Tell the subscriber each URI changed; False once it is gone."""
        if self._sink is None:
            return True
        try:
            for uri in sorted(uris):
                await self._sink.updated(uri)
        except CLIENT_GONE:
            return False
        return True

    async def _poll_list(self) -> None:
        seen = _Seen()
        while await self._look(seen):
            await self._pulse.wait(LIST_POLL_S)

    async def _look(self, seen: _Seen) -> bool:
        """Compare the list (and the waiting approvals) with what was seen; False once the client is gone."""
        try:
            listed = await self._port.call(ListRequest(params=ListParams(limit=LIST_WINDOW)))
            pending = (
                frozenset(view.call for view in await self._port.call(ApprovalListRequest()))
                if self._approvals
                else None
            )
        except ApiClientError:
            return True  # the daemon is away; the next look tries again
        tasks = list_signature(listed)
        list_changed = self._list_wanted and seen.tasks is not None and tasks != seen.tasks
        if list_changed and not await self._list_changed():
            return False
        approvals_changed = seen.approvals is not None and pending is not None and pending != seen.approvals
        if approvals_changed and not await self._updated({APPROVALS_URI}):
            return False
        seen.tasks, seen.approvals = tasks, pending
        return True

    async def _list_changed(self) -> bool:
        if self._sink is None:
            return True
        try:
            await self._sink.list_changed()
        except CLIENT_GONE:
            return False
        return True
