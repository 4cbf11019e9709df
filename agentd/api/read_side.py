"""The reads the API answers on its own loop: `task.get`, `task.list`, `task.match`, `daemon.status`.

Each reads the journal through the API loop's own read pool and adds what the supervisor knows
from the latest `LiveFigures` (`LiveMirror`), so none waits for the daemon's loop. The mirror keeps
two promises: a read never sees figures older than a request the daemon's loop answered before
it began (`handed_off` marks them stale, and the next read waits for new ones), and otherwise
never older than `LIVE_MAX_AGE_S` plus the daemon's loop's own backlog (a read that finds them
older asks for new ones and answers with these).
"""

from __future__ import annotations

import builtins
import os
import time
from collections.abc import Callable

import anyio

from agentd.api.backend import check_owner, task_not_found
from agentd.api.live_figures import LiveFigures, daemon_status, task_view
from agentd.api.loop_bridge import LoopBridge
from agentd.api.peercred import Caller
from agentd.journal.records import TaskRecord
from agentd.journal.store import JournalReads
from protocol.api import DaemonStatus, ListParams, MatchParams, TaskMatches, TaskRef, TaskView

# How old the figures a read answers with may be before it asks for new ones (plus the daemon's
# loop's backlog while they are taken).
LIVE_MAX_AGE_S = 0.1


class LiveMirror:
    """The API loop's copy of the supervisor's `LiveFigures`, taken on the daemon's loop."""

    def __init__(self, bridge: LoopBridge, take: Callable[[], LiveFigures], first: LiveFigures) -> None:
        self._bridge = bridge
        self._take = take
        self._figures = first
        # Invariant: `_fresh_as_of <= _handed`; figures taken after the `n`th hand-off answered
        # make `_fresh_as_of` at least `n`.
        self._handed = 0
        self._fresh_as_of = 0
        self._taking: tuple[int, anyio.Event] | None = None
        self._wanted = anyio.Event()

    def handed_off(self) -> None:
        """A request was answered on the daemon's loop: later reads must see its effects."""
        self._handed += 1

    async def figures(self) -> LiveFigures:
        """Figures fresh enough for a read beginning now."""
        needed = self._handed
        while self._fresh_as_of < needed:
            await self._take_new()
        if anyio.current_time() - self._figures.taken_at > LIVE_MAX_AGE_S:
            self._wanted.set()
        return self._figures

    async def serve(self) -> None:
        """Take new figures whenever a read found them old (a task on the API loop)."""
        while True:
            await self._wanted.wait()
            self._wanted = anyio.Event()
            await self._take_new()

    async def _take_new(self) -> None:
        """Take figures on the daemon's loop, or wait for the taking already under way."""
        if self._taking is not None:
            await self._taking[1].wait()
            return
        as_of = self._handed
        done = anyio.Event()
        self._taking = (as_of, done)
        try:
            figures = await self._bridge.on_main(self._take_async)
            if figures.taken_at >= self._figures.taken_at:
                self._figures = figures
            self._fresh_as_of = max(self._fresh_as_of, as_of)
        finally:
            self._taking = None
            done.set()

    async def _take_async(self) -> LiveFigures:
        return self._take()


class ReadSide:
    """`READ_METHODS` on the API loop (an `agentd.api.backend.ReadMethods`), with the ownership
    rule of `agentd.api.backend`: another uid's task is a missing one."""

    def __init__(self, journal: JournalReads, live: LiveMirror, started: float) -> None:
        self.journal = journal
        self.live = live
        self._started = started

    async def _owned(self, caller: Caller, task_id: str) -> TaskRecord:
        record = await self.journal.tasks.get(task_id)
        if record is None:
            raise task_not_found(task_id)
        check_owner(caller, record.owner_uid, task_id=task_id)
        return record

    async def _view(self, record: TaskRecord) -> TaskView:
        figures = await self.live.figures()
        return task_view(record, figures.tasks.get(record.task_id), anyio.current_time())

    async def get(self, caller: Caller, params: TaskRef) -> TaskView:
        return await self._view(await self._owned(caller, params.task_id))

    async def list(self, caller: Caller, params: ListParams) -> builtins.list[TaskView]:
        owner = None if caller.is_admin else caller.uid
        records = await self.journal.tasks.list(
            owner, params.state, params.limit, params.before, params.schedule_id, params.trigger
        )
        figures = await self.live.figures()
        now = anyio.current_time()
        return [task_view(r, figures.tasks.get(r.task_id), now) for r in records]

    async def match(self, caller: Caller, params: MatchParams) -> TaskMatches:
        owner = None if caller.is_admin else caller.uid
        return TaskMatches(
            task_ids=list(await self.journal.tasks.match_ids(params.prefix, owner, params.limit))
        )

    async def status(self, caller: Caller) -> DaemonStatus:
        owner = None if caller.is_admin else caller.uid
        counts = await self.journal.tasks.counts(owner)
        return daemon_status(
            await self.live.figures(),
            counts,
            self.journal.health,
            owner=owner,
            pid=os.getpid(),
            uptime_s=time.monotonic() - self._started,
        )
