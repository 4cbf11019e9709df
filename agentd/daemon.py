"""`agentd serve`: the daemon's composition and lifecycle (docs/design.md §6, §8, §9).

Order matters. The state directory's lock and restart recovery come before the socket accepts
anything, so no client sees a half-reconciled journal; SIGTERM/SIGINT drain (stop intake,
cancel running tasks, ladder stragglers, record outcomes) and exit 0 within the drain cap; a
second signal SIGKILLs every child at once. Under systemd (docs/design.md §15) `READY=1` is sent only once
recovery is done and the socket listens; SIGHUP is bracketed by `RELOADING=1` … `READY=1`, the
drain starts with `STOPPING=1`, and the watchdog is fed from this event loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import functools
import gc
import grp
import os
import resource
import signal
import socket
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc

from agentd import logs
from agentd.api.api_loop import serve_api_on_own_loop
from agentd.api.daemon_backend import DaemonBackend
from agentd.api.limits import ApiLimits
from agentd.api.listener import listener_from_fd, membership_problem, open_listener, resolve_group
from agentd.config.load import Config, ConfigError, load_config
from agentd.errors import ExecutorUnavailable, JournalError, ListenerError, UnsafeDirectory
from agentd.journal.records import TaskRecord
from agentd.journal.retention import serve_retention
from agentd.journal.store import Journal, open_journal
from agentd.metrics.port import Metrics
from agentd.options import (
    build_spawner,
    config_schedules,
    journal_options,
    retention,
    submit_quota,
    supervisor_options,
    temporal_settings,
    trigger_configs,
    trigger_manager_options,
    warm_payload,
)
from agentd.root_payload import build_payload, granted_deadline_s
from agentd.scheduling.driver import Scheduler
from agentd.service.collector import Collector
from agentd.service.metrics import Exporter, build_metrics, exporting
from agentd.service.reporting import ServiceStatus, run_watchdog, wedge_event_loop, wedge_seconds
from agentd.service.sdnotify import Notifier
from agentd.spawning import cgroup
from agentd.spawning.spawner import ExecSpawner
from agentd.spawning.zygote_spawner import ZygoteSpawner
from agentd.supervision.executor import Executor, LocalExecutor
from agentd.supervision.payloads import with_catalogues
from agentd.supervision.supervisor import Supervisor, SupervisorOptions
from agentd.supervision.task_payloads import CatalogueBoard, TaskPayloads
from agentd.tracing import NULL_TRACING, Tracing, from_environment
from agentd.triggers.manager import TriggerConfig, TriggerManager
from agentd.triggers.warm import WarmRoute
from processes.linux import set_child_subreaper
from protocol.exit_codes import ExitCode
from protocol.spawn import SpawnPayload

SD_LISTEN_FDS_START = 3
HANDLED_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
MAX_OPEN_FILES = 1 << 16  # the soft limit to take when the hard one is unlimited
# With a remote executor the front door follows every accepted task at once (a cheap poll each);
# `max_concurrent_tasks` is then each worker's own cap (docs/temporal.md).
REMOTE_FOLLOW_CAP = 100_000


@dataclass
class ConfigHolder:
    """The live configuration; SIGHUP swaps it only for a valid one."""

    current: Config
    # The error of the last rejected reload; None once a reload succeeds (shown in STATUS=).
    reload_error: str | None = None
    # Command-line settings that outlive a reload (e.g. --log-content).
    overrides: dict[str, object] | None = None

    def get(self) -> Config:
        return self.current

    def reload(self) -> None:
        """Load the file again; a valid one replaces the configuration in force, an invalid one
        is logged and kept in `reload_error`. The socket and the state dir are fixed for the
        daemon's life, whatever the file says now."""
        log = logs.get()
        try:
            fresh = load_config(
                str(self.current.path) if self.current.path else None,
                socket=str(self.current.socket),
                state_dir=str(self.current.state_dir),
                overrides=self.overrides,
            )
        except ConfigError as exc:
            self.reload_error = str(exc)
            log.error("config.invalid", source=exc.source, err=str(exc), kept="previous configuration")
            return
        self.current = fresh
        self.reload_error = None
        logs.set_level(fresh.daemon.log_level)  # subagents get it from the payload built per task
        log.info("config.loaded", source=fresh.source, reload=True)


def _admin_gid(config: Config) -> int | None:
    name = config.daemon.admin_group
    if name is None:
        return None
    if name.isdigit():
        return int(name)
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


