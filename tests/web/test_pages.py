"""The dashboard's pages in a real browser (headless Chromium) against a real daemon, the scripted
model and the example MCP server: a nested task's tree, timeline and live events; an approval
given from the page; hostile model and tool output shown as text. One daemon, one dashboard and
one browser serve the module (CI time); its end checks that nothing was left running."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.approvals import pending_request, record_turn, recorded_calls
from tests.support.browser import Stale, console, open_browser, screenshot, wait_for
from tests.support.daemon import FIXTURES, Daemon, running_daemon
from tests.support.leaks import wait_no_descendants
from tests.support.web import WebServer, start_web

WAIT_S = 30.0
# Each would run script in a page that took it as markup.
PAYLOAD = (
    "<script>window.__pwned = 'script'</script> "
    "<img src=x onerror=\"window.__pwned = 'img'\"> "
    "<a href=\"javascript:window.__pwned = 'link'\">click</a> "
    "[click](javascript:window.__pwned='markdown')"
)


def _body(workdir: Path) -> str:
    roles = [
        {
            "match": "^parent",
            "turns": [
                {"tool_calls": [{"name": "subagent_spawn", "arguments": {"instruction": "child: work"}}]},
                {"text": "the child said: {last_tool_result}"},
            ],
        },
        {"match": "^child: work", "turns": record_turn("demo", "child-work")},
        {"match": "^approve-me", "turns": record_turn("demo", "approve-me")},
        {
            "match": "^budget",
            "turns": [
                {"tool_calls": [{"name": "demo__echo", "arguments": {"text": "one"}}]},
                {"text": "spent"},
            ],
        },
        {
            "match": "^hostile",
            "turns": [
                {"tool_calls": [{"name": "demo__echo", "arguments": {"text": PAYLOAD}}]},
                {"text": PAYLOAD + " tool said: {last_tool_result}"},
            ],
        },
    ]
    script = workdir / "play.json"
    script.write_text(json.dumps({"model": "scripted-play", "turns": [{"text": "no role"}], "roles": roles}))
    calls = workdir / "calls"
    calls.mkdir(mode=0o755, exist_ok=True)
    return (
        f'[intelligence.play]\nkind = "scripted"\nscript = "{script}"\n'
        f'[mcp.demo]\ncommand = ["{sys.executable}", "{FIXTURES / "mcp_basic.py"}"]\ntrust = []\n'
        f'env = {{ AGENTD_TEST_SENTINEL_DIR = "{calls}" }}\n'
        'approval = ["record"]\napproval_timeout = "60s"\n'
        '[defaults]\nmodel = "play"\nmcp = ["demo"]\n'
        # Quick ladders, but pings that let a loaded machine be slow: a child that misses three
        # 200 ms pongs while the browser, the daemon and the servers share two cores is not stuck.
        "[supervision]\nping_interval_s = 1.0\nmissed_pongs = 10\ncancel_grace_s = 0.5\n"
        "term_grace_s = 0.5\nkill_reap_s = 2\neof_grace_s = 0.5\norphan_sweep_interval_s = 0.5\n"
    )


@dataclass
class Site:
    daemon: Daemon
    web: WebServer
    browser: Any

    def open(self, path: str) -> None:
        self.browser.get(self.web.base + path)

    def css(self, selector: str) -> list[Any]:
        found: list[Any] = self.browser.find_elements("css selector", selector)
        return found

    def text(self, selector: str) -> str:
        """The first match's text ("" while none matches or while it is being redrawn)."""
        try:
            found = self.css(selector)
            return str(found[0].text) if found else ""
        except Stale:
            return ""

    def click(self, selector: str, what: str) -> None:
        """Click the first match once it is there (a list that redraws itself may replace it
        between finding and clicking: then find it again)."""

        def clicked() -> bool:
            found = self.css(selector)
            if not found:
                return False
            found[0].click()
            return True

        wait_for(clicked, what)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    workdir = tmp_path_factory.mktemp("web-pages")
    with running_daemon(workdir, _body(workdir), daemon_lines="log_content = true\n") as daemon:
        web = start_web(daemon.socket)
        try:
            with open_browser() as browser:
                browser.get(web.url)  # the one-time token becomes the session cookie
                yield Site(daemon, web, browser)
        finally:
            assert web.stop() == 0
    assert wait_no_descendants(timeout_s=10.0) == []


