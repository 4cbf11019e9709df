"""`agentd web` over plain HTTP against a real daemon: who is let in (the one-time token, the
session cookie, `Host`, `Origin`, the CSRF token) and what the JSON API answers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import httpx2
import pytest

from tests.support.daemon import Daemon, running_daemon, scripted
from tests.support.leaks import wait_no_descendants
from tests.support.web import WebServer, csrf, signed_in, start_web

WAIT_S = 30.0


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One daemon for the module (CI time); its end checks that nothing was left running."""
    workdir = tmp_path_factory.mktemp("web-http")
    body = scripted("fast", [{"text": "forty-two"}], workdir)
    body += scripted("slow", [{"text": "late", "delay_s": 60}], workdir)
    with running_daemon(workdir, body + '[defaults]\nmodel = "fast"\n') as running:
        yield running
    assert wait_no_descendants(timeout_s=10.0) == []


@pytest.fixture(scope="module")
def server(daemon: Daemon) -> Iterator[WebServer]:
    running = start_web(daemon.socket)
    try:
        yield running
    finally:
        assert running.stop() == 0


@pytest.fixture(scope="module")
def client(server: WebServer) -> Iterator[httpx2.Client]:
    with signed_in(server) as signed:
        yield signed


def test_the_printed_url_is_loopback_and_carries_a_token(server: WebServer) -> None:
    assert server.url.startswith("http://127.0.0.1:") and len(server.token) >= 32


def test_without_the_cookie_every_page_and_api_is_refused_with_no_data(
    daemon: Daemon, server: WebServer
) -> None:
    task_id = daemon.submit("a secret instruction")
    for path in (
        "/",
        f"/tasks/{task_id}",
        "/api/tasks",
        f"/api/tasks/{task_id}",
        "/api/approvals",
        "/static/app.js",
    ):
        answer = httpx2.get(server.base + path, timeout=WAIT_S)
        assert answer.status_code == 401, path
        assert "secret" not in answer.text and task_id not in answer.text


def test_a_wrong_token_is_refused(server: WebServer) -> None:
    wrong = httpx2.get(f"{server.base}/?token={'x' * 43}", timeout=WAIT_S)
    assert wrong.status_code == 401 and "wrong" in wrong.text
    assert "set-cookie" not in wrong.headers


def test_the_token_becomes_an_httponly_strict_cookie_and_is_used_up(daemon: Daemon) -> None:
    server = start_web(daemon.socket)
    try:
        first = httpx2.get(f"{server.base}/tasks/x?token={server.token}", timeout=WAIT_S)
        assert first.status_code == 303 and first.headers["location"] == "/tasks/x"
        cookie = first.headers["set-cookie"]
        assert cookie.startswith(f"agentd_web_{server.port}=")
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        again = httpx2.get(f"{server.base}/?token={server.token}", timeout=WAIT_S)
        assert again.status_code == 401 and "already used" in again.text
        session = cookie.split(";")[0]
        assert (
            httpx2.get(server.base + "/api/tasks", headers={"cookie": session}, timeout=WAIT_S).status_code
            == 200
        )
        forged = f"agentd_web_{server.port}={'y' * 43}"
        assert (
            httpx2.get(server.base + "/api/tasks", headers={"cookie": forged}, timeout=WAIT_S).status_code
            == 401
        )
    finally:
        assert server.stop() == 0


def test_a_foreign_origin_or_host_is_refused_even_with_the_cookie(
    client: httpx2.Client, server: WebServer
) -> None:
    foreign = client.get("/api/tasks", headers={"origin": "http://evil.example"})
    assert foreign.status_code == 403 and "evil.example" in foreign.text
    rebound = client.get("/api/tasks", headers={"host": f"evil.example:{server.port}"})
    assert rebound.status_code == 421
    same = client.get("/api/tasks", headers={"origin": f"http://localhost:{server.port}"})
    assert same.status_code == 200


