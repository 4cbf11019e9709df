"""The approval gate's pure rules, and the desk over a real journal: a decision wakes
the waiter and is consumed once, a request expires, a cancel withdraws it, and a decision taken
while no run waited (a restart) is honoured once when the same call comes back."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from agentd.journal.records import ApprovalRecord
from agentd.journal.store import Journal, open_journal
from agentd.supervision.approvals import ApprovalDesk, Asker
from protocol import approval
from protocol.api import TaskSpec
from protocol.control import ApproveParams
from protocol.spawn import McpServerSpec

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("patterns", "tool", "expected"),
    [
        pytest.param(["merge_pull_request"], "merge_pull_request", True, id="exact"),
        pytest.param(["delete_*"], "delete_branch", True, id="glob"),
        pytest.param(["delete_*"], "undelete_branch", False, id="glob-anchored"),
        pytest.param([], "anything", False, id="no-gate"),
        pytest.param(["Merge"], "merge", False, id="case-sensitive"),
    ],
)
def test_a_call_is_gated_when_a_pattern_matches_its_tool_name(
    patterns: list[str], tool: str, expected: bool
) -> None:
    assert approval.gated(patterns, tool) is expected


def test_client_patterns_add_to_the_servers_they_name() -> None:
    patterns = ["github/merge_*", "delete_*", "fs/write"]
    assert approval.client_gates(patterns, "github") == ["merge_*", "delete_*"]
    assert approval.client_gates(patterns, "fs") == ["delete_*", "write"]


def test_the_same_call_has_the_same_digest_whatever_the_key_order() -> None:
    one = approval.call_digest("gh", "merge", {"a": 1, "b": [1, 2]})
    assert one == approval.call_digest("gh", "merge", {"b": [1, 2], "a": 1})
    assert one != approval.call_digest("gh", "merge", {"a": 2, "b": [1, 2]})
    assert one != approval.call_digest("gh", "close", {"a": 1, "b": [1, 2]})


def test_a_denial_says_a_person_denied_it_and_why() -> None:
    text = approval.denial_text("gh__merge", "denied", "not on Fridays", waited_s=3)
    assert "a person denied it: not on Fridays" in text and "never reached the server" in text
    assert "nobody approved it within 60 s" in approval.denial_text("gh__merge", "timeout", None, waited_s=60)


def test_a_child_payload_keeps_its_parents_gate() -> None:
    spec = McpServerSpec(name="gh", transport="stdio", command=["x"], approval=["merge_*"])
    assert spec.model_copy(update={"tools": ["merge_pr"]}).approval == ["merge_*"]


async def _task(journal: Journal) -> Asker:
    record, _ = await journal.tasks.submit(TaskSpec(instruction="merge it"), 1000)
    return Asker(record.task_id, record.run_id, 1000, "0", "merge it")


def _params(timeout_s: float = 30.0, pull: int = 42) -> ApproveParams:
    return ApproveParams(
        call_id="c1", server="gh", tool="merge", arguments={"pull": pull}, timeout_s=timeout_s
    )


async def _until_awaiting(desk: ApprovalDesk, task_id: str, handles: set[str]) -> None:
    """Poll (bounded by the caller's fail_after) until these nodes hold a call."""
    for _ in range(10_000):
        if desk.awaiting(task_id) == handles:
            return
        await anyio.sleep(0.01)


async def test_a_decision_wakes_the_waiter_and_is_consumed_once(tmp_path: Path) -> None:
    async with open_journal(tmp_path) as journal:
        desk = ApprovalDesk(journal)
        asker = await _task(journal)
        answers = []

        async def ask() -> None:
            answers.append(await desk.request(asker, _params(), deadline=anyio.current_time() + 30))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask)
                await _until_awaiting(desk, asker.task_id, {"0"})
                (pending,) = await journal.approvals.pending(task_id=asker.task_id)
                record, won = await desk.decide(pending.call_id, approve=True, reason=None, decider_uid=7)
                assert won and record is not None and record.state == "approved"
                _, again = await desk.decide(pending.call_id, approve=False, reason="late", decider_uid=7)
                assert not again  # the first decision stands
        assert [(a.outcome, a.decider_uid) for a in answers] == [("approved", 7)]
        stored = await journal.approvals.get(pending.call_id)
        assert stored is not None and stored.consumed
        assert desk.awaiting(asker.task_id) == set()


async def test_an_undecided_request_expires_as_a_timeout(tmp_path: Path) -> None:
    async with open_journal(tmp_path) as journal:
        desk = ApprovalDesk(journal)
        asker = await _task(journal)
        with anyio.fail_after(10):
            answer = await desk.request(asker, _params(timeout_s=0.2), deadline=anyio.current_time() + 30)
        assert answer.outcome == "timeout"
        assert await journal.approvals.pending() == ()


async def test_the_deadline_ends_the_wait_before_the_expiry(tmp_path: Path) -> None:
    async with open_journal(tmp_path) as journal:
        desk = ApprovalDesk(journal)
        asker = await _task(journal)
        with anyio.fail_after(10):
            answer = await desk.request(asker, _params(timeout_s=3600), deadline=anyio.current_time() + 0.2)
        assert (answer.outcome, answer.reason) == ("timeout", "the task's deadline came first")


