"""The dashboard sees what its user sees: run as another uid (`nobody`), it shows that user's own
tasks and not root's, while root's dashboard (an admin's) shows both."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentd.api.async_port import DaemonPort
from agentd.api.client import ApiClient
from agentd.api.listen_address import Listen
from dashboard.access import Keys, Origins, cookie_name
from dashboard.app import Gate, build_app
from protocol.api import SubmitParams, SubmitRequest, TaskSpec
from tests.support.as_user import NOGROUP, forked_as
from tests.support.daemon import Daemon, scripted, start_daemon, write_config
from tests.support.leaks import wait_no_descendants
from tests.support.privilege import AS_ANOTHER_USER
from tests.support.web import asgi_get, signed_in, start_web

pytestmark = [AS_ANOTHER_USER]

HOST = {"host": "127.0.0.1:8765"}


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    # The socket sits in its own directory, reachable by the socket's group (nobody's).
    socket_path = tmp_path / "run" / "agentd.sock"
    body = scripted("fast", [{"text": "done"}], tmp_path) + '[defaults]\nmodel = "fast"\n'
    config = write_config(tmp_path, body, daemon=f'socket_group = "{NOGROUP}"\n', socket=socket_path)
    started = start_daemon(tmp_path, config, socket=socket_path)
    try:
        yield started
    finally:
        assert started.stop(timeout_s=40) == 0
        assert wait_no_descendants(timeout_s=10.0) == []


def _as_nobody(root_task: str, app: Gate, keys: Keys) -> dict[str, Any]:
    """Submit a task as this user, then ask a dashboard of this user's what it shows (in process:
    the interpreter's files are closed to this uid, so nothing new may be imported, and the app
    was built before the fork: its page files are closed to this uid too). The app's port opens
    a connection per call, so every call it makes here is this user's."""
    with ApiClient("agentd.sock", timeout_s=10) as client:
        mine = client.call(SubmitRequest(params=SubmitParams(spec=TaskSpec(instruction="nobody's")))).task_id

    async def look() -> dict[str, Any]:
        status, headers, _ = await asgi_get(app, f"/?token={keys.launch_token}", HOST)
        assert status == 303
        session = {**HOST, "cookie": headers["set-cookie"].split(";")[0]}
        _, _, listed = await asgi_get(app, "/api/tasks", session)
        foreign, _, _ = await asgi_get(app, f"/api/tasks/{root_task}", session)
        return {"mine": mine, "listed": json.loads(listed)["tasks"], "foreign": foreign}

    return anyio.run(look)


def test_another_users_dashboard_shows_only_its_tasks_and_roots_shows_all(daemon: Daemon) -> None:
    root_task = daemon.submit("root's own")
    anyio.run(anyio.sleep, 0)  # the event loop's modules, loaded before the fork drops privileges
    assert cookie_name(8765)
    keys = Keys(launch_token="t" * 43)
    app = build_app(DaemonPort("agentd.sock"), keys, Origins(Listen("127.0.0.1", 8765), 8765))
    seen = forked_as(lambda: _as_nobody(root_task, app, keys), cwd=daemon.socket.parent)
    assert [task["task_id"] for task in seen["listed"]] == [seen["mine"]]
    assert seen["foreign"] == 404
    web = start_web(daemon.socket)
    try:
        with signed_in(web) as client:
            listed = {task["task_id"] for task in client.get("/api/tasks").json()["tasks"]}
        assert listed == {root_task, seen["mine"]}
    finally:
        assert web.stop() == 0
    for task_id in (root_task, seen["mine"]):
        daemon.wait(task_id)
