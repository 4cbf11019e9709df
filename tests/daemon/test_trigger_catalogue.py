"""A trigger's task asks the model first and connects its server meanwhile (a trigger's latency):
the real daemon, the real watcher, the SDK fixture servers of both eras over stdio, the real
subagent talking to `FakeLLM`.

The watcher lists its server's tools and resources and reports them; the daemon puts them in the
payload of the trigger's tasks; the task's first model request offers them before the task's own
connection to the server is up. Each fixture instance after the first (the watcher's) is the
task's, and the `--later-*` options make it slow to start, hide a tool, or fail:

- `slow` (2025, starts 3 s late): the first request is sent before the task's server serves, and
  already lists its tools; the model's `note` call waits for the connection, runs once, and its
  result reaches the model;
- `stale` (2026, the task's instance no longer has `note`): the call gets the unknown-tool
  observation and the server never runs it; the next request no longer offers it;
- `broken` (required, the task's instance exits at once): the run ends `crashed`, `abort = mcp`,
  with the message a failed connect has always had;
- `optional` (required = false, fails the same way): the call's observation says the server could
  not connect; the run goes on and completes.

The drain leaves no process behind (the `processes` marker checks it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.mcp_watch_driver import NOTES_LOG, SERVED_LOG
from tests.support.daemon import FAST_SUPERVISION, FIXTURES, Daemon, running_daemon
from tests.support.fake_llm import Behaviour, FakeLLM, Recorded, Respond, chat, tool_call
from tests.support.triggers import trigger_tasks, trigger_views, wait_until

pytestmark = pytest.mark.processes
WAIT_S = 120.0  # four watchers import `mcp` before they arm, on a loaded 2-core machine
SLOW_START_S = 3.0
SUPERVISION = FAST_SUPERVISION.replace("missed_pongs = 3", "missed_pongs = 25")
NAMES = ("slow", "stale", "broken", "optional")


def _body_of(request: Recorded) -> dict[str, Any]:
    body: Any = request.json
    assert isinstance(body, dict)
    return body


def _messages(request: Recorded) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = _body_of(request)["messages"]
    return messages


def _tools(request: Recorded) -> list[str]:
    return [t["function"]["name"] for t in _body_of(request).get("tools") or []]


def _trigger_of(request: Recorded) -> str | None:
    text = json.dumps(_messages(request))
    return next((name for name in NAMES if f"{name.capitalize()} changed" in text), None)


def _choose(request: Recorded) -> Behaviour:
    """Each task calls its server's `note` once, then answers with the observation it got."""
    name = _trigger_of(request)
    results = [m for m in _messages(request) if m.get("role") == "tool"]
    if name is None or results:
        return chat(f"answer: {results[-1]['content'] if results else 'nothing'}")
    return chat(tool_calls=[tool_call(f"{name}__note", {"text": f"from {name}"})])


def _body(model: FakeLLM, states: dict[str, Path]) -> str:
    def server(name: str, fixture: str, *args: str, required: bool = True) -> str:
        argv = [sys.executable, str(FIXTURES / fixture), "--state", str(states[name]), *args]
        extra = "" if required else "required = false\n"
        return f"[mcp.{name}]\ncommand = {json.dumps(argv)}\ntrust = []\n{extra}"

    triggers = "".join(
        f'[[trigger]]\nname = "{n}"\nserver = "{n}"\nuri = "watch://item/0"\n'
        f'instruction = "{n.capitalize()} changed: {{uri}}. Note it."\ndebounce_ms = 50\n'
        for n in NAMES
    )
    return (
        f'[intelligence.m]\nkind = "openai"\nbase_url = "{model.base_url}"\nmodel = "m"\n'
        '[defaults]\nmodel = "m"\n'
        + server("slow", "mcp_watch_2025.py", "--later-delay", str(SLOW_START_S))
        + server("stale", "mcp_watch_2026.py", "--later-hide", "note")
        + server("broken", "mcp_watch_2025.py", "--later-fail")
        + server("optional", "mcp_watch_2025.py", "--later-fail", required=False)
        + SUPERVISION
        + triggers
    )


def _task(daemon: Daemon, name: str) -> dict[str, Any]:
    tasks = wait_until(lambda: trigger_tasks(daemon, name), f"the {name} task", daemon, timeout_s=WAIT_S)
    done = daemon.wait(tasks[0]["task_id"], timeout_s=WAIT_S)
    return done.model_dump(mode="json")


def _served(state: Path) -> list[float]:
    """When each instance of the server began serving (time.monotonic(), CLOCK_MONOTONIC)."""
    lines = (state / SERVED_LOG).read_text().splitlines()
    return [float(line.split()[1]) for line in lines]


def test_a_trigger_task_asks_the_model_before_its_server_is_connected(tmp_path: Path) -> None:
    states = {name: tmp_path / f"{name}-state" for name in NAMES}
    for state in states.values():
        state.mkdir()
    with FakeLLM(Respond(_choose)) as model, running_daemon(tmp_path, _body(model, states)) as daemon:
        wait_until(
            lambda: all(v["state"] == "armed" for v in trigger_views(daemon).values()),
            "every trigger armed",
            daemon,
            timeout_s=WAIT_S,
        )
        slow = _task(daemon, "slow")
        stale = _task(daemon, "stale")
        broken = _task(daemon, "broken")
        optional = _task(daemon, "optional")
        catalogue_lines = [line for line in daemon.log() if line.get("event") == "trigger.catalogue"]
        by_trigger: dict[str, list[Recorded]] = {}
        for request in model.requests:
            name = _trigger_of(request)
            if name is not None:
                by_trigger.setdefault(name, []).append(request)

    # Every watcher reported its server's three tools and three resources.
    assert {line["server"] for line in catalogue_lines} == set(NAMES)
    assert all(line["tools"] == 3 and line["resources"] == 3 for line in catalogue_lines)

    # slow: asked before the task's own server instance served at all, with the hinted tools.
    first, second = by_trigger["slow"]
    watcher_served, task_served = _served(states["slow"])
    assert first.at < task_served, (first.at, task_served)
    assert {"slow__note", "slow__bump", "slow__create", "resource_read"} <= set(_tools(first))
    assert slow["status"] == "completed" and slow["result"] == "answer: noted: from slow"
    assert (states["slow"] / NOTES_LOG).read_text() == "from slow\n"  # run once
    assert watcher_served < first.at

    # stale: the hint offered `note`, the task's server no longer has it.
    first, second = by_trigger["stale"]
    assert "stale__note" in _tools(first) and "stale__note" not in _tools(second)
    assert stale["status"] == "completed"
    assert (
        stale["result"] == "answer: no such tool `stale__note`: it was not run; call one of the tools offered"
    )
    assert not (states["stale"] / NOTES_LOG).exists()

    # broken (required): as a failed connect has always ended a run.
    assert broken["status"] == "crashed" and broken["abort"] == "mcp"
    assert "required MCP server `broken` could not connect" in broken["error"]["message"]
    assert not (states["broken"] / NOTES_LOG).exists()

    # optional: the call is told the server could not connect, and the run goes on without it.
    assert optional["status"] == "completed"
    assert optional["result"].startswith(
        "answer: tool `optional__note` was not run: MCP server `optional` could not connect"
    )
    assert "optional__note" not in _tools(by_trigger["optional"][-1])
