"""A hostile client's schedules against a real daemon: input that would make the next-fire search
walk for centuries is refused at once, naming why, and never holds the event loop that serves
every other client (docs/security.md)."""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

import pytest

from agentd.errors import ApiClientError
from protocol.api import INVALID_SPEC, StatusRequest
from tests.support.daemon import Daemon, running_daemon, scripted

pytestmark = pytest.mark.processes

# The fifth Sunday of March at 02:30: in Berlin every such day is the spring-forward day, so every
# occurrence falls in the hour the clocks skip.
GAP_ONLY: dict[str, object] = {"kind": "cron", "cron": "30 2 * 3 SUN#5", "tz": "Europe/Berlin"}
# Every minute of that hour: the most candidates a gap-only expression makes the search skip.
GAP_ONLY_EVERY_MINUTE: dict[str, object] = {"kind": "cron", "cron": "* 2 * 3 7L", "tz": "Europe/Berlin"}


def _create(daemon: Daemon, trigger: dict[str, object]) -> tuple[float, ApiClientError]:
    started = time.perf_counter()
    with pytest.raises(ApiClientError) as refused:
        daemon.call("schedule.create", {"spec": {"instruction": "x"}, "trigger": trigger})
    return time.perf_counter() - started, refused.value


def _status_latencies(daemon: Daemon, stop: threading.Event) -> list[float]:
    latencies: list[float] = []
    with daemon.client() as client:
        while not stop.is_set():
            started = time.perf_counter()
            client.call(StatusRequest())
            latencies.append(time.perf_counter() - started)
    return latencies


@pytest.mark.alone  # a latency bound
def test_a_cron_whose_every_fire_falls_in_a_dst_gap_is_refused_at_once_and_stalls_no_one(
    tmp_path: Path,
) -> None:
    with running_daemon(tmp_path, scripted("m", [{"text": "done"}], tmp_path)) as daemon:
        daemon.call("daemon.status")
        elapsed, refused = _create(daemon, GAP_ONLY)
        assert refused.code == INVALID_SPEC
        assert refused.message == (
            "invalid schedule: cron: '30 2 * 3 SUN#5' never fires in the next 50 years: every occurrence "
            "falls in a daylight-saving gap of Europe/Berlin (clocks skip that local time)"
        )
        assert elapsed < 0.1, f"refused after {elapsed * 1000:.0f} ms"

        # Twenty of the costliest such requests at once, while another client asks for the status.
        stop = threading.Event()
        seen: list[list[float]] = []
        watcher = threading.Thread(target=lambda: seen.append(_status_latencies(daemon, stop)))
        watcher.start()
        answers: list[tuple[float, ApiClientError]] = []
        hostile = [
            threading.Thread(target=lambda: answers.append(_create(daemon, GAP_ONLY_EVERY_MINUTE)))
            for _ in range(20)
        ]
        for thread in hostile:
            thread.start()
        for thread in hostile:
            thread.join(timeout=30)
        stop.set()
        watcher.join(timeout=30)

        assert len(answers) == 20
        assert all(error.code == INVALID_SPEC for _, error in answers)
        assert all("daylight-saving gap" in error.message for _, error in answers)
        latencies = seen[0]
        assert latencies, "the status client got no answer"
        # Before the search was bounded and off the loop, one such request held the loop for
        # 0.6-1.2 s and twenty took another user's status from 7 ms to 3.5 s.
        assert max(latencies) < 0.25, (
            f"status p50 {statistics.median(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.0f} ms"
        )
        assert daemon.call("schedule.list", {}) == []


def test_the_cli_checks_a_cron_from_now_and_names_the_gap(tmp_path: Path) -> None:
    with running_daemon(tmp_path, scripted("m", [{"text": "done"}], tmp_path)) as daemon:
        done = daemon.cli("submit", "x", "--cron", "30 2 * 3 SUN#5", "--tz", "Europe/Berlin")
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(
            "agentd submit: --cron: '30 2 * 3 SUN#5' never fires in the next 50 years"
        )
        assert "daylight-saving gap of Europe/Berlin" in done.stderr
        assert daemon.call("schedule.list", {}) == []
