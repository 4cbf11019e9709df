"""Telling a client what changed (the 2025-11-25 era): `notifications/resources/updated` for each
subscribed task's state changes, its terminal one included, and
`notifications/resources/list_changed` when the caller's tasks appear or end.

Each subscribed task has one watcher that follows its events and compares the task's state after
each; the list (and the waiting approvals, once subscribed) is looked at once the client first
lists or subscribes, then every `LIST_POLL_S`, and at once after this server started a task.
"""

from __future__ import annotations

from dataclasses import dataclass

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

_CLIENT_GONE = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)


@dataclass(slots=True)
class _Seen:
    """What the last look at the list saw (None: not looked yet)."""

    tasks: frozenset[tuple[str, bool]] | None = None
    approvals: frozenset[str] | None = None


def _state(view: TaskView) -> tuple[str, str | None]:
    return view.state, view.status


class Changes:
    """The subscriptions of one client and the watchers behind them."""

    def __init__(self, port: DaemonPort, group: TaskGroup) -> None:
        self._port = port
        self._group = group
        self._session: ServerSession | None = None
        # Invariant: a task id is in `_watched` while a watcher for it runs.
        self._uris: dict[str, set[str]] = {}
        self._watched: set[str] = set()
        self._approvals = False
        self._poked = anyio.Event()
        self._polling = False

    def attach(self, session: ServerSession) -> None:
        """Remember where notifications go, and start announcing list changes."""
        self._session = session
        if not self._polling:
            self._polling = True
            self._group.start_soon(self._poll_list)

    def poke(self) -> None:
        """This server just started a task: look at the list now."""
        self._poked.set()

    async def subscribe(self, session: ServerSession, uri: str) -> None:
        """Raises: MCPError: not a resource of ours, or not the caller's task."""
        self.attach(session)
        if uri == APPROVALS_URI:
            self._approvals = True
            return
        parsed = parse_task_uri(uri)
        if parsed is None:
            raise MCPError(types.INVALID_PARAMS, f"no resource {uri!r}: agentd serves agentd://tasks/{{id}}")
        task_id = parsed[0]
        try:
            view = await self._port.call(GetRequest(params=TaskRef(task_id=task_id)))
        except ApiClientError as exc:
            code = types.INVALID_PARAMS if exc.code == NOT_FOUND else types.INTERNAL_ERROR
            raise MCPError(code, str(exc)) from None
        self._uris.setdefault(task_id, set()).add(uri)
        if task_id not in self._watched and view.state != "terminal":
            self._watched.add(task_id)
            self._group.start_soon(self._watch, task_id, _state(view))

    def unsubscribe(self, uri: str) -> None:
        if uri == APPROVALS_URI:
            self._approvals = False
            return
        parsed = parse_task_uri(uri)
        if parsed is not None:
            self._uris.get(parsed[0], set()).discard(uri)

    async def _watch(self, task_id: str, last: tuple[str, str | None]) -> None:
        try:
            async with self._port.open_follow(task_id) as items:
                async for item in items:
                    if isinstance(item, ApiClientError):
                        return
                    view = item if isinstance(item, TaskView) else await self._view(task_id)
                    if view is None or _state(view) == last:
                        continue
                    last = _state(view)
                    uris = self._uris.get(task_id, set())
                    if not uris or not await self._updated(uris):
                        return  # unsubscribed, or the client is gone
                    if view.state == "terminal":
                        return
        finally:
            self._watched.discard(task_id)

    async def _view(self, task_id: str) -> TaskView | None:
        try:
            return await self._port.call(GetRequest(params=TaskRef(task_id=task_id)))
        except ApiClientError:
            return None

    async def _updated(self, uris: set[str]) -> bool:
        """Tell the client each URI changed; False once it is gone."""
        session = self._session
        if session is None:
            return True
        try:
            for uri in sorted(uris):
                await session.send_resource_updated(uri)
        except _CLIENT_GONE:
            return False
        return True

    async def _poll_list(self) -> None:
        seen = _Seen()
        while await self._look(seen):
            with anyio.move_on_after(LIST_POLL_S):
                await self._poked.wait()
            self._poked = anyio.Event()

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
        if seen.tasks is not None and tasks != seen.tasks and not await self._list_changed():
            return False
        approvals_changed = seen.approvals is not None and pending is not None and pending != seen.approvals
        if approvals_changed and not await self._updated({APPROVALS_URI}):
            return False
        seen.tasks, seen.approvals = tasks, pending
        return True

    async def _list_changed(self) -> bool:
        assert self._session is not None  # attach() set it before starting the poll
        try:
            await self._session.send_resource_list_changed()
        except _CLIENT_GONE:
            return False
        return True
