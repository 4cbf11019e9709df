"""A supervised process's pipes and pidfd, at the level of file descriptors: write a frame within a
deadline, relay stderr line by line under a size cap, and reap the exit status through the pidfd
(docs/design.md §2, §3). `SupervisedProcess` drives them for a subagent and a resource watcher
alike; a parked child's preparation writes through `write_all` before it has a supervisor."""

from __future__ import annotations

import os
from collections.abc import Callable

import anyio

from agentd.supervision.liveness import ExitInfo
from processes.linux import reap_nowait
from processes.pipes import read_chunk
from protocol.framing import LineSplitter, Oversize


async def write_all(fd: int, data: bytes, timeout_s: float) -> bool:
    """Write all of `data` to the non-blocking `fd` within `timeout_s`; False when the child is gone
    or not reading. One frame at a time: the caller holds its write lock around this."""
    # Most frames go into the pipe at once: only a rest waits, under the timer (arming and
    # cancelling one costs several times the write itself, and every journaled step is answered).
    try:
        written = os.write(fd, data)
    except BlockingIOError:
        written = 0
    except OSError:
        return False
    if written == len(data):
        return True
    view = memoryview(data)[written:]
    with anyio.move_on_after(timeout_s):
        while view:
            try:
                written = os.write(fd, view)
            except BlockingIOError:
                await anyio.wait_writable(fd)
                continue
            except OSError:
                return False
            view = view[written:]
        return True
    return False


async def relay_stderr(fd: int, line_cap: int, on_line: Callable[[str], None]) -> None:
    """Hand each stderr line to `on_line` as text until EOF; a line over `line_cap` bytes becomes a
    note that it was dropped (a child cannot make the daemon hold an unbounded line)."""
    splitter = LineSplitter(line_cap)
    while True:
        chunk = await read_chunk(fd)
        for line in splitter.feed(chunk) if chunk else splitter.close():
            on_line(
                f"[line over {line_cap} bytes dropped]"
                if isinstance(line, Oversize)
                else line.decode("utf-8", "replace")
            )
        if not chunk:
            return


async def reap(pidfd: int) -> ExitInfo:
    """Wait for the child to exit and reap it: exactly our child (its pidfd), never blocking."""
    while True:
        await anyio.wait_readable(pidfd)
        info = reap_nowait(pidfd)  # readable pidfd = exited
        if info is not None:
            break
    if info.si_code == os.CLD_EXITED:
        return ExitInfo(exit_code=info.si_status)
    return ExitInfo(signal=info.si_status)
