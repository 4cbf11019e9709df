"""The real daemon under a fake systemd: READY/STATUS/WATCHDOG/STOPPING in order, the watchdog
starving while the event loop is wedged, and SIGHUP reloads bracketed by RELOADING=1 … READY=1."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.errors import ApiClientError
from protocol.api import INVALID_SPEC
from protocol.result import TerminalStatus
from tests.support.daemon import (
    WATCHDOG_PID_WRAPPER,
    Daemon,
    FakeNotifySocket,
    scripted,
    start_daemon,
    write_config,
)

pytestmark = pytest.mark.processes

WATCHDOG_USEC = 200_000  # pings every 0.1 s
WEDGE_S = 3.0
# Well inside the wedge even if the test notices its start late; pings resume right after it.
SILENCE_CHECKED_S = 1.0


@pytest.fixture
def notify(tmp_path: Path) -> Iterator[FakeNotifySocket]:
    fake = FakeNotifySocket(tmp_path / "notify.sock")
    yield fake
    fake.close()


def _stop(daemon: Daemon) -> int:
    try:
        return daemon.stop(timeout_s=40)
    finally:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()


def test_ready_status_watchdog_and_stopping_arrive_in_order(tmp_path: Path, notify: FakeNotifySocket) -> None:
    config = write_config(tmp_path, "")
    daemon = start_daemon(
        tmp_path, config, notify.env(WATCHDOG_USEC), launcher=WATCHDOG_PID_WRAPPER, wait=False
    )
    try:
        ready = notify.wait_for("READY")
        # READY=1 means recovery is done and the socket answers: one call, no retry.
        status = daemon.call("daemon.status", timeout_s=5)
        assert isinstance(status, dict)
        assert status["pid"] == daemon.pid
        assert daemon.wait_log("proc.ready", timeout_s=0)["watchdog_interval_s"] == WATCHDOG_USEC / 2e6
        assert ready.fields["STATUS"] == "0 queued, 0 running"
        for _ in range(3):
            notify.wait_for("WATCHDOG", timeout_s=10)
        assert "STOPPING" not in notify.key_sequence()
        daemon.proc.send_signal(signal.SIGTERM)
        stopping = notify.wait_for("STOPPING", timeout_s=10)
        assert stopping.fields["STATUS"].startswith("draining: ")
    finally:
        assert _stop(daemon) == 0
    keys = notify.key_sequence()
    assert keys[:2] == ["READY", "STATUS"]
    assert keys.count("READY") == 1
    assert keys.count("WATCHDOG") >= 3
    assert keys.index("READY") < keys.index("WATCHDOG") < keys.index("STOPPING")


def test_a_wedged_event_loop_stops_the_watchdog_pings_until_it_unwedges(
    tmp_path: Path, notify: FakeNotifySocket
) -> None:
    env = {**notify.env(WATCHDOG_USEC), "AGENTD_TEST_WEDGE_ON_SIGUSR2": str(WEDGE_S)}
    daemon = start_daemon(tmp_path, write_config(tmp_path, ""), env, launcher=WATCHDOG_PID_WRAPPER)
    try:
        for _ in range(3):
            notify.wait_for("WATCHDOG", timeout_s=10)
        daemon.proc.send_signal(signal.SIGUSR2)
        daemon.wait_log("proc.wedge", phase="start", timeout_s=10)
        notify.drain_nowait()  # sent before the wedge began
        silent = notify.receive(SILENCE_CHECKED_S)
        assert silent is None, f"the daemon notified during the wedge: {silent}"
        notify.wait_for("WATCHDOG", timeout_s=WEDGE_S + 10)
        daemon.wait_log("proc.wedge", phase="end", timeout_s=0)
        status = daemon.call("daemon.status", timeout_s=5)
        assert isinstance(status, dict)
    finally:
        assert _stop(daemon) == 0


def test_sighup_keeps_the_old_config_when_the_new_one_is_invalid_and_picks_up_a_valid_one(
    tmp_path: Path, notify: FakeNotifySocket
) -> None:
    body = scripted("first", [{"text": "done"}], tmp_path)
    config = write_config(tmp_path, body)
    daemon = start_daemon(tmp_path, config, notify.env())
    try:
        notify.wait_for("READY")
        with pytest.raises(ApiClientError) as rejected:
            daemon.submit("hello", model="second")
        assert rejected.value.code == INVALID_SPEC

        valid = config.read_text()
        config.write_text(valid + "\n[daemon]\nno_such_key = 1\n")
        daemon.proc.send_signal(signal.SIGHUP)
        reloading = notify.wait_for("RELOADING", timeout_s=10)
        assert int(reloading.fields["MONOTONIC_USEC"]) > 0
        after_invalid = notify.wait_for("READY", timeout_s=10)
        assert "config reload rejected" in after_invalid.fields["STATUS"]
        assert daemon.wait_log("config.invalid", timeout_s=0)["kept"] == "previous configuration"
        first = daemon.submit("still served", model="first")
        assert daemon.wait(first).status is TerminalStatus.COMPLETED

        config.write_text(valid + scripted("second", [{"text": "second"}], tmp_path))
        daemon.proc.send_signal(signal.SIGHUP)
        notify.wait_for("RELOADING", timeout_s=10)
        after_valid = notify.wait_for("READY", timeout_s=10)
        assert "degraded" not in after_valid.fields["STATUS"]
        daemon.wait_log("config.loaded", reload=True, timeout_s=0)
        second = daemon.submit("now known", model="second")
        assert daemon.wait(second).result == "second"
    finally:
        assert _stop(daemon) == 0


def test_sighup_applies_a_new_log_level_to_loggers_bound_before_it(
    tmp_path: Path, notify: FakeNotifySocket
) -> None:
    body = scripted("m", [{"text": "done"}], tmp_path)
    config = write_config(tmp_path, body)
    daemon = start_daemon(tmp_path, config, notify.env())
    try:
        notify.wait_for("READY")
        before = daemon.submit("logged")
        assert daemon.wait(before).status is TerminalStatus.COMPLETED
        daemon.wait_log("task.submitted", timeout_s=0, task_id=before)

        config.write_text(config.read_text().replace("[daemon]\n", '[daemon]\nlog_level = "warning"\n', 1))
        daemon.proc.send_signal(signal.SIGHUP)
        notify.wait_for("RELOADING", timeout_s=10)
        notify.wait_for("READY", timeout_s=10)
        quiet = daemon.submit("not logged")
        assert daemon.wait(quiet).status is TerminalStatus.COMPLETED
        # The supervisor's logger was bound at start; its info lines stop all the same.
        assert not [line for line in daemon.log() if line.get("task_id") == quiet and line["level"] == "info"]

        config.write_text(config.read_text().replace('log_level = "warning"\n', ""))
        daemon.proc.send_signal(signal.SIGHUP)
        notify.wait_for("READY", timeout_s=10)
        loud = daemon.submit("logged again")
        assert daemon.wait(loud).status is TerminalStatus.COMPLETED
        daemon.wait_log("task.submitted", timeout_s=5, task_id=loud)
    finally:
        assert _stop(daemon) == 0