@contextlib.asynccontextmanager
async def _closing(spawner: ExecSpawner | ZygoteSpawner) -> AsyncIterator[None]:
    try:
        yield
    finally:
        if isinstance(spawner, ZygoteSpawner):
            spawner.close()


@contextlib.contextmanager
def _listener(config: Config) -> Iterator[socket.socket]:
    """The API socket: adopted from systemd socket activation if passed, else bound here."""
    if os.environ.get("LISTEN_PID") == str(os.getpid()) and int(os.environ.get("LISTEN_FDS", "0")) >= 1:
        sock = listener_from_fd(SD_LISTEN_FDS_START)
        for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            os.environ.pop(name, None)
        try:
            yield sock
        finally:
            sock.close()
        return
    group = config.daemon.socket_group or config.daemon.admin_group
    gid = resolve_group(int(group) if group and group.isdigit() else group)
    if gid is not None:
        problem = membership_problem(gid, euid=os.geteuid(), egid=os.getegid(), groups=os.getgroups())
        if problem is not None:
            key = "daemon.socket_group" if config.daemon.socket_group else "daemon.admin_group"
            raise ListenerError(f"{key} = {group!r}: {problem}")
    # With a group, its members reach the socket through a 0750 directory; without one, the
    # directory is the daemon's user's alone (0700), e.g. a per-user daemon's /tmp/agentd-<uid>.
    with open_listener(
        config.socket,
        group=int(group) if group and group.isdigit() else group,
        dir_mode=0o750 if group else 0o700,
    ) as sock:
        yield sock


def raise_open_files_limit() -> int:
    """Raise this process's open-files soft limit to its hard limit; return the soft limit now.

    systemd and most shells start services at 1024, below `max_connections`' default plus the
    pipes and pidfds of the children; subagents get their own `limits.nofile` at spawn.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # An unlimited hard limit cannot be the soft one (the kernel caps fds at fs.nr_open).
    target = hard if hard != resource.RLIM_INFINITY else max(soft, MAX_OPEN_FILES)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return soft
    return target


def api_limits(config: Config) -> ApiLimits:
    """The `[daemon]` keys that bound what one API client may cost (here, not in `options.py`:
    `api/` sits above it)."""
    daemon = config.daemon
    return ApiLimits(
        frame_deadline_s=daemon.frame_deadline_s,
        idle_timeout_s=daemon.idle_timeout_s,
        max_connections_per_uid=daemon.max_connections_per_uid,
        max_connections=daemon.max_connections,
    )


def _supervisor_options(config: Config) -> SupervisorOptions:
    options = supervisor_options(config)
    if config.file.executor.kind == "temporal":
        options = dataclasses.replace(options, max_concurrent_tasks=REMOTE_FOLLOW_CAP)
    return options


async def _executor(holder: ConfigHolder, journal: Journal) -> Executor | None:
    """The `[executor]` in force: None is local; `temporal` connects first (or raises
    `ExecutorUnavailable`, before anything is accepted). The SDK is imported only here."""
    config = holder.get()
    if config.file.executor.kind != "temporal":
        return None
    from agentd.executors.temporal_common import connect
    from agentd.executors.temporal_front import TemporalExecutor

    settings = temporal_settings(config)
    client = await connect(settings)

    def deadline_of(record: TaskRecord) -> float:
        return granted_deadline_s(holder.get(), record)

    return TemporalExecutor(client, settings, journal, deadline_of)


def daemon_signals() -> set[signal.Signals]:
    """The signals the daemon handles (SIGUSR2 only with the fault-injection hook on)."""
    return HANDLED_SIGNALS | ({signal.SIGUSR2} if wedge_seconds() is not None else set())


async def _signals(
    supervisor: Supervisor,
    reload: Callable[[], None],
    on_drain: Callable[[], None],
    wedge_s: float | None,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Receive the daemon's signals without a window in which one could kill it.

    They are blocked in every thread from the start (`run_serve`), so the kernel never picks a
    thread with the default action; one thread takes them with `sigwaitinfo` and passes each to
    the event loop through a pipe. A signal that arrives before this task runs waits, pending.
    """
    wanted = daemon_signals()
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def take_signals() -> None:
        while True:
            info = signal.sigwaitinfo(wanted)
            with contextlib.suppress(OSError):  # the loop is gone: the daemon is exiting
                os.write(write_fd, bytes([info.si_signo]))

    threading.Thread(target=take_signals, name="agentd-signals", daemon=True).start()
    task_status.started()
    try:
        while True:
            await anyio.wait_readable(read_fd)
            for signum in os.read(read_fd, 64):
                if signum == signal.SIGHUP:
                    reload()
                elif signum == signal.SIGUSR2 and wedge_s is not None:
                    wedge_event_loop(wedge_s)
                elif signum in (signal.SIGTERM, signal.SIGINT):
                    first = not supervisor.draining
                    supervisor.drain(force=supervisor.draining)
                    if first:
                        on_drain()
    finally:
        os.close(read_fd)


