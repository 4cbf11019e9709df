"""Metrics end to end: a real daemon, a model served over real HTTP, a real MCP server, scraped
over the `[metrics]` listener while it runs (docs/metrics.md)."""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from protocol.result import TerminalStatus as S
from tests.metrics.scrape import scrape_tcp, scrape_unix, value
from tests.support.daemon import (
    Daemon,
    demo_mcp,
    rogue_command,
    running_daemon,
    scripted,
    start_daemon,
    write_config,
)
from tests.support.fake_llm import FakeLLM, Hang, chat, tool_call

pytestmark = pytest.mark.processes


def _listening(daemon: Daemon) -> str:
    return str(daemon.wait_log("proc.metrics")["listen"])


def _wait_for(scrape: object, predicate: object, timeout_s: float = 15.0) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        page = scrape()  # type: ignore[operator]
        if predicate(page):  # type: ignore[operator]
            return page  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, f"metrics never matched:\n{page[-3000:]}"
        time.sleep(0.1)


def test_counters_move_by_exact_amounts_for_a_known_set_of_tasks(tmp_path: Path) -> None:
    with FakeLLM() as fake, FakeLLM(default=Hang()) as slow:
        body = (
            f'[intelligence.fake]\nkind = "openai"\nbase_url = "{fake.base_url}"\nmodel = "m"\n'
            f'[intelligence.slow]\nkind = "openai"\nbase_url = "{slow.base_url}"\nmodel = "m"\n'
            + demo_mcp()
            + '[defaults]\nmodel = "fake"\nmcp = ["demo"]\n'
            + '[metrics]\nlisten = "127.0.0.1:0"\n'
        )
        with running_daemon(tmp_path, body) as daemon:
            address = _listening(daemon)
            before = scrape_tcp(address)
            assert value(before, "agentd_tasks_submitted_total") == 0
            # 1: a tool call, then an answer: two model calls of (10 in, 5 out) and one MCP call.
            fake.enqueue(chat(None, tool_calls=[tool_call("demo__add", {"a": 2, "b": 3})]), chat("5"))
            first = daemon.submit("add 2 and 3")
            assert daemon.wait(first).status is S.COMPLETED
            # 2: one answer.
            fake.enqueue(chat("done", usage=(7, 3)))
            second = daemon.submit("just answer")
            assert daemon.wait(second).status is S.COMPLETED
            # 3: a model that never answers, cancelled while it runs.
            third = daemon.submit("wait forever", model="slow")
            slow.wait_requests_blocking(1, timeout_s=30)
            page = _wait_for(lambda: scrape_tcp(address), lambda p: value(p, "agentd_tasks_running") == 1)
            daemon.call("task.cancel", {"task_id": third})
            assert daemon.wait(third).status is S.CANCELLED
            page = _wait_for(
                lambda: scrape_tcp(address),
                lambda p: (
                    value(p, "agentd_tasks_running") == 0
                    and value(p, "agentd_tasks_finished_total", status="cancelled", exit_code="1") == 1
                ),
            )

            assert value(page, "agentd_tasks_submitted_total") == 3
            assert value(page, "agentd_tasks_finished_total", status="completed", exit_code="0") == 2
            assert value(page, "agentd_tasks_finished_total", status="cancelled", exit_code="1") == 1
            assert value(page, "agentd_subagent_spawn_seconds_count") == 3
            assert value(page, "agentd_model_calls_total", endpoint="fake", outcome="ok") == 3
            assert value(page, "agentd_model_tokens_total", endpoint="fake", direction="in") == 27
            assert value(page, "agentd_model_tokens_total", endpoint="fake", direction="out") == 13
            assert value(page, "agentd_model_call_seconds_count", endpoint="fake") == 3
            assert value(page, "agentd_tool_calls_total", server="demo", outcome="ok") == 1
            assert value(page, "agentd_tool_call_seconds_count", server="demo") == 1
            assert value(page, "agentd_kill_ladder_rungs_total", rung="cancel", cause="cancel") == 1
            assert value(page, "agentd_mcp_server_restarts_total", server="demo") == 0
            assert value(page, "agentd_liveness_firings_total", verdict="unresponsive") == 0
            assert value(page, "agentd_journal_commit_seconds_count") > 0
            assert value(page, "agentd_event_loop_lag_seconds_count") > 0
            # No task id, run id or instruction anywhere on the page.
            for task_id in (first, second, third):
                assert task_id not in page
            assert "add 2 and 3" not in page


