"""The zygote: a pre-imported, single-threaded process that forks subagents (docs/design.md §10).

`python -I -m subagent.zygote` imports the whole subagent stack once, freezes the garbage
collector's view of it, reports ready, then serves fork requests from the supervisor on fd 3 (a
SOCK_SEQPACKET socket; the messages are `protocol.zygote`'s): a `Fork` with the child's environment,
its three pipe ends riding along (SCM_RIGHTS). Each child is cloned with CLONE_PARENT, so that it
is the supervisor's child from birth (where the kernel refuses that: double-forked, so that it is
reparented to the supervisor, a child subreaper); the supervisor then owns it exactly like an
exec'd child (pidfd, waitid, PDEATHSIG). A fork costs milliseconds instead of the second the imports take.
"""

from __future__ import annotations

import array
import contextlib
import errno
import gc
import os
import signal
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Literal

from protocol.environment import SUBAGENT_NICE_ENV, SUPERVISOR_PID_ENV
from protocol.exit_codes import ExitCode
from protocol.framing import FrameError, decode
from protocol.zygote import (
    MAX_ERROR_CHARS,
    MAX_REQUEST,
    TO_ZYGOTE_ADAPTER,
    Fork,
    Forked,
    ForkFailed,
    FromZygote,
    Ready,
    StartFailed,
    encode,
)
from subagent import hot_code
from subagent.scheduling import normal_scheduling

if TYPE_CHECKING:
    from protocol.spawn import EndpointSpec, SpawnPayload
    from subagent.channel import ControlChannel

SOCKET_FD = 3
# A grandchild waits this long for its intermediate to exit (it forks the whole batch first).
REPARENT_TIMEOUT_S = 10.0
# Requests already queued are forked through one intermediate, at most this many: a fork of this
# ~80 MiB process costs tens of milliseconds on a small VM, and the double fork paid it twice per
# child (plus the intermediate's exit); a batch pays the intermediate once.
MAX_BATCH = 8


def _warm_imports() -> None:
    """Everything a subagent imports after `ev/ready`, imported once here instead of per child."""
    # protocol.contract imports jsonschema only when a schema is first checked (VERIFY).
    import jsonschema.validators  # noqa: F401
    import mcp.client.streamable_http  # noqa: F401

    import subagent.boot
    import subagent.intel.anthropic
    import subagent.intel.openai
    import subagent.intel.scripted
    import subagent.intel.transport
    import subagent.run
    import subagent.tools.http
    import subagent.tools.stdio
    import subagent.tracing

    subagent.intel.transport.tls_context()
    subagent.tracing.warm_imports()  # the OTel SDK and exporter, when the OTEL_* variables ask for traces
    # First use loads more (the anyio asyncio backend, httpcore's connection machinery): do it here.
    import anyio

    anyio.run(_warm_async)
    _warm_run()


WARM_RUN_THREADS_S = 2.0
# A warm-up task that has not ended by then is cancelled (a proxy in the environment, a loaded
# machine): it only costs the warm-up, never the zygote's start.
WARM_RUN_TIMEOUT_S = 5.0
# One warm-up task per model kind: the scripted one (tests, benches) and the two HTTP adapters,
# answered by `subagent.warm_model` on loopback (the HTTP path built in every child
# cost ~8 % more copy-on-write faults per child than when the zygote had run it once).
WARM_KINDS = ("scripted", "openai", "anthropic")
# Whether the code every warm-up task runs is moved together before the first fork (`hot_code`).
PACK_HOT_CODE = True


def _warm_run() -> dict[str, str]:
    """Run one one-turn task per model kind here, before the first fork.

    Much of what a task uses is built on first use — pydantic validators and serializers, the
    loop's caches, code objects' specialised bytecode, interned strings, anyio's task machinery,
    the HTTP client's request path. Built here, it sits in pages every child shares; built in
    each child, it is allocated and written there (measured: fewer copy-on-write faults and less
    CPU per forked task). Best effort: a failure only costs the warm-up. Each run's control
    thread is joined before the next and before any fork. Returns each kind's result status (or
    why it has none), for tests; what did not complete is also reported on stderr.
    """
    import json
    import tempfile

    # Under SCHED_OTHER if the supervisor put the zygote under SCHED_BATCH (which its subagents
    # inherit), and SCHED_BATCH again before the first fork: the runs hand off between threads and
    # over loopback dozens of times, and under SCHED_BATCH each hand-off waits for a CPU. On a
    # loaded machine the warm-up's wall time was ~4x its CPU, and a burst at start waits for it.
    with normal_scheduling(), tempfile.TemporaryDirectory(prefix="agentd-zygote-") as tmp:
        with open(os.path.join(tmp, "warm.json"), "w") as f:
            json.dump({"model": "warm", "turns": [{"text": "warm"}]}, f)
        statuses: dict[str, str] = {}

        def one_round() -> None:
            for kind in WARM_KINDS:
                # A kind that did not complete is not run again: its failure (e.g. a proxy that
                # swallows loopback, bounded by WARM_RUN_TIMEOUT_S) would be paid every round.
                if statuses.get(kind, "completed") == "completed":
                    statuses[kind] = _warm_one(kind, tmp)

        one_round()
        if PACK_HOT_CODE:
            # The first round also ran each kind's one-off set-up; what the second runs is what
            # every task runs, and it is moved together (`hot_code`, allocated in the order first
            # called: measured, a task's code then sits on 0.3 pages per code object, against 0.5
            # when the first round's set-up code is mixed in). The third quickens the copies, so
            # that no child rewrites their bytecode on its own pages.
            copies = hot_code.relocate(hot_code.record(one_round))
            with hot_code.quickened_by_next_call(copies):
                one_round()
        return statuses


