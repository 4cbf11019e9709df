"""`subagent.scheduling`: out of SCHED_BATCH for a stretch, and back, on the calling thread only."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from subagent.scheduling import leave_batch, normal_scheduling


def _on_a_thread(body: Callable[[], list[int]]) -> list[int]:
    """Run `body` on a thread of its own (a policy set with pid 0 is that thread's alone)."""
    seen: list[int] = []
    thread = threading.Thread(target=lambda: seen.extend(body()))
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    return seen


def test_a_batch_thread_runs_normal_until_put_back_and_putting_back_twice_is_once() -> None:
    def body() -> list[int]:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        back = leave_batch()
        during = os.sched_getscheduler(0)
        back()
        after = os.sched_getscheduler(0)
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        back()  # a second call does nothing: it does not put the thread under BATCH again
        return [during, after, os.sched_getscheduler(0)]

    assert _on_a_thread(body) == [os.SCHED_OTHER, os.SCHED_BATCH, os.SCHED_OTHER]


def test_a_thread_not_under_batch_is_left_alone() -> None:
    def body() -> list[int]:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        with normal_scheduling():
            during = os.sched_getscheduler(0)
        return [during, os.sched_getscheduler(0)]

    assert _on_a_thread(body) == [os.SCHED_IDLE, os.SCHED_IDLE]


def test_the_block_runs_normal_and_batch_comes_back_even_on_an_error() -> None:
    def body() -> list[int]:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        during = -1
        try:
            with normal_scheduling():
                during = os.sched_getscheduler(0)
                raise ValueError("the warm-up failed")
        except ValueError:
            pass
        return [during, os.sched_getscheduler(0)]

    assert _on_a_thread(body) == [os.SCHED_OTHER, os.SCHED_BATCH]
