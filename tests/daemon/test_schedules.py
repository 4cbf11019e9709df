"""Schedules end to end (docs/design.md §11): a real daemon, the CLI, the scripted model or the rogue
stand-in child. Interval and loop schedules fire and end, pause/resume/delete, a kill -9 between
fires, a cron schedule kept across a kill -9 (its zone and next occurrence), overlapping fires
skipped and recorded, another uid kept out, bad input refused (exit 2)."""

from __future__ import annotations

import datetime
import itertools
import json
import os
import signal
import time
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agentd.errors import ApiClientError
from protocol.api import (
    INVALID_SPEC,
    NOT_FOUND,
    ListParams,
    ListRequest,
    Request,
    ScheduleDeleteRequest,
    ScheduleGetRequest,
    ScheduleListRequest,
    SchedulePauseRequest,
    ScheduleRef,
)
from tests.support.as_user import NOBODY, NOGROUP, fork_as_nobody, outcomes
from tests.support.daemon import Daemon, running_daemon, scripted, start_daemon, write_config
from tests.support.privilege import AS_ANOTHER_USER
from tests.support.rogue_daemon import rogue_daemon

pytestmark = pytest.mark.processes

ANSWER: list[dict[str, object]] = [{"text": "done"}]


def _model(tmp_path: Path, turns: list[dict[str, object]] = ANSWER) -> str:
    return scripted("m", turns, tmp_path) + '[defaults]\nmodel = "m"\n'


def _create(daemon: Daemon, *flags: str) -> str:
    done = daemon.cli("submit", "scheduled work", *flags, "--json")
    assert done.returncode == 0, done.stderr
    created = json.loads(done.stdout)
    assert created["created"] is True
    return str(created["schedule_id"])


def _schedule(daemon: Daemon, schedule_id: str) -> dict[str, Any]:
    view = daemon.call("schedule.get", {"schedule_id": schedule_id})
    assert isinstance(view, dict)
    return view


def _fires(daemon: Daemon, schedule_id: str) -> list[dict[str, Any]]:
    views = daemon.call("task.list", {"schedule_id": schedule_id, "limit": 1000})
    assert isinstance(views, list)
    return sorted(views, key=lambda v: v["created_at"])


def _lines(daemon: Daemon, event: str, since: int = 0, **match: object) -> list[dict[str, object]]:
    return [
        line
        for line in daemon.log()[since:]
        if line.get("event") == event and all(line.get(k) == v for k, v in match.items())
    ]


def _wait_lines(
    daemon: Daemon, event: str, count: int, *, since: int = 0, timeout_s: float = 30.0, **match: object
) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout_s
    while len(found := _lines(daemon, event, since, **match)) < count:
        assert time.monotonic() < deadline, f"{len(found)} of {count} {event} {match} within {timeout_s} s"
        assert daemon.proc.poll() is None, "the daemon exited"
        time.sleep(0.05)
    return found


def test_an_interval_schedule_fires_n_times_then_ends(tmp_path: Path) -> None:
    with running_daemon(tmp_path, _model(tmp_path)) as daemon:
        schedule_id = _create(daemon, "--every", "1s", "--max-runs", "3")
        daemon.wait_log("schedule.ended", schedule_id=schedule_id)
        fires = _fires(daemon, schedule_id)
        assert [f["status"] for f in fires] == ["completed"] * 3
        assert all(f["schedule_id"] == schedule_id for f in fires)
        view = _schedule(daemon, schedule_id)
        assert (view["state"], view["runs"], view["next_fire_at"]) == ("ended", 3, None)
        fired = _lines(daemon, "schedule.fired", schedule_id=schedule_id)
        assert [line["reason"] for line in fired] == ["on_time"] * 3
        # Fires keep the phase of the interval: due times whole seconds apart (a slow first run
        # makes the occurrences during it overlap, skipped and recorded).
        due = [float(line["due_at"]) for line in fired]  # type: ignore[arg-type]
        gaps = [round(b - a, 3) for a, b in itertools.pairwise(due)]
        assert all(gap >= 1 and gap == int(gap) for gap in gaps), gaps
        overlaps = _lines(daemon, "schedule.skipped", schedule_id=schedule_id, reason="overlap")
        assert len(overlaps) == sum(gaps) - len(gaps) == view["skipped"]


