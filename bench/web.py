"""`agentd web`: how soon a big task's page is drawn, how soon its live events arrive, and what
open pages cost the daemon's API.

Three phases against one real daemon (the scripted model) and one `agentd web`:

- **first render**: a task with a 50-node tree and 2,000 events, journaled into the state
  directory before the daemon starts; headless Chromium opens its page `--loads` times and reads
  the page's own mark (`data-first-render`: ms from the navigation's start to the task, tree,
  timeline and result drawn). Target: median ≤ 500 ms.
- **live events**: a running task journals an event every few ms; a client of the page's event
  stream (`/api/tasks/<id>/events`) notes when each arrives, against the event's journal time.
  Target: p99 ≤ 200 ms.
- **API with pages open**: `task.get` round trips on a warm socket, from a process of their own,
  first with no page open, then with `--pages` simulated pages on a live task (each as the page
  does: the summary once, then its event stream, which pushes the events and the summary, and the
  transcript again with a summary at most every 2 s). Target: p99 with pages ≤ 1.2× without.

    python bench/web.py [--loads 10] [--pages 10] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx2
import psutil
from pydantic import JsonValue

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from agentd.api.client import ApiClient  # noqa: E402
from agentd.journal.store import open_journal  # noqa: E402
from bench.daemon_procs import strays  # noqa: E402
from bench.samples import summarize, write_json  # noqa: E402
from protocol.api import EventsParams, EventsRequest, EventView, GetRequest, TaskRef, TaskSpec  # noqa: E402
from protocol.result import RunUsage, TerminalStatus  # noqa: E402
from tests.support.browser import open_browser, wait_for  # noqa: E402
from tests.support.daemon import Daemon, running_daemon, scripted  # noqa: E402
from tests.support.web import WebServer, start_web  # noqa: E402

TARGET_RENDER_MS = 500.0
TARGET_EVENT_P99_MS = 200.0
TARGET_API_RATIO = 1.2
CHILDREN, GRANDCHILDREN = 7, 6  # 1 + 7 + 7 × 6 = 50 nodes
EVENTS_PER_NODE = 40  # 50 × 40 = 2,000 events
CHATTY_TURNS = 300
TIMEOUT_S = 120.0
TRANSCRIPT_REFRESH_S = 2.0  # a task page's transcript while summaries arrive (dashboard/static/task.js)
TURN_DELAY_S = 0.05  # the chatty model's "thinking": a step every ~50 ms, ten times a fast real model


# ---- the journaled task ------------------------------------------------------------------------


def _handles() -> list[tuple[str, str | None, int]]:
    nodes: list[tuple[str, str | None, int]] = [("0", None, 0)]
    for c in range(1, CHILDREN + 1):
        nodes.append((f"0.{c}", "0", 1))
        nodes += [(f"0.{c}.{g}", f"0.{c}", 2) for g in range(1, GRANDCHILDREN + 1)]
    return nodes


async def journal_big_task(state_dir: Path) -> str:
    """A completed task with a 50-node tree and 2,000 events, written as a run would leave it."""
    async with open_journal(state_dir) as journal:
        record, _ = await journal.tasks.submit(TaskSpec(instruction="a big tree"), owner_uid=os.getuid())
        task_id = record.task_id
        await journal.tasks.mark_starting(task_id)
        await journal.tasks.mark_running(task_id, os.getpid(), psutil.Process().create_time())
        usage = RunUsage(tokens_in=900, tokens_out=100, steps=10, model_calls=10, tool_calls=10)
        for handle, parent, depth in _handles():
            if parent is not None:
                await journal.tasks.upsert_node(task_id, handle, parent=parent, depth=depth, state="running")
            for i in range(EVENTS_PER_NODE // 4):
                call = f"{handle}-{i}"
                steps: list[tuple[str, dict[str, JsonValue]]] = [
                    ("intel.call", {"endpoint": "play"}),
                    ("intel.result", {"outcome": "ok"}),
                    ("tool.call", {"tool": "echo", "call_id": call}),
                    ("tool.result", {"call_id": call, "err": None}),
                ]
                for name, fields in steps:
                    journal.append_event(task_id, name, {"handle": handle, **fields})
            await journal.flush_events()
            await journal.tasks.end_node(task_id, handle, TerminalStatus.COMPLETED, usage)
        await journal.tasks.mark_terminal(
            task_id, TerminalStatus.COMPLETED, exit_code=0, result="done", usage=usage
        )
    return task_id


# ---- first render ------------------------------------------------------------------------------


def first_renders(web: WebServer, task_id: str, loads: int) -> tuple[list[float], dict[str, str]]:
    """The page's own first-render mark (s) over `loads` fresh loads, after one warm-up; and the
    session cookie the browser was given (the one-time token is spent)."""
    marks: list[float] = []
    with open_browser() as browser:
        browser.get(web.url)
        name = f"agentd_web_{web.port}"
        cookie = {"cookie": f"{name}={browser.get_cookie(name)['value']}"}
        for n in range(loads + 1):
            browser.get(f"{web.base}/tasks/{task_id}")
            mark = wait_for(
                lambda: browser.find_element("css selector", "body").get_attribute("data-first-render"),
                "the first render",
            )
            nodes = browser.find_elements("css selector", "#tree button.node")
            if len(nodes) != len(_handles()):
                raise RuntimeError(f"the page drew {len(nodes)} nodes, not {len(_handles())}")
            if n:
                marks.append(float(mark) / 1000)
    return marks, cookie


# ---- live events and open pages ----------------------------------------------------------------


async def sse_messages(stream: httpx2.Response) -> AsyncIterator[tuple[str, str]]:
    """Each server-sent message of `stream` as (event name, data)."""
    name, data = "message", ""
    async for line in stream.aiter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif not line:
            if data:
                yield name, data
            name, data = "message", ""


async def event_delays(web: WebServer, cookie: dict[str, str], task_id: str) -> list[float]:
    """Each live event's arrival over the event stream, less its journal time (s)."""
    delays: list[float] = []
    connected = time.time()
    client = httpx2.AsyncClient(base_url=web.base, headers=cookie, timeout=TIMEOUT_S)
    async with client, client.stream("GET", f"/api/tasks/{task_id}/events") as stream:
        async for name, data in sse_messages(stream):
            if name == "end":
                break
            if name == "message":
                event = json.loads(data)
                if event["ts"] >= connected:  # the backlog is not live
                    delays.append(time.time() - event["ts"])
    return delays