def _warm_one(kind: str, tmp: str) -> str:
    import anyio

    from protocol.environment import TEST_FAULT_ENV
    from subagent.channel import ControlChannel

    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()  # a one-turn run's frames (~2 KB) fit in the pipe's buffer
    # Not `run_task`: its tracing would export this run's spans and start exporter threads.
    # A chaos test's armed fault is meant for the children, not for the zygote's warm-up.
    fault = os.environ.pop(TEST_FAULT_ENV, None)
    channel = ControlChannel(down_r, up_w)
    try:
        channel.start()
        anyio.run(_warm_task, kind, tmp, channel)
        status = _result_status(up_r)
    except Exception as exc:  # noqa: BLE001 - an optimisation: report it, start anyway
        status = f"failed: {exc!r}"
    finally:
        if fault is not None:
            os.environ[TEST_FAULT_ENV] = fault
        channel.close()
        os.close(down_w)  # EOF ends the control thread
        deadline = time.monotonic() + WARM_RUN_THREADS_S
        while threading.active_count() > 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        for fd in (down_r, up_r, up_w):
            os.close(fd)
    if status != "completed":
        os.write(2, f"agentd-zygote: {kind} warm-up run ended {status}\n".encode()[:500])
    return status


def _result_status(up_r: int) -> str:
    """The status of the `ev/result` the warm-up run wrote (all its frames sit in the pipe)."""
    import json

    os.set_blocking(up_r, False)
    try:
        data = os.read(up_r, 1 << 16)
    except BlockingIOError:
        data = b""
    for line in data.splitlines():
        try:
            frame = json.loads(line)
        except ValueError:
            continue
        if isinstance(frame, dict) and frame.get("method") == "ev/result":
            return str(frame.get("params", {}).get("status"))
    return "without a result"


async def _warm_task(kind: str, tmp: str, channel: ControlChannel) -> None:
    """One one-turn task on a `kind` endpoint; an HTTP kind is answered by a loopback model
    served in this same loop (the zygote stays single-threaded). `tmp` holds the warm script."""
    import anyio
    from anyio.abc import SocketAttribute

    from protocol.spawn import EndpointSpec
    from subagent.run import run_async
    from subagent.warm_model import serve

    with anyio.fail_after(WARM_RUN_TIMEOUT_S):
        if kind == "scripted":
            endpoint = EndpointSpec(kind="scripted", script_path=os.path.join(tmp, "warm.json"))
            await run_async(_warm_payload(endpoint), channel)
            return
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        port = listener.extra(SocketAttribute.local_port)
        suffix = "/v1" if kind == "openai" else ""
        http_kind: Literal["openai", "anthropic"] = "openai" if kind == "openai" else "anthropic"
        endpoint = EndpointSpec(kind=http_kind, base_url=f"http://127.0.0.1:{port}{suffix}", model="warm")
        async with anyio.create_task_group() as group:
            group.start_soon(serve, listener)
            await run_async(_warm_payload(endpoint), channel)
            group.cancel_scope.cancel()


def _warm_payload(endpoint: EndpointSpec) -> SpawnPayload:
    from protocol.spawn import SpawnPayload

    return SpawnPayload(
        task_id="t_warm", run_id="r_warm", instruction="warm", intelligence=[endpoint], record_steps=False
    )


async def _warm_async() -> None:
    from subagent.intel.transport import open_client

    async with open_client():
        pass


def _send(sock: socket.socket, message: FromZygote) -> None:
    sock.send(encode(message))


