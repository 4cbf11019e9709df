"""`agentd run` against a misbehaving local model server (the fake OpenAI-compatible one on
loopback): a reply that stalls mid-way, a server that rejects `tools`, a model that writes its
tool calls as prose, a server that cannot parse its own model's tool call."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue

from tests.support.fake_llm import FakeLLM, chat, error, stall_midway

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.processes


def config_for(tmp_path: Path, fake: FakeLLM, **endpoint: object) -> Path:
    lines = ["[intelligence.local]", 'kind = "openai"', f'base_url = "{fake.base_url}"', 'model = "local"']
    lines += [f"{key} = {json.dumps(value)}" for key, value in endpoint.items()]
    path = tmp_path / "agentd.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run(config: Path, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentd", "run", "--config", str(config), "--model", "local", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=REPO,
    )


def log_events(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def test_a_reply_that_stalls_midway_ends_with_the_intelligence_abort_within_the_bound(tmp_path: Path) -> None:
    with FakeLLM(default=stall_midway(chat("a reply that will never be finished"))) as fake:
        config = config_for(tmp_path, fake, read_idle_timeout_s=0.5, request_timeout_s=120)
        started = time.monotonic()
        done = run(config, "say something")
        elapsed = time.monotonic() - started
    assert done.returncode == 4, done.stderr[-2000:]
    # Two attempts (a stall is retried once) of 0.5 s each plus the process start, nowhere near
    # 2 x request_timeout_s.
    assert elapsed < 30, elapsed
    assert len(fake.requests) == 2
    [final] = [e for e in log_events(done.stderr) if e["event"] == "loop.final"]
    assert final["abort"] == "intelligence"


LLAMACPP_UNPARSED: JsonValue = {
    "error": {
        "code": 500,
        "message": "The model produced output that does not match the expected Hermes 2 Pro format",
        "type": "server_error",
    }
}
OLLAMA_NO_TOOLS: JsonValue = {
    "error": {"message": "registry.ollama.ai/library/gemma3:4b does not support tools"}
}
WRITE_NOTE = json.dumps({"action": "tool", "tool": "note_write", "arguments": {"text": "seen"}})
FINAL = json.dumps({"action": "final", "result": "noted"})


def has_tools(request: Any) -> bool:
    return isinstance(request.json, dict) and "tools" in request.json


def last_message(request: Any) -> str:
    assert isinstance(request.json, dict)
    return str(request.json["messages"][-1]["content"])


def loop_errors(stderr: str) -> list[str]:
    return [str(e.get("kind")) for e in log_events(stderr) if e["event"] == "loop.error"]


def test_a_tool_call_the_server_cannot_parse_is_asked_again_at_once_in_constrained_json_actions(
    tmp_path: Path,
) -> None:
    with FakeLLM() as fake:
        fake.enqueue(error(500, LLAMACPP_UNPARSED), chat(WRITE_NOTE), chat(FINAL))
        done = run(config_for(tmp_path, fake), "note that you saw this")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "noted\n"
    first, second, third = fake.requests
    assert has_tools(first) and not has_tools(second) and not has_tools(third)
    # The same turn again, not a re-ask: the same conversation, now under the action schema.
    assert last_message(second) == last_message(first)
    assert isinstance(second.json, dict) and "json_schema" in json.dumps(second.json["response_format"])
    assert last_message(third).startswith("Result of tool `note_write`")
    assert loop_errors(done.stderr) == ["tool_call_unparsed"]
    [final] = [e for e in log_events(done.stderr) if e["event"] == "loop.final"]
    assert final["steps"] == 2  # the unparsed reply cost no step


def test_a_server_that_rejects_tools_completes_in_json_actions(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        fake.enqueue(error(400, OLLAMA_NO_TOOLS), chat(WRITE_NOTE), chat(FINAL))
        done = run(config_for(tmp_path, fake), "note that you saw this")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "noted\n"
    assert [has_tools(r) for r in fake.requests] == [True, False, False]
    assert "tools_rejected" in loop_errors(done.stderr)


def test_a_model_that_ignores_tools_completes_after_the_instructions(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        fake.enqueue(
            chat("First I will use note_write to record that I saw it."), chat(WRITE_NOTE), chat(FINAL)
        )
        done = run(config_for(tmp_path, fake), "note that you saw this")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "noted\n"
    assert "You described a tool call instead of making one" in last_message(fake.requests[1])
    assert "prose_tool_call" in loop_errors(done.stderr)


def test_tool_mode_json_flag_sends_no_tools_field(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        fake.enqueue(chat(FINAL))
        done = run(config_for(tmp_path, fake), "x", "--tool-mode", "json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert [has_tools(r) for r in fake.requests] == [False]


def test_tool_mode_native_flag_makes_a_rejection_of_tools_fatal(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        fake.enqueue(error(400, OLLAMA_NO_TOOLS))
        done = run(config_for(tmp_path, fake), "x", "--tool-mode", "native")
    assert done.returncode == 4, done.stderr[-2000:]
    assert len(fake.requests) == 1
    [final] = [e for e in log_events(done.stderr) if e["event"] == "loop.final"]
    assert (final["abort"], final["error"]) == ("intelligence", "config")


def test_tool_mode_flag_with_intelligence_url(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        fake.enqueue(chat(FINAL))
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "agentd",
                "run",
                "x",
                "--intelligence",
                fake.base_url,
                "--model",
                "m",
                "--tool-mode",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    assert [has_tools(r) for r in fake.requests] == [False]


def test_a_bad_tool_mode_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentd", "run", "x", "--tool-mode", "sometimes"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 2
    assert "--tool-mode" in done.stderr
