"""The child's boot order (docs/design.md §2), before anything heavy is imported.

1. move the control channel to private fds; fd 0 becomes /dev/null and fd 1 points at fd 2;
2. PR_SET_PDEATHSIG(SIGKILL), then exit if the supervisor already died (the fork→prctl race);
3. join the cgroup leaf named by `AGENTD_CGROUP`, if any;
4. read the first frame: a valid `ctrl/spawn` or exit 2 without echoing it (it may hold secrets);
5. start the control thread and send `ev/ready`; only then import the loop, `mcp` and httpx2;
6. run the task, send exactly one `ev/result`, exit.
"""

from __future__ import annotations

import faulthandler
import os
import select
import signal
import sys
import time
from typing import TYPE_CHECKING

from protocol.environment import CGROUP_ENV, SPAWN_TIMEOUT_ENV, SUPERVISOR_PID_ENV

# A constants module with no imports of its own: safe before the first frame.
from protocol.exit_codes import ExitCode

if TYPE_CHECKING:
    from protocol.framing import LineSplitter, Oversize

SPAWN_TIMEOUT_S = float(os.environ.get(SPAWN_TIMEOUT_ENV, "30"))


def die(code: int, message: str, who: str = "subagent") -> int:
    os.write(2, f"{who}: {message}\n".encode())
    return code


def private_channel() -> tuple[int, int]:
    """Steps 1: the control channel moves to close-on-exec fds nothing else will touch."""
    ctrl_in, ctrl_out = os.dup(0), os.dup(1)  # os.dup fds are non-inheritable
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return ctrl_in, ctrl_out


def guard_parent(process_name: str = "agentd-subagent") -> bool:
    """Step 2. Returns False when the supervisor we were started for is already gone."""
    from processes.linux import set_pdeathsig, set_process_name

    set_pdeathsig(signal.SIGKILL)
    # Exec'd or forked from the zygote, every subagent shows up under one name in ps/top.
    set_process_name(process_name)
    expected = os.environ.get(SUPERVISOR_PID_ENV)
    return not expected or os.getppid() == int(expected)


def join_cgroup() -> None:
    """Step 3: best effort; the supervisor already falls back when no cgroup is writable."""
    leaf = os.environ.get(CGROUP_ENV)
    if not leaf:
        return
    try:
        with open(os.path.join(leaf, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    except OSError as exc:
        os.write(2, f"subagent: could not join cgroup leaf: {exc.strerror}\n".encode())


def read_first_line(fd: int, splitter: LineSplitter) -> tuple[bytes | None, list[bytes | Oversize]]:
    """Read up to the first newline, bounded in size and time; return it and any later lines."""
    from protocol.framing import Oversize

    deadline = time.monotonic() + SPAWN_TIMEOUT_S
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None, []
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        lines = splitter.feed(chunk) if chunk else splitter.close()
        if lines:
            first = lines[0]
            return (None if isinstance(first, Oversize) else first), lines[1:]
        if not chunk:
            return None, []


def main() -> int:
    faulthandler.enable()
    ctrl_in, ctrl_out = private_channel()
    if not guard_parent():
        return die(ExitCode.FAILURE, "supervisor exited before we started")
    join_cgroup()

    from protocol.framing import MAX_FRAME, LineSplitter

    splitter = LineSplitter(MAX_FRAME)
    first, rest = read_first_line(ctrl_in, splitter)
    if first is None:
        return die(ExitCode.USAGE, "no spawn payload (EOF, timeout or oversized frame)")

    from protocol import control
    from protocol.framing import FrameError, decode

    message = decode(first, control.DOWN_ADAPTER)
    if isinstance(message, FrameError):
        return die(ExitCode.USAGE, f"invalid spawn payload: {message.kind} ({message.detail})")
    if not isinstance(message, control.Spawn):
        return die(ExitCode.USAGE, "the first frame must be ctrl/spawn")

    from subagent.channel import ControlChannel

    channel = ControlChannel(ctrl_in, ctrl_out, splitter=splitter, early_lines=rest)
    channel.start()
    if not channel.send(control.Ready(params=control.ReadyParams(pid=os.getpid()))):
        return die(ExitCode.FAILURE, "control channel closed before ev/ready")

    from subagent.run import run_task  # heavy: the loop, httpx2, mcp

    return run_task(message.params, channel)


def exit_now(code: int) -> None:
    """Exit without the interpreter's teardown.

    By now the result is on the channel and every MCP server has been shut down; what is left is
    Python tearing down ~10k module objects, which takes ~200 ms — and the supervisor records a
    task terminal only once the child is reaped. Output is unbuffered, so nothing is lost.
    """
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