async def _sync_schedules(scheduler: Scheduler, config: Config) -> None:
    """The `[[schedule]]` tables into the journal, owned by the daemon's user."""
    try:
        await scheduler.sync_named(os.getuid(), config_schedules(config))
    except JournalError as exc:
        logs.get().error("config.invalid", source=config.source, err=f"schedules not synced: journal: {exc}")


async def _resync_schedules(
    scheduler: Scheduler, holder: ConfigHolder, changed: Callable[[], anyio.Event]
) -> None:
    while True:
        await changed().wait()
        await _sync_schedules(scheduler, holder.get())


def _warm_session_payload(
    holder: ConfigHolder, catalogues: CatalogueBoard
) -> Callable[[TriggerConfig, TaskRecord], SpawnPayload]:
    """A `route = "continue"` session's payload, from the configuration in force at each start."""

    def build(trigger: TriggerConfig, record: TaskRecord) -> SpawnPayload:
        config = holder.get()
        payload = warm_payload(build_payload(config, record), config.triggers[trigger.index])
        return with_catalogues(payload, catalogues.for_spec)

    return build


@dataclass(frozen=True, slots=True)
class _Rooms:
    """The daemon's long-lived parts, composed once per `serve` over one journal and spawner."""

    journal: Journal
    spawner: ExecSpawner | ZygoteSpawner
    supervisor: Supervisor
    scheduler: Scheduler
    warm: WarmRoute
    triggers: TriggerManager


def _compose(
    holder: ConfigHolder,
    journal: Journal,
    spawner: ExecSpawner | ZygoteSpawner,
    executor: Executor | None,
    *,
    cgroup_root: cgroup.CgroupRoot | None,
    metrics: Metrics,
    tracing: Tracing,
) -> _Rooms:
    """Build the rooms and wire their calls, each pointing down (docs/architecture.md)."""
    config, log = holder.get(), logs.get()
    # The watchers' catalogues: the trigger manager writes them, the task payloads read them.
    catalogues = CatalogueBoard()
    supervisor = Supervisor(
        journal,
        TaskPayloads(lambda record: build_payload(holder.get(), record), catalogues),
        spawner,
        _supervisor_options(config),
        cgroup_root,
        metrics,
        tracing,
        executor=executor,
    )
    scheduler = Scheduler(
        journal,
        on_fired=supervisor.notify_submitted,
        log=log,
        stopped=lambda: supervisor.draining,
        quota=lambda: submit_quota(holder.get()),
        metrics=metrics,
    )
    supervisor.on_fire_ended = scheduler.fire_ended
    warm = WarmRoute(
        journal,
        ports=supervisor.run_ports,
        payload=_warm_session_payload(holder, catalogues),
        registry=supervisor,
        owner_uid=os.getuid(),
        governor=lambda: trigger_manager_options(holder.get()).governor,
        log=log,
    )
    triggers = TriggerManager(
        journal,
        server_spec=lambda name: holder.get().mcp_spec(name),
        on_fired=supervisor.notify_submitted,
        log=log,
        options=trigger_manager_options(config),
        metrics=metrics,
        warm=warm,
        # A parked child runs locally, and its spans could not join the task's trace.
        parking=(
            supervisor.parking
            if isinstance(supervisor.executor, LocalExecutor) and tracing is NULL_TRACING
            else None
        ),
        catalogues=catalogues,
        watch_clock=supervisor.clock,
    )
    supervisor.on_trigger_ended = triggers.task_ended
    supervisor.also_owned = triggers.owned_pids
    return _Rooms(journal, spawner, supervisor, scheduler, warm, triggers)


