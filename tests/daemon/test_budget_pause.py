"""A task that pauses at its budget instead of ending (docs/durability.md): `awaiting_budget`,
surviving a restart, going on from its last step after `agentd extend`, and ending
`exhausted_*` when nobody extends it in `budget_wait_timeout`. A real daemon, real subagents and
the stdio MCP server that logs every call it runs."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest

from protocol.result import TerminalStatus
from tests.support.daemon import Daemon, start_daemon
from tests.support.resume import (
    WAIT_S,
    calls_of,
    restart_daemon,
    resume_config,
    stop_daemon,
    task_events,
    wait_for,
)

pytestmark = pytest.mark.processes


def _state(daemon: Daemon, task_id: str) -> object:
    view = daemon.call("task.get", {"task_id": task_id})
    assert isinstance(view, dict)
    return view["state"]


def test_a_paused_task_survives_a_restart_and_goes_on_from_its_step_after_extend(tmp_path: Path) -> None:
    config = resume_config(tmp_path)
    daemon = start_daemon(tmp_path, config)
    try:
        task_id = daemon.submit("paused", limits={"max_steps": 2}, on_budget="pause")
        wait_for("awaiting_budget", lambda: _state(daemon, task_id) == "awaiting_budget", daemon)
        shown = daemon.cli("status", task_id)
        assert "awaiting_budget" in shown.stdout
        assert "its step budget ran out: it waits for `agentd extend`" in shown.stdout
        # Two steps ran, each with its call; no wrap-up was asked (the task goes on later).
        assert calls_of(tmp_path, "paused") == Counter({"R1": 1, "R2": 1})

        daemon = restart_daemon(daemon, tmp_path, config, signal.SIGTERM)
        assert _state(daemon, task_id) == "awaiting_budget"
        not_waiting = daemon.cli("extend", daemon.submit("other"), "--steps", "5")
        assert not_waiting.returncode == 2 and "is not waiting for budget" in not_waiting.stderr

        done = daemon.cli("extend", task_id, "--steps", "10")
        assert done.returncode == 0, done.stderr
        view = daemon.wait(task_id, timeout_s=WAIT_S)
        assert view.status is TerminalStatus.COMPLETED, view
        # It went on from step 2: nothing ran twice, the rest ran once.
        assert calls_of(tmp_path, "paused") == Counter({"R1": 1, "R2": 1, "R3": 1, "C1": 1, "R4": 1})
        events = [e["event"] for e in task_events(daemon, task_id)]
        assert events.index("task.paused") < events.index("task.extended") < events.index("task.resumed")
    finally:
        stop_daemon(daemon)


def test_a_pause_nobody_extends_ends_exhausted_at_the_wait_timeout(tmp_path: Path) -> None:
    config = resume_config(tmp_path)
    text = config.read_text().replace(
        "[defaults]\n", '[defaults]\non_budget = "pause"\nbudget_wait_timeout = "1s"\n'
    )
    config.write_text(text)
    daemon = start_daemon(tmp_path, config)
    try:
        task_id = daemon.submit("abandoned", limits={"max_steps": 1})
        view = daemon.wait(task_id, timeout_s=WAIT_S)
        assert view.status is TerminalStatus.EXHAUSTED_STEPS, view
        assert view.error is not None and view.error.message == "no budget was added within 1 s"
        assert calls_of(tmp_path, "abandoned") == Counter({"R1": 1})
    finally:
        stop_daemon(daemon)
