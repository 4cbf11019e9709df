"""`ZygoteSpawner`: subagents forked from a pre-imported zygote, with `ExecSpawner` as the fallback.

The zygote (`python -I -m subagent.zygote`) is a helper child of the daemon: PDEATHSIG to it, never
swept as an orphan, killed and reaped at close. A spawn sends the child's environment and its three
pipe ends over a SOCK_SEQPACKET socket (the messages are `protocol.zygote`'s) and waits (bounded, a
few milliseconds in practice) for the pid; the zygote double-forks so the subagent is reparented to
this daemon, which then owns it like an exec'd child.

A spawn that comes while the zygote is still starting (a burst right after the daemon starts) waits
for it, bounded by `warm_wait_s` (`supervision.zygote_wait_s`), rather than stampeding the exec path
— a hundred exec'd interpreters pay ~1 s of CPU each and starve the zygote's own imports. Past the
bound, or once the zygote has failed (dead and waiting for its restart, or given up), spawns exec.
"""

from __future__ import annotations

import array
import contextlib
import os
import signal
import socket
import sys
from collections.abc import Mapping

import anyio
import structlog

from agentd.spawning.spawner import (
    RESET_SIGNALS,
    SCRUBBED_PREFIXES,
    ExecSpawner,
    SpawnedProcess,
    SpawnRequest,
    ZygoteState,
    adopt,
    child_environment,
)
from processes.linux import open_pidfd
from processes.pipes import open_stdio_pipes
from protocol.framing import FrameError, decode
from protocol.zygote import (
    FROM_ZYGOTE_ADAPTER,
    MAX_REPLY,
    MAX_REQUEST,
    Fork,
    Forked,
    ForkFailed,
    FromZygote,
    Ready,
    StartFailed,
    encode,
)

REPLY_TIMEOUT_S = 2.0
READY_TIMEOUT_S = 60.0
RESTART_DELAY_S = 5.0
MAX_STARTS = 5
# How long a spawn waits for a zygote that is starting before it execs instead (the config default).
WARM_WAIT_S = 5.0

log = structlog.get_logger("agentd.spawning.zygote_spawner")


