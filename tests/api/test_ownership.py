"""Across uids: a caller sees and cancels only its own tasks, unless it is in the admin group.

The other user is a real forked child that drops to `nobody` before connecting, so the server
sees its credentials through `SO_PEERCRED` exactly as in production. It reaches the socket through
the socket's group (the `group=` option of `open_listener`), starting in the socket's directory
because the test's temporary tree above it is closed to other users.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from agentd.api.client import UNREACHABLE
from protocol.api import (
    NOT_FOUND,
)
from tests.api.harness import RawConnection, serving
from tests.support.as_user import NOBODY, NOGROUP, fork_as_nobody
from tests.support.privilege import AS_ANOTHER_USER

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

ADMINS = 4242  # a gid no account uses; membership is given to the child directly


async def _as_nobody(cwd: Path, root_task: str, path: str, *, extra_groups: list[int]) -> dict[str, Any]:
    # In a worker thread: the server answering the child runs on this event loop.
    return await anyio.to_thread.run_sync(fork_as_nobody, cwd, root_task, path, extra_groups)


@AS_ANOTHER_USER
async def test_another_uid_cannot_see_or_cancel_a_task_and_sees_only_its_own(socket_path: Path) -> None:
    async with (
        serving(socket_path, group=NOGROUP) as server,
        await RawConnection.open(server.path) as root,
    ):
        root_task = (await root.request("task.submit", {"spec": {"instruction": "root's"}}))["result"][
            "task_id"
        ]
        seen = await _as_nobody(socket_path.parent, root_task, "agentd.sock", extra_groups=[])
        everything = await root.request("task.list", {}, request_id=2)
        still = await root.request("task.get", {"task_id": root_task}, request_id=3)

    # Someone else's task is indistinguishable from a missing one.
    for name in ("get", "events", "cancel"):
        assert seen[name] == {"code": NOT_FOUND, "message": f"no task {root_task!r}"}, name
    assert seen["missing"] == {"code": NOT_FOUND, "message": "no task 't999'"}
    own = seen["submit"]["result"]["task_id"]
    assert [t["task_id"] for t in seen["list"]["result"]] == [own]
    assert seen["list"]["result"][0]["owner_uid"] == NOBODY
    # Root (the daemon's uid) sees both; the refused cancel changed nothing.
    assert {t["task_id"] for t in everything["result"]} == {root_task, own}
    assert still["result"]["state"] == "queued"
    assert {c.uid for c in server.backend.callers} == {os.geteuid(), NOBODY}


@AS_ANOTHER_USER
async def test_an_admin_group_member_sees_and_cancels_every_task(socket_path: Path) -> None:
    async with (
        serving(socket_path, group=NOGROUP, admin_gid=ADMINS) as server,
        await RawConnection.open(server.path) as root,
    ):
        root_task = (await root.request("task.submit", {"spec": {"instruction": "root's"}}))["result"][
            "task_id"
        ]
        seen = await _as_nobody(socket_path.parent, root_task, "agentd.sock", extra_groups=[ADMINS])
    assert seen["get"]["result"]["owner_uid"] == os.geteuid()
    assert {t["task_id"] for t in seen["list"]["result"]} == {root_task, seen["submit"]["result"]["task_id"]}
    assert seen["cancel"]["result"]["status"] == "cancelled"
    admin_callers = [c for c in server.backend.callers if c.uid == NOBODY]
    assert admin_callers and all(c.is_admin and ADMINS in c.groups for c in admin_callers)


@AS_ANOTHER_USER
async def test_a_user_outside_the_socket_group_is_told_permission_is_denied(socket_path: Path) -> None:
    async with serving(socket_path):  # root's group only: closed to nobody
        seen = await _as_nobody(socket_path.parent.parent, "t1", "run/agentd.sock", extra_groups=[])
    assert seen["get"]["code"] == UNREACHABLE
    assert seen["get"]["message"].startswith("permission denied connecting to agentd at run/agentd.sock")
