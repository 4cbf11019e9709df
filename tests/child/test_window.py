"""Small context windows end to end: a real subagent, a real stdio MCP server with a large tool
catalogue (tests/fixtures/mcp_many_tools.py) and the fake OpenAI-compatible server."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from pydantic import JsonValue

from protocol.result import TerminalStatus as S
from protocol.result import exit_code
from protocol.spawn import McpServerSpec
from subagent.loop.context import COMPACTION_SYSTEM
from tests.child.conftest import REPO, openai_endpoint, payload
from tests.support.child import spawn_child
from tests.support.fake_llm import FakeLLM, Recorded, chat, tool_call

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

MANY_TOOLS = str(REPO / "tests" / "fixtures" / "mcp_many_tools.py")
# An instruction long enough that, with the catalogue, the fixed part of every request sits
# above 75% of a 4,096-token window: before this fix the loop compacted after every turn.
LONG_INSTRUCTION = "Check the files under / and report what a.txt and b.txt contain. " + (
    "Context: this is a routine inventory of a small test tree; be brief and precise. " * 24
)


def fs_server() -> McpServerSpec:
    return McpServerSpec(name="fs", transport="stdio", command=[sys.executable, MANY_TOOLS])


def body(request: Recorded) -> dict[str, Any]:
    assert isinstance(request.json, dict)
    return request.json


def is_compaction(request: Recorded) -> bool:
    messages = body(request)["messages"]
    return any(m.get("role") == "system" and m.get("content") == COMPACTION_SYSTEM for m in messages)


async def test_a_4k_window_with_a_large_catalogue_does_not_compact_with_nothing_to_compact(
    fake_llm: FakeLLM,
) -> None:
    # A real server reports the prompt it saw; the loop adds an eighth of that to its estimate.
    usage = (3000, 30)
    calls: list[tuple[str, JsonValue]] = [
        ("fs__list_directory", {"path": "/"}),
        ("fs__read_text_file", {"path": "/a.txt"}),
        ("fs__read_text_file", {"path": "/b.txt"}),
    ]
    for i, (name, args) in enumerate(calls):
        fake_llm.enqueue(chat("", tool_calls=[tool_call(name, args, f"c{i}")], usage=usage))
    fake_llm.enqueue(chat("a.txt holds alpha, b.txt holds bravo.", usage=usage))
    spec = payload(
        openai_endpoint(fake_llm, context_window=4096),
        fs_server(),
        instruction=LONG_INSTRUCTION,
    )
    async with spawn_child(spec) as child:
        result = await child.result()
    assert result.status is S.COMPLETED, result
    assert result.result == "a.txt holds alpha, b.txt holds bravo."
    requests = fake_llm.requests
    assert not [r for r in requests if is_compaction(r)]
    assert not child.events_named("loop.compact")
    assert len(requests) == 4
    first = body(requests[0])
    tools = first["tools"]
    assert sum(t["function"]["name"].startswith("fs__") for t in tools) == 14
    rendered = json.dumps(tools)
    assert '"title"' not in rendered and "$schema" not in rendered
    assert rendered.count("Only works within allowed directories.") <= 1
    # The fixed part really is past the 75% mark, so only the new rule kept compaction away.
    assert len(requests[0].body) / 4 + usage[0] / 8 > 0.75 * 4096


async def test_a_window_the_fixed_part_cannot_fit_fails_at_once_naming_sizes_and_the_fix(
    fake_llm: FakeLLM,
) -> None:
    spec = payload(openai_endpoint(fake_llm, context_window=1024), fs_server())
    async with spawn_child(spec) as child:
        result = await child.result()
    assert result.status is S.CRASHED and result.abort == "intelligence"
    assert exit_code(result) == 4
    assert result.error is not None and result.error.kind == "context_window"
    message = result.error.message
    assert "1024-token window" in message
    assert "system prompt and task take about" in message
    assert "tool catalogue (" in message and "tools)" in message
    assert "--context-window" in message and "tools = [...]" in message
    assert fake_llm.requests == []  # nothing was sent: the run failed before its first call