def daemon_delays(socket: Path, task_id: str, delays: list[float]) -> None:
    """As `event_delays`, for a follow of the daemon's socket itself."""
    connected = time.time()
    request = EventsRequest(params=EventsParams(task_id=task_id, follow=True))
    with ApiClient(str(socket), timeout_s=TIMEOUT_S) as api:
        for item in api.stream(request, idle_timeout_s=TIMEOUT_S):
            if not isinstance(item, EventView):
                return
            if item.ts >= connected:
                delays.append(time.time() - item.ts)


async def open_page(web: WebServer, cookie: dict[str, str], task_id: str, stop: anyio.Event) -> None:
    """What one task page asks while its task runs (dashboard/static/task.js): the summary once,
    then the event stream, which brings the events and the summary as it changes; with a new
    summary, the transcript again if `TRANSCRIPT_REFRESH_S` have passed."""
    async with httpx2.AsyncClient(base_url=web.base, headers=cookie, timeout=TIMEOUT_S) as client:
        await client.get(f"/api/tasks/{task_id}")
        await client.get(f"/api/tasks/{task_id}/transcript")
        transcript_at = time.monotonic()
        with anyio.move_on_after(TIMEOUT_S) as scope:

            async def close_at_stop() -> None:
                await stop.wait()
                scope.cancel()

            async with (
                client.stream("GET", f"/api/tasks/{task_id}/events") as answer,
                anyio.create_task_group() as group,
            ):
                group.start_soon(close_at_stop)
                async for name, _ in sse_messages(answer):
                    if name == "summary" and time.monotonic() - transcript_at >= TRANSCRIPT_REFRESH_S:
                        transcript_at = time.monotonic()
                        await client.get(f"/api/tasks/{task_id}/transcript")
                    if name == "end":
                        break
                group.cancel_scope.cancel()


def api_round_trips(socket: Path, task_id: str, window_s: float) -> list[float]:
    samples: list[float] = []
    request = GetRequest(params=TaskRef(task_id=task_id))
    deadline = time.monotonic() + window_s
    with ApiClient(str(socket), timeout_s=TIMEOUT_S) as api:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            api.call(request)
            samples.append(time.perf_counter() - started)
            time.sleep(0.01)
    return samples


def round_trips_apart(socket: Path, task_id: str, window_s: float) -> list[float]:
    """`api_round_trips` in a process of its own: the simulated pages' clients in this one
    would hold its interpreter lock while the round trips wait to be timed."""
    command = [sys.executable, __file__, "--round-trips", str(socket), task_id, str(window_s)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, check=True)
    samples: list[float] = json.loads(done.stdout)
    return samples


