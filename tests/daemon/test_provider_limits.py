"""Provider limits against a provider that enforces its own: a real daemon, real subagents, and a
fake OpenAI-compatible server that answers 429 with Retry-After over N in flight or M a minute;
standing slots among them."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import FAST_SUPERVISION, LEAN_SERVER, Daemon, running_daemon
from tests.support.fake_llm import FakeLLM, ProviderLimits, Recorded, Reply, Respond, chat, error, tool_call

pytestmark = pytest.mark.processes

TASKS = 50
IN_FLIGHT = 2


def config(fake: FakeLLM, limits: str) -> str:
    return (
        f'[intelligence.p]\nkind = "openai"\nbase_url = "{fake.base_url}"\nmodel = "m"\n{limits}'
        '[defaults]\nmodel = "p"\n[loop]\ntransport_retries = 10\nbackoff_initial_s = 0.05\n'
    )


def run_all(daemon: Daemon, count: int) -> list[str]:
    """Submit `count` one-turn tasks at once and wait for each; their statuses."""
    ids = [daemon.submit(f"task {i}") for i in range(count)]
    views = [daemon.wait(task_id, timeout_s=120) for task_id in ids]
    return [view.status.value if view.status else view.state for view in views]


def test_fifty_concurrent_tasks_with_limits_see_at_most_one_429_and_many_without(tmp_path: Path) -> None:
    slow = dataclasses.replace(chat("done"), delay_s=0.05)
    provider = ProviderLimits(max_in_flight=IN_FLIGHT, retry_after="0.2")
    counts = {}
    for name, limits in [("with", f"max_concurrent_requests = {IN_FLIGHT}\n"), ("without", "")]:
        workdir = tmp_path / name
        workdir.mkdir()
        with FakeLLM(slow, limits=provider) as fake:
            lines = f"max_concurrent_tasks = {TASKS}\n"
            with running_daemon(workdir, config(fake, limits), daemon_lines=lines) as daemon:
                started = time.monotonic()
                statuses = run_all(daemon, TASKS)
                elapsed = time.monotonic() - started
            counts[name] = fake.rejected
        print(f"{name} limits: {fake.rejected} x 429 for {TASKS} tasks in {elapsed:.1f} s")
        if name == "with":
            assert statuses == ["completed"] * TASKS
    assert counts["with"] <= 1
    assert counts["without"] > 10 * max(counts["with"], 1)


def events_of(daemon: Daemon, task_id: str) -> list[dict[str, Any]]:
    logs = daemon.cli("logs", task_id, "--json")
    assert logs.returncode == 0, logs.stderr
    return [json.loads(line) for line in logs.stdout.splitlines()]


def wait_throttled(daemon: Daemon, task_id: str, timeout_s: float = 20.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        view = daemon.call("task.get", {"task_id": task_id})
        assert isinstance(view, dict)
        if view.get("throttled"):
            return view
        assert time.monotonic() < deadline, f"task {task_id} never showed throttled: {view}"
        time.sleep(0.05)


def test_a_throttled_task_shows_its_wait_and_is_not_stalled(tmp_path: Path) -> None:
    # The wait is longer than the wedged-loop bound: it must not count as the loop being stuck.
    supervision = FAST_SUPERVISION + "loop_stall_s = 0.5\n"
    slow = dataclasses.replace(chat("done"), delay_s=2.0)
    with FakeLLM(slow, limits=ProviderLimits(max_in_flight=1)) as fake:
        body = config(fake, "max_concurrent_requests = 1\n") + supervision
        with running_daemon(tmp_path, body) as daemon:
            first = daemon.submit("first")
            fake.wait_requests_blocking(1, timeout_s=20)
            second = daemon.submit("second")
            view = wait_throttled(daemon, second)
            shown = daemon.cli("status", second)
            views = [daemon.wait(task_id) for task_id in (first, second)]
            events = events_of(daemon, second)
            stuck = [line for line in daemon.log() if line.get("event") == "subagent.stuck"]
        assert fake.rejected == 0
    assert view["throttled"]["endpoint"] == "p"
    assert view["throttled"]["blocked_by"] == "max_concurrent_requests"
    assert "throttled: a model request has waited" in shown.stdout, shown.stdout
    assert [v.status.value if v.status else None for v in views] == ["completed", "completed"]
    (throttled,) = [e["fields"] for e in events if e["event"] == "intel.throttled"]
    assert throttled["blocked_by"] == "max_concurrent_requests"
    assert throttled["wait_ms"] >= 1000
    assert stuck == []


SPENT_HEADERS = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1s"}


@pytest.mark.parametrize(
    ("first", "source"),
    [
        pytest.param(error(429, headers={"retry-after": "1"}), "retry_after", id="429-retry-after"),
        pytest.param(
            dataclasses.replace(chat("done"), headers={**chat("done").headers, **SPENT_HEADERS}),
            "headers",
            id="spent-rate-limit-headers",
        ),
    ],
)
def test_a_providers_wait_on_one_task_holds_back_every_tasks_requests(
    tmp_path: Path, first: Reply, source: str
) -> None:
    with FakeLLM() as fake:
        fake.enqueue(first)
        with running_daemon(tmp_path, config(fake, "max_concurrent_requests = 8\n")) as daemon:
            held = daemon.submit("first")
            fake.wait_requests_blocking(1, timeout_s=20)
            daemon.wait_log("intel.backoff", task_id=held)
            others = [daemon.submit(f"other {i}") for i in range(3)]
            views = [daemon.wait(task_id) for task_id in (held, *others)]
            events = events_of(daemon, held)
        requests = fake.requests
    assert [v.status.value if v.status else None for v in views] == ["completed"] * 4
    (backoff,) = [e["fields"] for e in events if e["event"] == "intel.backoff"]
    assert backoff["source"] == source and backoff["hold_ms"] >= 1000
    # Every request after the provider's answer waited out its wait (the others' included).
    assert all(r.at >= requests[0].at + 1.0 for r in requests[1:]), [r.at - requests[0].at for r in requests]


def test_the_wait_for_a_slot_counts_against_the_tasks_deadline(tmp_path: Path) -> None:
    slow = dataclasses.replace(chat("done"), delay_s=4.0)
    with (
        FakeLLM(slow) as fake,
        running_daemon(tmp_path, config(fake, "max_concurrent_requests = 1\n")) as daemon,
    ):
        first = daemon.submit("first")
        fake.wait_requests_blocking(1, timeout_s=20)
        second = daemon.submit("second", limits={"deadline_s": 1.5})
        ended = daemon.wait(second)
        daemon.wait(first)
        requests = len(fake.requests)
    assert ended.status is not None and ended.status.value == "deadline"
    assert requests == 1  # the second never reached the provider


def intel_results(daemon: Daemon, task_id: str) -> list[dict[str, Any]]:
    found = [e["fields"] for e in daemon.events(task_id) if e["event"] == "intel.result"]
    return [fields for fields in found if isinstance(fields, dict)]


def test_standing_slots_in_play_never_pass_the_concurrency_limit(tmp_path: Path) -> None:
    slow = dataclasses.replace(chat("done"), delay_s=0.2)
    provider = ProviderLimits(max_in_flight=4, retry_after="0.2")
    # Sixteen children boot at once: a loaded machine may pause one past the fast pong bound.
    supervision = FAST_SUPERVISION.replace("missed_pongs = 3", "missed_pongs = 25")
    with FakeLLM(slow, limits=provider) as fake:
        lines = "max_concurrent_tasks = 16\n"
        body = config(fake, "max_concurrent_requests = 4\n") + supervision
        with running_daemon(tmp_path, body, daemon_lines=lines) as daemon:
            statuses = run_all(daemon, 16)
        rejected = fake.rejected
    assert statuses == ["completed"] * 16
    # The provider saw at most 4 in flight at every instant (it answers 429 past them).
    assert rejected == 0


def test_far_from_the_limits_a_request_starts_under_a_standing_slot(tmp_path: Path) -> None:
    turns = [chat("", tool_calls=[tool_call("subagent_status", {"handle": "0"}, f"c{i}")]) for i in range(3)]
    with FakeLLM(chat("done")) as fake:
        fake.enqueue(*turns)
        with running_daemon(tmp_path, config(fake, "max_concurrent_requests = 8\n")) as daemon:
            task_id = daemon.submit("several turns")
            view = daemon.wait(task_id)
            standing = [fields["slot_standing"] for fields in intel_results(daemon, task_id)]
    assert view.status is not None and view.status.value == "completed"
    assert len(standing) == 4
    # Each request's end hands the next one a standing slot: it starts without asking.
    assert True in standing[1:], standing


def test_a_429_calls_back_the_standing_slot_another_task_holds(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    calls.mkdir()
    server = f'command = ["{sys.executable}", "{LEAN_SERVER}"]\ntrust = []\n'
    server += f'env = {{ AGENTD_TEST_SENTINEL_DIR = "{calls}" }}\n'
    tool_s, retry_after_s = 4.0, 5.0
    answered: set[str] = set()

    def choose(request: Recorded) -> Reply:
        text = json.dumps(request.json)
        if "other" in text:
            # The other task: a slow tool call first (its standing slot idles meanwhile), then done.
            if '"role": "tool"' in text:
                return chat("done")
            return chat("", tool_calls=[tool_call("demo__slow_record", {"text": "b", "seconds": tool_s})])
        if "held" in answered:
            return chat("done")
        answered.add("held")
        return error(429, headers={"retry-after": str(retry_after_s)})

    with FakeLLM(Respond(choose)) as fake:
        body = config(fake, "max_concurrent_requests = 8\n") + f"[mcp.demo]\n{server}"
        with running_daemon(tmp_path, body) as daemon:
            other = daemon.submit("other", mcp=["demo"])
            wait_file(calls / "started-b")
            held = daemon.submit("held")
            views = [daemon.wait(task_id) for task_id in (held, other)]
            throttled = [e["fields"] for e in daemon.events(other) if e["event"] == "intel.throttled"]
        requests = fake.requests
    assert [v.status.value if v.status else None for v in views] == ["completed"] * 2
    first_other, rejected, *_ = requests
    later_other = [r for r in requests[2:] if "other" in json.dumps(r.json)]
    assert "held" in json.dumps(rejected.json)
    # The 429 came while the other task's tool ran, holding its standing slot.
    assert rejected.at < first_other.at + tool_s
    # Its next request waited out the hold (asked for, not started under the called-back slot).
    assert [r.at >= rejected.at + retry_after_s for r in later_other] == [True]
    assert [t.get("blocked_by") if isinstance(t, dict) else t for t in throttled] == ["backoff"]


def wait_file(path: Path, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
