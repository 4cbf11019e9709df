"""`daemon.status` counts: the live children (counted at most once a second) and the
unfinished tasks, against a real daemon whose tasks sit in a scripted model call."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from protocol.result import TerminalStatus as S
from tests.support.daemon import Daemon, running_daemon, scripted

BOUND_S = 15.0


def status(daemon: Daemon) -> dict[str, object]:
    result = daemon.call("daemon.status")
    assert isinstance(result, dict)
    return result


def until(daemon: Daemon, wanted: Callable[[dict[str, object]], bool]) -> dict[str, object]:
    """Poll `daemon.status` until `wanted` holds (bounded)."""
    deadline = time.monotonic() + BOUND_S
    while not wanted(seen := status(daemon)):
        assert time.monotonic() < deadline, f"daemon.status never matched: {seen}"
        time.sleep(0.1)
    return seen


@pytest.mark.processes
def test_status_counts_the_live_children_and_the_unfinished_tasks(tmp_path: Path) -> None:
    body = scripted("slow", [{"text": "finally", "delay_s": 30}], tmp_path) + '[defaults]\nmodel = "slow"\n'
    with running_daemon(tmp_path, body) as daemon:
        idle = status(daemon)["children"]  # the zygote, once it is up
        assert isinstance(idle, int)
        held = [daemon.submit("hold") for _ in range(2)]
        daemon.wait_ready(held)
        busy = until(daemon, lambda s: s["children"] == idle + 2)
        assert busy["running"] == 2 and busy["queued"] == 0
        for task_id in held:
            daemon.call("task.cancel", {"task_id": task_id})
        for task_id in held:
            assert daemon.wait(task_id).status is S.CANCELLED
        # Both children reaped: the count comes back within the second it may be cached for.
        after = until(daemon, lambda s: s["children"] == idle)
        assert after["running"] == 0 and after["queued"] == 0