@pytest.fixture
def clean_console(site: Site) -> Iterator[None]:
    """The browser's console holds no error or refusal at the end of the test."""
    console(site.browser)
    yield
    problems = [entry for entry in console(site.browser) if entry["level"] in ("SEVERE", "WARNING")]
    assert problems == []


def test_a_nested_task_shows_its_tree_and_timeline_and_its_events_arrive_without_reload(
    site: Site, clean_console: None
) -> None:
    task_id = site.daemon.submit("parent: build a tree")
    pending = pending_request(site.daemon, task_id, handle="0.1")
    site.open(f"/tasks/{task_id}")
    wait_for(lambda: len(site.css("#tree button.node")) == 2, "the root and its child in the tree")
    assert site.css("#tree ul.tree ul.tree button.node")[0].get_attribute("data-handle") == "0.1"
    wait_for(lambda: site.css("#timeline .bar[data-kind=approval]"), "the approval wait on the timeline")
    site.browser.execute_script("window.__still_here = true")
    seen = len(site.css("#events li"))

    assert site.daemon.cli("approve", task_id, pending["call"]).returncode == 0
    wait_for(lambda: site.text("#task-state") == "completed", "the task's end, live")
    wait_for(lambda: len(site.css("#events li")) > seen, "new events, live")
    wait_for(lambda: "approval.decided" in site.text("#events"), "the decision among the events")
    assert site.browser.execute_script("return window.__still_here") is True  # never reloaded
    assert recorded_calls(site.daemon, "child-work") == 1
    lanes = [lane.get_attribute("data-handle") for lane in site.css("#timeline .lane")]
    assert lanes == ["0", "0.1"]
    kinds = {bar.get_attribute("data-kind") for bar in site.css("#timeline .bar")}
    assert {"model", "tool", "approval"} <= kinds
    wait_for(lambda: "the child said" in site.text("#result-text"), "the result")
    assert "model" in site.text("#transcript")
    screenshot(site.browser, "task")


def test_an_approval_approved_on_the_page_runs_its_call_once(site: Site, clean_console: None) -> None:
    task_id = site.daemon.submit("approve-me")
    call = pending_request(site.daemon, task_id)["call"]
    site.open("/approvals")
    row = wait_for(lambda: site.css(f'tr[data-call="{call}"]'), "the waiting call")[0]
    assert '"approve-me"' in row.text  # its arguments
    row.find_element("css selector", "input.reason").send_keys("looks right")
    # Another call comes to wait while the reason is typed: once the reason is left, the list
    # shows both, the typed reason still in its row.
    other = site.daemon.submit("approve-me as well")
    other_call = pending_request(site.daemon, other)["call"]
    site.browser.find_element("css selector", "h1").click()
    wait_for(lambda: site.css(f'tr[data-call="{other_call}"]'), "the second waiting call")
    row = site.css(f'tr[data-call="{call}"]')[0]
    assert row.find_element("css selector", "input.reason").get_attribute("value") == "looks right"
    screenshot(site.browser, "approvals")
    row.find_element("css selector", "button.approve").click()
    wait_for(lambda: not site.css(f'tr[data-call="{call}"]'), "the approved call leaving the list")
    site.css(f'tr[data-call="{other_call}"] button.deny')[0].click()
    wait_for(lambda: "No tool call is waiting" in site.text("#approval-list"), "the emptied list")
    assert site.daemon.wait(task_id, timeout_s=WAIT_S).status == "completed"
    assert recorded_calls(site.daemon, "approve-me") == 1
    decided = site.daemon.call("task.events", {"task_id": task_id})
    assert isinstance(decided, dict)
    events = site.daemon.log()
    (decision,) = [e for e in events if e.get("event") == "approval.decided" and e.get("call") == call]
    assert (decision["outcome"], decision["reason"]) == ("approved", "looks right")


def test_hostile_model_and_tool_output_is_shown_as_text_and_runs_nothing(
    site: Site, clean_console: None
) -> None:
    task_id = site.daemon.submit("hostile " + PAYLOAD)
    assert site.daemon.wait(task_id, timeout_s=WAIT_S).status == "completed"
    site.open(f"/tasks/{task_id}")
    result = wait_for(lambda: site.text("#result-text"), "the result")
    assert "<script>window.__pwned = 'script'</script>" in result and "tool said:" in result
    wait_for(lambda: "onerror" in site.text("#transcript"), "the tool's output in the transcript")
    wait_for(lambda: "onerror" in site.text("#events"), "the tool's output among the events")
    site.open("/")
    wait_for(lambda: "<img src=x" in site.text("#task-list"), "the instruction in the list")
    for page in (f"/tasks/{task_id}", "/"):
        site.open(page)
        wait_for(lambda: site.css("#task-list tr, #result-text"), "the page drawn")
        assert site.browser.execute_script("return window.__pwned") is None
        assert site.css("main img, main script") == []
        links = [a.get_attribute("href") or "" for a in site.css("a")]
        assert not [href for href in links if not href.startswith(site.web.base)], links


