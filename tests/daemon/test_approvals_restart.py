"""The approval gate across a daemon kill -9: a request pending at the kill stays
decidable after the restart, and the decision is honoured once when the requeued run makes the same
call. Its own module: it runs its own daemons, and the leak check needs no other daemon alive."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from protocol.result import TerminalStatus as S
from tests.support.approvals import approvals_body, pending_request, recorded_calls
from tests.support.daemon import start_daemon, write_config


@pytest.mark.processes
def test_a_request_pending_at_a_kill_9_is_decidable_after_restart_and_honoured_once(tmp_path: Path) -> None:
    config = write_config(tmp_path, approvals_body(tmp_path))
    daemon = start_daemon(tmp_path, config)
    try:
        task_id = daemon.submit("restart")
        request = pending_request(daemon, task_id)
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.proc.wait(timeout=10)
        daemon = start_daemon(tmp_path, config)
        # The requeued run repeats its turns (its model waits 4 s before the same call), so the
        # decision lands while no run waits: it is journaled, then honoured when the call returns.
        survived = pending_request(daemon, task_id)
        assert survived["call"] == request["call"]
        assert daemon.cli("approve", task_id, request["call"]).returncode == 0
        final = daemon.wait(task_id)
        assert final.status is S.COMPLETED, final
        assert final.result == "recorded restart"
        assert final.attempts == 1  # one interrupted run before this one
        assert recorded_calls(daemon, "restart") == 1
        honoured = daemon.wait_log("approval.decided", task_id=task_id, honoured=True)
        assert honoured["call"] == request["call"]
        assert daemon.call("approval.list", {}) == []
    finally:
        if daemon.proc.poll() is None:
            assert daemon.stop() == 0
