"""Every terminal status and both fatal aborts, produced by the real child process end to end."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from protocol import control
from protocol.result import TerminalStatus as S
from protocol.result import exit_code
from tests.child.conftest import SILENT_SERVER, demo_server, openai_endpoint, payload, write_script
from tests.support.child import spawn_child
from tests.support.fake_llm import FakeLLM, Hang, chat, error, tool_call
from tests.tools.servers import wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


async def test_a_scripted_task_with_an_mcp_tool_completes(tmp_path: Path) -> None:
    endpoint = write_script(
        tmp_path,
        [
            {"tool_calls": [{"name": "demo__add", "arguments": {"a": 2, "b": 3}}]},
            {"text": "The sum is {last_tool_result}."},
        ],
    )
    async with spawn_child(payload(endpoint, demo_server())) as child:
        result = await child.result()
        assert result.status is S.COMPLETED
        assert result.result == "The sum is 5."
        assert result.usage.steps == 2
        assert result.usage.tool_calls == 1
        assert await child.wait_exit() == 0
        usage = [f.params for f in child.frames if isinstance(f, control.Usage)]
        assert [u.steps for u in usage] == [1, 1]
        assert sum(u.tokens_in for u in usage) == result.usage.tokens_in
        assert len(child.results()) == 1


async def test_a_refusing_model_ends_as_refused(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(chat(None, refusal="I can't help with that."))
    async with spawn_child(payload(openai_endpoint(fake_llm))) as child:
        result = await child.result()
        assert result.status is S.REFUSED
        assert exit_code(result) == 5


async def test_a_model_that_never_finishes_exhausts_its_steps(fake_llm: FakeLLM) -> None:
    for i in range(3):
        fake_llm.enqueue(chat(f"step {i}", tool_calls=[tool_call("demo__counter", {}, f"c{i}")]))
    async with spawn_child(
        payload(openai_endpoint(fake_llm), demo_server(), limits={"max_steps": 3})
    ) as child:
        result = await child.result()
        assert result.status is S.EXHAUSTED_STEPS
        assert result.partial
        assert result.result == "step 2"


async def test_a_token_budget_stops_before_the_call_that_would_exceed_it(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(chat("", tool_calls=[tool_call("demo__counter", {}, "c1")], usage=(2900, 50)))
    async with spawn_child(
        payload(openai_endpoint(fake_llm), demo_server(), limits={"max_tokens": 3000})
    ) as child:
        result = await child.result()
        assert result.status is S.EXHAUSTED_TOKENS
        assert len(fake_llm.requests) == 1


async def test_the_deadline_interrupts_a_slow_model_call(tmp_path: Path) -> None:
    endpoint = write_script(tmp_path, [{"text": "too late", "delay_s": 60}])
    async with spawn_child(payload(endpoint, limits={"deadline_s": 1.0})) as child:
        with anyio.fail_after(10):
            result = await child.result()
        assert result.status is S.DEADLINE
        assert exit_code(result) == 124


async def test_a_call_that_keeps_returning_the_same_result_ends_as_stalled(tmp_path: Path) -> None:
    # The same call returning the same text every turn: no progress. The repeat cap is raised so
    # only the stalled detector can fire.
    turns = [{"tool_calls": [{"name": "demo__constant", "arguments": {}}]}]
    endpoint = write_script(tmp_path, turns, after_end="repeat_last")
    async with spawn_child(payload(endpoint, demo_server(), loop={"repeat_cap": 100})) as child:
        result = await child.result()
        assert result.status is S.STALLED
        assert result.usage.steps == 4


async def test_an_identical_call_repeated_is_refused_then_loop_detected(tmp_path: Path) -> None:
    endpoint = write_script(
        tmp_path,
        [{"tool_calls": [{"name": "demo__add", "arguments": {"a": 1, "b": 1}}], "text": "again"}],
        after_end="repeat_last",
    )
    async with spawn_child(payload(endpoint, demo_server(), loop={"idle_limit": 100})) as child:
        result = await child.result()
        assert result.status is S.LOOP_DETECTED
        assert result.usage.tool_calls == 3  # the 4th..7th were refused, never executed
        assert result.usage.steps == 7


async def test_an_unreachable_model_aborts_as_intelligence(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(error(401, {"error": {"message": "bad key"}}))
    async with spawn_child(payload(openai_endpoint(fake_llm, api_key="sk-secret-test"))) as child:
        result = await child.result()
        assert result.status is S.CRASHED
        assert result.abort == "intelligence"
        assert exit_code(result) == 4
        assert "sk-secret-test" not in child.stderr.decode()
        assert "sk-secret-test" not in json.dumps([f.model_dump(mode="json") for f in child.frames])
        # The key reached the endpoint, so the payload carried it in clear on the private channel.
        assert fake_llm.requests[0].headers.get("authorization") == "Bearer sk-secret-test"


async def test_a_required_server_that_never_answers_aborts_as_mcp(tmp_path: Path) -> None:
    endpoint = write_script(tmp_path, [{"text": "never reached"}])
    silent = demo_server(name="silent", command=["python3", SILENT_SERVER], connect_timeout_s=1.0)
    async with spawn_child(payload(endpoint, silent)) as child:
        with anyio.fail_after(15):
            result = await child.result()
        assert result.status is S.CRASHED
        assert result.abort == "mcp"
        assert exit_code(result) == 6
        assert "silent" in (result.error.message if result.error else "")


@pytest.mark.alone
async def test_cancel_during_a_model_call_is_reported_within_200ms(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(Hang())
    async with spawn_child(payload(openai_endpoint(fake_llm))) as child:
        await fake_llm.wait_requests(1, timeout_s=15)
        started = anyio.current_time()
        await child.cancel()
        result = await child.result(timeout_s=5)
        elapsed = anyio.current_time() - started
        assert result.status is S.CANCELLED
        assert elapsed < 0.2, f"cancel took {elapsed * 1000:.0f} ms"
        await fake_llm.wait_aborted(1, timeout_s=5)  # the HTTP request was really aborted
        assert await child.wait_exit() == 0


async def test_cancel_during_a_tool_call_sends_notifications_cancelled(tmp_path: Path) -> None:
    sentinels = tmp_path / "sentinels"
    sentinels.mkdir()
    endpoint = write_script(
        tmp_path, [{"tool_calls": [{"name": "demo__hang", "arguments": {"seconds": 60, "tag": "t1"}}]}]
    )
    server = demo_server(env={"AGENTD_TEST_SENTINEL_DIR": str(sentinels)})
    async with spawn_child(payload(endpoint, server)) as child:
        await wait_until((sentinels / "started-t1").exists, timeout_s=20)
        await child.cancel()
        # Bounded well under the tool's 60 s: the run ends without waiting for the call (how fast
        # a cancel is reported is the `alone` test above's and bench/daemon.py's to measure).
        result = await child.result(timeout_s=5)
        assert result.status is S.CANCELLED
        await wait_until((sentinels / "cancelled-t1").exists, timeout_s=10)
        assert await child.wait_exit() == 0


async def test_pings_are_answered_during_a_long_model_call(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(Hang())
    async with spawn_child(payload(openai_endpoint(fake_llm))) as child:
        await fake_llm.wait_requests(1, timeout_s=15)
        for _ in range(3):
            pong = await child.ping(timeout_s=1.0)
            assert pong.loop_age_ms < 1000  # the loop is waiting, not wedged
            await anyio.sleep(0.3)
        await child.cancel()
        assert (await child.result()).status is S.CANCELLED