def test_a_change_without_the_csrf_token_is_refused_and_with_it_goes_through(
    daemon: Daemon, client: httpx2.Client
) -> None:
    task_id = daemon.submit("take your time", model="slow")
    refused = client.post(f"/api/tasks/{task_id}/cancel", json={})
    assert refused.status_code == 403 and "CSRF" in refused.text
    wrong = client.post(f"/api/tasks/{task_id}/cancel", json={}, headers={"x-csrf-token": "0" * 64})
    assert wrong.status_code == 403
    assert client.get(f"/api/tasks/{task_id}").json()["task"]["state"] != "terminal"
    done = client.post(f"/api/tasks/{task_id}/cancel", json={}, headers=csrf(client))
    assert done.status_code == 200, done.text
    assert daemon.wait(task_id, timeout_s=WAIT_S).status == "cancelled"


def test_every_answer_carries_a_policy_that_forbids_inline_script(client: httpx2.Client) -> None:
    for path in ("/", "/api/tasks", "/static/main.js"):
        answer = client.get(path)
        assert answer.status_code == 200, path
        policy = answer.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "default-src 'none'" in policy
        assert "unsafe-inline" not in policy
        assert answer.headers["x-content-type-options"] == "nosniff"
    page = client.get("/")
    assert "<script>" not in page.text and 'src="/static/main.js"' in page.text


def test_the_api_shows_a_task_its_tree_its_timeline_and_its_transcript(
    daemon: Daemon, client: httpx2.Client
) -> None:
    task_id = daemon.submit("answer")
    assert daemon.wait(task_id, timeout_s=WAIT_S).status == "completed"
    listed = client.get("/api/tasks").json()["tasks"]
    assert task_id in [task["task_id"] for task in listed]
    page = client.get(f"/api/tasks/{task_id}").json()
    assert page["task"]["result"] == "forty-two"
    assert [node["handle"] for node in page["tree"]] == ["0"]
    assert [span["kind"] for span in page["timeline"]] == ["model"]
    assert page["timeline"][0]["end"] is not None
    transcript = client.get(f"/api/tasks/{task_id}/transcript").json()
    assert [step["item"]["kind"] for step in transcript["steps"]] == ["reply"]
    terminal = client.get("/api/tasks", params={"state": "terminal"}).json()["tasks"]
    assert all(task["state"] == "terminal" for task in terminal)
    # The daemon filters by trigger: no task here came from one.
    assert client.get("/api/tasks", params={"trigger": "inbox"}).json() == {"tasks": [], "before": None}


def test_an_unknown_task_or_a_bad_filter_is_a_clear_json_error(client: httpx2.Client) -> None:
    missing = client.get("/api/tasks/t_nosuchtask")
    assert missing.status_code == 404 and "t_nosuchtask" in missing.json()["error"]
    bad = client.get("/api/tasks", params={"state": "sideways"})
    assert bad.status_code == 400 and "state" in bad.json()["error"]


def test_the_events_stream_replays_then_ends_with_the_task(daemon: Daemon, client: httpx2.Client) -> None:
    task_id = daemon.submit("answer")
    daemon.wait(task_id, timeout_s=WAIT_S)
    with client.stream("GET", f"/api/tasks/{task_id}/events") as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        text = "".join(answer.iter_text())
    assert "subagent.ready" in text and "loop.final" in text, text
    assert text.rstrip().split("\n\n")[-1].startswith("event: end")


def _refused(daemon: Daemon, *flags: str) -> str:
    command = [sys.executable, "-m", "agentd", "web", "--socket", str(daemon.socket), "--no-open", *flags]
    done = subprocess.run(command, capture_output=True, text=True, timeout=WAIT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    return done.stderr


def test_a_remote_address_needs_allow_remote_and_a_bad_address_names_the_flag(daemon: Daemon) -> None:
    assert "--allow-remote" in _refused(daemon, "--listen", "0.0.0.0:0")
    assert "HOST:PORT" in _refused(daemon, "--listen", "8765")