def test_loop_with_max_runs_3_runs_three_times(tmp_path: Path) -> None:
    with running_daemon(tmp_path, _model(tmp_path)) as daemon:
        schedule_id = _create(daemon, "--loop", "--max-runs", "3")
        daemon.wait_log("schedule.ended", schedule_id=schedule_id)
        listed = daemon.cli("list", "--schedule", schedule_id, "--json")
        assert listed.returncode == 0, listed.stderr
        fires = [json.loads(line) for line in listed.stdout.splitlines()]
        assert [f["status"] for f in fires] == ["completed"] * 3
        assert _schedule(daemon, schedule_id)["note"] == "max_runs reached (3)"
        shown = daemon.cli("schedules")
        assert schedule_id in shown.stdout and "ended (max_runs reached (3))" in shown.stdout


def test_a_loop_whose_runs_report_nothing_done_backs_off(tmp_path: Path) -> None:
    idle: list[dict[str, object]] = [{"tool_calls": [{"name": "nothing_to_do"}]}, {"text": "nothing to do"}]
    with running_daemon(tmp_path, _model(tmp_path, idle)) as daemon:
        schedule_id = _create(daemon, "--loop", "--max-runs", "3")
        daemon.wait_log("schedule.ended", schedule_id=schedule_id)
        view = _schedule(daemon, schedule_id)
        # Two idle runs: the pause went from 1 s to 2 s (the third run ended the schedule).
        assert view["pause_s"] == 2.0
        fires = _fires(daemon, schedule_id)
        waits = [float(b["created_at"]) - float(a["ended_at"]) for a, b in itertools.pairwise(fires)]
        assert waits[0] >= 1.0 and waits[1] >= 2.0, waits


def test_pause_resume_and_delete(tmp_path: Path) -> None:
    with running_daemon(tmp_path, _model(tmp_path)) as daemon:
        schedule_id = _create(daemon, "--every", "1s")
        daemon.wait_log("schedule.fired", schedule_id=schedule_id)
        paused = daemon.cli("schedules", "pause", schedule_id)
        assert paused.returncode == 0, paused.stderr
        view = _schedule(daemon, schedule_id)
        assert (view["state"], view["next_fire_at"]) == ("paused", None)
        before = len(_fires(daemon, schedule_id))
        time.sleep(2.5)  # two occurrences pass while paused: neither may fire
        assert len(_fires(daemon, schedule_id)) == before
        mark = len(daemon.log())
        assert daemon.cli("schedules", "resume", schedule_id).returncode == 0
        _wait_lines(daemon, "schedule.fired", 1, since=mark, schedule_id=schedule_id)
        assert _schedule(daemon, schedule_id)["state"] == "active"
        deleted = daemon.cli("schedules", "delete", schedule_id)
        assert deleted.returncode == 0, deleted.stderr
        gone = daemon.cli("schedules", "show", schedule_id)
        assert gone.returncode == 1 and f"no schedule {schedule_id!r}" in gone.stderr
        assert schedule_id not in daemon.cli("schedules").stdout
        # The fires stay listable by the schedule's id.
        assert len(_fires(daemon, schedule_id)) >= before + 1


@pytest.mark.parametrize("missed", ["skip", "catch_up_one"])
def test_kill_9_between_fires_then_the_missed_fire_follows_its_policy(tmp_path: Path, missed: str) -> None:
    config = write_config(tmp_path, rogue_daemon(tmp_path))
    daemon = start_daemon(tmp_path, config)
    try:
        # Overlap allowed: after the restart the catch-up fire's task may still wait for the zygote
        # when the next occurrence comes due; overlap has its own test, this one is about misses.
        done = daemon.cli(
            "submit", "complete", "--every", "2s", "--missed", missed, "--overlap", "allow", "--json"
        )
        assert done.returncode == 0, done.stderr
        schedule_id = json.loads(done.stdout)["schedule_id"]
        first = daemon.wait_log("schedule.fired", schedule_id=schedule_id)
        daemon.wait(str(first["task_id"]))  # between fires: the first one is over
    finally:
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.proc.wait(timeout=10)
    time.sleep(4.5)  # at least two occurrences come due while no daemon runs
    mark = len(daemon.log())
    daemon = start_daemon(tmp_path, config)
    try:
        after = _wait_lines(daemon, "schedule.fired", 2, since=mark, timeout_s=20)
        skipped = _lines(daemon, "schedule.skipped", mark, schedule_id=schedule_id)
        if missed == "skip":
            assert [line["reason"] for line in skipped] == ["missed"]
            assert int(skipped[0]["skipped"]) >= 2  # type: ignore[call-overload]
            assert [line["reason"] for line in after] == ["on_time", "on_time"]
        else:
            assert skipped == [], [(line["reason"], line.get("running_task")) for line in skipped]
            assert [line["reason"] for line in after] == ["catch_up", "on_time"]
            assert int(after[0]["skipped"]) >= 1  # type: ignore[call-overload]
        # Never a burst, never an occurrence twice: every fire has its own due time.
        fires = _fires(daemon, schedule_id)
        due = [line["due_at"] for line in _lines(daemon, "schedule.fired", schedule_id=schedule_id)]
        assert len(due) == len(set(due)) == len(fires)
        for earlier, later in itertools.pairwise(after):
            assert float(later["due_at"]) - float(earlier["due_at"]) >= 2.0  # type: ignore[arg-type]
    finally:
        assert daemon.stop(timeout_s=40) == 0


