"""The child's boot contract (docs/design.md §2) and its behaviour on hostile input."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import pytest

from protocol import control
from protocol.environment import SUPERVISOR_PID_ENV
from protocol.result import TerminalStatus as S
from tests.child.conftest import demo_server, openai_endpoint, payload, write_script
from tests.support.child import spawn_child
from tests.support.fake_llm import FakeLLM, chat, json_reply, tool_call

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

SECRET = "sk-do-not-echo-1234"


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(
            b'{"jsonrpc":"2.0","method":"ctrl/spawn","params":{"api_key":"' + SECRET.encode() + b'"}}\n',
            id="invalid-spawn",
        ),
        pytest.param(b"not json " + SECRET.encode() + b"\n", id="garbage"),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"method":"ctrl/ping","params":{"seq":1}}\n', id="wrong-first-frame"
        ),
        pytest.param(b"\xff\xfe" + SECRET.encode() + b"\n", id="not-utf8"),
        pytest.param(b"", id="eof"),
    ],
)
async def test_a_bad_first_frame_exits_2_without_echoing_it(frame: bytes) -> None:
    async with spawn_child(frame, close_stdin=True) as child:
        assert await child.wait_exit() == 2
        assert SECRET not in child.stderr.decode(errors="replace")
        assert child.frames == []


async def test_boot_imports_only_the_environment_names_and_exit_codes_before_the_first_frame() -> None:
    # docs/design.md §2: the child imports almost nothing before step 5; pydantic comes with the first frame.
    code = (
        "import json, sys, subagent.boot; print(json.dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('protocol', 'processes', 'pydantic', 'anyio', 'mcp', 'httpx2'))))"
    )
    done = await anyio.run_process([sys.executable, "-I", "-c", code])
    assert json.loads(done.stdout) == ["protocol", "protocol.environment", "protocol.exit_codes"]


async def test_a_child_whose_supervisor_is_not_its_parent_exits_at_once(tmp_path: Path) -> None:
    endpoint = write_script(tmp_path, [{"text": "x"}])
    async with spawn_child(payload(endpoint), env={SUPERVISOR_PID_ENV: "1"}) as child:
        assert await child.wait_exit() == 1
        assert child.frames == []


async def test_the_control_channel_moves_off_fd_1_so_stray_output_goes_to_stderr(fake_llm: FakeLLM) -> None:
    from tests.support.fake_llm import Hang

    fake_llm.enqueue(Hang())
    async with spawn_child(payload(openai_endpoint(fake_llm))) as child:
        await fake_llm.wait_requests(1, timeout_s=15)
        fd1 = os.readlink(f"/proc/{child.pid}/fd/1")
        fd2 = os.readlink(f"/proc/{child.pid}/fd/2")
        fd0 = os.readlink(f"/proc/{child.pid}/fd/0")
        assert fd1 == fd2
        assert fd0 == "/dev/null"
        await child.cancel()
        assert (await child.result()).status is S.CANCELLED


async def test_ready_comes_first_and_exactly_one_result_last(tmp_path: Path) -> None:
    endpoint = write_script(tmp_path, [{"text": "done"}])
    async with spawn_child(payload(endpoint)) as child:
        await child.result()
        assert await child.wait_exit() == 0
        assert isinstance(child.frames[0], control.Ready)
        assert child.frames[0].params.pid == child.pid
        assert sum(isinstance(f, control.Result) for f in child.frames) == 1


async def test_garbage_model_replies_are_observations_not_crashes(fake_llm: FakeLLM) -> None:
    from tests.support.fake_llm import Reply

    fake_llm.enqueue(
        Reply(200, b"<html>proxy error</html>", {"content-type": "text/html"}),
        json_reply({"choices": "nope"}),
        chat("", tool_calls=[tool_call("demo__add", "{not json")]),
        chat("recovered"),
    )
    async with spawn_child(payload(openai_endpoint(fake_llm), demo_server())) as child:
        result = await child.result()
        assert result.status is S.COMPLETED
        assert result.result == "recovered"
        assert result.usage.steps == 4
        errors = [e.fields.get("kind") for e in child.events_named("loop.error")]
        assert errors.count("malformed_reply") == 2
        assert "call_refused" in errors


async def test_a_tool_server_that_dies_mid_call_is_an_observation(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(
        chat("", tool_calls=[tool_call("demo__crash", {})]), chat("the server crashed; giving up")
    )
    async with spawn_child(payload(openai_endpoint(fake_llm), demo_server())) as child:
        result = await child.result(timeout_s=40)
        assert result.status is S.COMPLETED
        second = fake_llm.requests[1].json
        assert isinstance(second, dict)
        messages = second["messages"]
        assert isinstance(messages, list)
        tool_message = messages[-1]
        assert isinstance(tool_message, dict)
        assert tool_message["role"] == "tool"
        assert "crash" in str(tool_message["content"])
