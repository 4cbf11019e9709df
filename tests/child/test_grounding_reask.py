"""The grounding re-ask end to end through the real child against a real HTTP server playing a
small model in JSON-action mode: a final answer about a file the instruction names, given before
any tool call opened it, is asked again once; an answer that follows a call naming the file, a
second answer, and a run with no server's tool to open files are taken as they are."""

from __future__ import annotations

import json
from typing import Any

import pytest

from protocol.result import TerminalStatus as S
from tests.child.conftest import demo_server, openai_endpoint, payload
from tests.support.child import spawn_child
from tests.support.fake_llm import FakeLLM, Recorded, chat

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

INSTRUCTION = "Read the file notes.txt in /srv/data and report what it says."
GUESS = json.dumps({"action": "final", "result": "notes.txt is a text file"})
OPEN = json.dumps({"action": "tool", "tool": "demo__echo", "arguments": {"text": "/srv/data/notes.txt"}})
FROM_FILE = json.dumps({"action": "final", "result": "it says /srv/data/notes.txt"})
REASK = "[agentd] The task names `notes.txt`, but no tool call has opened it yet"


def last_message(request: Recorded) -> str:
    assert isinstance(request.json, dict)
    messages = request.json["messages"]
    assert isinstance(messages, list) and isinstance(messages[-1], dict)
    return str(messages[-1]["content"])


def kinds(child: Any) -> list[str]:
    return [str(e.fields["kind"]) for e in child.events_named("loop.error")]


async def test_an_answer_before_opening_the_named_file_is_asked_again_and_the_model_opens_it(
    fake_llm: FakeLLM,
) -> None:
    fake_llm.enqueue(chat(GUESS), chat(OPEN), chat(FROM_FILE))
    endpoint = openai_endpoint(fake_llm, tool_mode="json", temperature=0)
    async with spawn_child(payload(endpoint, demo_server(), instruction=INSTRUCTION)) as child:
        result = await child.result()
        assert result.status is S.COMPLETED and result.result == "it says /srv/data/notes.txt"
        assert result.usage.steps == 3 and result.usage.tool_calls == 1
        assert kinds(child) == ["ungrounded_final"]
    first, reasked, after_tool = fake_llm.requests
    assert last_message(first) == INSTRUCTION
    assert last_message(reasked).startswith(REASK)
    assert last_message(after_tool).startswith("Result of tool `demo__echo`")


async def test_the_second_answer_is_taken_as_it_is(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(chat(GUESS), chat(GUESS))
    endpoint = openai_endpoint(fake_llm, tool_mode="json")
    async with spawn_child(payload(endpoint, demo_server(), instruction=INSTRUCTION)) as child:
        result = await child.result()
        assert result.status is S.COMPLETED and result.result == "notes.txt is a text file"
        assert result.usage.steps == 2 and kinds(child) == ["ungrounded_final"]
    assert len(fake_llm.requests) == 2


async def test_an_answer_after_a_call_that_names_the_file_is_not_asked_again(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(chat(OPEN), chat(FROM_FILE))
    endpoint = openai_endpoint(fake_llm, tool_mode="json")
    async with spawn_child(payload(endpoint, demo_server(), instruction=INSTRUCTION)) as child:
        result = await child.result()
        assert result.status is S.COMPLETED and result.usage.steps == 2 and kinds(child) == []


async def test_without_a_servers_tool_the_answer_is_not_asked_again(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(chat(GUESS))
    endpoint = openai_endpoint(fake_llm, tool_mode="json")
    async with spawn_child(payload(endpoint, instruction=INSTRUCTION)) as child:
        result = await child.result()
        assert result.status is S.COMPLETED and result.usage.steps == 1 and kinds(child) == []
