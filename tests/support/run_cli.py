"""`agentd run` as a subprocess: its helpers for the tests of the command and its flags."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


BASIC = REPO / "tests" / "fixtures" / "mcp_basic.py"


def script(tmp_path: Path, turns: list[Any], name: str = "s.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"turns": turns}))
    return f"scripted:{path}"


def run(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentd", "run", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=REPO,
    )


def log_events(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
