"""The pure contract between the front door and a worker: ids, inputs, retryability, the event
tail's bounds, the mirror's de-duplication, and the steps a workflow's history carries from one
attempt to the next (no SDK, no processes)."""

from __future__ import annotations

import json

from agentd.executors.remote import (
    SIGNAL_BYTES,
    TAIL_BYTES,
    TAIL_EVENTS,
    Assignment,
    EventTail,
    Mirror,
    decode_events,
    retryable,
    seed_of,
    steps_batches,
    workflow_id,
    workflow_input,
)
from agentd.journal.records import TaskRecord
from protocol.api import RetryPolicy, TaskSpec
from protocol.result import RunError, RunResult, TerminalStatus
from protocol.transcript import ReplyItem, ResultItem, StartItem, StepItem


def _record(task_id: str = "t_1", attempts: int = 3) -> TaskRecord:
    spec = TaskSpec(instruction="x", retry=RetryPolicy(max_attempts=attempts))
    return TaskRecord(
        task_id=task_id,
        run_id="r_1",
        owner_uid=7,
        idempotency_key="k",
        spec=spec,
        state="queued",
        created_at=0,
    )


def test_the_workflow_id_is_the_task_ids_so_one_task_is_one_workflow() -> None:
    assert workflow_id("t_1") == workflow_id("t_1") != workflow_id("t_2")


def test_the_workflow_input_carries_the_spec_deadline_and_the_tasks_own_attempt_cap() -> None:
    task = workflow_input(_record(attempts=3), deadline_s=42.0, heartbeat_timeout_s=5.0)
    assert (task["task_id"], task["owner_uid"], task["deadline_s"], task["max_attempts"]) == (
        "t_1",
        7,
        42.0,
        3,
    )
    assert TaskSpec.model_validate(task["spec"]).instruction == "x"
    json.dumps(task)  # plain JSON: Temporal's default converter carries it


def _assignment(asked_s: float | None, granted_s: float, deadline_at: float) -> Assignment:
    spec = TaskSpec(instruction="x", limits={"deadline_s": asked_s}, retry=RetryPolicy(max_attempts=3))
    record = TaskRecord("t_1", "r_1", 7, "k", spec, "queued", 0)
    task = workflow_input(record, deadline_s=granted_s, heartbeat_timeout_s=5.0)
    return Assignment.of({**task, "deadline_at": deadline_at})


def test_an_attempt_runs_for_what_is_left_of_the_granted_deadline_as_one_attempt() -> None:
    spec = _assignment(asked_s=None, granted_s=60.0, deadline_at=1000.0).attempt_spec(now=990.0)
    assert spec is not None
    assert (spec.limits.deadline_s, spec.retry.max_attempts) == (10.0, 1)


def test_an_attempt_never_runs_past_the_grant_even_when_the_asked_deadline_and_clocks_allow_more() -> None:
    # The task asked 10 h, the front door granted 60 s, and this host's clock is 10 min behind.
    spec = _assignment(asked_s=36000.0, granted_s=60.0, deadline_at=1600.0).attempt_spec(now=1000.0)
    assert spec is not None
    assert spec.limits.deadline_s == 60.0


def test_an_attempt_that_starts_after_the_deadline_has_no_spec() -> None:
    assert _assignment(asked_s=None, granted_s=60.0, deadline_at=1000.0).attempt_spec(now=1000.0) is None


def test_only_a_crashed_child_without_an_rfc_abort_is_retried() -> None:
    crash = RunResult(status=TerminalStatus.CRASHED, error=RunError(kind="signal", message="SIGSEGV"))
    assert retryable(crash)
    assert not retryable(crash.model_copy(update={"abort": "intelligence"}))
    for status in TerminalStatus:
        if status is not TerminalStatus.CRASHED:
            assert not retryable(RunResult(status=status)), status


def test_the_tail_keeps_the_newest_events_within_its_count_and_byte_caps() -> None:
    tail = EventTail()
    tail.extend((seq, 0.0, "loop.step", {}) for seq in range(1, 1001))
    encoded = tail.encoded()
    assert len(encoded) == TAIL_EVENTS
    assert [e[0] for e in encoded] == list(range(1001 - TAIL_EVENTS, 1001))  # type: ignore[index]
    big = EventTail()
    big.extend((seq, 0.0, "tool.result", {"text": "x" * 10_000}) for seq in range(1, 101))
    encoded = big.encoded()
    assert sum(len(json.dumps(e)) for e in encoded) <= TAIL_BYTES
    assert encoded[-1][0] == 100  # type: ignore[index]


def test_the_mirror_appends_each_event_once_per_attempt_and_records_a_gap() -> None:
    mirror = Mirror()
    first = mirror.take(1, decode_events([[1, 0.0, "a", {}], [2, 0.0, "b", {"k": 1}]]))
    assert [(a.event, a.fields) for a in first] == [("a", {"attempt": 1}), ("b", {"k": 1, "attempt": 1})]
    # An overlapping heartbeat: only the new one; then a gap of 2 events beyond the tail.
    again = mirror.take(1, decode_events([[2, 0.0, "b", {}], [3, 0.0, "c", {}], [6, 0.0, "f", {}]]))
    assert [a.event for a in again] == ["c", "task.events_lost", "f"]
    assert again[1].fields == {"attempt": 1, "count": 2}
    # A new attempt numbers its events from 1 again.
    assert [a.event for a in mirror.take(2, decode_events([[1, 0.0, "a", {}]]))] == ["a"]


def test_an_attempt_is_announced_once_per_worker() -> None:
    mirror = Mirror()
    assert mirror.new_attempt(1, "w1") is not None
    assert mirror.new_attempt(1, "w1") is None
    second = mirror.new_attempt(2, "w2")
    assert second is not None and second.fields == {"attempt": 2, "worker": "w2"}


def test_malformed_heartbeat_events_are_skipped_not_fatal() -> None:
    assert decode_events("nope") == []
    assert decode_events([[1, 0.0, "a"], ["x", 0.0, "b", {}], [2, 0.0, "c", "notadict"]]) == [
        (2, 0.0, "c", {})
    ]


def test_steps_go_out_in_order_in_signals_under_the_size_cap_and_come_back_per_node() -> None:
    big = "x" * (SIGNAL_BYTES // 3)
    root: list[StepItem] = [
        ReplyItem(text="calling"),
        StartItem(call_id="c1", name="demo__read"),
        *[ResultItem(call_id=f"c{i}", name="demo__read", text=big) for i in range(5)],
    ]
    batches = steps_batches("0", root)
    assert len(batches) >= 3
    assert all(len(json.dumps(b)) < SIGNAL_BYTES + 4096 for b in batches)
    child = steps_batches("0.1", [ReplyItem(text="child")])
    # Interleaved in history order, each node's items come back in its own order.
    seed = seed_of([batches[0], child[0], *batches[1:]])
    assert seed == {"0": root, "0.1": [ReplyItem(text="child")]}


def test_an_unreadable_signal_keeps_its_nodes_steps_before_it_and_no_later_ones() -> None:
    first, second = steps_batches("0", [ReplyItem(text="one")]), steps_batches("0", [ReplyItem(text="three")])
    broken = {"handle": "0", "items": [{"kind": "reply", "text": 7}]}
    seed = seed_of([first[0], broken, second[0], "not a batch", {"handle": 3}])
    assert seed == {"0": [ReplyItem(text="one")]}