async def _recover(rooms: _Rooms, config: Config) -> list[str]:
    """Reconcile the journal with what survived, then load schedules and triggers (before the
    socket accepts anything)."""
    recovered = await rooms.supervisor.recover()
    await rooms.scheduler.load()
    await _sync_schedules(rooms.scheduler, config)
    await rooms.triggers.load()
    rooms.triggers.configure(trigger_configs(config))
    return recovered


class _Running:
    """A recovered daemon while it serves: its signals' effects (reload, drain) and its tasks."""

    def __init__(
        self, holder: ConfigHolder, rooms: _Rooms, notifier: Notifier, status: ServiceStatus
    ) -> None:
        self.holder = holder
        self.rooms = rooms
        self.notifier = notifier
        self.status = status
        # The watcher program is read at start; a reload changes the governor and the triggers.
        self.watch_argv = trigger_manager_options(holder.get()).argv
        # Replaced by each reload once set: `_resync_schedules` waits on the current one.
        self.schedules_changed = anyio.Event()
        self.stop_accepting = anyio.Event()

    def reload(self) -> None:
        """SIGHUP: a valid configuration file replaces the one in force, bracketed for systemd."""
        holder, rooms = self.holder, self.rooms
        self.notifier.reloading()
        holder.reload()
        # Tasks started from now on get the new limits, supervision and concurrency.
        rooms.supervisor.options = _supervisor_options(holder.get())
        rooms.supervisor.providers.configure(rooms.supervisor.options.provider_limits)
        if holder.reload_error is None:
            options = dataclasses.replace(trigger_manager_options(holder.get()), argv=self.watch_argv)
            rooms.triggers.configure(trigger_configs(holder.get()), options)
        self.schedules_changed.set()
        self.schedules_changed = anyio.Event()
        self.notifier.ready(self.status.text())

    def on_drain(self) -> None:
        """The first SIGTERM/SIGINT: intake stops and every child climbs its ladder."""
        # New clients wait in the backlog (for the next daemon, under socket activation).
        self.stop_accepting.set()
        self.rooms.triggers.begin_stop()  # no new deliveries; every watcher climbs its ladder
        self.rooms.warm.stop()  # every warm session's child climbs its ladder
        self.notifier.stopping(self.status.text())

    async def run(self, sock: socket.socket, exporter: Exporter, *, ready: Callable[[], None]) -> None:
        """Serve until drained: every room's task, the API, signals; `ready` once all started."""
        rooms, config = self.rooms, self.holder.get()
        supervisor = rooms.supervisor
        async with anyio.create_task_group() as tg:
            tg.start_soon(supervisor.serve)
            tg.start_soon(rooms.scheduler.serve)
            tg.start_soon(rooms.triggers.serve)
            tg.start_soon(rooms.warm.serve)
            tg.start_soon(_resync_schedules, rooms.scheduler, self.holder, lambda: self.schedules_changed)
            if isinstance(rooms.spawner, ZygoteSpawner):
                tg.start_soon(rooms.spawner.serve)
            backend = DaemonBackend(
                rooms.journal, supervisor, self.holder.get, rooms.scheduler, rooms.triggers
            )
            tg.start_soon(
                functools.partial(
                    serve_api_on_own_loop,
                    sock,
                    backend,
                    limits=api_limits(config),  # fixed for the daemon's life: a reload keeps them
                    admin_gid=_admin_gid(config),
                    stop_accepting=self.stop_accepting,
                )
            )
            await tg.start(_signals, supervisor, self.reload, self.on_drain, wedge_seconds())
            tg.start_soon(run_watchdog, self.notifier)
            tg.start_soon(self.status.run)
            tg.start_soon(serve_retention, rooms.journal, retention(self.holder.get()))
            tg.start_soon(exporter.run, supervisor, rooms.triggers.summary)
            if config.daemon.gc_freeze:
                tg.start_soon(Collector(lambda: supervisor.live).run)
            ready()
            await supervisor.wait_drained()
            await rooms.triggers.stop()  # bounded: every watcher reaped before the daemon exits
            await rooms.warm.wait_stopped()  # bounded by each session's ladder
            tg.cancel_scope.cancel()