def test_a_cron_schedule_survives_a_kill_9_with_its_zone_and_next_occurrence(tmp_path: Path) -> None:
    config = write_config(tmp_path, _model(tmp_path))
    daemon = start_daemon(tmp_path, config)
    try:
        schedule_id = _create(daemon, "--cron", "0 7 * * 1-5", "--tz", "Europe/Berlin")
        before = _schedule(daemon, schedule_id)
    finally:
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.proc.wait(timeout=10)
    daemon = start_daemon(tmp_path, config)
    try:
        after = _schedule(daemon, schedule_id)
        assert after["trigger"] == before["trigger"]
        assert (after["trigger"]["cron"], after["trigger"]["tz"]) == ("0 7 * * 1-5", "Europe/Berlin")
        assert after["state"] == "active"
        # Re-armed from the journal: the same next occurrence, 07:00 on a weekday in Berlin.
        assert after["next_fire_at"] == before["next_fire_at"]
        due = datetime.datetime.fromtimestamp(float(after["next_fire_at"]), ZoneInfo("Europe/Berlin"))
        assert (due.hour, due.minute, due.second) == (7, 0, 0) and due.weekday() < 5, due
        assert due.timestamp() > time.time()
    finally:
        assert daemon.stop(timeout_s=40) == 0


def test_a_fire_due_while_the_previous_runs_is_skipped_and_recorded(tmp_path: Path) -> None:
    slow: list[dict[str, object]] = [{"text": "done", "delay_s": 2.5}]
    with running_daemon(tmp_path, _model(tmp_path, slow)) as daemon:
        schedule_id = _create(daemon, "--every", "1s")
        first = daemon.wait_log("schedule.fired", schedule_id=schedule_id)
        skipped = daemon.wait_log("schedule.skipped", schedule_id=schedule_id, reason="overlap")
        assert skipped["running_task"] == first["task_id"]
        assert daemon.cli("schedules", "delete", schedule_id).returncode == 0
        view = daemon.wait(str(first["task_id"]))
        assert view.status is not None and view.status.value == "completed"
        events = daemon.call("task.events", {"task_id": first["task_id"]})
        assert isinstance(events, dict)
        logs = daemon.cli("logs", str(first["task_id"]), "--json")
        recorded = [json.loads(line) for line in logs.stdout.splitlines()]
        assert any(e["event"] == "schedule.skipped" and e["fields"]["reason"] == "overlap" for e in recorded)
        assert _schedule_or_none(daemon, schedule_id) is None


def _schedule_or_none(daemon: Daemon, schedule_id: str) -> dict[str, Any] | None:
    try:
        return _schedule(daemon, schedule_id)
    except ApiClientError as exc:
        if exc.code != NOT_FOUND:
            raise
        return None