class ZygoteSpawner:
    """Forks subagents from a warm zygote; any failure falls back to `ExecSpawner`."""

    def __init__(
        self,
        fallback: ExecSpawner | None = None,
        base_env: Mapping[str, str] | None = None,
        warm_wait_s: float = WARM_WAIT_S,
    ) -> None:
        self.fallback = fallback or ExecSpawner()
        self._base_env = dict(base_env if base_env is not None else os.environ)
        self._warm_wait_s = warm_wait_s
        self._sock: socket.socket | None = None
        self._pid: int | None = None
        self._ready = False
        self._next_id = 0
        # "starting" from construction: `serve` starts the zygote, and a spawn that comes before
        # it runs (a recovered backlog) must wait for it too.
        self._state: ZygoteState = "starting"
        self._changed: anyio.Event | None = None

    @property
    def state(self) -> ZygoteState:
        return self._state

    def _set_state(self, state: ZygoteState) -> None:
        self._state = state
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def settle(self) -> None:
        """Wait, at most `warm_wait_s`, while the zygote is starting; then `spawn` forks or execs."""
        with anyio.move_on_after(self._warm_wait_s):
            while self._state == "starting":
                if self._changed is None:
                    self._changed = anyio.Event()
                await self._changed.wait()

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the zygote; it reports ready once its imports are done (spawns exec until then)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # The zygote's environment is its children's base: the same allow-list as an exec'd child.
        env = child_environment(SpawnRequest(task_id="zygote", run_id="zygote", handle="0"), self._base_env)
        env = {k: v for k, v in env.items() if not k.startswith(SCRUBBED_PREFIXES)}
        argv = [sys.executable, "-I", "-m", "subagent.zygote"]
        try:
            self._pid = os.posix_spawn(
                argv[0],
                argv,
                env,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, theirs.fileno(), 3),
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                ],
                setsid=True,
                setsigdef=RESET_SIGNALS,
                setsigmask=(),
            )
        except OSError as exc:
            ours.close()
            self._set_state("failed")
            log.warning("proc.start", comp="supervisor", err=f"zygote could not start: {exc.strerror}")
            return
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours

    def helper_pids(self) -> set[int]:
        """Pids of the spawner's own helpers (the zygote): the orphan sweep must leave them alone."""
        return {self._pid} if self._pid is not None else set()

    def close(self) -> None:
        self._set_state("failed")
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self._pid, 0)
            self._pid = None
        self._ready = False

    def _broken(self, why: str) -> None:
        log.warning("proc.exit", comp="supervisor", process="zygote", err=why, fallback="exec")
        self.close()

    async def serve(self) -> None:
        """Keep a zygote running: start it, mark it ready, restart it (bounded) if it dies."""
        for attempt in range(MAX_STARTS):
            self._set_state("starting")
            self.start()
            if self._sock is None or self._pid is None:
                self._set_state("failed")
                return
            pid, sock = self._pid, self._sock
            pidfd = open_pidfd(pid)
            try:
                with anyio.move_on_after(READY_TIMEOUT_S):
                    await anyio.wait_readable(sock)
                    self._take_ready()
                if not self._ready and self._pid == pid:
                    self._broken("the zygote did not report ready in time")
                if self._ready:
                    log.info("proc.ready", comp="supervisor", process="zygote", pid=pid, attempt=attempt + 1)
                    await anyio.wait_readable(pidfd)  # it exited
                    if self._pid == pid:
                        self._broken("the zygote exited")
            finally:
                os.close(pidfd)
            await anyio.sleep(RESTART_DELAY_S)
        self._set_state("failed")
        log.warning(
            "proc.exit", comp="supervisor", process="zygote", err="gave up restarting it", fallback="exec"
        )

    def _take_ready(self) -> None:
        assert self._sock is not None
        try:
            data = self._sock.recv(MAX_REPLY)
        except BlockingIOError:
            return
        except OSError as exc:
            self._broken(f"zygote socket failed: {exc.strerror}")
            return
        message: FromZygote | FrameError | None = None
        if data:
            message = decode(data, FROM_ZYGOTE_ADAPTER, max_line=MAX_REPLY)
        match message:
            case Ready():
                self._ready = True
                self._set_state("warm")
                return
            case None:
                why = "it exited"
            case StartFailed(error=error):
                why = error
            case FrameError(kind=kind, detail=detail):
                why = f"its message is unreadable: {kind} ({detail})"
            case _:
                why = f"it sent {message.type} before ready"
        self._broken(f"zygote did not start: {why}")

    # ---- spawning --------------------------------------------------------------------------

    def spawn(self, request: SpawnRequest) -> SpawnedProcess:
        if request.argv is not None or not self._ready:
            return self.fallback.spawn(request)
        try:
            return self._fork(request)
        except (OSError, ValueError) as exc:
            self._broken(f"zygote spawn failed: {exc}")
            return self.fallback.spawn(request)

    def _fork(self, request: SpawnRequest) -> SpawnedProcess:
        assert self._sock is not None
        self._next_id += 1
        # Only what differs per child; the zygote passes its own base environment on.
        message = encode(Fork(id=self._next_id, env=child_environment(request, {})))
        if len(message) > MAX_REQUEST:
            raise ValueError(f"the fork request is {len(message)} bytes, over the zygote's {MAX_REQUEST}")
        pipes = open_stdio_pipes()
        try:
            fds = array.array("i", pipes.child_ends)
            self._sock.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())])
            pipes.close_child_ends()
            pid = self._reply()
        except BaseException:
            pipes.close()
            raise
        return adopt(pid, request.rlimits, pipes, via="zygote")

    def _reply(self) -> int:
        """The pid the zygote forked for our last request: a blocking wait of a few ms, bounded."""
        assert self._sock is not None
        self._sock.settimeout(REPLY_TIMEOUT_S)
        try:
            data = self._sock.recv(MAX_REPLY)
        finally:
            self._sock.setblocking(False)
        if not data:
            raise OSError("the zygote closed its socket")
        reply = decode(data, FROM_ZYGOTE_ADAPTER, max_line=MAX_REPLY)
        if isinstance(reply, FrameError):
            raise ValueError(f"the zygote's reply is unreadable: {reply.kind} ({reply.detail})")
        if isinstance(reply, ForkFailed) and reply.id in (None, self._next_id):
            raise ValueError(reply.error)
        if not isinstance(reply, Forked) or reply.id != self._next_id:
            raise ValueError("the zygote answered out of turn")
        return reply.pid
