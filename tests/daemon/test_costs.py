"""Budgets in money against a real daemon, real subagents and a fake priced provider: a cost
budget stops a task at its cap, an unpriced endpoint refuses one at submit, and a reply without
usage is counted at its maximum."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import Daemon, running_daemon
from tests.support.fake_llm import FakeLLM, Recorded, Reply, Respond, chat, tool_call

pytestmark = pytest.mark.processes

# $1,000 per million tokens is a tenth of a cent a token: each (10 in, 5 out) call costs $0.015.
PRICE = "price = { input = 1000.0, output = 1000.0, cached_input = 100.0 }\n"
CALL_USD = 0.015


def config(fake: FakeLLM, endpoint_lines: str = PRICE, defaults: str = "") -> str:
    return (
        f'[intelligence.p]\nkind = "openai"\nbase_url = "{fake.base_url}"\nmodel = "m"\n'
        f'max_output_tokens = 100\n{endpoint_lines}[defaults]\nmodel = "p"\n{defaults}'
    )


def notes_forever() -> Respond:
    """A model that writes a new note every turn and never finishes."""
    counter = itertools.count()

    def choose(_: Recorded) -> Reply:
        return chat(tool_calls=[tool_call("note_write", {"text": f"note {next(counter)}"})])

    return Respond(choose)


def events_of(daemon: Daemon, task_id: str) -> list[dict[str, Any]]:
    logs = daemon.cli("logs", task_id, "--json")
    assert logs.returncode == 0, logs.stderr
    return [json.loads(line) for line in logs.stdout.splitlines()]


def test_a_task_with_a_cost_budget_stops_at_its_cap_saying_so(tmp_path: Path) -> None:
    with FakeLLM(notes_forever()) as fake, running_daemon(tmp_path, config(fake)) as daemon:
        done = daemon.cli("submit", "write notes", "--max-cost", "0.05", "--max-steps", "40", "--wait")
        listed = daemon.cli("list", "--json")
        task_id = json.loads(listed.stdout.splitlines()[0])["task_id"]
        shown, tree = daemon.cli("status", task_id), daemon.cli("tree", task_id)
        calls = len(fake.requests)
    assert done.returncode in (3, 7), done.stderr
    assert "exhausted_tokens" in done.stderr and "the cost budget ran out" in done.stderr
    assert "of max_cost $0.0500" in done.stderr
    # It stopped at the first call past the cap, not later.
    assert calls == 4
    (view,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert view["usage"]["cost_usd"] == pytest.approx(4 * CALL_USD)
    assert "· $0.0600" in shown.stdout, shown.stdout
    assert tree.stdout.rstrip().endswith("$0.0600"), tree.stdout


def test_a_cost_budget_on_an_unpriced_endpoint_is_refused_at_submit(tmp_path: Path) -> None:
    with FakeLLM() as fake, running_daemon(tmp_path, config(fake, endpoint_lines="")) as daemon:
        refused = daemon.cli("submit", "anything", "--max-cost", "2.50")
        plain = daemon.cli("submit", "anything", "--wait")
    assert refused.returncode == 2
    assert "intelligence.p.price is not set" in refused.stderr
    assert fake.requests[1:] == []  # only the plain task asked the model
    assert plain.returncode == 0, plain.stderr


def test_a_reply_without_usage_is_counted_at_its_maximum_and_the_event_says_so(tmp_path: Path) -> None:
    with FakeLLM(chat("done", usage=None)) as fake, running_daemon(tmp_path, config(fake)) as daemon:
        task_id = daemon.submit("answer")
        view = daemon.wait(task_id)
        events = events_of(daemon, task_id)
    assert view.status is not None and view.status.value == "completed"
    (unmetered,) = [e["fields"] for e in events if e["event"] == "intel.unmetered"]
    assert unmetered["endpoint"] == "p" and unmetered["max_reply_tokens"] == 100
    # At least the whole output allowance at the output price ($0.10), plus the input estimate.
    assert view.usage.cost_usd == pytest.approx(unmetered["cost_usd"])
    assert view.usage.cost_usd > 100 * 1000 / 1_000_000


def test_a_task_that_spends_its_cost_budget_pauses_with_on_budget_pause(tmp_path: Path) -> None:
    with FakeLLM(notes_forever()) as fake, running_daemon(tmp_path, config(fake)) as daemon:
        task_id = daemon.submit("write notes", limits={"max_cost": 0.05, "max_steps": 40}, on_budget="pause")
        deadline = time.monotonic() + 60
        while (view := daemon.call("task.get", {"task_id": task_id})) and view["state"] != "awaiting_budget":  # type: ignore[index]
            assert time.monotonic() < deadline, view
            time.sleep(0.1)
        shown = daemon.cli("status", task_id)
        daemon.cli("cancel", task_id)
    assert "awaiting_budget" in shown.stdout, shown.stdout
    assert "cost budget" in shown.stdout, shown.stdout


def test_a_task_resumed_by_extend_counts_the_cost_before_its_pause_once(tmp_path: Path) -> None:
    counter = itertools.count(1)

    def two_notes_then_done(_: Recorded) -> Reply:
        call = next(counter)
        return (
            chat("done") if call > 2 else chat(tool_calls=[tool_call("note_write", {"text": f"note {call}"})])
        )

    with FakeLLM(Respond(two_notes_then_done)) as fake, running_daemon(tmp_path, config(fake)) as daemon:
        task_id = daemon.submit("two notes", limits={"max_steps": 2}, on_budget="pause")
        deadline = time.monotonic() + 60
        while (view := daemon.call("task.get", {"task_id": task_id})) and view["state"] != "awaiting_budget":  # type: ignore[index]
            assert time.monotonic() < deadline, view
            time.sleep(0.1)
        paused_usd = view["usage"]["cost_usd"]  # type: ignore[index]
        extended = daemon.cli("extend", task_id, "--steps", "5")
        assert extended.returncode == 0, extended.stderr
        ended = daemon.wait(task_id)
        calls = len(fake.requests)
    assert paused_usd == pytest.approx(2 * CALL_USD)
    assert ended.status is not None and ended.status.value == "completed", ended
    assert calls == 3
    # Each call priced once: the two before the pause and the one after.
    assert ended.usage.cost_usd == pytest.approx(3 * CALL_USD)
