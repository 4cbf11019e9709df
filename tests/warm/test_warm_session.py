"""`WarmSession` end to end: real subagent processes, a real journal, the fake model server.

A session takes injections one turn each and keeps its context; its turns are journaled on its
task; idle and the session token cap end it cleanly (and a later delivery resumes it fresh); a
kill -9 mid-turn restarts it with the delivery re-injected once; deliveries during a turn
coalesce per URI; a stop ends it within the kill ladder's bound.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import anyio
import psutil
import pytest

from agentd.supervision.supervisor import Supervisor
from agentd.supervision.warm_policy import Delivery
from processes.ladder import bound_s, plan
from protocol.result import TerminalStatus as S
from tests.support.fake_llm import FakeLLM, Hang, Stream, chat, chat_chunks, tool_call
from tests.warm.session_support import LADDER, Recorder, open_session, warm_payload

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


def change(uri: str, etag: str | None = None) -> Delivery:
    return Delivery(trigger="feed", server="status", uri=uri, etag=etag)


def sent(fake: FakeLLM, index: int) -> str:
    body = fake.requests[index].json
    assert isinstance(body, dict)
    return json.dumps(body["messages"])


async def test_three_injections_keep_their_context_and_each_turn_is_journaled(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.enqueue(chat("first noted"), chat("second noted"), chat("third noted"))
    recorder = Recorder()
    async with open_session(tmp_path, warm_payload(fake_llm), recorder) as (session, journal):
        with anyio.fail_after(90):
            outcomes = [await session.inject(change(f"status://incident/{n}")) for n in (1, 2, 3)]
        assert [o.status for o in outcomes] == [S.COMPLETED] * 3
        assert [o.result for o in outcomes] == ["first noted", "second noted", "third noted"]
        assert [o.usage.tokens for o in outcomes] == [15, 15, 15]
        task_id = outcomes[0].task_id
        assert task_id is not None and {o.task_id for o in outcomes} == {task_id}
        pid = next(iter(session.pids()))
        session.stop("the test is done")
        with anyio.fail_after(20):
            await session.wait_ended()
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        assert [decision for _, _, decision in recorder.exits] == ["end"]
        record = await journal.tasks.get(task_id)
        assert record is not None and record.state == "terminal" and record.status is S.CANCELLED
        assert record.usage.tokens == 45 and record.usage.steps == 3
        turns = [e for e in await journal.events_after(task_id, 0) if e.event == "session.turn"]
        assert [e.fields["status"] for e in turns] == ["completed"] * 3
        assert [e.fields["uri"] for e in turns] == [f"status://incident/{n}" for n in (1, 2, 3)]
    # The model was told of all three changes, and heard its own earlier answers.
    third = sent(fake_llm, 2)
    for text in (
        "status://incident/1",
        "first noted",
        "status://incident/2",
        "second noted",
        "status://incident/3",
    ):
        assert text in third
    assert "You watch the feed" in third


async def test_a_spent_delivery_budget_ends_only_that_turn(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(
        chat("", tool_calls=[tool_call("no_such_tool", {"x": 1})]),
        chat("wrapped up early"),
        chat("second handled"),
    )
    payload = warm_payload(fake_llm, session={"turn_max_steps": 2})
    recorder = Recorder()
    async with open_session(tmp_path, payload, recorder) as (session, _journal):
        with anyio.fail_after(90):
            first = await session.inject(change("status://a"))
            second = await session.inject(change("status://b"))
        assert first.status is S.EXHAUSTED_STEPS
        assert first.result == "wrapped up early" and first.partial
        assert second.status is S.COMPLETED and second.result == "second handled"
        assert second.task_id == first.task_id
    assert recorder.restarts == []


async def test_the_idle_timeout_ends_the_session_cleanly_and_a_later_delivery_resumes_it(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.enqueue(chat("before idle"), chat("after resume"))
    payload = warm_payload(fake_llm, session={"idle_timeout_s": 0.5})
    recorder = Recorder()
    async with open_session(tmp_path, payload, recorder) as (session, journal):
        with anyio.fail_after(90):
            first = await session.inject(change("status://a"))
            pid = next(iter(session.pids()))
            await recorder.wait_exits(1)
        record, result, decision = recorder.exits[0]
        assert (result.status, result.idle, decision) == (S.COMPLETED, True, "dormant")
        assert session.state == "dormant" and session.pids() == set()
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        ended = await journal.tasks.get(record.task_id)
        assert ended is not None and ended.state == "terminal" and ended.status is S.COMPLETED
        assert ended.exit_code == 0 and ended.result == "before idle"
        with anyio.fail_after(90):
            second = await session.inject(change("status://b"))
        assert second.status is S.COMPLETED and second.result == "after resume"
        assert second.task_id != first.task_id
        assert [r.cause for r in recorder.restarts] == ["resumed"]
    # The fresh session starts from the standing instruction, not the old transcript.
    assert "before idle" not in sent(fake_llm, 1)


async def test_the_session_token_cap_ends_the_session(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(*(chat(f"answer {n}", usage=(400, 100)) for n in range(4)))
    payload = warm_payload(fake_llm, limits={"max_tokens": 1200}, session={"turn_max_tokens": 100_000})
    recorder = Recorder()
    async with open_session(tmp_path, payload, recorder) as (session, journal):
        with anyio.fail_after(90):
            outcomes = [await session.inject(change(f"status://{n}")) for n in range(3)]
            await recorder.wait_exits(1)
        assert outcomes[-1].status is S.EXHAUSTED_TOKENS or outcomes[-1].status is S.COMPLETED
        record, result, decision = recorder.exits[0]
        assert result.status is S.EXHAUSTED_TOKENS and decision == "dormant"
        assert result.usage.tokens <= 1200
        ended = await journal.tasks.get(record.task_id)
        assert ended is not None and ended.status is S.EXHAUSTED_TOKENS


async def test_a_session_killed_mid_turn_is_restarted_fresh_and_the_delivery_re_injected_once(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.enqueue(Hang(), chat("handled after the crash"))
    recorder = Recorder()
    async with open_session(tmp_path, warm_payload(fake_llm), recorder) as (session, journal):
        async with anyio.create_task_group() as tg:
            outcome: list[object] = []

            async def deliver() -> None:
                outcome.append(await session.inject(change("status://crashy", etag="e1")))

            tg.start_soon(deliver)
            await fake_llm.wait_requests(1, timeout_s=20)
            pid = next(iter(session.pids()))
            os.killpg(pid, signal.SIGKILL)
            with anyio.fail_after(90):
                await recorder.wait_exits(1)
        (result,) = outcome
        assert result.status is S.COMPLETED and result.result == "handled after the crash"  # type: ignore[attr-defined]
        assert result.injections == 2  # type: ignore[attr-defined]
        crashed_record, crashed, decision = recorder.exits[0]
        assert crashed.status is S.CRASHED and decision == "restart"
        assert [(r.cause, r.restarts) for r in recorder.restarts] == [("crashed", 1)]
        assert result.task_id != crashed_record.task_id  # type: ignore[attr-defined]
        ended = await journal.tasks.get(crashed_record.task_id)
        assert ended is not None and ended.status is S.CRASHED
    # Injected twice in all: once into each incarnation; the fresh one had no old transcript.
    assert len(fake_llm.requests) == 2
    assert sent(fake_llm, 1).count("status://crashy") == 1


async def test_deliveries_during_a_turn_are_coalesced_per_uri(tmp_path: Path, fake_llm: FakeLLM) -> None:
    slow = Stream([json.dumps(c).encode() for c in chat_chunks("first done")] + [b"[DONE]"], delay_s=0.3)
    fake_llm.enqueue(slow, chat("x handled"), chat("y handled"))
    payload = warm_payload(fake_llm)
    payload = payload.model_copy(
        update={"intelligence": [payload.intelligence[0].model_copy(update={"stream": True})]}
    )
    recorder = Recorder()
    async with open_session(tmp_path, payload, recorder) as (session, _journal):
        first = session.inject_nowait(change("status://x", etag="v1"))
        await fake_llm.wait_requests(1, timeout_s=20)
        older = session.inject_nowait(change("status://x", etag="v2"))
        other = session.inject_nowait(change("status://y", etag="w1"))
        newest = session.inject_nowait(change("status://x", etag="v3"))
        assert session.queued == 2
        with anyio.fail_after(90):
            for waiter in (first, older, other, newest):
                await waiter.done.wait()
        assert first.outcome is not None and first.outcome.result == "first done"
        assert older.outcome is not None and newest.outcome is not None
        assert older.outcome.coalesced and older.outcome.delivery.etag == "v3"
        assert not newest.outcome.coalesced and newest.outcome.result == "x handled"
        assert other.outcome is not None and other.outcome.result == "y handled"
    assert len(fake_llm.requests) == 3
    assert "v3" in sent(fake_llm, 1) and "v2" not in json.dumps([r.json for r in fake_llm.requests])


async def test_stop_during_a_turn_ends_the_session_within_the_ladder_bound(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.enqueue(Hang())
    recorder = Recorder()
    async with open_session(tmp_path, warm_payload(fake_llm), recorder) as (session, journal):
        waiter = session.inject_nowait(change("status://busy"))
        await fake_llm.wait_requests(1, timeout_s=20)
        pid = next(iter(session.pids()))
        session.stop("cancelled by the test")
        with anyio.fail_after(bound_s(plan(LADDER)) + 2.0):
            await session.wait_ended()
            await waiter.done.wait()
        assert waiter.outcome is not None and waiter.outcome.status in (S.CANCELLED, None)
        record, result, decision = recorder.exits[0]
        assert result.status is S.CANCELLED and decision == "end"
        ended = await journal.tasks.get(record.task_id)
        assert ended is not None and ended.status is S.CANCELLED
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        assert recorder.restarts == []
        late = await session.inject(change("status://late"))
        assert late.status is None and late.error == "the warm session has ended"


async def test_the_supervisor_knows_a_sessions_task_to_cancel_it_and_to_spare_its_process(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.enqueue(chat("noted"))
    recorder = Recorder()
    async with open_session(tmp_path, warm_payload(fake_llm), recorder, supervised=True) as (
        session,
        journal,
    ):
        supervisor = session.registry
        assert isinstance(supervisor, Supervisor)
        with anyio.fail_after(90):
            outcome = await session.inject(change("status://a"))
        assert outcome.task_id is not None
        pid = next(iter(session.pids()))
        assert pid in supervisor.owned_pids()  # the orphan sweep leaves it alone
        await supervisor.cancel(outcome.task_id, "cancelled by its owner")
        with anyio.fail_after(bound_s(plan(LADDER)) + 5.0):
            await session.wait_ended()
        record, result, decision = recorder.exits[0]
        assert (result.status, decision) == (S.CANCELLED, "end")
        assert supervisor.owned_pids() == set()
        ended = await journal.tasks.get(record.task_id)
        assert ended is not None and ended.status is S.CANCELLED
