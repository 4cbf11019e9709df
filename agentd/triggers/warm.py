"""`route = "continue"`: one warm session per trigger (docs/warm-sessions.md, docs/triggers.md).

The trigger manager hands this route each debounced delivery of a `continue` trigger; the route
keeps one `WarmSession` per trigger, started on the trigger's first delivery (the synthetic one
after arming, usually), and injects the delivery as one more turn. A session that crashes is
restarted by the trigger governor's policy (backoff with jitter; past the limit the trigger is
`failed` until a reload or `agentd triggers restart`). A session that ended cleanly (idle, its
token cap or lifetime) is dormant and starts afresh on the next delivery. A reload that removes
or changes a trigger stops its session; the next delivery starts one under the new settings.

How a session's payload is built (the configuration, `agentd.root_payload`) is the daemon's, so
it is passed in: this room sits below those.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio
import anyio.abc
import structlog

from agentd.journal.records import TaskRecord
from agentd.journal.store import Journal
from agentd.supervision.ports import RunPorts
from agentd.supervision.task_payloads import PayloadError
from agentd.supervision.warm_policy import Delivery as WarmDelivery
from agentd.supervision.warm_session import Restart, TaskRegistry, WarmSession
from agentd.triggers.manager import TriggerConfig
from agentd.triggers.plan import Delivery, Governor, GovernorPolicy, render_instruction
from protocol.api import TaskSpec
from protocol.spawn import SpawnPayload

EV_SESSION_FAILED = "trigger.failed"
EV_SESSION_BACKOFF = "trigger.backoff"

# The session's payload for one trigger and one incarnation's journaled task, from the
# configuration in force. Raises `PayloadError` when the configuration no longer allows it.
PayloadBuilder = Callable[[TriggerConfig, TaskRecord], SpawnPayload]
# The record a session's template payload is built for (its limits are the session's grant).
_PENDING = ("t_pending", "r_pending")


@dataclass
class _Entry:
    config: TriggerConfig  # what it was started with (a reload compares it)
    session: WarmSession
    governor: Governor
    failed: str | None = None


@dataclass
class WarmRoute:
    """The `WarmSessions` the trigger manager delivers `continue` deliveries to."""

    journal: Journal
    ports: Callable[[], RunPorts]
    payload: PayloadBuilder
    registry: TaskRegistry
    owner_uid: int
    governor: Callable[[], GovernorPolicy]
    log: structlog.typing.FilteringBoundLogger
    rand: Callable[[], float] = random.random
    _sessions: dict[str, _Entry] = field(default_factory=dict)
    _failed: dict[str, str] = field(default_factory=dict)
    _tg: anyio.abc.TaskGroup | None = None
    _stopping: bool = False
    # Set by `stop`: ends a backoff wait at once, so a drain never waits out a restart's delay.
    _stopped: anyio.Event = field(default_factory=anyio.Event)

    # ---- the manager's interface (`agentd.triggers.manager.WarmSessions`) -------------------

    def configure(self, triggers: Sequence[TriggerConfig]) -> None:
        wanted = {t.name: t for t in triggers}
        for name, entry in list(self._sessions.items()):
            if wanted.get(name) != entry.config:
                entry.session.stop("the trigger was changed or removed by a reload")
                del self._sessions[name]
        self._failed = {n: e for n, e in self._failed.items() if n in wanted}

    async def deliver(self, trigger: TriggerConfig, delivery: Delivery) -> None:
        config = trigger
        if self._stopping or self._tg is None or config.name in self._failed:
            return
        entry = self._sessions.get(config.name)
        if entry is None or entry.session.state == "ended":
            entry = await self._start(config)
            if entry is None:
                return
        entry.session.inject_nowait(
            WarmDelivery(config.name, config.server, delivery.uri, delivery.etag, delivery.synthetic)
        )

    def failed(self, name: str) -> str | None:
        """Why the trigger's session was given up on (the governor's limit), or None."""
        return self._failed.get(name)

    def reset(self, name: str) -> None:
        """`agentd triggers restart NAME`: forget the failure; the next delivery starts afresh."""
        self._failed.pop(name, None)
        entry = self._sessions.pop(name, None)
        if entry is not None:
            entry.session.stop("restarted by an operator")

    def pids(self) -> set[int]:
        return {pid for entry in self._sessions.values() for pid in entry.session.pids()}

    # ---- lifecycle ---------------------------------------------------------------------------

    async def serve(self) -> None:
        """Hold the sessions' task group until cancelled (after `stop`, on a drain)."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                await anyio.sleep_forever()
        finally:
            self._tg = None

    def stop(self) -> None:
        """The drain: every session's child climbs its ladder; no new session starts."""
        self._stopping = True
        self._stopped.set()
        for entry in self._sessions.values():
            entry.session.stop("agentd is shutting down")

    async def wait_stopped(self) -> None:
        for entry in list(self._sessions.values()):
            await entry.session.wait_ended()

    # ---- inside ------------------------------------------------------------------------------

    async def _start(self, config: TriggerConfig) -> _Entry | None:
        assert self._tg is not None
        # The standing instruction: {uri} is the trigger's URI or glob (each delivery names the
        # changed URI), {etag} is empty.
        instruction = render_instruction(
            config.instruction, uri=config.uri or config.glob or "", server=config.server, etag=None
        )
        spec = TaskSpec(
            instruction=instruction, model=config.model, mcp=list(config.mcp), labels={"trigger": config.name}
        )
        task_id, run_id = _PENDING
        pending = TaskRecord(task_id, run_id, self.owner_uid, None, spec, "starting", time.time())
        try:
            template = self.payload(config, pending)
        except PayloadError as exc:  # the config names something that is gone
            self._fail(config.name, f"the session cannot start: {exc}")
            return None
        governor = Governor(self.governor(), rand=self.rand)
        name = config.name
        holder: list[_Entry] = []

        async def restart(ask: Restart) -> bool:
            if ask.cause == "resumed":
                return not self._stopping
            decision = governor.on_exit(time.monotonic())
            if decision.failed:
                why = ask.last.error.message if ask.last.error is not None else ask.last.status.value
                self._fail(name, f"the warm session crashed {decision.restarts_in_window} times: {why}")
                return False
            self.log.warning(EV_SESSION_BACKOFF, trigger=name, delay_s=round(decision.delay_s, 3), warm=True)
            with anyio.move_on_after(decision.delay_s):
                await self._stopped.wait()
            return not self._stopping and holder[0] is self._sessions.get(name)

        session = WarmSession(
            self.ports(),
            self.journal,
            spec,
            self.owner_uid,
            template,
            restart=restart,
            registry=self.registry,
            name=name,
            build=lambda record: self.payload(config, record),
            trigger=name,
        )
        entry = _Entry(config=config, session=session, governor=governor)
        holder.append(entry)
        self._sessions[name] = entry
        await self._tg.start(session.run)
        return entry

    def _fail(self, name: str, why: str) -> None:
        self._failed[name] = why[:2000]
        self.log.error(EV_SESSION_FAILED, trigger=name, err=why[:2000], warm=True)
