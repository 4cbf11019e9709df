"""The trigger manager: resource watchers in, journaled tasks out (docs/design.md §11; docs/triggers.md).

One watcher process per MCP server that has triggers (`agentd.triggers.watcher`), restarted by
the governor when it dies. Each `ev/resource` is given to the one trigger that owns its URI, held
by that trigger's debouncer, and — once due and admitted by its `max_inflight` gate — journaled
as a queued task carrying `trigger` and `uri` *before* anything else happens (log, metrics, the
supervisor's wake-up). The supervisor tells the manager when such a task ends (`task_ended`),
which frees a slot of its trigger. What is not journaled yet (held by the debouncer or waiting at
the gate) is lost with the daemon, and covered by the synthetic "possibly changed" per URI that
every (re)armed watcher sends.

Each watcher also reports its server's catalogue (tools, resources; `ev/catalogue`); the manager
puts the latest per server on the `CatalogueBoard` the spawn payloads of tasks granted that server
read (agentd/supervision/task_payloads.py), so their first model request does not wait for their
own MCP connection.

While a URI's window is open its task-to-be may be prestarted: the manager takes the task's ids
from the journal's allocation and asks the supervisor's parking for its child
(agentd/supervision/parking.py). Every call goes down, to the journal and to supervision.

Time is `anyio.current_time()` unless a `clock` is injected; decisions live in `plan`.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import anyio
import anyio.abc
import structlog

from agentd.errors import ConfigError, JournalError, QuotaExceeded, SpawnError
from agentd.journal.store import Journal, TaskRecord, new_run_id, new_task_id
from agentd.metrics.port import NULL_METRICS, Metrics
from agentd.spawning.spawner import ExecSpawner, RLimits, SpawnRequest
from agentd.supervision.liveness import LivenessPolicy
from agentd.supervision.task_payloads import CatalogueBoard
from agentd.supervision.watch_clock import WatchClock
from agentd.triggers.plan import (
    Debouncer,
    Delivery,
    Gate,
    Governor,
    GovernorPolicy,
    OnArm,
    Overflow,
    Target,
    owner,
    render_instruction,
)
from agentd.triggers.watcher import WatcherProcess
from processes.ladder import LadderPolicy
from protocol import control
from protocol.api import TaskSpec, TriggerState, TriggerView
from protocol.spawn import McpServerSpec
from protocol.watch import (
    MAX_WATCHED_URIS,
    CatalogueReport,
    ResourceChanged,
    WatchPayload,
    WatchState,
    WatchTarget,
)

EV_ARMED = "trigger.armed"
EV_FIRED = "trigger.fired"
EV_UPDATED = "resource.updated"
EV_BACKOFF = "trigger.backoff"
EV_FAILED = "trigger.failed"
EV_UNSUPPORTED = "trigger.unsupported"
EV_PAUSED = "trigger.paused"
EV_RESUMED = "trigger.resumed"
EV_DROPPED = "trigger.dropped"
EV_CATALOGUE = "trigger.catalogue"

# The longest the dispatcher sleeps without looking again (a missed wake-up costs at most this).
MAX_SLEEP_S = 1.0
LAST_ERROR_CAP = 500
# Deliveries being journaled at once; more wait (group commit batches those in flight).
START_CONCURRENCY = 64
# A prestarted child waits this long beyond its window's `max_wait` for its task's run, and never
# longer than the cap (a window of a longer `max_wait` that lasts: its task is forked as usual).
PRESTART_HOLD_SLACK_S = 30.0
PRESTART_HOLD_MAX_S = 600.0

ServerState = Literal["starting", "armed", "unsupported", "backoff", "failed"]


def default_watch_argv() -> list[str]:
    """The real watcher: this interpreter, isolated, running `subagent.watch`."""
    import sys

    return [sys.executable, "-I", "-m", "subagent.watch"]


@dataclass(frozen=True, slots=True)
class TriggerConfig:
    """One `[[trigger]]` table as the manager runs it (built in `agentd.options`)."""

    name: str
    index: int
    server: str
    instruction: str
    uri: str | None = None
    glob: str | None = None
    route: Literal["spawn", "continue"] = "spawn"
    model: str | None = None
    # The task's MCP grant: the trigger's `mcp` (or defaults.mcp) plus `server`.
    mcp: tuple[str, ...] = ()
    debounce_s: float = 0.25
    max_wait_s: float = 2.0
    max_inflight: int = 4
    overflow: Overflow = "coalesce"
    # route spawn: a URI's task is forked and prepared while its debounce window is open.
    prestart: bool = True
    # The "possibly changed" per URI after (re)arming and resuming: delivered, or skipped.
    on_arm: OnArm = "deliver"

    def target(self) -> Target:
        return Target(self.name, self.index, uri=self.uri, glob=self.glob)

    def watch_target(self) -> WatchTarget:
        return WatchTarget(trigger=self.name, uri=self.uri, glob=self.glob)


class Prestarts(Protocol):
    """Where a task-to-be's child is parked while its window is open (agentd/supervision/parking.py)."""

    def prestart(self, record: TaskRecord, hold_s: float) -> bool:
        """Park a held child for `record` (as it will be journaled) for at most `hold_s`; False
        when none was parked."""
        ...

    def discard(self, task_id: str, reason: str) -> None:
        """Kill and reap `task_id`'s parked child, if there is one."""
        ...