def _receive(sock: socket.socket) -> tuple[Fork | FrameError | None, list[int]]:
    fds = array.array("i")
    data, ancillary, _flags, _addr = sock.recvmsg(MAX_REQUEST, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    if not data:
        return None, list(fds)
    return decode(data, TO_ZYGOTE_ADAPTER, max_line=MAX_REQUEST), list(fds)


def _become_subagent(env: dict[str, str], fds: list[int], middle: int | None) -> None:
    """In the subagent: take the pipes as fds 0–2, wait to be the supervisor's child, boot.
    `middle` is the intermediate process, our parent until it exits (None: cloned as the
    supervisor's child already)."""
    # A process group of its own (the kill ladder signals it), in the supervisor's session: the
    # kernel then weighs subagents against the daemon, not against other users' sessions.
    os.setpgid(0, 0)
    nice = int(os.environ.get(SUBAGENT_NICE_ENV) or 0)
    if nice > 0:
        with contextlib.suppress(OSError):
            os.nice(nice)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_DFL)
    os.environ.update(env)
    expected = int(env[SUPERVISOR_PID_ENV])
    deadline = time.monotonic() + REPARENT_TIMEOUT_S
    if middle is not None:
        _await_exit(middle, REPARENT_TIMEOUT_S)
    # The intermediate process exits right after forking its batch; until then our parent is it.
    # Reparented to anyone but the supervisor (a subreaper), the supervisor is gone: end at once,
    # or a daemon killed mid-batch leaves us spinning here for the whole timeout.
    while (parent := os.getppid()) != expected:
        if parent != middle or time.monotonic() > deadline:
            os._exit(ExitCode.FAILURE)
        time.sleep(0.0005)
    # The imported modules stay in the permanent generation: collecting them would cost tens of
    # milliseconds and copy the pages this child shares with the zygote.
    from subagent import boot

    boot.exit_now(boot.main())


def _await_exit(middle: int, timeout_s: float) -> None:
    """Sleep until `middle` (our parent, the intermediate) has exited and we are reparented.

    The first subagent of a batch waits for the intermediate to fork all the others — hundreds of
    milliseconds under load — and polling `getppid` every 0.5 ms for that long cost each subagent
    CPU the forks needed. A pidfd becomes readable only once the kernel has reparented
    the exiting process's children, so one `select` replaces the polling; the caller's loop then
    checks the new parent. Best effort: without a pidfd (already reaped, old kernel) it returns.
    """
    import select

    try:
        pidfd = os.pidfd_open(middle)
    except OSError:
        return
    try:
        if os.getppid() == middle:  # still our parent, so the pidfd is the intermediate's
            select.select([pidfd], [], [], timeout_s)
    finally:
        os.close(pidfd)


def fork_subagent(env: dict[str, str], fds: list[int]) -> int:
    """Fork one subagent as the supervisor's child; return its pid."""
    (pid,) = fork_subagents([(env, fds)])
    if isinstance(pid, str):
        raise OSError(pid)
    return pid


def fork_subagents(batch: list[tuple[dict[str, str], list[int]]]) -> list[int | str]:
    """Fork each subagent of `batch` as a child of the supervisor; return each one's pid, or why it
    could not be forked. One `clone(CLONE_PARENT)` per subagent where the kernel allows it, else
    one intermediate that forks them all and exits (they are then reparented to the supervisor)."""
    global _clone_refused
    if _SYS_CLONE is not None and not _clone_refused:
        pids: list[int | str] = []
        for env, fds in batch:
            try:
                pid = _clone_parent()
            except OSError as exc:
                if not pids and exc.errno in (errno.EINVAL, errno.ENOSYS, errno.EPERM):
                    _clone_refused = True  # a sandbox that forbids it: the double fork from now on
                    break
                pids.append(exc.strerror or "fork failed")
                continue
            if pid == 0:
                try:
                    _become_subagent(env, fds, None)
                finally:
                    os._exit(ExitCode.FAILURE)
            pids.append(pid)
        else:
            return pids
    return _double_fork(batch)


# clone(2) on the architectures we know its number for; its other arguments are 0 everywhere.
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(os.uname().machine)
_CLONE_PARENT = 0x00008000
_clone_refused = False


def _clone_parent() -> int:
    """`os.fork()`, except that the child's parent is ours (the supervisor): one page-table copy
    per subagent instead of a second one in an intermediate process plus its exit and the child's
    wait to be reparented (a fork of this ~76 MiB process costs ≈ 0.25 ms per MiB here).

    Python's own fork hooks run exactly as `os.fork` runs them (`PyOS_BeforeFork` /
    `PyOS_AfterFork_*`: the import lock, threading's and random's at-fork handlers). glibc's fork
    bookkeeping is skipped; it matters only with threads (the zygote has none when it forks:
    `main` checks) — and glibc ≥ 2.34 raises signals in the child by the kernel's thread id.
    Called through `ctypes.PyDLL`, so the GIL is held throughout. Raises OSError."""
    import ctypes

    assert _SYS_CLONE is not None
    libc = ctypes.PyDLL(None, use_errno=True)
    api = ctypes.pythonapi
    api.PyOS_BeforeFork()
    flags = ctypes.c_long(_CLONE_PARENT | signal.SIGCHLD)
    zero = ctypes.c_long(0)
    pid = libc.syscall(ctypes.c_long(_SYS_CLONE), flags, zero, zero, zero, zero)
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0
    code = ctypes.get_errno()
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(code, os.strerror(code))
    return int(pid)


