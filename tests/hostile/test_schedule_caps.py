"""Schedules are capped like tasks against a real daemon: how many one user holds, the bytes their
specs hold, how often they fire, and a listing whose memory is bounded by its page, not by what
was stored (docs/security.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentd.errors import ApiClientError
from agentd.scheduling.fire_rate import FireRate
from protocol.api import (
    QUOTA_EXCEEDED,
    ScheduleCreateParams,
    ScheduleCreateRequest,
    ScheduleListParams,
    ScheduleListRequest,
    ScheduleSpec,
    TaskSpec,
)
from tests.support.as_user import NOGROUP, forked_as, outcomes
from tests.support.daemon import Daemon, running_daemon, scripted
from tests.support.privilege import AS_ANOTHER_USER
from tests.support.rss import MiB, rss_growth_during

HOURLY: dict[str, object] = {"kind": "interval", "every_s": 3600}


def _call(daemon: Daemon, method: str, params: dict[str, object]) -> Any:
    """`daemon.call`, its plain JSON answer for indexing."""
    return daemon.call(method, params)


def _create(daemon: Daemon, instruction: str, trigger: dict[str, object] = HOURLY) -> str:
    result = _call(daemon, "schedule.create", {"spec": {"instruction": instruction}, "trigger": trigger})
    return str(result["schedule_id"])


def _refused(daemon: Daemon, instruction: str) -> ApiClientError:
    with pytest.raises(ApiClientError) as refused:
        _create(daemon, instruction)
    return refused.value


def _create_request(instruction: str) -> ScheduleCreateRequest:
    return ScheduleCreateRequest(
        params=ScheduleCreateParams(
            spec=TaskSpec(instruction=instruction), trigger=ScheduleSpec.model_validate(HOURLY)
        )
    )


def test_the_fire_rate_counts_a_minute_per_owner_and_takes_back_what_did_not_fire() -> None:
    rate = FireRate()
    assert [rate.admit(1, t, 2) for t in (0.0, 1.0)] == [None, None]
    problem = rate.admit(1, 2.0, 2)
    assert problem is not None and "daemon.max_fires_per_minute_per_uid = 2" in problem
    assert rate.admit(2, 2.0, 2) is None  # another owner has its own minute
    assert rate.admit(1, 60.5, 2) is None  # the fire at 0 left the window
    rate.forget(1, 60.5)
    assert rate.admit(1, 60.6, 2) is None
    assert rate.admit(1, 60.7, 2) is not None
    assert rate.admit(3, 0.0, None) is None


@pytest.mark.processes
@AS_ANOTHER_USER
def test_schedules_count_against_a_users_caps_and_not_another_users(tmp_path: Path) -> None:
    run = tmp_path / "run"
    lines = f'socket_group = "{NOGROUP}"\nmax_schedules_per_uid = 3\nmax_pending_bytes_per_uid = "96K"\n'
    body = scripted("m", [{"text": "done"}], tmp_path)
    with running_daemon(tmp_path, body, daemon_lines=lines, socket=run / "agentd.sock") as daemon:
        first = _create(daemon, "x" * 60_000)
        # The schedule's spec holds 60 KB of the 96 KiB: a task or a schedule that would pass the
        # cap is refused, naming it.
        too_big = _refused(daemon, "y" * 40_000)
        assert too_big.code == QUOTA_EXCEEDED and too_big.retryable
        assert "daemon.max_pending_bytes_per_uid = 98304" in too_big.message
        with pytest.raises(ApiClientError) as task_refused:
            daemon.submit("z" * 40_000)
        assert task_refused.value.code == QUOTA_EXCEEDED
        assert "your unfinished tasks and your schedules hold" in task_refused.value.message
        ids = [_create(daemon, f"small {i}") for i in range(2)]
        over = _refused(daemon, "one too many")
        assert over.code == QUOTA_EXCEEDED
        assert over.message.startswith(
            "the schedule was not accepted: you have 3 schedules, the cap (daemon.max_schedules_per_uid = 3)"
        )
        done = daemon.cli("submit", "one too many", "--every", "1h")
        assert done.returncode == 1 and "max_schedules_per_uid" in done.stderr

        # Another user's caps are their own, and root's schedule id is no cursor for them.
        def as_nobody() -> dict[str, Any]:
            return outcomes(
                "agentd.sock",
                [
                    ("create", _create_request("nobody's")),
                    ("probe", ScheduleListRequest(params=ScheduleListParams(after=first))),
                ],
            )

        seen = forked_as(as_nobody, cwd=run, groups=[NOGROUP])
        assert "result" in seen["create"], seen
        assert seen["probe"] == {"result": []}

        # Deleting one frees its place and its bytes.
        daemon.call("schedule.delete", {"schedule_id": first})
        _create(daemon, "y" * 40_000)
        # Pages, oldest first, after a cursor.
        page = _call(daemon, "schedule.list", {"limit": 2})
        assert [v["schedule_id"] for v in page] == ids
        rest = _call(daemon, "schedule.list", {"limit": 10, "after": ids[-1]})
        assert len(rest) == 2 and rest[0]["owner_uid"] == 65534


@pytest.mark.processes
def test_a_users_fires_per_minute_are_capped(tmp_path: Path) -> None:
    lines = "max_fires_per_minute_per_uid = 3\n"
    body = scripted("m", [{"text": "done"}] * 20, tmp_path)
    with running_daemon(tmp_path, body, daemon_lines=lines) as daemon:
        every_second: dict[str, object] = {"kind": "interval", "every_s": 1, "overlap": "allow"}
        schedules = [_create(daemon, f"tick {i}", every_second) for i in range(2)]
        refused = daemon.wait_log("schedule.skipped", timeout_s=30, reason="quota")
        assert "daemon.max_fires_per_minute_per_uid = 3" in str(refused["err"])
        fired = [line for line in daemon.log() if line.get("event") == "schedule.fired"]
        # Within the first minute no more than the cap fired, across both schedules.
        assert len(fired) == 3, fired
        for schedule_id in schedules:
            daemon.call("schedule.delete", {"schedule_id": schedule_id})


@pytest.mark.processes
def test_parallel_schedule_listings_keep_the_daemons_memory_bounded(tmp_path: Path) -> None:
    lines = 'max_schedules_per_uid = "infinity"\nmax_pending_bytes_per_uid = "infinity"\n'
    with running_daemon(tmp_path, scripted("m", [{"text": "done"}], tmp_path), daemon_lines=lines) as daemon:
        big = "z" * 1_000_000
        with daemon.client(timeout_s=60) as client:
            for _ in range(60):
                client.call(_create_request(big))

        def lister() -> int:
            with daemon.client(timeout_s=60) as client:
                views = client.call(ScheduleListRequest(params=ScheduleListParams(limit=1000)))
            assert all(len(v.instruction) == 201 for v in views)
            return len(views)

        growth, counts = rss_growth_during(daemon.pid, lister)
        assert counts == [60] * 16
        # Before the listing was cut in SQL, sixteen lists of this took the daemon up by hundreds of MB.
        assert growth < 50 * MiB, f"RSS grew by {growth / MiB:.0f} MiB"
        one = _call(daemon, "schedule.list", {"limit": 1})[0]
        whole = _call(daemon, "schedule.get", {"schedule_id": one["schedule_id"]})
        assert len(whole["instruction"]) == len(big)
