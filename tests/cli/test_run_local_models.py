"""`agentd run` against a misbehaving local model server (the fake OpenAI-compatible one on
loopback): a reply that stalls mid-way, a server that rejects `tools`, a model that writes its
tool calls as prose, a server that cannot parse its own model's tool call (issue 15)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_llm import FakeLLM, chat, stall_midway

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