async def serve(
    config: Config,
    *,
    on_ready: Callable[[str], None] | None = None,
    overrides: dict[str, object] | None = None,
    tracing: Tracing = NULL_TRACING,
) -> int:
    """Run the daemon until it is drained; returns the process exit code."""
    log = logs.get()
    notifier = Notifier.from_environ(report=lambda err: log.warning("proc.notify", err=err))
    set_child_subreaper()
    holder = ConfigHolder(config, overrides=overrides)
    cgroup_root = cgroup.discover()
    log.info(
        "proc.start",
        pid=os.getpid(),
        nofile=raise_open_files_limit(),
        config=config.source,
        state_dir=str(config.state_dir),
        socket=str(config.socket),
        cgroup=str(cgroup_root.path) if cgroup_root else None,
    )
    # A front door of remote workers spawns no task: no zygote to keep warm.
    local = config.file.executor.kind == "local"
    spawner = build_spawner(config, zygote=config.supervision.spawner == "zygote" and local)
    metrics = build_metrics(holder.get)
    async with open_journal(config.state_dir, journal_options(config)) as journal, _closing(spawner):
        executor = await _executor(holder, journal)
        rooms = _compose(
            holder, journal, spawner, executor, cgroup_root=cgroup_root, metrics=metrics, tracing=tracing
        )
        recovered = await _recover(rooms, config)
        with _listener(config) as sock, exporting(metrics, config, journal) as exporter:
            status = ServiceStatus(
                notifier,
                rooms.supervisor,
                journal,
                lambda: holder.reload_error,
                failed_triggers=rooms.triggers.failed,
            )
            await status.refresh_queued()

            def ready() -> None:
                log.info(
                    "proc.ready",
                    pid=os.getpid(),
                    recovered=len(recovered),
                    socket=str(config.socket),
                    notify=notifier.enabled,
                    watchdog_interval_s=notifier.watchdog_interval_s,
                )
                notifier.ready(status.text())
                if on_ready is not None:
                    on_ready(str(config.socket))

            await _Running(holder, rooms, notifier, status).run(sock, exporter, ready=ready)
    await anyio.to_thread.run_sync(tracing.close)  # bounded: the last spans, at most 3 s
    notifier.close()
    log.info("proc.exit", pid=os.getpid(), code=0)
    return ExitCode.OK


def run_serve(
    config_path: str | None,
    socket: str | None,
    state_dir: str | None,
    *,
    log_content: bool = False,
    log_format: logs.LogFormat | None = None,
) -> int:
    """`agentd serve` entry: load config (exit 2 on error), configure logs, serve. `log_format`
    None: text when stderr is a terminal, else JSON."""
    # Blocked in every thread for the daemon's whole life (threads inherit the mask): they are
    # taken by `sigwaitinfo` (see `_signals`), so none can ever kill the daemon by default action,
    # and one sent during start-up is held pending until the daemon can drain.
    signal.pthread_sigmask(signal.SIG_BLOCK, daemon_signals())
    overrides: dict[str, object] | None = {"daemon": {"log_content": True}} if log_content else None
    fmt = log_format or logs.default_format(sys.stderr)
    try:
        config = load_config(config_path, socket=socket, state_dir=state_dir, overrides=overrides)
    except ConfigError as exc:
        logs.configure("info", fmt=fmt)
        logs.get().error("config.invalid", source=exc.source, err=str(exc))
        return ExitCode.USAGE
    logs.configure(config.daemon.log_level, fmt=fmt)
    # systemd's watchdog ends a wedged daemon with SIGABRT: the stacks then show where it hung.
    faulthandler.enable()
    logs.get().info("config.loaded", source=config.source)
    try:
        tracing = from_environment()
    except ValueError as exc:  # OTEL_* asks for traces this install cannot give
        logs.get().error("config.invalid", source="environment", err=str(exc))
        return ExitCode.USAGE
    try:
        Path(config.state_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
        # What start-up imported lives as long as the daemon: out of the collector's sight, a full
        # collection with a thousand tasks alive walks only their objects.
        gc.collect()
        gc.freeze()
        code = anyio.run(functools.partial(serve, config, overrides=overrides, tracing=tracing))
    except (JournalError, ListenerError, UnsafeDirectory, ExecutorUnavailable, OSError) as exc:
        # Start-up failures an operator must act on: one clear log line, no traceback.
        logs.get().error("proc.exit", code=1, err=f"{type(exc).__name__}: {exc}")
        code = ExitCode.FAILURE
    if config.file.executor.kind == "temporal":
        from agentd.executors.exiting import exit_now

        exit_now(code)  # the SDK may crash the interpreter's own exit (agentd/executors/exiting.py)
    return code