class WarmSessions(Protocol):
    """Where `route = "continue"` deliveries go (warm sessions, supervised elsewhere). Without
    one, such triggers are not run (config validation refuses them until warm sessions exist)."""

    def configure(self, triggers: Sequence[TriggerConfig]) -> None:
        """The `continue` triggers now configured (at start and on each reload)."""
        ...

    async def deliver(self, trigger: TriggerConfig, delivery: Delivery) -> None:
        """One debounced delivery for `trigger`'s session. Must not raise; bounded."""
        ...

    def failed(self, name: str) -> str | None:
        """Why the trigger's session was given up on (the governor's limit), or None."""
        ...

    def reset(self, name: str) -> None:
        """Forget a given-up session (`agentd triggers restart NAME`)."""
        ...


@dataclass(frozen=True, slots=True)
class ManagerOptions:
    """How watchers are run and restarted (`[supervision]`, mapped in `agentd.options`)."""

    governor: GovernorPolicy = field(default_factory=GovernorPolicy)
    liveness: LivenessPolicy = field(default_factory=LivenessPolicy)
    ladder: LadderPolicy = field(default_factory=LadderPolicy)
    # The watcher program; tests pass a protocol-speaking fixture, the default is the real one.
    argv: tuple[str, ...] | None = None
    stderr_line_cap: int = 8192


@dataclass
class _Trigger:
    config: TriggerConfig
    debouncer: Debouncer
    gate: Gate
    # Per held URI: the task its window will become (as it will be journaled), whose child is
    # prestarted (parked).
    tickets: dict[str, TaskRecord] = field(default_factory=dict)
    paused: bool = False
    deliveries: int = 0
    dropped: int = 0
    tasks_started: int = 0
    last_fired_at: float | None = None
    last_error: str | None = None

    @classmethod
    def build(cls, config: TriggerConfig) -> _Trigger:
        return cls(
            config,
            Debouncer(config.debounce_s, config.max_wait_s),
            Gate(config.max_inflight, config.overflow),
        )


@dataclass
class _Server:
    name: str
    spec: McpServerSpec | None
    triggers: tuple[TriggerConfig, ...]
    governor: Governor
    state: ServerState = "starting"
    subscribed: frozenset[str] = frozenset()
    era: str | None = None
    last_error: str | None = None
    watcher: WatcherProcess | None = None
    # Set to stop this server's loop for good (removed by a reload, or the daemon drains).
    removed: bool = False
    # Set to wake a server waiting in backoff or failed (a restart, a reload that changed it).
    kick: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    # Each URI's owner among `triggers` (cleared when they change; bounded like the subscriptions).
    owners: dict[str, str | None] = field(default_factory=dict)
    # URIs whose next synthetic report is the one after (re)arming, not a glob's new match.
    arming: set[str] = field(default_factory=set)

    def owner_of(self, uri: str) -> str | None:
        if uri not in self.owners:
            if len(self.owners) >= MAX_WATCHED_URIS:
                self.owners.clear()
            self.owners[uri] = owner(uri, self.targets())
        return self.owners[uri]

    def said_unsupported(self) -> bool:
        # A method, not an inline test: the watcher's reports change `state` across awaits.
        return self.state == "unsupported"

    def targets(self) -> tuple[Target, ...]:
        return tuple(t.target() for t in self.triggers)

    def fingerprint(self) -> tuple[object, ...]:
        return (self.spec, tuple((t.name, t.uri, t.glob) for t in self.triggers))


