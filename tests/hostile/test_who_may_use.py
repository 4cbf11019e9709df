"""Who may use which server, endpoint and approval, against a real daemon: an operator's `allow`
lists decide which uids may grant an MCP server or use a model endpoint, and `approval_by =
"admin"` keeps a server's gated calls from being approved by the task's own owner
(docs/security.md). The other user is a forked child that drops to `nobody`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from protocol.api import (
    FORBIDDEN,
    INVALID_SPEC,
    ApprovalDecideParams,
    ApprovalDecideRequest,
    SubmitParams,
    SubmitRequest,
    TaskSpec,
)
from tests.support.approvals import pending_request, record_turn
from tests.support.as_user import NOGROUP, forked_as, outcomes
from tests.support.daemon import FIXTURES, running_daemon
from tests.support.privilege import AS_ANOTHER_USER

pytestmark = [pytest.mark.processes, AS_ANOTHER_USER]


def _approvals_body(workdir: Path) -> str:
    script = workdir / "play.json"
    roles = [{"match": "^gated", "turns": record_turn("demo", "gated")}]
    script.write_text(json.dumps({"model": "scripted-play", "turns": [{"text": "done"}], "roles": roles}))
    server = f'command = ["{sys.executable}", "{FIXTURES / "mcp_basic.py"}"]\ntrust = []\n'
    return (
        f'[intelligence.play]\nkind = "scripted"\nscript = "{script}"\n'
        f'[intelligence.private]\nkind = "scripted"\nscript = "{script}"\nallow = ["user:root"]\n'
        f'[mcp.demo]\n{server}approval = ["record"]\napproval_by = "admin"\nallow = ["group:{NOGROUP}"]\n'
        f'[mcp.secret]\n{server}allow = ["user:root"]\n'
        '[defaults]\nmodel = "play"\n'
    )


def _submit(spec: dict[str, object]) -> SubmitRequest:
    return SubmitRequest(params=SubmitParams(spec=TaskSpec.model_validate(spec)))


def test_allow_lists_and_approval_by_decide_what_another_user_may_do(tmp_path: Path) -> None:
    run = tmp_path / "run"
    lines = f'socket_group = "{NOGROUP}"\n'
    with running_daemon(
        tmp_path, _approvals_body(tmp_path), daemon_lines=lines, socket=run / "agentd.sock"
    ) as daemon:

        def submits() -> dict[str, Any]:
            return outcomes(
                "agentd.sock",
                [
                    ("secret", _submit({"instruction": "x", "mcp": ["secret"]})),
                    ("private", _submit({"instruction": "x", "model": "private"})),
                    ("gated", _submit({"instruction": "gated", "mcp": ["demo"]})),
                ],
            )

        seen = forked_as(submits, cwd=run, groups=[NOGROUP])
        assert seen["secret"]["code"] == INVALID_SPEC
        assert (
            seen["secret"]["message"]
            == "mcp: uid 65534 may not be granted MCP server 'secret' (mcp.secret.allow)"
        )
        assert seen["private"]["code"] == INVALID_SPEC
        assert "(intelligence.private.allow)" in seen["private"]["message"]
        # The admin (root here) may use both.
        daemon.submit("x", mcp=["secret"], model="private")

        # nobody may grant `demo` (its group is listed), but not approve its gated call.
        task_id = seen["gated"]["result"]["task_id"]
        call = pending_request(daemon, task_id)["call"]

        def decide() -> dict[str, Any]:
            request = ApprovalDecideRequest(
                params=ApprovalDecideParams(task_id=task_id, call=call, approve=True)
            )
            return outcomes("agentd.sock", [("decide", request)])

        refused = forked_as(decide, cwd=run, groups=[NOGROUP])["decide"]
        assert refused == {
            "code": FORBIDDEN,
            "message": "calls of MCP server 'demo' are decided by an admin only (mcp.demo.approval_by)",
        }
        decided: Any = daemon.call("approval.decide", {"task_id": task_id, "call": call, "approve": True})
        assert decided["state"] == "approved"
        assert daemon.wait(task_id).status == "completed"
