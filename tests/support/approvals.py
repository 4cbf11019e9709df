"""A daemon whose tasks call gated tools of `tests/fixtures/mcp_lean.py`: its configuration, the
scripted turns, the calls the servers recorded, and the pending approval requests."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.daemon import LEAN_SERVER, Daemon

WAIT_S = 30.0


def record_turn(server: str, text: str, *, delay_s: float = 0) -> list[dict[str, object]]:
    call: dict[str, object] = {"tool_calls": [{"name": f"{server}__record", "arguments": {"text": text}}]}
    if delay_s:
        call["delay_s"] = delay_s
    return [call, {"text": "{last_tool_result}"}]


def approvals_script(workdir: Path) -> str:
    roles = [
        {"match": f"^{name}", "turns": record_turn(server, name)}
        for name, server in (
            ("approve-once", "demo"),
            ("deny-reason", "demo"),
            ("timeout", "quick"),
            ("cancel-wait", "demo"),
            ("other-uid", "demo"),
            ("pty", "demo"),
            ("child: nested", "demo"),
        )
    ]
    roles.append(
        {
            "match": "^client-gate",
            "turns": [
                {"tool_calls": [{"name": "demo__echo", "arguments": {"text": "client-gate"}}]},
                {"text": "{last_tool_result}"},
            ],
        }
    )
    roles.append(
        {
            "match": "^nested",
            "turns": [
                {"tool_calls": [{"name": "subagent_spawn", "arguments": {"instruction": "child: nested"}}]},
                {"text": "{last_tool_result}"},
            ],
        }
    )
    # The restart test (test_approvals_restart.py): its model "thinks" 4 s before the call.
    roles.append({"match": "^restart", "turns": record_turn("demo", "restart", delay_s=4)})
    path = workdir / "play.json"
    path.write_text(json.dumps({"model": "scripted-play", "turns": [{"text": "no role"}], "roles": roles}))
    return f'[intelligence.play]\nkind = "scripted"\nscript = "{path}"\n'


def approvals_body(workdir: Path) -> str:
    calls = workdir / "calls"
    calls.mkdir(mode=0o755, exist_ok=True)
    server = f'command = ["{sys.executable}", "{LEAN_SERVER}"]\ntrust = []\n'
    env = f'env = {{ AGENTD_TEST_SENTINEL_DIR = "{calls}" }}\n'
    return (
        approvals_script(workdir)
        + f'[mcp.demo]\n{server}{env}approval = ["record"]\napproval_timeout = "60s"\n'
        + f'[mcp.quick]\n{server}{env}approval = ["rec*"]\napproval_timeout = "1s"\n'
        + '[defaults]\nmodel = "play"\nmcp = ["demo"]\n'
    )


def recorded_calls(daemon: Daemon, text: str) -> int:
    log = daemon.workdir / "calls" / "calls.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return lines.count(text)


def pending_request(daemon: Daemon, task_id: str, *, handle: str = "0") -> dict[str, Any]:
    """The task's one pending request, waiting for it (bounded)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        found = daemon.call("approval.list", {"task_id": task_id})
        assert isinstance(found, list)
        if found:
            (request,) = found
            assert isinstance(request, dict)
            assert request["handle"] == handle
            return request
        view = daemon.call("task.get", {"task_id": task_id})
        assert isinstance(view, dict) and view["state"] != "terminal", view
        assert time.monotonic() < deadline, f"no approval request of {task_id} within {WAIT_S} s"
        time.sleep(0.05)