async def live_phase(
    daemon: Daemon, web: WebServer, cookie: dict[str, str], pages: int, window_s: float
) -> dict[str, Any]:
    chatty = daemon.submit("chatter", model="chatty", limits={"max_steps": CHATTY_TURNS + 10})
    direct: list[float] = []
    async with anyio.create_task_group() as group:
        # The daemon's own follow of the same events, beside the page's: the dashboard's share.
        group.start_soon(anyio.to_thread.run_sync, daemon_delays, daemon.socket, chatty, direct)
        delays = await event_delays(web, cookie, chatty)
    busy = daemon.submit("chatter again", model="chatty", limits={"max_steps": CHATTY_TURNS + 10})
    alone = await anyio.to_thread.run_sync(round_trips_apart, daemon.socket, busy, window_s)
    stop = anyio.Event()
    async with anyio.create_task_group() as group:
        for _ in range(pages):
            group.start_soon(open_page, web, cookie, busy, stop)
        await anyio.sleep(1.0)  # the pages' first loads
        with_pages = await anyio.to_thread.run_sync(round_trips_apart, daemon.socket, busy, window_s)
        stop.set()
    daemon.call("task.cancel", {"task_id": busy})
    return {"delays": delays, "direct": direct, "alone": alone, "with_pages": with_pages}


# ---- the run -----------------------------------------------------------------------------------


def _body(workdir: Path) -> str:
    turns: list[dict[str, object]] = [
        {"tool_calls": [{"name": "note_write", "arguments": {"text": f"note {i}"}}], "delay_s": TURN_DELAY_S}
        for i in range(CHATTY_TURNS)
    ]
    turns.append({"text": "said it all"})
    return scripted("chatty", turns, workdir) + '[defaults]\nmodel = "chatty"\n'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--loads", type=int, default=10)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--window", type=float, default=4.0, help="seconds of API round trips per phase")
    parser.add_argument("--smoke", action="store_true", help="2 loads, 2 pages, 1 s windows: no verdict")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "web.json"))
    parser.add_argument(
        "--round-trips", nargs=3, metavar=("SOCKET", "TASK", "SECONDS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.round_trips:
        socket, task_id, seconds = args.round_trips
        print(json.dumps(api_round_trips(Path(socket), task_id, float(seconds))))
        return 0
    loads, pages, window = (2, 2, 1.0) if args.smoke else (args.loads, args.pages, args.window)
    load = tuple(round(x, 2) for x in os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        big = anyio.run(journal_big_task, workdir / "state")
        with running_daemon(workdir, _body(workdir)) as daemon:
            web = start_web(daemon.socket, timeout_s=TIMEOUT_S)
            try:
                renders, cookie = first_renders(web, big, loads)
                live = anyio.run(live_phase, daemon, web, cookie, pages, window)
            finally:
                web.stop()
            daemon_pid = daemon.pid
    load_end = tuple(round(x, 2) for x in os.getloadavg())
    left = strays([daemon_pid])
    render, delay, direct = summarize(renders), summarize(live["delays"]), summarize(live["direct"])
    alone, with_pages = summarize(live["alone"]), summarize(live["with_pages"])
    ratio = with_pages.p99_ms / alone.p99_ms
    ok = (
        render.p50_ms <= TARGET_RENDER_MS
        and delay.p99_ms <= TARGET_EVENT_P99_MS
        and ratio <= TARGET_API_RATIO
    )
    verdict = "ok" if args.smoke or ok else "MISS"
    mode = "smoke" if args.smoke else "default"
    print(f"agentd web: {loads} loads, {pages} pages; {mode}; load {load} -> {load_end}")
    print(f"{'what':>40} {'n':>5} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    rows = [
        ("first render, 50 nodes + 2,000 events", render),
        ("live event -> page's stream", delay),
        ("live event -> the daemon's own follow", direct),
        ("task.get, no page open", alone),
        (f"task.get, {pages} pages open", with_pages),
    ]
    for name, s in rows:
        print(f"{name:>40} {s.count:>5} {s.p50_ms:>8.1f} {s.p90_ms:>8.1f} {s.p99_ms:>8.1f} {s.max_ms:>8.1f}")
    print(
        f"first render p50 {render.p50_ms:.0f} ms (target <= {TARGET_RENDER_MS:g});"
        f" event p99 {delay.p99_ms:.0f} ms (target <= {TARGET_EVENT_P99_MS:g});"
        f" API p99 with pages {ratio:.2f}x (target <= {TARGET_API_RATIO}x); {verdict};"
        f" processes left {len(left)}"
    )
    results: dict[str, Any] = {
        "benchmark": "web",
        "mode": mode,
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_avg": {"start": load, "end": load_end},
        "first_render": asdict(render),
        "event_delay": asdict(delay),
        "event_delay_daemon_follow": asdict(direct),
        "api_alone": asdict(alone),
        "api_with_pages": asdict(with_pages),
        "pages": pages,
        "ratio_api_p99": ratio,
        "targets": {
            "render_ms": TARGET_RENDER_MS,
            "event_p99_ms": TARGET_EVENT_P99_MS,
            "api_ratio": TARGET_API_RATIO,
        },
        "verdict": verdict,
        "left": len(left),
    }
    write_json(Path(args.out), results)
    return 0 if verdict == "ok" and not left else 1


if __name__ == "__main__":
    sys.exit(main())