class TriggerManager:
    """Runs every trigger of the configuration. Obtain, `load`, `configure`, `serve`; `stop` on drain."""

    def __init__(
        self,
        journal: Journal,
        *,
        server_spec: Callable[[str], McpServerSpec],
        on_fired: Callable[[], None],
        log: structlog.typing.FilteringBoundLogger,
        options: ManagerOptions | None = None,
        owner_uid: int | None = None,
        metrics: Metrics = NULL_METRICS,
        clock: Callable[[], float] = anyio.current_time,
        rand: Callable[[], float] = random.random,
        spawner: ExecSpawner | None = None,
        warm: WarmSessions | None = None,
        parking: Prestarts | None = None,
        catalogues: CatalogueBoard | None = None,
        watch_clock: WatchClock | None = None,
    ) -> None:
        self.journal = journal
        self.options = options or ManagerOptions()
        self._server_spec = server_spec
        self._on_fired = on_fired
        self._log = log
        self._metrics = metrics
        self._clock = clock
        self._rand = rand
        self._spawner = spawner or ExecSpawner()
        self._warm = warm
        self._parking = parking
        # Written here, read by the payloads of the tasks granted a watched server.
        self.catalogues = catalogues if catalogues is not None else CatalogueBoard()
        # Checks each watcher's liveness with every subagent's (the supervisor's clock).
        self._watch_clock = watch_clock
        self._owner_uid = os.getuid() if owner_uid is None else owner_uid
        self._triggers: dict[str, _Trigger] = {}
        self._servers: dict[str, _Server] = {}
        self._paused: set[str] = set()
        self._counts: dict[str, tuple[int, int, float | None]] = {}
        self._wake = anyio.Event()
        self._limiter = anyio.CapacityLimiter(START_CONCURRENCY)
        self._tg: anyio.abc.TaskGroup | None = None
        self._stopping = False

    # ---- composition -------------------------------------------------------------------------

    async def load(self) -> None:
        """Read what survives a restart: paused triggers, and each trigger's tasks (its unfinished
        ones count against `max_inflight`). Call after the supervisor's recovery."""
        self._paused = await self.journal.triggers.paused()
        self._counts = await self.journal.triggers.counts()

    def configure(self, triggers: Sequence[TriggerConfig], options: ManagerOptions | None = None) -> None:
        """Make the running triggers those of `triggers` (at start and on each reload). A watcher
        whose server and targets did not change keeps running; others are (re)started or stopped."""
        if options is not None:
            self.options = options
        routes = {"spawn", "continue"} if self._warm is not None else {"spawn"}
        wanted = {t.name: t for t in triggers if t.route in routes}
        if self._warm is not None:
            self._warm.configure([t for t in wanted.values() if t.route == "continue"])
        for name in list(self._triggers):
            if name not in wanted:
                self._tear_up_all(self._triggers.pop(name), "its trigger was removed")
        for name, config in wanted.items():
            current = self._triggers.get(name)
            if current is None:
                fresh = _Trigger.build(config)
                fresh.paused = name in self._paused
                total, unfinished, last = self._counts.get(name, (0, 0, None))
                fresh.tasks_started, fresh.last_fired_at = total, last
                fresh.gate.inflight = unfinished
                self._triggers[name] = fresh
                if self._tg is not None:
                    # Added by a reload: its tasks from before (a trigger removed and re-added)
                    # may still run; count them against max_inflight.
                    self._tg.start_soon(self._recount, name)
            elif current.config != config:
                inflight = current.gate.inflight
                current.config = config
                self._tear_up_all(current, "its trigger changed")
                current.debouncer = Debouncer(config.debounce_s, config.max_wait_s)
                current.gate = Gate(config.max_inflight, config.overflow)
                current.gate.inflight = inflight
        by_server: dict[str, list[TriggerConfig]] = {}
        for config in wanted.values():
            by_server.setdefault(config.server, []).append(config)
        for name, server in list(self._servers.items()):
            if name not in by_server:
                self._remove_server(server)
        for name, configs in by_server.items():
            configs.sort(key=lambda t: t.index)
            spec, error = self._spec(name)
            current_server = self._servers.get(name)
            if current_server is not None and not current_server.removed:
                before = current_server.fingerprint()
                current_server.spec, current_server.triggers = spec, tuple(configs)
                current_server.owners.clear()
                current_server.governor.policy = self.options.governor  # a reload's new limits
                current_server.last_error = error or current_server.last_error
                if current_server.fingerprint() != before:
                    # Its assignment changed: a fresh watcher with the new one, counted afresh.
                    current_server.governor.reset()
                    self._restart(current_server, "its triggers changed")
                elif current_server.state == "failed":
                    current_server.governor.reset()  # a reload tries a failed watcher again
                    current_server.kick.set()
                continue
            server = _Server(name, spec, tuple(configs), Governor(self.options.governor, self._rand))
            server.last_error = error
            self.catalogues.forget(name)  # listed by a watcher of an earlier assignment
            self._servers[name] = server
            if self._tg is not None:
                self._tg.start_soon(self._run_server, server)
        self._wake.set()

    async def _recount(self, name: str) -> None:
        try:
            counts = await self.journal.triggers.counts()
        except JournalError:
            return  # best effort: the count only bounds how many more it starts
        self._counts = counts
        trigger = self._triggers.get(name)
        if trigger is not None and name in counts:
            total, unfinished, last = counts[name]
            trigger.tasks_started = max(trigger.tasks_started, total)
            trigger.last_fired_at = trigger.last_fired_at or last
            trigger.gate.inflight = max(trigger.gate.inflight, unfinished)

    def _spec(self, server: str) -> tuple[McpServerSpec | None, str | None]:
        try:
            return self._server_spec(server), None
        except (ConfigError, KeyError, ValueError) as exc:
            return None, f"server {server!r}: {exc}"[:LAST_ERROR_CAP]

    async def serve(self) -> None:
        """Run watchers and deliveries until cancelled (`stop` first, on a drain)."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                for server in self._servers.values():
                    tg.start_soon(self._run_server, server)
                await self._dispatch_forever()
        finally:
            self._tg = None

    def begin_stop(self) -> None:
        """No more deliveries; every watcher starts its kill ladder (the daemon drains)."""
        self._stopping = True
        for trigger in self._triggers.values():
            self._tear_up_all(trigger, "agentd is shutting down")
        for server in list(self._servers.values()):
            self._remove_server(server, forget=False)

    async def stop(self) -> None:
        """Stop every watcher (the kill ladder) and wait, bounded, until each is reaped."""
        self.begin_stop()
        with anyio.move_on_after(self._ladder_bound() + 1.0):
            for server in list(self._servers.values()):
                await server.done.wait()

    def _ladder_bound(self) -> float:
        ladder = self.options.ladder
        return ladder.cancel_grace_s + ladder.term_grace_s + ladder.kill_reap_s

    def owned_pids(self) -> set[int]:
        """The live watcher processes: the orphan sweep must not kill them."""
        return {
            s.watcher.pid for s in self._servers.values() if s.watcher is not None and not s.watcher.exited
        }

    # ---- one server's watcher, under the governor --------------------------------------------

    def _remove_server(self, server: _Server, *, forget: bool = True) -> None:
        server.removed = True
        server.kick.set()
        if server.watcher is not None:
            server.watcher.stop("agentd is shutting down" if self._stopping else "its triggers were removed")
        elif server.scope is not None:
            server.scope.cancel()
        if forget:
            self._servers.pop(server.name, None)
            self.catalogues.forget(server.name)

    def _restart(self, server: _Server, reason: str) -> None:
        server.kick.set()
        if server.watcher is not None:
            server.watcher.stop(f"restart: {reason}")

    async def _run_server(self, server: _Server) -> None:
        try:
            with anyio.CancelScope() as scope:
                server.scope = scope
                while not server.removed:
                    server.kick = anyio.Event()
                    outcome = await self._run_watcher_once(server)
                    if server.removed:
                        break
                    if outcome == "restart":
                        continue
                    if outcome == "unsupported":
                        await server.kick.wait()  # only a reload or a restart tries again
                        continue
                    decision = server.governor.on_exit(self._clock())
                    if decision.failed:
                        server.state = "failed"
                        self._log.error(
                            EV_FAILED,
                            server=server.name,
                            triggers=[t.name for t in server.triggers],
                            restarts=decision.restarts_in_window,
                            window_s=self.options.governor.window_s,
                            err=server.last_error,
                        )
                        await server.kick.wait()
                        server.governor.reset()
                        continue
                    server.state = "backoff"
                    self._log.warning(
                        EV_BACKOFF,
                        server=server.name,
                        delay_s=round(decision.delay_s, 3),
                        restarts=decision.restarts_in_window,
                        err=server.last_error,
                    )
                    with anyio.move_on_after(decision.delay_s):
                        await server.kick.wait()
        finally:
            server.done.set()

    async def _run_watcher_once(self, server: _Server) -> Literal["exited", "unsupported", "restart"]:
        server.state = "starting"
        server.subscribed = frozenset()
        if server.spec is None:
            server.spec, error = self._spec(server.name)
            if server.spec is None:
                server.last_error = error
                return "exited"
        watcher_id = f"w_{server.name}"[:64]
        argv = list(self.options.argv) if self.options.argv else default_watch_argv()
        # No CPU-time limit: a watcher lives as long as the daemon, and RLIMIT_CPU counts its whole
        # life (a busy server's notifications would end it after hours, by SIGXCPU).
        request = SpawnRequest(
            task_id=watcher_id,
            run_id=new_run_id(),
            handle="0",
            argv=argv,
            rlimits=RLimits(cpu_seconds=None),
        )
        try:
            proc = self._spawner.spawn(request)
        except SpawnError as exc:
            server.last_error = f"spawn: {exc}"[:LAST_ERROR_CAP]
            return "exited"
        watcher = WatcherProcess(
            proc,
            server.name,
            _Listener(self, server),
            liveness=self.options.liveness,
            ladder=self.options.ladder,
            stderr_line_cap=self.options.stderr_line_cap,
            clock=self._watch_clock,
        )
        server.watcher = watcher
        payload = WatchPayload(
            watcher_id=watcher_id, server=server.spec, targets=[t.watch_target() for t in server.triggers]
        )
        self._log.info("subagent.spawn", server=server.name, pid=proc.pid, via="exec", watcher=True)
        try:
            info = await watcher.run(payload)
        finally:
            server.watcher = None
        self._log.info("subagent.exit", server=server.name, pid=proc.pid, exit=info.describe, watcher=True)
        if watcher.stopped_by_us:
            return "restart"
        if server.said_unsupported() and info.exit_code == 0:
            return "unsupported"
        stuck = f" after it was stuck ({watcher.stuck_verdict})" if watcher.stuck_verdict else ""
        server.last_error = f"watcher {info.describe}{stuck}"
        return "exited"

    # ---- what a watcher reports --------------------------------------------------------------

    def on_state(self, server: _Server, frame: WatchState) -> None:
        params = frame.params
        server.era = params.era or server.era
        if params.state == "armed":
            if server.state != "armed":  # a (re)arm; an armed server's new list is a glob's new matches
                server.arming = set(params.subscribed)
            server.state = "armed"
            server.subscribed = frozenset(params.subscribed)
            self._log.info(
                EV_ARMED,
                server=server.name,
                triggers=[t.name for t in server.triggers],
                uris=len(params.subscribed),
                era=params.era,
            )
        elif params.state == "unsupported":
            server.state = "unsupported"
            server.last_error = (params.detail or "the server cannot notify about resource changes")[
                :LAST_ERROR_CAP
            ]
            self._log.warning(EV_UNSUPPORTED, server=server.name, detail=params.detail)
        else:
            server.state = "starting"
            if params.detail:
                server.last_error = params.detail[:LAST_ERROR_CAP]

    def on_resource(self, server: _Server, frame: ResourceChanged) -> None:
        params = frame.params
        name = server.owner_of(params.uri)
        self._log.debug(
            EV_UPDATED, server=server.name, uri=params.uri, synthetic=params.synthetic, trigger=name
        )
        trigger = self._triggers.get(name) if name is not None else None
        arming = params.synthetic and params.uri in server.arming
        server.arming.discard(params.uri)
        if trigger is None or trigger.config.server != server.name or trigger.paused:
            return
        if arming and trigger.config.on_arm == "skip":
            return
        # Only a newly held URI can be due before the dispatcher's next wake-up (a held one's due
        # time only moves later): waking it for every change made a burst cost a full pass over
        # every held URI per notification.
        delivery = Delivery(params.uri, params.etag, params.synthetic)
        if trigger.debouncer.offer(delivery, self._clock()):
            self._window_opened(trigger, delivery)
            self._wake.set()

    def on_catalogue(self, server: _Server, frame: CatalogueReport) -> None:
        params = frame.params
        if server.spec is None:
            self.catalogues.forget(server.name)
        else:
            self.catalogues.put(server.spec, params.catalogue)  # None forgets a stale one
        catalogue = params.catalogue
        self._log.info(
            EV_CATALOGUE,
            server=server.name,
            tools=len(catalogue.tools) if catalogue else None,
            resources=len(catalogue.resources) if catalogue else None,
            detail=params.detail,
        )

    def task_ended(self, record: TaskRecord) -> None:
        """A task a trigger started reached its terminal state: a slot of that trigger is free."""
        trigger = self._triggers.get(record.trigger or "")
        if trigger is not None:
            trigger.gate.ended()
            self._wake.set()

    # ---- deliveries --------------------------------------------------------------------------

    async def _dispatch_forever(self) -> None:
        while True:
            self._wake = anyio.Event()
            now = self._clock()
            starts: list[tuple[_Trigger, Delivery, TaskRecord | None]] = []
            for trigger in list(self._triggers.values()):
                if trigger.config.route == "continue" and self._warm is not None:
                    # A warm session takes the debounced deliveries as turns; it coalesces what
                    # arrives while a turn runs and has no max_inflight.
                    for delivery in trigger.debouncer.take_due(now):
                        trigger.deliveries += 1
                        trigger.last_fired_at = time.time()
                        await self._warm.deliver(trigger.config, delivery)
                    continue
                for delivery in trigger.debouncer.take_due(now):
                    trigger.deliveries += 1
                    # Taken now: a change arriving while this one is journaled opens a new window.
                    ticket = trigger.tickets.pop(delivery.uri, None)
                    admission = trigger.gate.offer(delivery)
                    self._dropped(trigger, admission.dropped)
                    trigger.gate.started(len(admission.start))  # the slot is taken now
                    if ticket is not None and delivery not in admission.start:
                        self._tear_up(ticket, "its delivery waits at max_inflight")
                        ticket = None
                    starts += [(trigger, s, ticket if s is delivery else None) for s in admission.start]
                ready = trigger.gate.take_ready()
                trigger.gate.started(len(ready))
                starts += [(trigger, start, None) for start in ready]
            if starts:
                # Journaled concurrently, so group commit batches a window's deliveries.
                async with anyio.create_task_group() as tg:
                    for trigger, start, ticket in starts:
                        tg.start_soon(self._start_limited, trigger, start, ticket)
            due = [t.debouncer.next_due() for t in self._triggers.values()]
            soonest = min((d for d in due if d is not None), default=math.inf)
            wait_s = min(max(soonest - self._clock(), 0.0), MAX_SLEEP_S)
            with anyio.move_on_after(wait_s):
                await self._wake.wait()

    def _dropped(self, trigger: _Trigger, dropped: Sequence[Delivery]) -> None:
        for delivery in dropped:
            trigger.dropped += 1
            self._metrics.fired("trigger", trigger.config.name, "dropped")
            self._log.info(
                EV_DROPPED,
                trigger=trigger.config.name,
                uri=delivery.uri,
                overflow=trigger.config.overflow,
                inflight=trigger.gate.inflight,
            )

    def _spec_for(self, config: TriggerConfig, delivery: Delivery) -> TaskSpec:
        return TaskSpec(
            instruction=render_instruction(
                config.instruction, uri=delivery.uri, server=config.server, etag=delivery.etag
            ),
            model=config.model,
            mcp=list(config.mcp),
            labels={"trigger": config.name},
        )

    def _window_opened(self, trigger: _Trigger, delivery: Delivery) -> None:
        """A URI's debounce window opened: prestart its task's child if the delivery will start at
        once when the window closes (a slot of `max_inflight` free for it, nothing waiting)."""
        config = trigger.config
        if (
            self._parking is None
            or not config.prestart
            or config.route != "spawn"
            or self._stopping
            or delivery.uri in trigger.tickets
            or trigger.gate.inflight + len(trigger.tickets) >= config.max_inflight
            or trigger.gate.waiting
        ):
            return
        # The ids the journal's `submit` would mint, taken now: the child carries them.
        record = TaskRecord(
            task_id=new_task_id(),
            run_id=new_run_id(),
            owner_uid=self._owner_uid,
            idempotency_key=None,
            spec=self._spec_for(config, delivery),
            state="queued",
            created_at=time.time(),
            trigger=config.name,
            uri=delivery.uri,
        )
        hold_s = min(config.max_wait_s + PRESTART_HOLD_SLACK_S, PRESTART_HOLD_MAX_S)
        if self._parking.prestart(record, hold_s):
            trigger.tickets[delivery.uri] = record

    def _tear_up(self, ticket: TaskRecord, reason: str) -> None:
        """The window of `ticket` ends without its task: its parked child is killed and reaped."""
        if self._parking is not None:
            self._parking.discard(ticket.task_id, reason)

    def _tear_up_all(self, trigger: _Trigger, reason: str) -> None:
        for ticket in trigger.tickets.values():
            self._tear_up(ticket, reason)
        trigger.tickets.clear()

    async def _start_limited(self, trigger: _Trigger, delivery: Delivery, ticket: TaskRecord | None) -> None:
        async with self._limiter:
            await self._start(trigger, delivery, ticket)

    async def _start(self, trigger: _Trigger, delivery: Delivery, ticket: TaskRecord | None = None) -> None:
        """Journal the delivery as a task — first — then count, log and wake the supervisor.
        Its slot of the trigger's `max_inflight` is already taken (freed again on failure). With
        a `ticket` the task takes the ids its prestarted child was parked with."""
        config = trigger.config
        if self._stopping:
            trigger.gate.ended()
            if ticket is not None:
                self._tear_up(ticket, "agentd is shutting down")
            return  # the daemon drains: the next start's synthetic deliveries cover this URI
        try:
            try:
                record, _ = await self.journal.tasks.submit(
                    self._spec_for(config, delivery),
                    self._owner_uid,
                    trigger=config.name,
                    uri=delivery.uri,
                    task_id=ticket.task_id if ticket else None,
                    run_id=ticket.run_id if ticket else None,
                )
            except BaseException:
                if ticket is not None:  # no task will take its child (a retry parks afresh)
                    self._tear_up(ticket, "its delivery was not journaled")
                raise
        except QuotaExceeded as exc:
            trigger.gate.ended()
            trigger.last_error = f"not started: {exc}"[:LAST_ERROR_CAP]
            self._metrics.fired("trigger", config.name, "refused")
            self._log.warning(EV_DROPPED, trigger=config.name, uri=delivery.uri, err=str(exc))
            return
        except JournalError as exc:
            # Not journaled: held again, so it is retried after the debounce window.
            trigger.gate.ended()
            trigger.last_error = f"journal: {exc}"[:LAST_ERROR_CAP]
            self._log.error(EV_FIRED, trigger=config.name, uri=delivery.uri, err=f"journal: {exc}")
            trigger.debouncer.offer(delivery, self._clock())
            return
        trigger.tasks_started += 1
        trigger.last_fired_at = time.time()
        self._metrics.fired("trigger", config.name, "started")
        fields = {
            "trigger": config.name,
            "uri": delivery.uri,
            "etag": delivery.etag,
            "synthetic": delivery.synthetic,
        }
        self.journal.append_event(record.task_id, EV_FIRED, fields)
        self._log.info(
            EV_FIRED, task_id=record.task_id, server=config.server, inflight=trigger.gate.inflight, **fields
        )
        self._on_fired()

    # ---- what clients see and do -------------------------------------------------------------

    def _state(self, trigger: _Trigger) -> TriggerState:
        if trigger.paused:
            return "paused"
        if (
            trigger.config.route == "continue"
            and self._warm is not None
            and self._warm.failed(trigger.config.name)
        ):
            return "failed"
        server = self._servers.get(trigger.config.server)
        return server.state if server is not None else "starting"

    def view(self, name: str) -> TriggerView:
        trigger = self._triggers.get(name)
        if trigger is None:
            raise KeyError(name)
        config = trigger.config
        server = self._servers.get(config.server)
        subscribed = server.subscribed if server is not None else frozenset()
        return TriggerView(
            name=name,
            server=config.server,
            uri=config.uri,
            glob=config.glob,
            route=config.route,
            state=self._state(trigger),
            deliveries=trigger.deliveries,
            dropped=trigger.dropped,
            tasks_started=trigger.tasks_started,
            inflight=trigger.gate.inflight,
            waiting=trigger.gate.waiting + len(trigger.debouncer),
            last_fired_at=trigger.last_fired_at,
            last_error=trigger.last_error
            or (self._warm.failed(name) if self._warm is not None and config.route == "continue" else None)
            or (server.last_error if server is not None else None),
            subscribed=sum(1 for uri in subscribed if server is not None and server.owner_of(uri) == name),
        )

    def views(self) -> list[TriggerView]:
        return [
            self.view(name) for name in sorted(self._triggers, key=lambda n: self._triggers[n].config.index)
        ]

    def summary(self) -> dict[str, int]:
        """How many triggers are in each state (daemon.status, STATUS=, metrics)."""
        out: dict[str, int] = {}
        for trigger in self._triggers.values():
            state = self._state(trigger)
            out[state] = out.get(state, 0) + 1
        return out

    def failed(self) -> list[str]:
        return sorted(name for name, t in self._triggers.items() if self._state(t) == "failed")

    async def pause(self, name: str) -> TriggerView:
        trigger = self._triggers.get(name)
        if trigger is None:
            raise KeyError(name)
        await self.journal.triggers.set_paused(name, True)
        self._paused.add(name)
        trigger.paused = True
        trigger.debouncer.clear()
        self._tear_up_all(trigger, "its trigger was paused")
        self._dropped(trigger, trigger.gate.clear())
        self._log.info(EV_PAUSED, trigger=name)
        return self.view(name)

    async def resume(self, name: str) -> TriggerView:
        """Deliver again, starting with one "possibly changed" per URI it owns (what changed
        while it was paused was not delivered), unless its `on_arm` is `skip`."""
        trigger = self._triggers.get(name)
        if trigger is None:
            raise KeyError(name)
        await self.journal.triggers.set_paused(name, False)
        self._paused.discard(name)
        if trigger.paused:
            trigger.paused = False
            server = self._servers.get(trigger.config.server)
            if server is not None and trigger.config.on_arm == "deliver":
                now = self._clock()
                for uri in sorted(server.subscribed):
                    if server.owner_of(uri) == name:
                        trigger.debouncer.offer(Delivery(uri, None, synthetic=True), now)
                self._wake.set()
            self._log.info(EV_RESUMED, trigger=name)
        return self.view(name)

    def restart(self, name: str) -> TriggerView:
        """Restart the trigger's watcher now, its restart count forgotten (a failed one too)."""
        trigger = self._triggers.get(name)
        if trigger is None:
            raise KeyError(name)
        if trigger.config.route == "continue" and self._warm is not None:
            self._warm.reset(name)
        server = self._servers.get(trigger.config.server)
        if server is not None:
            server.governor.reset()
            server.last_error = None
            trigger.last_error = None
            self._restart(server, "asked by an operator")
        return self.view(name)


