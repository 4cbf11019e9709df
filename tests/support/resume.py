"""A daemon whose tasks record tool calls and spawn children, restarted mid-run: its
configuration, the calls each instruction made, its events, and bounded waits."""

from __future__ import annotations

import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from tests.support.daemon import LEAN_SERVER, Daemon, scripted, start_daemon, write_config

SLOW_S = 1.0
FINAL_DELAY_S = 0.5
TURN_DELAY_S = 0.3


# The root: two recorded calls, a slow one (a kill lands while it runs), a nested child that
# records its own call, one more call, then the answer. Arguments carry the instruction, so each
# round's calls are told apart in the one log.
# The replies after R1 and R2 take a moment too, so a kill once R1 (or R2) ran lands before the
# next call on a fast machine as on a slow one, and the kills resume from several different steps.
ROOT_TURNS: list[dict[str, object]] = [
    {"tool_calls": [{"name": "demo__record", "arguments": {"text": "{instruction}/R1"}}]},
    {
        "tool_calls": [{"name": "demo__record", "arguments": {"text": "{instruction}/R2"}}],
        "delay_s": TURN_DELAY_S,
    },
    {
        "tool_calls": [
            {"name": "demo__slow_record", "arguments": {"text": "{instruction}/R3", "seconds": SLOW_S}}
        ],
        "delay_s": TURN_DELAY_S,
    },
    {"tool_calls": [{"name": "subagent_spawn", "arguments": {"instruction": "child of {instruction}"}}]},
    {"tool_calls": [{"name": "demo__record", "arguments": {"text": "{instruction}/R4"}}]},
    # The answer takes a moment, as a model's does: a kill once R4 ran lands before the task ends.
    {"text": "done: {last_tool_result}", "delay_s": FINAL_DELAY_S},
]


ROLES = [
    {
        "match": "^child of",
        "turns": [
            {"tool_calls": [{"name": "demo__record", "arguments": {"text": "{instruction}/C1"}}]},
            {"text": "child done"},
        ],
    }
]


WAIT_S = 60.0


def resume_config(tmp_path: Path, *, idempotent: str = "") -> Path:
    calls = tmp_path / "calls"
    calls.mkdir(exist_ok=True)
    body = (
        scripted("work", ROOT_TURNS, tmp_path, roles=ROLES)
        + f'[mcp.demo]\ncommand = ["{sys.executable}", "{LEAN_SERVER}"]\ntrust = []\n'
        + f'env = {{ AGENTD_TEST_SENTINEL_DIR = "{calls}" }}\n'
        + idempotent
        + '[defaults]\nmodel = "work"\nmcp = ["demo"]\n'
    )
    return write_config(tmp_path, body)


def calls_of(tmp_path: Path, instruction: str) -> Counter[str]:
    log = tmp_path / "calls" / "calls.log"
    lines = log.read_text().splitlines() if log.exists() else []
    calls: Counter[str] = Counter()
    for line in lines:
        for prefix in (f"{instruction}/", f"child of {instruction}/"):
            if line.startswith(prefix):
                calls[line.removeprefix(prefix)] += 1
    return calls


def wait_for(what: str, ready: Callable[[], bool], daemon: Daemon, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert daemon.proc.poll() is None, f"the daemon exited waiting for {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.01)


def task_events(daemon: Daemon, task_id: str) -> list[dict[str, object]]:
    return daemon.events(task_id)


def restart_daemon(daemon: Daemon, tmp_path: Path, config: Path, sig: int) -> Daemon:
    daemon.proc.send_signal(sig)
    code = daemon.proc.wait(timeout=40)
    if sig == signal.SIGTERM:
        assert code == 0, daemon.log_path.read_text()[-3000:]
    return start_daemon(tmp_path, config)


def stop_daemon(daemon: Daemon) -> None:
    if daemon.proc.poll() is None:
        daemon.proc.send_signal(signal.SIGTERM)
        daemon.proc.wait(timeout=40)
