"""Daily caps against a real daemon, real subagents and a fake priced provider (docs/budgets.md,
"Daily caps"): a user's, a schedule's and a trigger's spent cap defers their next task to the next
day, saying why in its events, `status`, `list` and `agentd budgets`; the next day lifts it. The
daemon's clock for the caps is moved a day on by `AGENTD_TEST_CLOCK_SHIFT_FILE`."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentd.supervision.daily_desk import SHIFT_ENV
from tests.daemon.test_costs import CALL_USD, config
from tests.daemon.test_triggers import SUPERVISION, _control, _emit
from tests.support.daemon import FIXTURES, Daemon, demo_mcp, running_daemon
from tests.support.fake_llm import FakeLLM
from tests.support.triggers import trigger_tasks, wait_until

pytestmark = pytest.mark.processes

# Below one call's cost: the first task runs (nothing spent yet), and spends past it.
CAP = CALL_USD / 2


def _shift_file(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    shift = tmp_path / "clock-shift"
    shift.write_text("0")
    return shift, {SHIFT_ENV: str(shift)}


def _next_day(shift: Path, until: float) -> None:
    """Move the caps' clock past `until` (the deferred task's next day)."""
    shift.write_text(str(until - time.time() + 1))


def _listed(daemon: Daemon, task_id: str) -> dict[str, Any]:
    listed = daemon.cli("list", "--json")
    assert listed.returncode == 0, listed.stderr
    views: list[dict[str, Any]] = [json.loads(line) for line in listed.stdout.splitlines()]
    (view,) = [v for v in views if v["task_id"] == task_id]
    return view


def _deferred(daemon: Daemon, scope: str) -> dict[str, object]:
    return daemon.wait_log("task.deferred", timeout_s=60, scope=scope)


def test_a_users_spent_daily_cap_defers_their_next_task_until_the_next_day(tmp_path: Path) -> None:
    shift, env = _shift_file(tmp_path)
    with FakeLLM() as fake:
        budgets = f"[budgets]\nper_uid_daily_cost = {CAP}\n"
        with running_daemon(tmp_path, config(fake) + budgets, env=env) as daemon:
            first = daemon.submit("spend")
            assert daemon.wait(first).usage.cost_usd == pytest.approx(CALL_USD)
            second = daemon.submit("wait for tomorrow")
            line = _deferred(daemon, f"uid:{os.getuid()}")
            assert "budgets.per_uid_daily_cost" in str(line["reason"])
            status = daemon.cli("status", second)
            listed = _listed(daemon, second)
            shown = daemon.cli("budgets")
            as_json = daemon.cli("budgets", "--json")
            calls_before = len(fake.requests)
            _next_day(shift, float(listed["deferred"]["until"]))
            done = daemon.wait(second, timeout_s=60)
            events = [json.loads(x) for x in daemon.cli("logs", second, "--json").stdout.splitlines()]
    assert "deferred until" in status.stdout and "the daily cost cap of uid" in status.stdout, status.stdout
    assert listed["state"] == "queued" and listed["deferred"]["reason"].startswith("the daily cost cap")
    assert shown.returncode == 0, shown.stderr
    assert f"uid {os.getuid()}" in shown.stdout and second in shown.stdout, shown.stdout
    view = json.loads(as_json.stdout)
    (mine,) = [x for x in view["lines"] if x["kind"] == "uid" and x["name"] == str(os.getuid())]
    assert mine["spent_usd"] == pytest.approx(CALL_USD) and mine["cap_usd"] == pytest.approx(CAP)
    assert [d["task_id"] for d in view["deferred"]] == [second]
    assert calls_before == 1  # the deferred task asked nothing of the model before its day
    assert done.status is not None and done.status.value == "completed", done
    assert [e["event"] for e in events].count("task.deferred") == 1


def test_a_schedules_spent_daily_cap_defers_its_next_fire_until_the_next_day(tmp_path: Path) -> None:
    shift, env = _shift_file(tmp_path)
    with FakeLLM() as fake, running_daemon(tmp_path, config(fake), env=env) as daemon:
        made = daemon.cli("submit", "a fire", "--every", "1s", "--daily-cost", str(CAP), "--json")
        assert made.returncode == 0, made.stderr
        schedule_id = json.loads(made.stdout)["schedule_id"]
        line = _deferred(daemon, f"schedule:{schedule_id}")
        assert "the schedule's daily_cost" in str(line["reason"])
        fires = daemon.call("task.list", {"schedule_id": schedule_id, "limit": 100})
        assert isinstance(fires, list)
        deferred = [f for f in fires if f.get("deferred")]
        ran = [f for f in fires if f["state"] == "terminal"]
        assert len(deferred) == 1 and len(ran) == 1, fires
        _next_day(shift, float(deferred[0]["deferred"]["until"]))
        done = daemon.wait(deferred[0]["task_id"], timeout_s=60)
        daemon.cli("schedules", "delete", schedule_id)
    assert done.status is not None and done.status.value == "completed", done


def test_a_triggers_spent_daily_cap_defers_its_next_delivery_until_the_next_day(tmp_path: Path) -> None:
    shift, env = _shift_file(tmp_path)
    files = _control(tmp_path, "files", uris=["file:///srv/a"])
    watch = f'watch_command = ["{sys.executable}", "{FIXTURES / "fake_watcher.py"}", '
    watch += f'"{tmp_path / "control"}"]\n'
    trigger = (
        '[[trigger]]\nname = "inbox"\nserver = "files"\nglob = "file:///srv/*"\n'
        f'instruction = "A file changed: {{uri}}."\ndebounce_ms = 50\nmax_wait_ms = 200\nprestart = false\n'
        f"daily_cost = {CAP}\n"
    )
    with FakeLLM() as fake:
        body = config(fake) + demo_mcp("files") + SUPERVISION + watch + trigger
        with running_daemon(tmp_path, body, env=env) as daemon:
            # The delivery after arming runs and spends the cap; the change after it waits.
            first = wait_until(lambda: trigger_tasks(daemon, "inbox"), "the first delivery", daemon)
            daemon.wait(first[0]["task_id"], timeout_s=60)
            _emit(files, ["file:///srv/a"], 1)
            _deferred(daemon, "trigger:inbox")
            tasks = trigger_tasks(daemon, "inbox")
            second = tasks[-1]
            assert second["deferred"] is not None and "trigger 'inbox'" in second["deferred"]["reason"]
            shown = daemon.cli("budgets")
            _next_day(shift, float(second["deferred"]["until"]))
            done = daemon.wait(second["task_id"], timeout_s=60)
    assert "trigger inbox" in shown.stdout, shown.stdout
    assert done.status is not None and done.status.value == "completed", done