def test_a_unix_socket_listener_and_a_textfile_with_the_final_figures(tmp_path: Path) -> None:
    metrics_sock = tmp_path / "metrics.sock"
    textfile = tmp_path / "agentd.prom"
    body = (
        scripted("m", [{"text": "ok"}], tmp_path)
        + '[defaults]\nmodel = "m"\n'
        + f'[metrics]\nlisten = "{metrics_sock}"\ntextfile = "{textfile}"\ntextfile_interval_s = 0.2\n'
    )
    with running_daemon(tmp_path, body) as daemon:
        assert _listening(daemon) == str(metrics_sock)
        assert metrics_sock.stat().st_mode & 0o777 == 0o660
        task_id = daemon.submit("say ok")
        assert daemon.wait(task_id).status is S.COMPLETED
        page = scrape_unix(str(metrics_sock))
        assert value(page, "agentd_tasks_finished_total", status="completed", exit_code="0") == 1
        assert value(page, "agentd_model_calls_total", endpoint="m", outcome="ok") == 1
        # The textfile follows within its interval, and is never seen half-written.
        deadline = time.monotonic() + 10
        while value(textfile.read_text() if textfile.exists() else "", "agentd_tasks_submitted_total") != 1:
            assert time.monotonic() < deadline, "the textfile never showed the submit"
            time.sleep(0.05)
        assert daemon.stop(signal.SIGTERM) == 0
    # At exit: the socket is gone, the textfile holds the final figures, no temporary file is left.
    assert not metrics_sock.exists()
    final = textfile.read_text()
    assert value(final, "agentd_tasks_finished_total", status="completed", exit_code="0") == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("agentd.prom")) == ["agentd.prom"]


