"""Following a task against a real daemon and the scripted model: `submit --follow` names the task
before any event, Ctrl-C on a terminal leaves the task running and says how to reach it again
(exit 130), a pipe gets the same readable lines `logs` prints, `--json` gets JSON lines, and the
short id a listing shows is accepted where a task id is."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.result import TerminalStatus
from tests.support.daemon import Daemon, lean_mcp, running_daemon, scripted
from tests.support.terminal import open_terminal

pytestmark = pytest.mark.processes

TURNS: list[dict[str, object]] = [
    {"tool_calls": [{"name": "demo__add", "arguments": {"a": 20, "b": 22}}]},
    {"text": "The answer is {last_tool_result}."},
]
# A task that takes its first step, then sits in a 60 s "model call" until it is cancelled.
ROLES = [
    {
        "match": "^slow",
        "turns": [{"tool_calls": [{"name": "note_read", "arguments": {}}]}, {"text": "late", "delay_s": 60}],
    }
]


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    body = (
        scripted("m", TURNS, tmp_path, roles=ROLES) + lean_mcp() + '[defaults]\nmodel = "m"\nmcp = ["demo"]\n'
    )
    with running_daemon(tmp_path, body) as running:
        yield running


def _state(daemon: Daemon, task_id: str) -> str:
    view = daemon.call("task.get", {"task_id": task_id})
    assert isinstance(view, dict)
    return str(view["state"])


@pytest.mark.alone  # a pseudo-terminal and a signal, with fast supervision knobs
def test_ctrl_c_while_following_leaves_the_task_running_and_says_how_to_reach_it(daemon: Daemon) -> None:
    terminal = open_terminal(["submit", "slow: think at length", "--follow", "--socket", str(daemon.socket)])
    try:
        screen = terminal.wait_for(["submitted", "step 1 · tools · 1 tool call"])
        first = screen.lstrip().splitlines()[0]
        assert first.startswith("task t_") and "Ctrl-C stops following, the task goes on" in first
        task_id = first.split()[1]
        assert screen.index(task_id) < screen.index("▶ started")  # the id before any event
        terminal.type(b"\x03")
        code = terminal.wait_exit()
        screen = terminal.screen
    finally:
        terminal.close()
    assert code == 130, screen
    assert f"stopped following {task_id}; the task goes on." in screen
    assert f"agentd logs -f {task_id}" in screen and f"agentd cancel {task_id}" in screen
    assert "Traceback" not in screen
    assert _state(daemon, task_id) == "running"

    # The short id a listing shows names it; cancel says what it did.
    listed = daemon.cli("list", "--state", "running")
    assert listed.returncode == 0, listed.stderr
    short = listed.stdout.splitlines()[1].split()[0]
    assert task_id.startswith(short) and len(short) < len(task_id)
    cancelled = daemon.cli("cancel", short)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.startswith(f"cancelling {task_id}: it was running;")
    assert daemon.wait(task_id, timeout_s=30).status is TerminalStatus.CANCELLED


def test_piped_follow_prints_the_lines_logs_prints_after_the_task_id(daemon: Daemon) -> None:
    followed = daemon.cli("submit", "add 20 and 22", "--follow")
    assert followed.returncode == 0, followed.stderr
    lines = followed.stdout.splitlines()
    assert lines[0].startswith("task t_") and lines[0].endswith(" submitted")  # no terminal: no hint
    task_id = lines[0].split()[1]
    logs = daemon.cli("logs", task_id[:16].lower())  # any unique start of the id, in any case
    assert logs.returncode == 0, logs.stderr
    events = logs.stdout.splitlines()
    assert "▶ started (at most 40 steps, 200000 tokens)" in events
    assert "step 1 · tools · 1 tool call" in "\n".join(events)
    assert not any(line.startswith("{") for line in lines)  # readable text, not JSON
    assert lines[1 : 1 + len(events)] == events
    assert lines[1 + len(events)].startswith(f"{task_id}  completed (exit 0)  2 steps")
    assert lines[-1] == "The answer is 42."


def test_follow_and_logs_with_json_print_json_lines(daemon: Daemon) -> None:
    followed = daemon.cli("submit", "add 20 and 22", "--follow", "--json")
    assert followed.returncode == 0, followed.stderr
    lines = [json.loads(line) for line in followed.stdout.splitlines()]
    submitted, *events, view = lines
    assert (submitted["created"], submitted["task_id"]) == (True, view["task_id"])
    assert "loop.final" in {e["event"] for e in events}
    assert view["result"] == "The answer is 42."
    logs = daemon.cli("logs", view["task_id"], "--json")
    assert [json.loads(line) for line in logs.stdout.splitlines()] == events


def test_an_unknown_or_ambiguous_start_of_an_id_is_a_clear_error(daemon: Daemon) -> None:
    first = daemon.submit("add 20 and 22")
    second = daemon.submit("add 20 and 22")
    daemon.wait(first)
    daemon.wait(second)
    unknown = daemon.cli("status", "t_ZZZZZZ")
    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert unknown.stderr == "agentd status: TASK: no task id you may see starts with 't_ZZZZZZ'\n"
    ambiguous = daemon.cli("tree", "t_")
    assert ambiguous.returncode == 2
    assert ambiguous.stderr.startswith("agentd tree: TASK: 't_' is the start of several task ids (")
    assert first in ambiguous.stderr and second in ambiguous.stderr
    assert "type more of the id" in ambiguous.stderr
    before = daemon.cli("list", "--before", second[:16])
    assert before.returncode == 0, before.stderr
    assert [line.split()[0] for line in before.stdout.splitlines()[1:]] == [first[:14]]


def test_empty_listings_say_so_and_json_prints_nothing(daemon: Daemon) -> None:
    for args, said in (
        (["list"], "no tasks\n"),
        (["list", "--state", "queued"], "no queued tasks\n"),
        (["schedules"], "no schedules (`agentd submit … --cron|--every|--loop` makes one)\n"),
        (["approvals"], "no pending approval requests you may decide\n"),
    ):
        shown = daemon.cli(*args)
        assert (shown.returncode, shown.stdout, shown.stderr) == (0, said, ""), args
        machine = daemon.cli(*args, "--json")
        assert (machine.returncode, machine.stdout) == (0, ""), args


def test_schedule_commands_say_what_they_did(daemon: Daemon) -> None:
    created = daemon.cli("submit", "yearly report", "--cron", "0 0 1 1 *")
    assert created.returncode == 0, created.stderr
    schedule_id = created.stdout.strip()
    shown = daemon.cli("schedules", "show", schedule_id)
    assert shown.stdout.splitlines()[:3] == [
        f"schedule     {schedule_id}",
        "state        active",
        "when         cron: 0 0 1 1 *",
    ]
    assert json.loads(daemon.cli("schedules", "show", schedule_id, "--json").stdout)["state"] == "active"
    paused = daemon.cli("schedules", "pause", schedule_id)
    assert (
        paused.stdout
        == f"paused schedule {schedule_id}: no fires until `agentd schedules resume {schedule_id}`\n"
    )
    deleted = daemon.cli("schedules", "delete", schedule_id)
    assert deleted.stdout.startswith(f"deleted schedule {schedule_id}: it fires no more")


def test_status_of_a_deadline_task_says_why_it_ended(tmp_path: Path) -> None:
    body = scripted("m", [{"text": "slow", "delay_s": 30}], tmp_path) + '[defaults]\nmodel = "m"\n'
    with running_daemon(tmp_path, body) as daemon:
        task_id = daemon.submit("x", limits={"deadline_s": 1})
        daemon.wait(task_id)
        shown = daemon.cli("status", task_id)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[1] == "state        deadline (exit 124)"
    assert lines[2].startswith("why          the deadline passed after ")
    assert lines[2].endswith(" s; no usable result")
