"""A held payload (a trigger's prestarted task, docs/triggers.md#prestart), end to end with the real
child process: it reads its payload and waits — no model request, not even a connection — until
`ctrl/go`, then runs the instruction `ctrl/go` carries; without one it gives up at `hold_s`,
having done nothing; a cancel (or its supervisor's EOF) while held ends it at once."""

from __future__ import annotations

import json

import anyio
import pytest

from protocol import control
from protocol.result import TerminalStatus as S
from tests.child.conftest import openai_endpoint, payload
from tests.support.child import spawn_child
from tests.support.fake_llm import FakeLLM

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


async def test_a_held_child_asks_nothing_until_go_then_runs_the_final_instruction(fake_llm: FakeLLM) -> None:
    held = payload(openai_endpoint(fake_llm), instruction="changed: watch://a (etag 1)", hold_s=30.0)
    async with spawn_child(held) as child:
        await child.wait_for(lambda frame: isinstance(frame, control.Ready))
        await anyio.sleep(0.5)  # given time to misbehave
        assert fake_llm.requests == [] and fake_llm.connections == 0
        assert child.events_named("loop.start") == []
        go = control.GoParams(instruction="changed: watch://a (etag 2)", deadline_s=60.0)
        await child.send(control.Go(params=go))
        result = await child.result()
        assert result.status is S.COMPLETED
        (request,) = fake_llm.requests
        assert "etag 2" in json.dumps(request.json) and "etag 1" not in json.dumps(request.json)
        (start,) = child.events_named("loop.start")
        assert start.fields["deadline_s"] == 60.0
        assert await child.wait_exit() == 0


async def test_a_held_child_never_told_to_go_gives_up_having_done_nothing(fake_llm: FakeLLM) -> None:
    async with spawn_child(payload(openai_endpoint(fake_llm), hold_s=0.5)) as child:
        result = await child.result()
        assert result.status is S.CANCELLED and result.error is not None
        assert "never told to run" in result.error.message
        assert await child.wait_exit() == 0
    assert fake_llm.requests == [] and fake_llm.connections == 0


async def test_a_cancel_while_held_ends_it_at_once(fake_llm: FakeLLM) -> None:
    async with spawn_child(payload(openai_endpoint(fake_llm), hold_s=30.0)) as child:
        await child.wait_for(lambda frame: isinstance(frame, control.Ready))
        with anyio.fail_after(10):
            await child.cancel()
            result = await child.result()
        assert result.status is S.CANCELLED
        assert await child.wait_exit() == 0
    assert fake_llm.requests == []