def test_the_tasks_page_lists_tasks_with_links_and_filters_them_by_state(
    site: Site, clean_console: None
) -> None:
    running = site.daemon.submit("approve-me later")
    pending_request(site.daemon, running)
    site.open("/")
    wait_for(lambda: site.css(f'tr[data-task="{running}"]'), "the waiting task")
    assert len(site.css("#task-list tbody tr")) >= 4
    screenshot(site.browser, "tasks")
    site.css("#filter-state")[0].send_keys("terminal")
    site.click("#filters button[type=submit]", "the filter button")
    wait_for(lambda: not site.css(f'tr[data-task="{running}"]'), "the list without the live task")
    states = {cell.text for cell in site.css("#task-list tbody tr td:nth-child(2)")}
    assert states and states <= {"completed", "cancelled", "crashed", "refused"}
    assert "state=terminal" in site.browser.current_url
    site.click("#task-list tbody tr a", "a task's link")
    wait_for(lambda: site.text("#task-state"), "a task's page from its link")
    site.daemon.cli("cancel", running)


def test_cancel_fork_and_extend_from_the_task_page(site: Site, clean_console: None) -> None:
    waiting = site.daemon.submit("approve-me, then cancel")
    pending_request(site.daemon, waiting)
    site.open(f"/tasks/{waiting}")
    wait_for(lambda: site.text("#task-state") == "awaiting_approval", "the task waiting")
    typed = site.css("#extend-steps")[0]
    typed.send_keys("5")
    site.click("#cancel", "the cancel button")
    wait_for(lambda: site.text("#task-state") == "cancelled", "the cancel, live")
    # The page was redrawn for the new state, and what was typed is still there, in the same field.
    assert typed.get_attribute("value") == "5"
    site.css("#fork-step")[0].clear()
    site.css("#fork-step")[0].send_keys("0")
    site.click("#fork", "the fork button")
    forked_link = wait_for(lambda: site.css("#action-message a"), "the fork's link")[0]
    forked = str(forked_link.text)
    assert site.daemon.call("task.get", {"task_id": forked}) is not None
    site.daemon.cli("cancel", forked)

    paused = site.daemon.submit("budget", limits={"max_steps": 1}, on_budget="pause")
    site.open(f"/tasks/{paused}")
    wait_for(lambda: site.text("#task-state") == "awaiting_budget", "the task waiting for budget")
    wait_for(lambda: site.css("#extend:not([disabled])"), "the extend button")
    site.css("#extend-steps")[0].send_keys("5")
    site.click("#extend", "the extend button")
    wait_for(lambda: site.text("#task-state") == "completed", "the extended task's end")
    assert site.daemon.wait(paused, timeout_s=WAIT_S).result == "spent"


def test_the_schedule_daemon_and_trigger_pages(site: Site, clean_console: None) -> None:
    spec: dict[str, object] = {
        "spec": {"instruction": "approve-me each morning"},
        "trigger": {"kind": "cron", "cron": "0 7 * * 1-5"},
    }
    created = site.daemon.call("schedule.create", spec)
    assert isinstance(created, dict)
    schedule = created["schedule_id"]
    site.open("/schedules")
    row = f'tr[data-schedule="{schedule}"]'
    site.click(f"{row} button.pause", "the active schedule")
    site.click(f"{row} button.resume", "the paused schedule")
    wait_for(lambda: site.css(f"{row} button.pause"), "the resumed schedule")
    assert "active" in site.text(row)
    site.daemon.call("schedule.delete", {"schedule_id": schedule})
    site.open("/daemon")
    wait_for(lambda: "max concurrent tasks" in site.text("dl.status"), "the daemon's status")
    assert str(site.daemon.pid) in site.text("dl.status")
    screenshot(site.browser, "daemon")
    site.open("/triggers")
    wait_for(lambda: "No triggers are configured" in site.text("#listing"), "the empty trigger list")
