"""`agentd submit` to a daemon with a local OpenAI-compatible endpoint behaves as `agentd run`
does: a server whose tool-call parser fails gets the same turn again in constrained JSON actions,
and a model that parrots agentd's feedback ends `stalled` saying so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue

from tests.support.daemon import running_daemon
from tests.support.fake_llm import FakeLLM, Recorded, Respond, chat, error

pytestmark = pytest.mark.processes

LLAMACPP_UNPARSED: JsonValue = {
    "error": {
        "code": 500,
        "message": "The model produced output that does not match the expected Hermes 2 Pro format",
        "type": "server_error",
    }
}
WRITE_NOTE = json.dumps({"action": "tool", "tool": "note_write", "arguments": {"text": "seen"}})
NOTED = json.dumps({"action": "final", "result": "noted"})


def endpoint(fake: FakeLLM) -> str:
    return (
        f'[intelligence.local]\nkind = "openai"\nbase_url = "{fake.base_url}"\nmodel = "local"\n'
        '[defaults]\nmodel = "local"\n'
    )


def body(request: Recorded) -> dict[str, Any]:
    assert isinstance(request.json, dict)
    return request.json


def test_submit_asks_the_same_turn_again_constrained_after_a_tool_call_parse_failure(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        fake.enqueue(error(500, LLAMACPP_UNPARSED), chat(WRITE_NOTE), chat(NOTED))
        with running_daemon(tmp_path, endpoint(fake)) as daemon:
            done = daemon.cli("submit", "note that you saw this", "--wait", "--json")
        native, again, _ = fake.requests
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    assert (view["status"], view["result"], view["usage"]["steps"]) == ("completed", "noted", 2)
    assert "tools" in body(native) and "tools" not in body(again)
    assert "json_schema" in json.dumps(body(again)["response_format"])
    assert body(again)["messages"][1:] == body(native)["messages"][1:]


def test_submit_of_a_task_whose_model_parrots_ends_stalled_saying_so(tmp_path: Path) -> None:
    def parrot(request: Recorded) -> Any:
        messages = body(request)["messages"]
        return chat("" if len(messages) <= 2 else str(messages[-1]["content"]))

    with FakeLLM(default=Respond(parrot)) as fake, running_daemon(tmp_path, endpoint(fake)) as daemon:
        done = daemon.cli("submit", "say something", "--wait")
    assert done.returncode == 1
    assert "stalled (exit 1)" in done.stderr
    assert "parroted_feedback: the model's answer repeated agentd's own message" in done.stderr
    assert done.stdout == ""