_OWN_KEYS = frozenset({"server", "pid", "comp", "event", "level", "ts"})


@dataclass(frozen=True, slots=True)
class _Listener:
    """Binds a watcher's reports to its server."""

    manager: TriggerManager
    server: _Server

    def on_state(self, watcher: WatcherProcess, frame: WatchState) -> None:
        self.manager.on_state(self.server, frame)

    def on_resource(self, watcher: WatcherProcess, frame: ResourceChanged) -> None:
        self.manager.on_resource(self.server, frame)

    def on_catalogue(self, watcher: WatcherProcess, frame: CatalogueReport) -> None:
        self.manager.on_catalogue(self.server, frame)

    def on_event(self, watcher: WatcherProcess, params: control.EventParams) -> None:
        # The watcher's fields, cut, never overriding the keys this line sets itself.
        fields = {
            k: (v[:500] if isinstance(v, str) else v) for k, v in params.fields.items() if k not in _OWN_KEYS
        }
        self.manager._log.info(params.event, server=self.server.name, pid=watcher.pid, comp="mcp", **fields)

    def on_stderr(self, watcher: WatcherProcess, line: str) -> None:
        self.manager._log.info("log.stderr", server=self.server.name, pid=watcher.pid, line=line)

    def on_stuck(self, watcher: WatcherProcess, verdict: str) -> None:
        self.manager._log.warning("subagent.stuck", server=self.server.name, pid=watcher.pid, verdict=verdict)
