"""A warm subagent (`warm = true`) driven over its control channel by the test harness: each
`ctrl/inject` is one turn answered by `ev/turn`, the context carries over, per-delivery budgets end
only that turn, and the idle timeout, the session token cap and a cancel end the session."""

from __future__ import annotations

import json
from typing import Any

import pytest

from protocol import control
from protocol.result import TerminalStatus as S
from tests.child.conftest import openai_endpoint, payload
from tests.support.child import ChildHarness, spawn_child
from tests.support.fake_llm import FakeLLM, Hang, chat, tool_call

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


def warm(fake: FakeLLM, **session: Any) -> Any:
    fields: dict[str, Any] = {"warm": True, "session": {"idle_timeout_s": 30.0, **session}}
    limits = session.pop("limits", None)
    if limits is not None:
        fields["limits"] = limits
        fields["session"] = {k: v for k, v in fields["session"].items() if k != "limits"}
    return payload(openai_endpoint(fake), instruction="You watch the feed.", **fields)


async def inject(child: ChildHarness, seq: int, message: str) -> control.TurnParams:
    await child.send(control.Inject(params=control.InjectParams(message=message, seq=seq)))
    frame = await child.wait_for(lambda f: isinstance(f, control.Turn) and f.params.seq == seq)
    assert isinstance(frame, control.Turn)
    return frame.params


def said(request: Any) -> str:
    return json.dumps(request.json["messages"])


async def test_three_injections_are_three_turns_that_keep_their_context(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(chat("noted one"), chat("noted two"), chat("noted three"))
    async with spawn_child(warm(fake_llm)) as child:
        turns = [await inject(child, n, f"change number {n} of res://feed") for n in (1, 2, 3)]
        assert [t.status for t in turns] == [S.COMPLETED] * 3
        assert [t.result for t in turns] == ["noted one", "noted two", "noted three"]
        assert all(t.usage.steps == 1 and t.usage.tokens == 15 for t in turns)
        await child.cancel()
        result = await child.result()
        assert result.status is S.CANCELLED
        assert result.usage.steps == 3
        assert await child.wait_exit() == 0
    third = said(fake_llm.requests[2])
    for text in ("change number 1", "noted one", "change number 2", "noted two", "change number 3"):
        assert text in third


async def test_a_spent_delivery_budget_ends_that_turn_and_the_next_injection_runs(fake_llm: FakeLLM) -> None:
    looping = chat("", tool_calls=[tool_call("nothing_here", {"a": 1})])
    fake_llm.enqueue(looping, chat("wrapped up"), chat("second answer"))
    async with spawn_child(warm(fake_llm, turn_max_steps=2)) as child:
        first = await inject(child, 1, "change of res://a")
        assert first.status is S.EXHAUSTED_STEPS
        second = await inject(child, 2, "change of res://b")
        assert second.status is S.COMPLETED
        assert second.result == "second answer"
        await child.cancel()
        await child.result()
    # The second turn's request is well formed: the unfinished tool call got its result.
    assert "change of res://b" in said(fake_llm.requests[2])


async def test_the_idle_timeout_ends_the_session_cleanly(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(chat("one"))
    async with spawn_child(warm(fake_llm, idle_timeout_s=0.5)) as child:
        assert (await inject(child, 1, "change of res://a")).status is S.COMPLETED
        result = await child.result()
        assert result.status is S.COMPLETED
        assert result.idle is True
        assert result.result == "one"
        assert await child.wait_exit() == 0


async def test_the_session_token_cap_ends_the_session(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(*(chat(f"answer {n}", usage=(400, 100)) for n in range(5)))
    spec = warm(fake_llm, turn_max_tokens=100_000, limits={"max_tokens": 1200})
    async with spawn_child(spec) as child:
        statuses = []
        for n in range(1, 5):
            await child.send(control.Inject(params=control.InjectParams(message=f"change {n}", seq=n)))
        result = await child.result()
        statuses = [f.params.status for f in child.frames if isinstance(f, control.Turn)]
        assert result.status is S.EXHAUSTED_TOKENS
        assert statuses[-1] is S.EXHAUSTED_TOKENS
        assert result.usage.tokens <= 1200


async def test_a_turn_past_its_deadline_reports_deadline_and_the_session_goes_on(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(Hang(), chat("on time"))
    async with spawn_child(warm(fake_llm, turn_deadline_s=1.0)) as child:
        late = await inject(child, 1, "change of res://slow")
        assert late.status is S.DEADLINE
        assert 1000 <= late.dur_ms < 10_000
        on_time = await inject(child, 2, "change of res://fast")
        assert on_time.status is S.COMPLETED and on_time.result == "on time"
        assert child.results() == []  # the session itself has not ended
        await child.cancel()
        assert (await child.result()).status is S.CANCELLED
