"""`task.watch` on a real daemon: one connection follows every task of the caller, and another
user's tasks never reach it."""

from __future__ import annotations

import os
import select
import threading
from pathlib import Path
from typing import Any

import pytest

from agentd.api.client import ApiClient
from protocol.api import SubmitParams, SubmitRequest, TaskSpec, WatchParams, WatchRequest
from tests.support.as_user import NOGROUP, forked_as
from tests.support.daemon import scripted, start_daemon, write_config
from tests.support.privilege import AS_ANOTHER_USER

WAIT_S = 60.0

pytestmark = pytest.mark.processes


def _watch_own_task(socket: str, root_task: str, ready: int) -> dict[str, Any]:
    """As the other user: submit a task, watch it and root's, until it ended; what arrived."""
    with ApiClient(socket) as api:
        own = api.call(SubmitRequest(params=SubmitParams(spec=TaskSpec(instruction="nobody's")))).task_id
    seen: list[tuple[str, str]] = []
    with ApiClient(socket) as watcher:
        for view in watcher.watch(WatchRequest(params=WatchParams(task_ids=[own, root_task]))):
            if not seen:
                os.write(ready, own.encode())  # watching: the test may change both tasks now
            seen.append((view.task_id, view.state))
            if view.task_id == own and view.state == "terminal":
                break
    return {"own": own, "seen": seen}


@AS_ANOTHER_USER
def test_a_watch_hears_the_callers_tasks_and_never_another_users(tmp_path: Path) -> None:
    run = tmp_path / "run"
    socket = run / "agentd.sock"
    slow = scripted("slow", [{"text": "late", "delay_s": 60}], tmp_path) + '[defaults]\nmodel = "slow"\n'
    config = write_config(tmp_path, slow, daemon=f'socket_group = "{NOGROUP}"\n', socket=socket)
    daemon = start_daemon(tmp_path, config, socket=socket)
    ready_read, ready_write = os.pipe()
    outcome: dict[str, Any] = {}
    try:
        root_task = daemon.submit("root's task")
        child = threading.Thread(
            target=lambda: outcome.update(
                forked_as(lambda: _watch_own_task("agentd.sock", root_task, ready_write), cwd=run)
            )
        )
        child.start()
        assert select.select([ready_read], [], [], WAIT_S)[0], "the other user's watch did not start"
        own = os.read(ready_read, 64).decode()
        # Root's task ends first: had it leaked, it would arrive before the watcher's own end.
        daemon.call("task.cancel", {"task_id": root_task})
        assert daemon.wait(root_task, timeout_s=WAIT_S).state == "terminal"
        daemon.call("task.cancel", {"task_id": own})
        child.join(WAIT_S)
        assert not child.is_alive()
    finally:
        os.close(ready_read)
        os.close(ready_write)
        assert daemon.stop() == 0
    seen = [tuple(pair) for pair in outcome["seen"]]
    assert {task_id for task_id, _ in seen} == {own}
    assert seen[0][1] != "terminal"  # the named task first, as it stood
    assert seen[-1] == (own, "terminal")
