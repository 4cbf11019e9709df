"""A subagent's CPU policy where it is waited on: out of SCHED_BATCH for a while, then back.

The supervisor runs subagents under SCHED_BATCH (`supervision.batch_scheduling`): the same CPU
share, but a woken child never preempts the daemon. That costs a woken child up to a scheduler
tick each time it waits for a CPU, which matters on the few paths someone is waiting on: the
zygote's warm-up (a burst at start waits for it) and a prestarted trigger task between `ctrl/go`
and its first model request (a trigger's change-to-request latency). Switching between the two policies
needs no privilege at nice 0. A process found under any other policy is left alone.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator


def leave_batch() -> Callable[[], None]:
    """SCHED_OTHER now if under SCHED_BATCH; returns what puts it back (a no-op otherwise)."""
    try:
        if os.sched_getscheduler(0) != os.SCHED_BATCH:
            return _nothing
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except OSError:
        return _nothing
    done = False

    def back() -> None:
        nonlocal done
        if not done:
            done = True
            with contextlib.suppress(OSError):
                os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))

    return back


@contextlib.contextmanager
def normal_scheduling() -> Iterator[None]:
    """The block under SCHED_OTHER when the process was under SCHED_BATCH, and back after."""
    back = leave_batch()
    try:
        yield
    finally:
        back()


def _nothing() -> None:
    return None
