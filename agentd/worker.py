"""`agentd worker`: a Temporal worker host that runs tasks on its own local supervisor (docs/design.md §16).

The same configuration file as `agentd serve` (`[executor] kind = "temporal"`). The worker opens
its own journal in its state directory (one agentd process per state directory: a front door and
a worker on one host need two), recovers what a previous worker left (ended `crashed`, never
requeued: Temporal retries those tasks elsewhere), connects to Temporal, and polls the task queue
for the task workflow and its activity. Under systemd it sends `READY=1` once polling, feeds the
watchdog, and on SIGTERM drains: it stops taking tasks, lets running ones finish within the drain
cap less the kill ladder's bound, hands the rest back to Temporal (their children climb the
ladder), and exits 0. A second signal SIGKILLs every child at once.
"""

from __future__ import annotations

import faulthandler
import functools
import os
import signal
import socket
from pathlib import Path

import anyio

from agentd import logs
from agentd.config.load import Config, ConfigError, load_config
from agentd.daemon import _closing, raise_open_files_limit
from agentd.errors import ExecutorUnavailable, JournalError, UnsafeDirectory
from agentd.executors.exiting import exit_now
from agentd.journal.store import open_journal
from agentd.options import build_spawner, journal_options, supervisor_options, temporal_settings
from agentd.root_payload import build_payload
from agentd.service.reporting import run_watchdog
from agentd.service.sdnotify import Notifier
from agentd.spawning import cgroup
from agentd.spawning.zygote_spawner import ZygoteSpawner
from agentd.supervision.executor import LocalExecutor
from agentd.supervision.supervisor import Supervisor
from agentd.supervision.task_run import TEARDOWN_SLACK_S
from agentd.tracing import NULL_TRACING, Tracing, from_environment
from processes.ladder import bound_s, plan
from processes.linux import set_child_subreaper
from protocol.exit_codes import ExitCode


def worker_identity() -> str:
    """How Temporal and the front door's journal name this worker: `pid@host`."""
    return f"{os.getpid()}@{socket.gethostname()}"


async def work(config: Config, *, tracing: Tracing = NULL_TRACING) -> int:
    """Run the worker until drained; returns the process exit code."""
    from agentd.executors.temporal_common import connect
    from agentd.executors.temporal_worker import TaskActivity, WorkflowSteps, build_worker

    log = logs.get()
    notifier = Notifier.from_environ(report=lambda err: log.warning("proc.notify", err=err))
    set_child_subreaper()
    settings = temporal_settings(config)
    identity = worker_identity()
    cgroup_root = cgroup.discover()
    log.info(
        "proc.start",
        pid=os.getpid(),
        nofile=raise_open_files_limit(),
        config=config.source,
        state_dir=str(config.state_dir),
        socket=None,
        cgroup=str(cgroup_root.path) if cgroup_root else None,
        role="worker",
        target=settings.target,
        task_queue=settings.task_queue,
    )
    spawner = build_spawner(config, zygote=config.supervision.spawner == "zygote")
    options = supervisor_options(config)
    stop_bound_s = bound_s(plan(options.run.ladder)) + TEARDOWN_SLACK_S
    async with open_journal(config.state_dir, journal_options(config)) as journal, _closing(spawner):
        steps = WorkflowSteps(journal.transcripts)
        supervisor = Supervisor(
            journal,
            lambda record: build_payload(config, record),
            spawner,
            options,
            cgroup_root,
            tracing=tracing,
            approvals=False,  # no one can decide a gated call here: it is denied, with the reason
            executor=LocalExecutor(requeue=False),
            steps=steps,
        )
        recovered = await supervisor.recover()
        client = await connect(settings, identity=identity)
        steps.client = client
        activity_impl = TaskActivity(journal, supervisor, identity, stop_bound_s, steps)
        # Running tasks get the drain cap less the ladder's bound to finish; then they are handed back.
        worker = build_worker(
            client,
            settings,
            activity_impl,
            max_tasks=options.max_concurrent_tasks,
            drain_s=max(options.drain_timeout_s - stop_bound_s, 1.0),
        )

        async def drain_on_signals() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    if supervisor.draining or worker.is_shutdown:
                        supervisor.drain(force=True)
                        continue
                    log.info("proc.drain", running=len(supervisor.running), role="worker")
                    notifier.stopping("draining: finishing or handing back running tasks")
                    tg.start_soon(finish)

        failed: list[str] = []

        async def poll() -> None:
            try:
                await worker.run()
            except Exception as exc:  # noqa: BLE001 - the SDK's worker gave up (e.g. Temporal gone for good)
                failed.append(f"{type(exc).__name__}: {exc}"[:500])
                log.error("executor.error", op="worker", err=failed[-1])
                supervisor.drain()

        async def finish() -> None:
            await worker.shutdown()  # stops polling; waits, then cancels (hands back) what still runs
            supervisor.drain()

        async with anyio.create_task_group() as tg:
            tg.start_soon(drain_on_signals)
            tg.start_soon(supervisor.serve)
            if isinstance(spawner, ZygoteSpawner):
                tg.start_soon(spawner.serve)
            tg.start_soon(run_watchdog, notifier)
            tg.start_soon(poll)
            log.info(
                "proc.ready",
                pid=os.getpid(),
                recovered=len(recovered),
                socket=None,
                notify=notifier.enabled,
                watchdog_interval_s=notifier.watchdog_interval_s,
                worker=identity,
            )
            notifier.ready(f"worker {identity} polling {settings.task_queue!r} at {settings.target}")
            await supervisor.wait_drained()
            tg.cancel_scope.cancel()
    await anyio.to_thread.run_sync(tracing.close)
    notifier.close()
    code = ExitCode.FAILURE if failed else ExitCode.OK
    log.info("proc.exit", pid=os.getpid(), code=int(code))
    return code


def run_worker(config_path: str | None, state_dir: str | None) -> int:
    """`agentd worker` entry: load config (exit 2 on error), check it names Temporal, work."""
    try:
        config = load_config(config_path, state_dir=state_dir)
    except ConfigError as exc:
        logs.configure("info")
        logs.get().error("config.invalid", source=exc.source, err=str(exc))
        return ExitCode.USAGE
    logs.configure(config.daemon.log_level)
    if config.file.executor.kind != "temporal":
        logs.get().error(
            "config.invalid", source=config.source, err='agentd worker needs [executor] kind = "temporal"'
        )
        return ExitCode.USAGE
    faulthandler.enable()
    logs.get().info("config.loaded", source=config.source)
    try:
        tracing = from_environment()
    except ValueError as exc:
        logs.get().error("config.invalid", source="environment", err=str(exc))
        return ExitCode.USAGE
    try:
        Path(config.state_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
        code = anyio.run(functools.partial(work, config, tracing=tracing))
    except (ExecutorUnavailable, JournalError, UnsafeDirectory, OSError) as exc:
        logs.get().error("proc.exit", code=1, err=f"{type(exc).__name__}: {exc}")
        code = ExitCode.FAILURE
    exit_now(code)  # see agentd/executors/exiting.py: the SDK may crash the interpreter's exit
    return code
