"""A member of the socket's group reaches the system daemon with no flag and no variable.

The real daemon binds the system socket `/run/agentd/agentd.sock` (group `nogroup` standing in for
`agentd`); a forked process that dropped to nobody, with that group and an empty environment, runs
`agentd submit` and `agentd status`. The pure search order is tested in tests/config/test_load.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import pytest

from agentd.cli.main import main
from agentd.config.paths import SYSTEM_SOCKET
from protocol.result import TerminalStatus
from tests.support.as_user import NOBODY, NOGROUP, forked_as, preload
from tests.support.daemon import running_daemon, scripted

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to bind /run/agentd and to become nobody"),
    pytest.mark.skipif(
        SYSTEM_SOCKET.parent.exists(), reason="/run/agentd exists: a system agentd may be installed"
    ),
]


def _as_group_member() -> dict[str, object]:
    """In a forked child (nobody in `nogroup`, with no AGENTD_SOCKET, no XDG_RUNTIME_DIR and no
    config in its environment): submit and wait through the CLI."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(["submit", "from a group member", "--wait", "--json"])
    return {"code": code, "output": out.getvalue()}


def test_a_socket_group_member_reaches_the_system_daemon_without_settings(tmp_path: Path) -> None:
    body = scripted("m", [{"text": "hello, member"}], tmp_path) + '[defaults]\nmodel = "m"\n'
    try:
        with running_daemon(
            tmp_path, body, daemon_lines=f'socket_group = "{NOGROUP}"\n', socket=SYSTEM_SOCKET
        ) as daemon:
            preload("agentd.cli")  # the command's modules, loaded before the fork drops privileges
            seen = forked_as(_as_group_member, cwd="/", groups=[NOGROUP], env={"HOME": "/nonexistent"})
            assert seen["code"] == 0, seen["output"]
            view = json.loads(str(seen["output"]))
            assert view["status"] == TerminalStatus.COMPLETED.value
            assert view["result"] == "hello, member"
            assert view["owner_uid"] == NOBODY
            task = daemon.call("task.get", {"task_id": view["task_id"]})
            assert isinstance(task, dict) and task["owner_uid"] == NOBODY
    finally:
        shutil.rmtree(SYSTEM_SOCKET.parent, ignore_errors=True)