def test_bad_cron_zone_or_interval_is_exit_2_naming_the_field_and_journals_nothing(tmp_path: Path) -> None:
    with running_daemon(tmp_path, _model(tmp_path)) as daemon:
        for flags, named in (
            (("--cron", "61 * * * *"), "--cron"),
            (("--cron", "not cron"), "--cron"),
            (("--cron", "0 7 * * *", "--tz", "Nowhere/Atlantis"), "--tz"),
            (("--every", "0.5s"), "--every"),
            (("--loop", "--interval", "soon"), "--interval"),
        ):
            done = daemon.cli("submit", "x", *flags)
            assert done.returncode == 2, (flags, done.stderr)
            assert done.stderr.startswith(f"agentd submit: {named}: "), done.stderr
        # The daemon refuses the same input from a client that skips the CLI's checks.
        with pytest.raises(ApiClientError) as refused:
            daemon.call(
                "schedule.create",
                {"spec": {"instruction": "x"}, "trigger": {"kind": "cron", "cron": "61 * * * *"}},
            )
        assert refused.value.code == INVALID_SPEC
        assert "invalid schedule: cron:" in refused.value.message
        assert daemon.call("schedule.list", {}) == []


def test_schedule_tables_in_the_config_are_owned_by_the_daemons_user(tmp_path: Path) -> None:
    table = '[[schedule]]\nname = "tick"\ninstruction = "tick"\nevery = "1s"\nmax_runs = 2\n'
    with running_daemon(tmp_path, _model(tmp_path) + table) as daemon:
        listed = daemon.call("schedule.list", {})
        assert isinstance(listed, list) and len(listed) == 1
        (view,) = listed
        assert (view["name"], view["owner_uid"]) == ("tick", os.getuid())
        daemon.wait_log("schedule.ended", schedule_id=view["schedule_id"])
        assert len(_fires(daemon, view["schedule_id"])) == 2
    # Restarted with the same table: the schedule is kept, not created again.
    daemon = start_daemon(tmp_path, daemon.config)
    try:
        again = daemon.call("schedule.list", {})
        assert isinstance(again, list) and [v["schedule_id"] for v in again] == [view["schedule_id"]]
    finally:
        assert daemon.stop(timeout_s=40) == 0


def _other_uid_scenario(schedule_id: str, path: str) -> dict[str, Any]:
    steps: list[tuple[str, Request[Any]]] = [
        ("get", ScheduleGetRequest(params=ScheduleRef(schedule_id=schedule_id))),
        ("pause", SchedulePauseRequest(params=ScheduleRef(schedule_id=schedule_id))),
        ("delete", ScheduleDeleteRequest(params=ScheduleRef(schedule_id=schedule_id))),
        ("list", ScheduleListRequest()),
        ("fires", ListRequest(params=ListParams(schedule_id=schedule_id))),
    ]
    return outcomes(path, steps)


@AS_ANOTHER_USER
def test_another_uid_cannot_see_or_delete_a_schedule(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    body = _model(tmp_path)
    with running_daemon(tmp_path, body, daemon_lines=f'socket_group = "{NOGROUP}"\n') as daemon:
        schedule_id = _create(daemon, "--every", "1s")
        daemon.wait_log("schedule.fired", schedule_id=schedule_id)
        seen = fork_as_nobody(tmp_path, schedule_id, "agentd.sock", [], _other_uid_scenario)
        for name in ("get", "pause", "delete"):
            assert seen[name] == {"code": NOT_FOUND, "message": f"no schedule {schedule_id!r}"}, name
        assert seen["list"] == {"result": []}
        assert seen["fires"] == {"result": []}
        view = _schedule(daemon, schedule_id)
        assert view["state"] == "active" and view["owner_uid"] != NOBODY
        assert daemon.cli("schedules", "delete", schedule_id).returncode == 0


def test_a_loop_stops_after_k_crashed_runs_in_a_row_with_the_last_error(tmp_path: Path) -> None:
    with running_daemon(tmp_path, rogue_daemon(tmp_path)) as daemon:
        done = daemon.cli("submit", "segfault", "--loop", "--max-failures", "2", "--json")
        assert done.returncode == 0, done.stderr
        schedule_id = json.loads(done.stdout)["schedule_id"]
        ended = daemon.wait_log("schedule.ended", schedule_id=schedule_id)
        assert str(ended["reason"]).startswith("2 failed runs in a row: ")
        view = _schedule(daemon, schedule_id)
        assert (view["state"], view["runs"], view["failures"], view["last_status"]) == (
            "ended",
            2,
            2,
            "crashed",
        )
        assert view["last_error"] and view["last_error"] in str(view["note"])
        fires = _fires(daemon, schedule_id)
        assert [f["status"] for f in fires] == ["crashed", "crashed"]
        # The second run waited out the crash backoff after the first.
        assert float(fires[1]["created_at"]) - float(fires[0]["ended_at"]) >= 0.5
