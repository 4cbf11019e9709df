"""`agentd serve`: the daemon's composition and lifecycle (DESIGN §6, §8, §9).

Order matters. The state directory's lock and restart recovery come before the socket accepts
anything, so no client sees a half-reconciled journal; SIGTERM/SIGINT drain (stop intake,
cancel running tasks, ladder stragglers, record outcomes) and exit 0 within the drain cap; a
second signal SIGKILLs every child at once.
"""

from __future__ import annotations

import contextlib
import functools
import grp
import os
import signal
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc

from agentd import cgroup, logs
from agentd.api_listener import listener_from_fd, open_listener
from agentd.api_server import ApiLimits, serve_api
from agentd.backend import DaemonBackend
from agentd.config import Config, ConfigError, load_config
from agentd.grants import build_payload, supervisor_options
from agentd.journal import open_journal
from agentd.spawner import ExecSpawner
from agentd.supervisor import Supervisor
from subagent.linux import set_child_subreaper

SD_LISTEN_FDS_START = 3


@dataclass
class ConfigHolder:
    """The live configuration; SIGHUP swaps it only for a valid one."""

    current: Config

    def get(self) -> Config:
        return self.current


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
    with open_listener(config.socket, group=int(group) if group and group.isdigit() else group) as sock:
        yield sock


async def _signals(supervisor: Supervisor, holder: ConfigHolder, reload: Callable[[], None]) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as received:
        async for signum in received:
            if signum == signal.SIGHUP:
                reload()
            else:
                supervisor.drain(force=supervisor.draining)


async def serve(config: Config, *, on_ready: Callable[[str], None] | None = None) -> int:
    """Run the daemon until it is drained; returns the process exit code."""
    log = logs.get()
    set_child_subreaper()
    holder = ConfigHolder(config)

    def reload() -> None:
        try:
            fresh = load_config(str(holder.current.path) if holder.current.path else None)
        except ConfigError as exc:
            log.error("config.invalid", source=exc.source, err=str(exc), kept="previous configuration")
            return
        holder.current = fresh
        log.info("config.loaded", source=fresh.source, reload=True)

    cgroup_root = cgroup.discover()
    log.info(
        "proc.start",
        pid=os.getpid(),
        config=config.source,
        state_dir=str(config.state_dir),
        socket=str(config.socket),
        cgroup=str(cgroup_root.path) if cgroup_root else None,
    )
    async with open_journal(config.state_dir) as journal:
        supervisor = Supervisor(
            journal,
            lambda record: build_payload(holder.get(), record),
            ExecSpawner(),
            supervisor_options(config),
            cgroup_root,
        )
        recovered = await supervisor.recover()
        with _listener(config) as sock:
            backend = DaemonBackend(journal, supervisor, holder.get)
            limits = ApiLimits(
                frame_deadline_s=config.daemon.frame_deadline_s,
                max_connections_per_uid=config.daemon.max_connections_per_uid,
            )
            async with anyio.create_task_group() as tg:
                tg.start_soon(supervisor.serve)
                tg.start_soon(
                    functools.partial(serve_api, sock, backend, limits=limits, admin_gid=_admin_gid(config))
                )
                tg.start_soon(_signals, supervisor, holder, reload)
                log.info("proc.ready", pid=os.getpid(), recovered=len(recovered), socket=str(config.socket))
                if on_ready is not None:
                    on_ready(str(config.socket))
                await supervisor.wait_drained()
                tg.cancel_scope.cancel()
    log.info("proc.exit", pid=os.getpid(), code=0)
    return 0


def run_serve(config_path: str | None, socket: str | None, state_dir: str | None) -> int:
    """`agentd serve` entry: load config (exit 2 on error), configure logs, serve."""
    try:
        config = load_config(config_path, socket=socket, state_dir=state_dir)
    except ConfigError as exc:
        logs.configure("info")
        logs.get().error("config.invalid", source=exc.source, err=str(exc))
        return 2
    logs.configure(config.daemon.log_level)
    logs.get().info("config.loaded", source=config.source)
    Path(config.state_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
    return anyio.run(serve, config)
