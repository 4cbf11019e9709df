"""`ZygoteSpawner`: subagents forked from a pre-imported zygote, with `ExecSpawner` as the fallback.

The zygote (`python -I -m subagent.zygote`) is a helper child of the daemon: PDEATHSIG to it, never
swept as an orphan, killed and reaped at close. A spawn sends the child's environment and its three
pipe ends over a SOCK_SEQPACKET socket (the messages are `protocol.zygote`'s) and waits (bounded, a
few milliseconds in practice) for the pid; the zygote clones the subagent as this daemon's child
(CLONE_PARENT; where that is refused, it double-forks so the subagent is reparented to this
daemon), which then owns it like an exec'd child.

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
    lower_priority,
)
from processes.linux import open_pidfd
from processes.pipes import open_stdio_pipes
from protocol.environment import SUBAGENT_NICE_ENV, ZYGOTE_RUN_ID
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

# No reply at all for this long while one is owed: the zygote is stuck (a batch of forks on a loaded
# 2-core VM can take a couple of seconds).
REPLY_TIMEOUT_S = 10.0
READY_TIMEOUT_S = 60.0
RESTART_DELAY_S = 5.0
MAX_STARTS = 5
# How long a spawn waits for a zygote that is starting before it execs instead (the config default).
WARM_WAIT_S = 30.0
# Fork requests in flight at once: enough to keep the zygote busy while the loop does other work,
# few enough that the fds they carry stay far below the kernel's in-flight SCM_RIGHTS limit.
FORK_WINDOW = 32

log = structlog.get_logger("agentd.spawning.zygote_spawner")


class ZygoteSpawner:
    """Forks subagents from a warm zygote; any failure falls back to `ExecSpawner`."""

    def __init__(
        self,
        fallback: ExecSpawner | None = None,
        base_env: Mapping[str, str] | None = None,
        warm_wait_s: float = WARM_WAIT_S,
        *,
        batch: bool = False,
        nice: int = 0,
    ) -> None:
        self.fallback = fallback or ExecSpawner(batch=batch, nice=nice)
        # Subagents below the daemon (`lower_priority`): the zygote under SCHED_BATCH, which every
        # fork inherits, and each fork `nice` levels lower (`SUBAGENT_NICE_ENV`).
        self._batch = batch
        self._nice = nice
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
        # Pipelined fork requests (docs/design.md §10): each spawn sends its request and awaits
        # its reply by id, so the loop never blocks on the zygote and the zygote always has work.
        self._waiting: dict[int, _Waiter] = {}
        self._window = anyio.Semaphore(FORK_WINDOW)
        self._in_flight = 0
        self._oldest_sent: float | None = None
        self._reader_wake: anyio.Event | None = None

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
        env = child_environment(
            SpawnRequest(task_id=ZYGOTE_RUN_ID, run_id=ZYGOTE_RUN_ID, handle="0"), self._base_env
        )
        env = {k: v for k, v in env.items() if not k.startswith(SCRUBBED_PREFIXES)}
        env[SUBAGENT_NICE_ENV] = str(self._nice)
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
                setpgroup=0,  # in our session, as its subagents are (`lower_priority`)
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
        # SCHED_BATCH here, inherited by every fork; the nice levels per subagent, after its fork.
        lower_priority(self._pid, batch=self._batch, nice=0)
        ours.setblocking(False)
        self._sock = ours

    def helper_pids(self) -> set[int]:
        """Pids of the spawner's own helpers (the zygote): the orphan sweep must leave them alone."""
        return {self._pid} if self._pid is not None else set()

    def close(self) -> None:
        self._set_state("failed")
        self._fail_waiting("the zygote is gone")
        self._wake_reader()
        if self._sock is not None:
            with contextlib.suppress(RuntimeError):  # outside an event loop there is no one to tell
                anyio.notify_closing(self._sock)
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
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._read_replies, sock)
                        await anyio.wait_readable(pidfd)  # it exited
                        if self._pid == pid:
                            self._broken("the zygote exited")
                        tg.cancel_scope.cancel()
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

    @property
    def spawning(self) -> bool:
        """Fork requests are in flight: a subagent may already be the daemon's child, unowned yet."""
        return self._in_flight > 0

    def spawn(self, request: SpawnRequest) -> SpawnedProcess:
        """Exec a child (the synchronous path); `spawn_child` is the one that forks."""
        return self.fallback.spawn(request)

    async def spawn_child(self, request: SpawnRequest) -> SpawnedProcess:
        """Fork the child from the zygote, pipelined with other spawns; exec if it cannot."""
        if request.argv is not None or not self._ready:
            return self.fallback.spawn(request)
        self._in_flight += 1
        try:
            async with self._window:
                if not self._ready:  # it broke while this spawn waited for a place in the window
                    return self.fallback.spawn(request)
                try:
                    return await self._fork(request)
                except (OSError, ValueError, anyio.ClosedResourceError) as exc:
                    if self._sock is not None and self._ready:
                        self._broken(f"zygote spawn failed: {exc}")
                    return self.fallback.spawn(request)
        finally:
            self._in_flight -= 1

    async def _fork(self, request: SpawnRequest) -> SpawnedProcess:
        assert self._sock is not None
        sock = self._sock
        self._next_id += 1
        fork_id = self._next_id
        # Only what differs per child; the zygote passes its own base environment on.
        message = encode(Fork(id=fork_id, env=child_environment(request, {})))
        if len(message) > MAX_REQUEST:
            raise ValueError(f"the fork request is {len(message)} bytes, over the zygote's {MAX_REQUEST}")
        pipes = open_stdio_pipes()
        waiter = _Waiter()
        self._waiting[fork_id] = waiter
        try:
            fds = array.array("i", pipes.child_ends)
            await _send_with_fds(sock, message, fds.tobytes())
            pipes.close_child_ends()
            if self._oldest_sent is None:
                self._oldest_sent = anyio.current_time()
            self._wake_reader()
            await waiter.done.wait()
            if waiter.error is not None:
                raise ValueError(waiter.error) if waiter.refused else OSError(waiter.error)
            assert waiter.pid is not None
        except BaseException:
            pipes.close()
            raise
        finally:
            self._waiting.pop(fork_id, None)
        return adopt(waiter.pid, request.rlimits, pipes, via="zygote")

    def _wake_reader(self) -> None:
        if self._reader_wake is not None:
            self._reader_wake.set()

    async def _read_replies(self, sock: socket.socket) -> None:
        """Hand each reply to the spawn waiting for its id; break the zygote if it stops answering.

        Replies come in request order. Progress, not each request, is bounded: with many requests
        queued the last waits for all before it, but no reply at all for `REPLY_TIMEOUT_S` while
        one is owed means the zygote is stuck.
        """
        while self._sock is sock:
            if not self._waiting:
                self._oldest_sent = None
                self._reader_wake = anyio.Event()
                await self._reader_wake.wait()
                continue
            try:
                with anyio.move_on_after(REPLY_TIMEOUT_S):
                    await anyio.wait_readable(sock)
            except anyio.ClosedResourceError:
                return  # `close` announced it: the zygote broke and every waiter was told
            if self._sock is not sock:
                return
            if not self._take_replies(sock):
                return
            since = self._oldest_sent
            if self._waiting and since is not None and anyio.current_time() - since > REPLY_TIMEOUT_S:
                self._broken(f"the zygote sent no reply for {REPLY_TIMEOUT_S:g} s")
                return

    def _take_replies(self, sock: socket.socket) -> bool:
        """Read every reply that is there; False when the zygote broke."""
        while True:
            try:
                data = sock.recv(MAX_REPLY)
            except BlockingIOError:
                return True
            except OSError as exc:
                self._broken(f"zygote socket failed: {exc.strerror}")
                return False
            if not data:
                self._broken("the zygote closed its socket")
                return False
            reply = decode(data, FROM_ZYGOTE_ADAPTER, max_line=MAX_REPLY)
            if isinstance(reply, FrameError):
                self._broken(f"the zygote's reply is unreadable: {reply.kind} ({reply.detail})")
                return False
            reply_id = reply.id if isinstance(reply, Forked | ForkFailed) else None
            waiter = self._waiting.get(reply_id) if reply_id is not None else None
            if waiter is None:
                self._broken(f"the zygote answered out of turn ({reply.type})")
                return False
            if isinstance(reply, Forked):
                waiter.pid = reply.pid
            elif isinstance(reply, ForkFailed):
                waiter.error, waiter.refused = reply.error, True
            waiter.done.set()
            # The next owed reply's clock starts now: the zygote is making progress.
            self._oldest_sent = anyio.current_time()

    def _fail_waiting(self, why: str) -> None:
        for waiter in self._waiting.values():
            if not waiter.done.is_set():
                waiter.error = why
                waiter.done.set()
        self._waiting.clear()


class _Waiter:
    """One fork request waiting for the zygote's reply."""

    __slots__ = ("done", "error", "pid", "refused")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.pid: int | None = None
        self.error: str | None = None
        self.refused = False


async def _send_with_fds(sock: socket.socket, message: bytes, fds: bytes) -> None:
    """Send one request and its fds; a full socket buffer waits (bounded) until there is room."""
    with anyio.fail_after(REPLY_TIMEOUT_S):
        while True:
            try:
                sock.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
                return
            except BlockingIOError:
                await anyio.wait_writable(sock)
