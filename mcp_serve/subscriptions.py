"""Telling a client what changed: that a subscribed task's state changed (its terminal one
included), that the waiting approvals changed, and that the caller's tasks appeared or ended.

`Changes` holds one subscriber's interests; where the news goes is a `Sink`: a connection's
standalone channel for 2025-11-25 subscriptions (`SessionSink`), a `subscriptions/listen` stream
for 2026-07-28 ones (`mcp_serve.listen`). A subscribed task's changes come from the server's one
`task.watch` stream (`TaskWatch`), whatever the number of subscriptions. The list (and the
waiting approvals, once subscribed) is looked at once a subscriber wants it, then every
`LIST_POLL_S`, and at once after this server started a task (`Pulse`).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError

from agentd.api.async_port import DaemonPort
from agentd.errors import ApiClientError
from mcp_serve.task_watch import TaskWatch
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

    def __init__(self, port: DaemonPort, group: TaskGroup, pulse: Pulse, watch: TaskWatch) -> None:
        self._port = port
        self._group = group
        self._pulse = pulse
        self._watch = watch
        self._sink: Sink | None = None
        self._uris: dict[str, set[str]] = {}
        # Invariant: the tasks this subscriber listens to on `watch`, with the state last seen.
        self._watched: dict[str, tuple[str, str | None] | None] = {}
        self._heard_send, self._heard = anyio.create_memory_object_stream[TaskView](math.inf)
        self._reading = False
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
        self._unwatch_all()
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
        listening = task_id in self._watched
        if not listening:  # before the read, so that a change after it is heard
            self._watched[task_id] = None
            self._watch.add(task_id, self._hear)
        try:
            view = await self._port.call(GetRequest(params=TaskRef(task_id=task_id)))
        except ApiClientError as exc:
            if not listening:
                self._unwatch(task_id)
            code = types.INVALID_PARAMS if exc.code == NOT_FOUND else types.INTERNAL_ERROR
            raise MCPError(code, str(exc)) from None
        self._uris.setdefault(task_id, set()).add(uri)
        if view.state == "terminal":
            self._unwatch(task_id)
            return
        if self._watched.get(task_id) is None:
            self._watched[task_id] = _state(view)
        if not self._reading:
            self._reading = True
            self._spawn(self._tell_changes)

    def unsubscribe(self, uri: str) -> None:
        if uri == APPROVALS_URI:
            self._approvals = False
            return
        parsed = parse_task_uri(uri)
        if parsed is not None:
            self._uris.get(parsed[0], set()).discard(uri)

    def _hear(self, view: TaskView) -> None:
        self._heard_send.send_nowait(view)

    def _unwatch(self, task_id: str) -> None:
        self._watched.pop(task_id, None)
        self._watch.discard(task_id, self._hear)

    def _unwatch_all(self) -> None:
        for task_id in list(self._watched):
            self._unwatch(task_id)

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

    async def _tell_changes(self) -> None:
        """Announce each change of a watched task's state or status until the client is gone."""
        try:
            async for view in self._heard:
                last = self._watched.get(view.task_id)
                if last is None or _state(view) == last:
                    continue  # not (yet) subscribed, or no change of state
                self._watched[view.task_id] = _state(view)
                uris = self._uris.get(view.task_id, set())
                if view.state == "terminal" or not uris:
                    self._unwatch(view.task_id)
                if uris and not await self._updated(uris):
                    return
        finally:
            self._unwatch_all()

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
