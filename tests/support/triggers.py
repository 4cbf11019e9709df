"""A daemon's triggers and the tasks they started, read over its socket, and a bounded wait on
them."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.support.daemon import Daemon

WAIT_S = 30.0


def wait_until(check: Callable[[], Any], what: str, daemon: Daemon, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := check()):
        assert daemon.proc.poll() is None, f"the daemon exited:\n{daemon.log_path.read_text()[-3000:]}"
        assert time.monotonic() < deadline, (
            f"timed out waiting for {what}:\n{daemon.log_path.read_text()[-3000:]}"
        )
        time.sleep(0.05)
    return value


def trigger_views(daemon: Daemon) -> dict[str, dict[str, Any]]:
    views = daemon.call("trigger.list")
    assert isinstance(views, list)
    return {v["name"]: v for v in views}


def trigger_tasks(daemon: Daemon, trigger: str) -> list[dict[str, Any]]:
    views = daemon.call("task.list", {"limit": 1000})
    assert isinstance(views, list)
    return sorted((v for v in views if v.get("trigger") == trigger), key=lambda v: v["created_at"])