def _double_fork(batch: list[tuple[dict[str, str], list[int]]]) -> list[int | str]:
    """Fork one intermediate that forks each subagent of `batch`, then exits: every subagent is
    reparented to the supervisor. Returns each one's pid, or why it could not be forked."""
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            os.close(read_end)
            me = os.getpid()
            report = []
            for env, fds in batch:
                try:
                    child = os.fork()
                except OSError as exc:
                    report.append("-" + (exc.strerror or "fork failed").replace(" ", "_"))
                    continue
                if child == 0:
                    os.close(write_end)
                    _become_subagent(env, fds, me)
                report.append(str(child))
            os.write(write_end, " ".join(report).encode())
        finally:
            os._exit(ExitCode.OK)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        data = reader.read(32 * len(batch))
    os.waitpid(middle, 0)  # only our own intermediate: the subagents are the supervisor's to reap
    words = data.decode().split()
    if len(words) != len(batch):
        raise OSError("the intermediate process died before reporting the subagents' pids")
    return [w[1:].replace("_", " ") if w.startswith("-") else int(w) for w in words]


def _serve(requests: list[tuple[Fork | FrameError, list[int]]]) -> list[Forked | ForkFailed]:
    """Fork the subagents `requests` ask for, or say why not, in order (the caller closes the fds)."""
    replies: list[Forked | ForkFailed | None] = []
    batch: list[tuple[dict[str, str], list[int]]] = []
    for request, fds in requests:
        if isinstance(request, FrameError):
            error = f"unreadable request: {request.kind} ({request.detail})"
            replies.append(ForkFailed(id=None, error=error[:MAX_ERROR_CHARS]))
        elif len(fds) != 3:
            replies.append(ForkFailed(id=request.id, error="ValueError: a request needs three fds"))
        else:
            replies.append(None)
            batch.append((request.env, fds))
    try:
        pids: list[int | str] = fork_subagents(batch) if batch else []
    except OSError as exc:
        pids = [f"{type(exc).__name__}: {exc}"] * len(batch)
    forked = iter(pids)
    out: list[Forked | ForkFailed] = []
    for (request, _), reply in zip(requests, replies, strict=True):
        if reply is not None:
            out.append(reply)
            continue
        assert isinstance(request, Fork)
        pid = next(forked)
        if isinstance(pid, int):
            out.append(Forked(id=request.id, pid=pid))
        else:
            out.append(ForkFailed(id=request.id, error=f"OSError: {pid}"[:MAX_ERROR_CHARS]))
    return out


def _receive_batch(sock: socket.socket) -> tuple[list[tuple[Fork | FrameError, list[int]]], bool]:
    """The next request (waiting for it) and any already queued behind it, up to `MAX_BATCH`;
    and whether the supervisor closed its end."""
    batch: list[tuple[Fork | FrameError, list[int]]] = []
    request, fds = _receive(sock)
    if request is None:
        return batch, True
    batch.append((request, fds))
    sock.setblocking(False)
    try:
        while len(batch) < MAX_BATCH:
            try:
                request, fds = _receive(sock)
            except BlockingIOError:
                break
            if request is None:
                return batch, True
            batch.append((request, fds))
    finally:
        sock.setblocking(True)
    return batch, False


def main() -> int:
    from processes.linux import set_pdeathsig, set_process_name

    set_pdeathsig(signal.SIGKILL)
    set_process_name("agentd-zygote")
    expected = os.environ.get(SUPERVISOR_PID_ENV)
    if expected and os.getppid() != int(expected):
        return ExitCode.FAILURE
    sock = socket.socket(fileno=SOCKET_FD)
    _warm_imports()
    gc.collect()
    gc.freeze()  # children share these pages instead of copying them on the first collection
    if threading.active_count() != 1:
        _send(sock, StartFailed(error="the zygote has threads after its imports; fork would be unsafe"))
        return ExitCode.FAILURE
    _send(sock, Ready(pid=os.getpid()))
    while True:
        try:
            batch, closed = _receive_batch(sock)
        except OSError:
            return ExitCode.OK
        try:
            replies = _serve(batch)
        finally:
            for _, fds in batch:
                for fd in fds:
                    os.close(fd)
        try:
            for reply in replies:
                _send(sock, reply)
        except OSError:
            return ExitCode.OK
        if closed:
            return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
