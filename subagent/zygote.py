"""The zygote: a pre-imported, single-threaded process that forks subagents (DESIGN §10).

`python -I -m subagent.zygote` imports the whole subagent stack once, freezes the garbage
collector's view of it, reports ready, then serves fork requests from the supervisor on fd 3 (a
SOCK_SEQPACKET socket; the messages are `protocol.zygote`'s): a `Fork` with the child's environment,
its three pipe ends riding along (SCM_RIGHTS). Each child is double-forked so that it is reparented
to the supervisor — a child subreaper — which then owns it exactly like an exec'd child (pidfd,
waitid, PDEATHSIG). A fork costs milliseconds instead of the second the imports take.
"""

from __future__ import annotations

import array
import gc
import os
import signal
import socket
import sys
import threading
import time

from protocol.environment import SUPERVISOR_PID_ENV
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

SOCKET_FD = 3
REPARENT_TIMEOUT_S = 2.0


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


def _warm_run() -> None:
    """Run one one-turn task on the scripted model here, before the first fork.

    Much of what a task uses is built on first use — pydantic validators and serializers, the
    loop's caches, code objects' specialised bytecode, interned strings, anyio's task machinery.
    Built here, it sits in pages every child shares; built in each child, it is allocated and
    written there (measured: ~20 % fewer copy-on-write faults and less CPU per forked task). Best
    effort: a failure only costs the warm-up. Its control thread is joined before any fork.
    """
    import json
    import tempfile

    import anyio

    from protocol.environment import TEST_FAULT_ENV
    from protocol.spawn import EndpointSpec, SpawnPayload
    from subagent.channel import ControlChannel
    from subagent.run import run_async

    with tempfile.TemporaryDirectory(prefix="agentd-zygote-") as tmp:
        script = os.path.join(tmp, "warm.json")
        with open(script, "w") as f:
            json.dump({"model": "warm", "turns": [{"text": "warm"}]}, f)
        payload = SpawnPayload(
            task_id="t_warm",
            run_id="r_warm",
            instruction="warm",
            intelligence=[EndpointSpec(kind="scripted", script_path=script)],
        )
        down_r, down_w = os.pipe()
        up_r, up_w = os.pipe()  # a one-turn run's frames (~2 KB) fit in the pipe's buffer
        # Not `run_task`: its tracing would export this run's spans and start exporter threads.
        # A chaos test's armed fault is meant for the children, not for the zygote's warm-up.
        fault = os.environ.pop(TEST_FAULT_ENV, None)
        channel = ControlChannel(down_r, up_w)
        try:
            channel.start()
            anyio.run(run_async, payload, channel)
        except Exception as exc:  # noqa: BLE001 - an optimisation: report it, start anyway
            os.write(2, f"agentd-zygote: warm-up run failed: {exc!r}\n".encode()[:500])
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


def _become_subagent(env: dict[str, str], fds: list[int]) -> None:
    """In the grandchild: take the pipes as fds 0–2, wait to be the supervisor's child, boot."""
    os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_DFL)
    os.environ.update(env)
    expected = int(env[SUPERVISOR_PID_ENV])
    deadline = time.monotonic() + REPARENT_TIMEOUT_S
    # The intermediate process exits right after forking us; until then our parent is it.
    while os.getppid() != expected:
        if time.monotonic() > deadline:
            os._exit(ExitCode.FAILURE)
        time.sleep(0.0005)
    # The imported modules stay in the permanent generation: collecting them would cost tens of
    # milliseconds and copy the pages this child shares with the zygote.
    from subagent import boot

    boot.exit_now(boot.main())


def fork_subagent(env: dict[str, str], fds: list[int]) -> int:
    """Double-fork a subagent; return its pid (it is reparented to the supervisor)."""
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            os.close(read_end)
            child = os.fork()
            if child == 0:
                os.close(write_end)
                _become_subagent(env, fds)
            os.write(write_end, str(child).encode())
        finally:
            os._exit(ExitCode.OK)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        data = reader.read(32)
    os.waitpid(middle, 0)  # only our own intermediate: the subagent is the supervisor's to reap
    if not data:
        raise OSError("the intermediate process died before reporting the subagent's pid")
    return int(data)


def _serve(request: Fork | FrameError, fds: list[int]) -> Forked | ForkFailed:
    """Fork the subagent `request` asks for, or say why not (the caller closes `fds`)."""
    if isinstance(request, FrameError):
        return ForkFailed(id=None, error=f"unreadable request: {request.kind} ({request.detail})")
    try:
        if len(fds) != 3:
            raise ValueError("a request needs three fds")
        return Forked(id=request.id, pid=fork_subagent(request.env, fds))
    except (OSError, ValueError) as exc:
        return ForkFailed(id=request.id, error=f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS])


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
            request, fds = _receive(sock)
        except OSError:
            return ExitCode.OK
        if request is None:
            return 0  # the supervisor closed its end
        try:
            reply = _serve(request, fds)
        finally:
            for fd in fds:
                os.close(fd)
        try:
            _send(sock, reply)
        except OSError:
            return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