def test_a_listener_that_cannot_bind_stops_the_start_with_one_clear_line(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-socket"
    blocker.write_text("keep me")
    config = write_config(tmp_path, f'[metrics]\nlisten = "{blocker}"\n')
    daemon = start_daemon(tmp_path, config, wait=False)
    assert daemon.proc.wait(timeout=60) == 1
    lines = [line for line in daemon.log() if line.get("event") == "proc.exit"]
    assert lines, daemon.log_path.read_text()[-2000:]
    assert "metrics listener" in str(lines[-1]["err"]) and "not a socket" in str(lines[-1]["err"])
    assert blocker.read_text() == "keep me"


def test_a_wedged_child_counts_one_detector_firing_and_its_ladder(tmp_path: Path) -> None:
    body = (
        scripted("m", [{"text": "unused"}], tmp_path)
        + '[defaults]\nmodel = "m"\n[metrics]\nlisten = "127.0.0.1:0"\n'
        + "[supervision]\nping_interval_s = 0.2\nmissed_pongs = 3\ncancel_grace_s = 0.5\n"
        "term_grace_s = 0.5\nkill_reap_s = 2\neof_grace_s = 0.5\n" + rogue_command()
    )
    with running_daemon(tmp_path, body) as daemon:
        address = _listening(daemon)
        view = daemon.wait(daemon.submit("silent"))  # the rogue stops answering pings
        assert view.status is S.CRASHED
        page = scrape_tcp(address)
        assert value(page, "agentd_liveness_firings_total", verdict="unresponsive") == 1
        assert value(page, "agentd_kill_ladder_rungs_total", rung="sigterm", cause="stuck") == 1
        assert value(page, "agentd_tasks_finished_total", status="crashed", exit_code="1") == 1


def test_an_mcp_server_that_dies_mid_call_counts_one_restart(tmp_path: Path) -> None:
    turns: list[dict[str, object]] = [
        {"tool_calls": [{"name": "demo__crash", "arguments": {}}]},
        {"tool_calls": [{"name": "demo__add", "arguments": {"a": 1, "b": 1}}]},
        {"text": "done"},
    ]
    body = (
        scripted("m", turns, tmp_path)
        + demo_mcp()
        + '[defaults]\nmodel = "m"\nmcp = ["demo"]\n[metrics]\nlisten = "127.0.0.1:0"\n'
    )
    with running_daemon(tmp_path, body) as daemon:
        address = _listening(daemon)
        assert daemon.wait(daemon.submit("crash it, then add")).status is S.COMPLETED
        page = scrape_tcp(address)
        assert value(page, "agentd_mcp_server_restarts_total", server="demo") == 1
        assert value(page, "agentd_tool_calls_total", server="demo", outcome="ok") == 1
        failed = [
            value(page, "agentd_tool_calls_total", server="demo", outcome=kind)
            for kind in ("server_restarted", "transport", "protocol")
        ]
        assert sum(failed) == 1, page


def test_schedule_fires_count_by_configured_name_and_others_as_other(tmp_path: Path) -> None:
    model = scripted("s", [{"text": "done"}] * 8, tmp_path)
    table = '[[schedule]]\nname = "tick"\ninstruction = "tick"\nevery = "1s"\nmax_runs = 2\n'
    body = model + '[defaults]\nmodel = "s"\n[metrics]\nlisten = "127.0.0.1:0"\n' + table
    with running_daemon(tmp_path, body) as daemon:
        address = _listening(daemon)
        # A client's own schedule has no configured name: its fires count under `other`.
        done = daemon.cli("submit", "tock", "--every", "1s", "--max-runs", "1")
        assert done.returncode == 0, done.stderr
        later = daemon.cli("submit", "later", "--every", "1h", "--json")
        assert later.returncode == 0, later.stderr
        paused = daemon.cli("schedules", "pause", json.loads(later.stdout)["schedule_id"])
        assert paused.returncode == 0, paused.stderr

        def fired(page: str) -> bool:
            tick = value(page, "agentd_fires_total", kind="schedule", name="tick", outcome="started")
            tock = value(page, "agentd_fires_total", kind="schedule", name="other", outcome="started")
            paused = value(page, "agentd_armed", kind="schedule", state="paused")
            return tick == 2 and tock == 1 and paused == 1

        _wait_for(lambda: scrape_tcp(address), fired, timeout_s=30)


def test_slow_clients_cannot_starve_the_scraper_of_a_tcp_listener(tmp_path: Path) -> None:
    """Sixteen clients that trickle a request a byte at a time hold every connection slot; each is
    cut once `[daemon] frame_deadline_s` passes without a whole request, so the scraper gets in."""
    body = scripted("m", [{"text": "ok"}], tmp_path) + '[metrics]\nlisten = "127.0.0.1:0"\n'
    with running_daemon(tmp_path, body, daemon_lines="frame_deadline_s = 1\n") as daemon:
        host, port = _listening(daemon).rsplit(":", 1)
        stop = threading.Event()
        slow = []
        for _ in range(16):
            sock = socket.create_connection((host, int(port)), timeout=5)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
            slow.append(sock)

        def trickle() -> None:
            while not stop.wait(0.2):
                for sock in slow:
                    with contextlib.suppress(OSError):
                        sock.sendall(b"x")

        thread = threading.Thread(target=trickle)
        thread.start()
        try:
            time.sleep(0.3)  # the slow clients hold every slot now
            started = time.monotonic()
            page = None
            while page is None and time.monotonic() - started < 8:
                try:
                    page = scrape_tcp(f"{host}:{port}", timeout_s=5)
                except (OSError, http.client.HTTPException):
                    time.sleep(0.1)
            waited = time.monotonic() - started
        finally:
            stop.set()
            thread.join()
            for sock in slow:
                sock.close()
        # Before the request deadline a trickling client held its slot for ever.
        assert page is not None and "agentd_tasks_running" in page, f"no scrape within {waited:.1f} s"
        assert waited < 4, f"the scraper waited {waited:.1f} s"
