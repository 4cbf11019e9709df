"""Fixtures for end-to-end tests of the real subagent process (`python -m subagent`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from protocol.spawn import EndpointSpec, McpServerSpec, SpawnPayload
from tests.support.fake_llm import FakeLLM

REPO = Path(__file__).resolve().parents[2]
BASIC_SERVER = str(REPO / "tests" / "fixtures" / "mcp_basic.py")
SILENT_SERVER = str(REPO / "tests" / "fixtures" / "mcp_silent.py")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def demo_server(**overrides: Any) -> McpServerSpec:
    fields: dict[str, Any] = {"name": "demo", "transport": "stdio", "command": [sys.executable, BASIC_SERVER]}
    return McpServerSpec(**(fields | overrides))


def openai_endpoint(fake: FakeLLM, **overrides: Any) -> EndpointSpec:
    fields: dict[str, Any] = {"kind": "openai", "base_url": fake.base_url, "model": "fake-model"}
    return EndpointSpec(**(fields | overrides))


def write_script(tmp_path: Path, turns: list[dict[str, Any]], **extra: Any) -> EndpointSpec:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"model": "scripted-test", "turns": turns, **extra}))
    return EndpointSpec(kind="scripted", script_path=str(path))


def payload(endpoint: EndpointSpec, *servers: McpServerSpec, **overrides: Any) -> SpawnPayload:
    fields: dict[str, Any] = {
        "task_id": "t_test",
        "run_id": "r_test",
        "instruction": "do the test task",
        "intelligence": [endpoint],
        "mcp_servers": list(servers),
        "loop": {"backoff_initial_s": 0.01, "backoff_max_s": 0.05},
    }
    return SpawnPayload.model_validate(fields | overrides)