async def test_release_ends_every_wait_of_the_task_at_once(tmp_path: Path) -> None:
    async with open_journal(tmp_path) as journal:
        desk = ApprovalDesk(journal)
        asker = await _task(journal)
        answers = []

        async def ask(pull: int, handle: str) -> None:
            who = Asker(asker.task_id, asker.run_id, asker.owner_uid, handle, asker.instruction)
            params = _params(pull=pull)
            answers.append(await desk.request(who, params, deadline=anyio.current_time() + 30))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask, 1, "0")
                tg.start_soon(ask, 2, "0.1")
                await _until_awaiting(desk, asker.task_id, {"0", "0.1"})
                desk.release(asker.task_id, "cancelled by client")
        assert sorted((a.outcome, a.reason) for a in answers) == [("denied", "cancelled by client")] * 2
        assert await journal.approvals.pending() == ()


async def test_a_decision_taken_while_no_run_waits_is_honoured_once(tmp_path: Path) -> None:
    async with open_journal(tmp_path) as journal:
        asker = await _task(journal)
        # The run that asked is gone (the daemon died): only the journal row is left.
        row, opened = await journal.approvals.open(
            task_id=asker.task_id,
            run_id=asker.run_id,
            handle="0",
            owner_uid=1000,
            tool_call_id="old",
            server="gh",
            tool="merge",
            arguments={"pull": 42},
            instruction="merge it",
            timeout_s=60,
            busy=frozenset(),
        )
        assert opened == "new"
        desk = ApprovalDesk(journal)  # a new daemon's desk
        await desk.decide(row.call_id, approve=True, reason=None, decider_uid=0)
        with anyio.fail_after(10):
            first = await desk.request(asker, _params(), deadline=anyio.current_time() + 30)
            assert (first.outcome, first.call) == ("approved", row.call_id)
            # Honoured once: the same call again is a new request.
            second = await desk.request(asker, _params(timeout_s=0.1), deadline=anyio.current_time() + 30)
        assert second.outcome == "timeout" and second.call != row.call_id


async def test_an_approve_racing_a_cancel_answers_that_the_call_was_withdrawn(tmp_path: Path) -> None:
    async with open_journal(tmp_path) as journal:
        desk = ApprovalDesk(journal)
        asker = await _task(journal)
        answers = []
        decisions = []

        async def ask() -> None:
            answers.append(await desk.request(asker, _params(), deadline=anyio.current_time() + 30))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask)
                await _until_awaiting(desk, asker.task_id, {"0"})
                (pending,) = await journal.approvals.pending()
                # The cancel ends the wait; the approve arrives before the waiter has journaled it.
                desk.release(asker.task_id, "cancelled by client")
                decisions.append(await desk.decide(pending.call_id, approve=True, reason=None, decider_uid=0))
        ((record, won),) = decisions
        # Before: the approve won, and the client heard "approved" for a call that never ran.
        assert record is not None and (record.state, won) == ("withdrawn", False)
        assert record.reason == "cancelled by client"
        assert [(a.outcome, a.reason) for a in answers] == [("denied", "cancelled by client")]


async def test_a_parked_wait_ends_with_its_task_and_leaves_the_request_to_the_resumed_run(
    tmp_path: Path,
) -> None:
    async with open_journal(tmp_path) as journal:
        desk = ApprovalDesk(journal)
        desk.park_after_s = 0.05
        asker = await _task(journal)
        parked: list[tuple[str, float]] = []
        decided: list[str] = []
        desk.on_decided_unwaited = lambda record: decided.append(record.call_id)
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:

                def park(who: Asker, record: ApprovalRecord, until: float) -> bool:
                    parked.append((record.call_id, until))
                    tg.cancel_scope.cancel()  # what the task's stop does to its node's request
                    return True

                desk.on_long_wait = park
                await desk.request(asker, _params(timeout_s=60), deadline=anyio.current_time() + 30)
        ((call_id, until),) = parked
        assert 25 < until - time.time() <= 30  # the node's deadline (before the expiry), wall clock
        (pending,) = await journal.approvals.pending(task_id=asker.task_id)
        assert pending.call_id == call_id and pending.state == "pending"  # not withdrawn
        await desk.decide(call_id, approve=True, reason=None, decider_uid=7)
        assert decided == [call_id]  # the scheduler hears it: the parked task may start
        desk.on_long_wait = None
        with anyio.fail_after(10):
            resumed = await desk.request(asker, _params(), deadline=anyio.current_time() + 30)
        assert (resumed.outcome, resumed.call) == ("approved", call_id)


async def test_a_wait_the_supervisor_does_not_park_goes_on_to_its_decision(tmp_path: Path) -> None:
    async with open_journal(tmp_path) as journal:
        desk = ApprovalDesk(journal)
        desk.park_after_s = 0.05
        desk.on_long_wait = lambda who, record, until: False  # e.g. the daemon is draining
        asker = await _task(journal)
        with anyio.fail_after(10):
            answer = await desk.request(asker, _params(timeout_s=0.3), deadline=anyio.current_time() + 30)
        assert answer.outcome == "timeout"  # it waited out its whole window, not just park_after
        assert "within 0 s" in (answer.reason or "")
