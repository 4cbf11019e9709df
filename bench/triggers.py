"""Reactive triggers under load (docs/triggers.md, "Measured"): change → first model request, and a flood.

Everything is real: `agentd serve`, its watcher (`python -m subagent.watch`), the SDK-built fixture
MCP server `tests/fixtures/mcp_watch_2025.py` over stdio, and (latency) the real subagent talking
to `FakeLLM`, an HTTP server in this process, so one monotonic clock sees both ends.

1. **Latency.** One trigger on one URI (`debounce_ms`, default 100). Each sample appends one bump
   to the fixture's change log (`watch_changes.bump`: the change instant) and waits for the
   task's first model request at `FakeLLM`; then for the task to end, then a pause. Also split:
   change → the task journaled (its `created_at`, wall clock) and journaled → first request (the
   zygote fork and the child's boot). The task's MCP connection to the server (which a trigger's
   task always has: it must be able to read the resource) runs behind the first request: the
   payload carries the catalogue the watcher listed, so that request already offers the server's
   tools (counted: `hinted`); the child starts that server only once the request is on the wire.
   The fixture polls its log every 20 ms; right after each change the bench sends it `SIGUSR1`,
   which makes it read the log at once (as inotify would a real server), so the sample still
   starts at the change but no longer carries 0–20 ms of the fixture's poll (`--no-wake`: it
   does, as before). The A/B base, alternating with each sample in the same daemon: a second
   trigger of the same server on another URI with `prestart = false` (its task's subagent is
   forked after the window closes, as before prestart). The control, measured alternately in the
   same daemon under the same load: a plain `task.submit` (no MCP server) → its first model
   request. Per hop: the daemon's log lines for each sample's task, as ms after the change.
2. **Flood.** `--rate` notifications/s round-robin over `--uris` URIs for `--duration` s, by
   appending a batch of lines every 20 ms (the fixture's poll). The trigger's tasks are the
   light stand-in child (`rogue_child.py idle`, never ending) with `max_inflight = 1`, so the
   first task holds the slot and every later delivery waits coalesced: what is measured is the
   watcher → debouncer → dispatcher path, not 1,000 subagents on 2 cores. Deliveries are the
   trigger's `deliveries` counter (the debouncer's output, counted before the `max_inflight`
   gate), read with `trigger.list` 20 times a second; a URI changing every 100 ms never goes
   quiet for `debounce_ms`, so each is delivered once per `max_wait_ms`: the expected count is
   uris × (floor(duration / max_wait) + 1 trailing). The same calls' round trips stand in for
   event-loop lag seen from outside; the daemon's own `agentd_event_loop_lag_seconds` histogram
   (one sample a second, from `[metrics]`) is scraped too. The daemon's, watcher's and fixture
   server's RSS are sampled every second.
3. **Fixture capacity.** The same flood against the fixture alone, read by an MCP client in this
   process: how many notifications per second the fixture actually sends.

Prints a table, writes `bench/results/triggers.json`, and checks no process is left.

    .venv/bin/python -m bench.triggers [--smoke] [--samples 100] [--duration 30] [--rate 1000] [--no-wake]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import psutil

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # also runnable as `python bench/triggers.py`
    sys.path.insert(0, str(REPO))

from agentd.api.client import ApiClient  # noqa: E402
from bench.daemon_procs import MIB, BenchDaemon, kill_all, open_daemon, strays  # noqa: E402
from bench.daemon_subagent import _events, wait_zygote  # noqa: E402
from bench.samples import Summary, summarize, write_json  # noqa: E402
from tests.fixtures import watch_changes  # noqa: E402
from tests.support.daemon import FIXTURES, rogue_command, scripted  # noqa: E402
from tests.support.fake_llm import FakeLLM  # noqa: E402

RESULTS = REPO / "bench" / "results" / "triggers.json"
FIXTURE = FIXTURES / "mcp_watch_2025.py"
LATENCY_SLACK_MS = 50.0  # target: debounce_ms + this
LAG_TARGET_MS = 20.0
ARM_TIMEOUT_S = 120.0  # a watcher imports `mcp` before it arms: ~10 s on a loaded machine
WAIT_S = 60.0
TICK_S = 0.02  # the fixture's poll of its change log: one batch of lines per poll


@dataclass(frozen=True, slots=True)
class Settings:
    samples: int
    debounce_ms: int
    rate: int
    uris: int
    duration_s: float
    flood_debounce_ms: int
    flood_max_wait_ms: int


DEFAULT = Settings(
    samples=100,
    debounce_ms=100,
    rate=1000,
    uris=100,
    duration_s=30.0,
    flood_debounce_ms=250,
    flood_max_wait_ms=2000,
)
SMOKE = Settings(
    samples=5,
    debounce_ms=100,
    rate=200,
    uris=20,
    duration_s=4.0,
    flood_debounce_ms=250,
    flood_max_wait_ms=1000,
)


@dataclass
class Results:
    latency: Summary | None = None  # change → first model request
    to_journaled: Summary | None = None  # change → task journaled (wall clocks, ms resolution)
    journaled_to_request: Summary | None = None
    spawn_to_ready: Summary | None = None  # the daemon's `subagent.ready` dur_ms
    mcp_connect: Summary | None = None  # the child's `mcp.connect` dur_ms (in the background)
    # Samples whose first request already offered the server's tools (the watcher's catalogue).
    hinted: int = 0
    # The control: a plain submit (no MCP) → its first model request, alternating with the samples.
    submit_to_request: Summary | None = None
    latency_timeouts: int = 0
    # The fixture was signalled to read its change log at once (else its 20 ms poll adds 0–20 ms).
    wake: bool = False
    fixture_sent: int = 0
    fixture_received: int = 0
    fixture_rate: float = 0.0
    fixture_gap: Summary | None = None  # per-URI gaps between notifications, the fixture alone
    fixture_gaps_over_debounce: int = 0
    flood_written: int = 0
    flood_write_rate: float = 0.0
    deliveries: int = 0
    deliveries_expected: int = 0
    deliveries_per_window: list[int] = field(default_factory=list)
    rtt: Summary | None = None  # trigger.list round trips during the flood
    idle_rtt: Summary | None = None  # the same, the daemon idle just before (the control)
    loop_lag_buckets: dict[str, float] = field(default_factory=dict)  # le → cumulative count
    daemon_rss_mb: list[float] = field(default_factory=list)
    watcher_rss_mb: list[float] = field(default_factory=list)
    server_rss_mb: list[float] = field(default_factory=list)
    daemon_cpu_s: float = 0.0
    watcher_cpu_s: float = 0.0
    server_cpu_s: float = 0.0
    load: list[float] = field(default_factory=list)
    # The A/B base in the same run: a second trigger on another URI with `prestart = false`.
    base_latency: Summary | None = None
    base_to_journaled: Summary | None = None
    base_journaled_to_request: Summary | None = None
    base_hops: dict[str, Summary] = field(default_factory=dict)
    # Latency, per hop: ms after the change at which each of the daemon's log lines for the
    # sample's task was written (wall clock, ms resolution), p50/p99; and the same for the control.
    hops: dict[str, Summary] = field(default_factory=dict)
    control_hops: dict[str, Summary] = field(default_factory=dict)
    # Each sample's hops (ms after the change, None where its line is missing), to find the tail.
    hop_samples: list[dict[str, float | None]] = field(default_factory=list)
    # --arrivals: the daemon's `resource.updated` lines (debug): changes reaching it, and the gaps
    # between two arrivals of one URI longer than the debounce (each one is an extra delivery).
    arrivals: int = 0
    arrival_gaps_over_debounce: int = 0
    arrival_gap: Summary | None = None


def _server_toml(name: str, resources: int, state: Path) -> str:
    argv = [sys.executable, str(FIXTURE), "--resources", str(resources), "--state", str(state)]
    return f"[mcp.{name}]\ncommand = {json.dumps(argv)}\ntrust = []\n"


def _triggers(daemon: BenchDaemon) -> dict[str, dict[str, Any]]:
    views = daemon.daemon.call("trigger.list")
    assert isinstance(views, list)
    return {v["name"]: v for v in views}


def _until(check: Any, what: str, daemon: BenchDaemon, timeout_s: float = ARM_TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := check()):
        if daemon.daemon.proc.poll() is not None:
            raise RuntimeError(f"the daemon exited while waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)
    return value


def _watcher_and_server(daemon: BenchDaemon) -> tuple[psutil.Process | None, psutil.Process | None]:
    for proc in psutil.Process(daemon.pid).children():
        try:
            if "subagent.watch" in " ".join(proc.cmdline()):
                servers = [c for c in proc.children(recursive=True) if str(FIXTURE) in " ".join(c.cmdline())]
                return proc, servers[0] if servers else None
        except psutil.Error:
            continue
    return None, None


# ---- 1. change → the task's first model request ------------------------------------------------


@dataclass
class _Series:
    """One trigger's latency samples (prestarted, or the A/B base with `prestart = false`)."""

    trigger: str
    uri: str
    to_request: list[float] = field(default_factory=list)
    to_journal: list[float] = field(default_factory=list)
    after_journal: list[float] = field(default_factory=list)
    ready: list[float] = field(default_factory=list)
    connect: list[float] = field(default_factory=list)
    stamps: list[tuple[str, float, float]] = field(default_factory=list)  # task, change, request (wall)


def measure_latency(
    settings: Settings, workdir: Path, out: Results, pids: list[int], wake: bool = True
) -> None:
    """Samples alternate between two triggers of the same daemon and server on two URIs: `lat`
    (the default, `prestart = true`) and `lat-base` (`prestart = false`, the A/B base), then the
    control (a plain submit)."""
    state = workdir / "lat-state"
    state.mkdir(parents=True)
    with FakeLLM() as model:
        body = (
            f'[intelligence.m]\nkind = "openai"\nbase_url = "{model.base_url}"\nmodel = "m"\n'
            '[defaults]\nmodel = "m"\n'
            + _server_toml("lat", 2, state)
            + f'[[trigger]]\nname = "lat"\nserver = "lat"\nuri = "watch://item/0"\n'
            f'instruction = "Changed: {{uri}}. Say done."\ndebounce_ms = {settings.debounce_ms}\n'
            + f'[[trigger]]\nname = "lat-base"\nserver = "lat"\nuri = "watch://item/1"\n'
            f'instruction = "Changed: {{uri}}. Say done."\ndebounce_ms = {settings.debounce_ms}\n'
            "prestart = false\n"
        )
        with open_daemon(workdir / "lat", body, daemon_lines='log_level = "info"\n', fast=False) as daemon:
            pids.append(daemon.pid)
            wait_zygote(daemon)
            _until(lambda: _triggers(daemon)["lat"]["state"] == "armed", "the trigger armed", daemon)
            # The synthetic deliveries after arming: their tasks are the warm-up, not samples.
            _until(lambda: len(model.requests) >= 2, "the synthetic deliveries' requests", daemon)
            _idle(daemon)
            server = _watcher_and_server(daemon)[1] if wake else None
            if wake and server is None:
                raise RuntimeError("the watcher's fixture server was not found")
            out.wake = server is not None
            series = (_Series("lat", "watch://item/0"), _Series("lat-base", "watch://item/1"))
            plain: list[float] = []
            plain_stamps: list[tuple[str, float, float]] = []
            for _ in range(settings.samples):
                for one in series:
                    _sample(daemon, model, state, server, one, out)
                    time.sleep(0.2)  # the child's exit and the orphan sweep are done before the next
                plain.append(_plain_submit(daemon, model, plain_stamps))
                time.sleep(0.2)
            lines = daemon.daemon.log()
            ours, base = series
            out.latency = summarize(ours.to_request)
            out.to_journaled = summarize(ours.to_journal)
            out.journaled_to_request = summarize(ours.after_journal)
            out.spawn_to_ready = summarize(ours.ready)
            out.mcp_connect = summarize(ours.connect) if ours.connect else None
            out.hops = _hops(lines, ours.stamps, out.hop_samples)
            out.base_latency = summarize(base.to_request)
            out.base_to_journaled = summarize(base.to_journal)
            out.base_journaled_to_request = summarize(base.after_journal)
            out.base_hops = _hops(lines, base.stamps)
            out.submit_to_request = summarize(plain)
            out.control_hops = _hops(lines, plain_stamps)


def _sample(
    daemon: BenchDaemon,
    model: FakeLLM,
    state: Path,
    server: psutil.Process | None,
    series: _Series,
    out: Results,
) -> None:
    """One change to `series.uri` → its task's first model request (and the task's end)."""
    offset = time.time() - time.monotonic()
    seen = len(model.requests)
    tasks_before = _triggers(daemon)[series.trigger]["tasks_started"]
    wall, started = time.time(), time.monotonic()
    watch_changes.bump(state, series.uri)
    if server is not None:
        server.send_signal(signal.SIGUSR1)  # it reads its log now, not at its next poll
    try:
        request = model.wait_requests_blocking(seen + 1, timeout_s=WAIT_S)[seen]
    except Exception:  # noqa: BLE001 - counted, and the run goes on
        out.latency_timeouts += 1
        _idle(daemon)
        return
    series.to_request.append(request.at - started)
    if series.trigger == "lat":
        out.hinted += "lat__bump" in _tool_names(request.json)
    _until(
        lambda: _triggers(daemon)[series.trigger]["tasks_started"] > tasks_before,
        "the task",
        daemon,
    )
    task = _newest_task(daemon)
    series.stamps.append((task["task_id"], wall, request.at + offset))
    series.to_journal.append(max(0.0, task["created_at"] - wall))
    series.after_journal.append(max(0.0, (request.at - started) - (task["created_at"] - wall)))
    _idle(daemon)
    with ApiClient(daemon.socket, timeout_s=30) as api:
        for event in _events(api, task["task_id"]):
            duration = event.get("dur_ms")
            if not isinstance(duration, int | float):
                continue
            if event["event"] == "subagent.ready":
                series.ready.append(duration / 1000)
            elif event["event"] == "mcp.connect":
                series.connect.append(duration / 1000)


def _tool_names(body: Any) -> list[str]:
    tools = body.get("tools") if isinstance(body, dict) else None
    return [t["function"]["name"] for t in tools or [] if isinstance(t, dict) and "function" in t]


def _plain_submit(daemon: BenchDaemon, model: FakeLLM, stamps: list[tuple[str, float, float]]) -> float:
    """The control: a task without MCP servers, submit → its first model request (s)."""
    seen = len(model.requests)
    wall, started = time.time(), time.monotonic()
    task_id = daemon.daemon.submit("Plain. Say done.", model="m", mcp=[])
    request = model.wait_requests_blocking(seen + 1, timeout_s=WAIT_S)[seen]
    daemon.daemon.wait(task_id, timeout_s=WAIT_S)
    stamps.append((task_id, wall, wall + request.at - started))
    return request.at - started


# The daemon's log lines for a task, in the order its start passes them (each logged as the daemon
# sees it: `trigger.fired` once journaled, `subagent.spawn` once forked and `starting` committed,
# `task.started` once `running` is committed, `subagent.ready` once the child read its task, and
# `loop.start` once its loop began).
HOP_EVENTS = (
    "trigger.fired",
    "task.submitted",
    "subagent.spawn",
    "task.started",
    "subagent.ready",
    "loop.start",
)


def _hops(
    lines: list[dict[str, object]],
    stamps: list[tuple[str, float, float]],
    each: list[dict[str, float | None]] | None = None,
) -> dict[str, Summary]:
    """Per hop, the p50/p99 of (its log line's time − the change), and the first request's."""
    first: dict[tuple[str, str], float] = {}
    for line in lines:
        task_id, event, ts = line.get("task_id"), line.get("event"), line.get("ts")
        if line.get("prestart"):
            continue  # a prestarted child's own lines (its park), before the task was journaled
        if event in HOP_EVENTS and isinstance(task_id, str) and isinstance(ts, str):
            logged = datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
            first.setdefault((task_id, str(event)), logged)
    hops: dict[str, list[float]] = {}
    for task_id, changed, requested in stamps:
        sample: dict[str, float | None] = {}
        for event in HOP_EVENTS:
            at = first.get((task_id, event))
            sample[event] = None if at is None else round((at - changed) * 1000, 1)
            if at is not None:
                hops.setdefault(event, []).append(at - changed)
        hops.setdefault("first model request", []).append(requested - changed)
        sample["first model request"] = round((requested - changed) * 1000, 1)
        if each is not None:
            each.append(sample)
    return {name: summarize(values) for name, values in hops.items()}


def _idle(daemon: BenchDaemon) -> None:
    _until(
        lambda: all(v["inflight"] == 0 for v in _triggers(daemon).values()),
        "the tasks to end",
        daemon,
        WAIT_S,
    )


def _newest_task(daemon: BenchDaemon) -> dict[str, Any]:
    views = daemon.daemon.call("task.list", {"limit": 5})
    assert isinstance(views, list) and views
    newest: dict[str, Any] = max(views, key=lambda v: v["created_at"])
    return newest


# ---- 2. the flood -------------------------------------------------------------------------------


class Flood(threading.Thread):
    """Appends `rate` bumps a second, round-robin over `uris` URIs, one batch per fixture poll."""

    def __init__(self, state: Path, rate: int, uris: int, duration_s: float) -> None:
        super().__init__(daemon=True)
        self.state, self.rate, self.uris, self.duration_s = state, rate, uris, duration_s
        self.written = 0
        self.elapsed_s = 0.0

    def run(self) -> None:
        lines = [
            (json.dumps({"op": "bump", "uri": f"watch://item/{i}"}) + "\n").encode() for i in range(self.uris)
        ]
        fd = os.open(self.state / watch_changes.LOG_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            started = time.monotonic()
            tick = 0
            while (now := time.monotonic()) - started < self.duration_s:
                due = int((now - started) * self.rate) - self.written  # on an absolute schedule
                if due > 0:
                    batch = b"".join(lines[(self.written + k) % self.uris] for k in range(due))
                    os.write(fd, batch)  # one O_APPEND write: never torn by another writer
                    self.written += due
                tick += 1
                time.sleep(max(0.0, started + tick * TICK_S - time.monotonic()))
            self.elapsed_s = time.monotonic() - started
        finally:
            os.close(fd)


def measure_flood(
    settings: Settings, workdir: Path, out: Results, pids: list[int], arrivals: bool = False
) -> None:
    state = workdir / "flood-state"
    state.mkdir(parents=True)
    body = (
        scripted("m", [{"text": "unused"}], workdir)
        + '[defaults]\nmodel = "m"\n[metrics]\nlisten = "127.0.0.1:0"\n'
        + _server_toml("flood", settings.uris, state)
        + f'[[trigger]]\nname = "flood"\nserver = "flood"\nglob = "watch://item/*"\ninstruction = "idle"\n'
        f"debounce_ms = {settings.flood_debounce_ms}\nmax_wait_ms = {settings.flood_max_wait_ms}\n"
        'max_inflight = 1\noverflow = "coalesce"\n' + "[supervision]\n" + rogue_command()
    )
    lines = f'max_concurrent_tasks = 1\nlog_level = "{"debug" if arrivals else "info"}"\n'
    with open_daemon(workdir / "flood", body, daemon_lines=lines, fast=False) as daemon:
        pids.append(daemon.pid)
        address = str(daemon.daemon.wait_log("proc.metrics")["listen"])
        _until(lambda: _triggers(daemon)["flood"]["state"] == "armed", "the trigger armed", daemon)
        # The synthetic deliveries after arming (one per URI) are out before the flood starts.
        _until(
            lambda: _triggers(daemon)["flood"]["deliveries"] >= settings.uris, "the synthetic ones", daemon
        )
        time.sleep(settings.flood_max_wait_ms / 1000 + 0.5)
        # The control: the same round trips against the same daemon, idle, just before the flood.
        idle_rtts: list[float] = []
        idle_until = time.monotonic() + min(5.0, settings.duration_s)
        while time.monotonic() < idle_until:
            asked = time.perf_counter()
            _triggers(daemon)
            idle_rtts.append(time.perf_counter() - asked)
            time.sleep(0.05)
        out.idle_rtt = summarize(idle_rtts)
        watcher, server = _watcher_and_server(daemon)
        procs = {"daemon": psutil.Process(daemon.pid), "watcher": watcher, "server": server}
        cpu0 = {k: _cpu(p) for k, p in procs.items()}
        lag0 = _lag_buckets(address)
        base = _triggers(daemon)["flood"]["deliveries"]
        flood = Flood(state, settings.rate, settings.uris, settings.duration_s)
        series: list[tuple[float, int]] = []
        rtts: list[float] = []
        next_rss = 0.0
        flood.start()
        started = time.monotonic()
        # Through the flood and past it: the trailing deliveries are due max_wait after the last.
        until = started + settings.duration_s + settings.flood_max_wait_ms / 1000 + 1.0
        while (now := time.monotonic()) < until:
            asked = time.perf_counter()
            views = _triggers(daemon)
            rtts.append(time.perf_counter() - asked)
            series.append((now - started, views["flood"]["deliveries"] - base))
            if now >= next_rss:
                next_rss = now + 1.0
                out.daemon_rss_mb.append(_rss(procs["daemon"]))
                out.watcher_rss_mb.append(_rss(watcher))
                out.server_rss_mb.append(_rss(server))
                out.load.append(round(os.getloadavg()[0], 2))
            time.sleep(0.05)
        flood.join(timeout=10)
        out.daemon_cpu_s = round(_cpu(procs["daemon"]) - cpu0["daemon"], 2)
        out.watcher_cpu_s = round(_cpu(watcher) - cpu0["watcher"], 2)
        out.server_cpu_s = round(_cpu(server) - cpu0["server"], 2)
        lag1 = _lag_buckets(address)
        out.loop_lag_buckets = {le: lag1.get(le, 0.0) - lag0.get(le, 0.0) for le in lag1}
        out.flood_written = flood.written
        out.flood_write_rate = round(flood.written / max(flood.elapsed_s, 1e-9), 1)
        out.deliveries = series[-1][1] if series else 0
        # Every URI changes every uris/rate s (< debounce), so each is due once per max_wait: one
        # window per max_wait during the flood, and a trailing one unless the flood ended on a
        # window's edge.
        out.deliveries_expected = settings.uris * math.ceil(
            settings.duration_s * 1000 / settings.flood_max_wait_ms
        )
        out.deliveries_per_window = _steps(series)
        out.rtt = summarize(rtts)
        if arrivals:
            _arrivals(daemon, settings, out)


def _arrivals(daemon: BenchDaemon, settings: Settings, out: Results) -> None:
    last: dict[str, float] = {}
    gaps: list[float] = []
    for line in daemon.daemon.log():
        if line.get("event") != "resource.updated" or line.get("synthetic"):
            continue
        uri, ts = str(line.get("uri")), str(line.get("ts"))
        at = datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
        out.arrivals += 1
        if uri in last:
            gaps.append(at - last[uri])
        last[uri] = at
    out.arrival_gaps_over_debounce = sum(1 for g in gaps if g * 1000 > settings.flood_debounce_ms)
    out.arrival_gap = summarize(gaps)


def _steps(series: list[tuple[float, int]]) -> list[int]:
    """The counter's increments grouped into bursts: increases less than 0.3 s apart are one
    window's deliveries (a window's URIs fall due within a few ms of each other)."""
    steps: list[int] = []
    last, last_at = 0, -1.0
    for at, count in series:
        if count > last:
            if steps and at - last_at <= 0.3:
                steps[-1] += count - last
            else:
                steps.append(count - last)
            last, last_at = count, at
    return steps


def _rss(proc: psutil.Process | None) -> float:
    if proc is None:
        return float("nan")
    try:
        rss: int = proc.memory_info().rss
        return round(rss / MIB, 1)
    except psutil.Error:
        return float("nan")


def _cpu(proc: psutil.Process | None) -> float:
    if proc is None:
        return 0.0
    try:
        times = proc.cpu_times()
    except psutil.Error:
        return 0.0
    total: float = times.user + times.system
    return total


LAG_LINE = re.compile(r'^agentd_event_loop_lag_seconds_bucket\{le="([^"]+)"\} ([0-9.e+]+)$')


def _lag_buckets(address: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = {}
    for line in text.splitlines():
        if match := LAG_LINE.match(line):
            found[match.group(1)] = float(match.group(2))
    return found


# ---- 3. the fixture alone -----------------------------------------------------------------------


async def _fixture_alone(
    settings: Settings, state: Path, duration_s: float, gaps: list[float]
) -> tuple[int, int]:
    import mcp_types
    from mcp import ClientSession, StdioServerParameters, stdio_client

    received = 0
    last: dict[str, float] = {}

    async def on_message(message: Any) -> None:
        nonlocal received
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            received += 1
            uri, now = str(message.params.uri), time.monotonic()
            if uri in last:
                gaps.append(now - last[uri])
            last[uri] = now

    args = [str(FIXTURE), "--resources", str(settings.uris), "--state", str(state)]
    params = StdioServerParameters(command=sys.executable, args=args)
    with open(os.devnull, "w") as devnull:  # noqa: ASYNC230 - /dev/null, before the session
        async with (
            stdio_client(params, errlog=devnull) as (read, write),
            ClientSession(read, write, read_timeout_seconds=60, message_handler=on_message) as session,
        ):
            await session.initialize()
            for i in range(settings.uris):
                await session.subscribe_resource(f"watch://item/{i}")
            flood = Flood(state, settings.rate, settings.uris, duration_s)
            flood.start()
            await anyio.to_thread.run_sync(flood.join)
            with anyio.move_on_after(5):
                while received < flood.written:  # noqa: ASYNC110 - a counter, polled briefly
                    await anyio.sleep(0.05)
            # What arrived during the flood plus up to 5 s to drain what the fixture had read.
            return flood.written, received


def measure_fixture(settings: Settings, workdir: Path, out: Results) -> None:
    state = workdir / "fixture-state"
    state.mkdir(parents=True)
    duration = min(settings.duration_s, 10.0)
    started = time.monotonic()
    gaps: list[float] = []
    sent, received = anyio.run(_fixture_alone, settings, state, duration, gaps)
    out.fixture_gap = summarize(gaps)
    out.fixture_gaps_over_debounce = sum(1 for g in gaps if g * 1000 > settings.flood_debounce_ms)
    out.fixture_sent, out.fixture_received = sent, received
    out.fixture_rate = round(received / duration, 1)
    del started


# ---- the table ----------------------------------------------------------------------------------


def _growth(samples: list[float]) -> str:
    clean = [s for s in samples if s == s]
    if len(clean) < 4:
        return "-"
    half = len(clean) // 2
    first, second = clean[: max(1, half // 2)], clean[-max(1, half // 2) :]
    return f"{sum(first) / len(first):.1f} → {sum(second) / len(second):.1f} (max {max(clean):.1f})"


def rows(settings: Settings, out: Results) -> list[tuple[str, str, str, str]]:
    table: list[tuple[str, str, str, str]] = []
    target = settings.debounce_ms + LATENCY_SLACK_MS
    if out.latency is not None:
        lat = out.latency
        ok = "ok" if lat.p99_ms <= target else "MISS"
        table.append(
            (
                f"change → first model request p50 / p99 (n={lat.count}, debounce {settings.debounce_ms} ms"
                f"{'' if out.wake else ', fixture poll'})",
                f"{lat.p50_ms:.0f} / {lat.p99_ms:.0f} ms",
                f"≤ {target:g} ms",
                ok,
            )
        )
        table.append(
            (
                "  first requests already offering the server's tools (the watcher's catalogue)",
                f"{out.hinted} of {lat.count}",
                f"{lat.count}",
                "ok" if out.hinted == lat.count else "MISS",
            )
        )
        if out.base_latency is not None:
            base = out.base_latency
            table.append(
                (
                    "  A/B base in the same run: the same with prestart = false p50 / p99",
                    f"{base.p50_ms:.0f} / {base.p99_ms:.0f} ms",
                    f"≤ {target:g} ms",
                    "ok" if base.p99_ms <= target else "MISS",
                )
            )
        for name, summary in (
            ("  of which change → task journaled p50 / p99", out.to_journaled),
            ("  of which journaled → first request p50 / p99", out.journaled_to_request),
            ("    in it: spawn → ev/ready (zygote) p50 / p99", out.spawn_to_ready),
            ("  the task's MCP connect, behind the first request p50 / p99", out.mcp_connect),
            ("  base: change → task journaled p50 / p99", out.base_to_journaled),
            ("  base: journaled → first request p50 / p99", out.base_journaled_to_request),
            ("  control: plain submit (no MCP) → first request p50 / p99", out.submit_to_request),
        ):
            if summary is not None:
                table.append((name, f"{summary.p50_ms:.0f} / {summary.p99_ms:.0f} ms", "-", "info"))
        for label, hops in (
            ("trigger task", out.hops),
            ("base", out.base_hops),
            ("control", out.control_hops),
        ):
            for event, summary in hops.items():
                table.append(
                    (
                        f"    hop ({label}): {event}, ms after the change p50 / p99",
                        f"{summary.p50_ms:.0f} / {summary.p99_ms:.0f} ms",
                        "-",
                        "info",
                    )
                )
    if out.fixture_sent:
        table.append(
            (
                f"fixture alone: notifications sent / s (asked {settings.rate})",
                f"{out.fixture_rate:.0f} ({out.fixture_received}/{out.fixture_sent})",
                f"{settings.rate}",
                "ok" if out.fixture_received >= 0.95 * out.fixture_sent else "FIXTURE",
            )
        )
    if out.fixture_gap is not None:
        gap = out.fixture_gap
        table.append(
            (
                "fixture alone: per-URI gap p50 / p99 / max; gaps > flood debounce",
                f"{gap.p50_ms:.0f} / {gap.p99_ms:.0f} / {gap.max_ms:.0f} ms; "
                f"{out.fixture_gaps_over_debounce}",
                "-",
                "info",
            )
        )
    if not out.flood_written:
        return table
    table.append(
        (
            f"flood: changes written ({settings.uris} URIs, {settings.duration_s:g} s)",
            f"{out.flood_written} ({out.flood_write_rate:.0f}/s)",
            f"{settings.rate}/s",
            "info",
        )
    )
    table.append(
        (
            f"flood: deliveries (debounce {settings.flood_debounce_ms} ms, "
            f"max_wait {settings.flood_max_wait_ms} ms)",
            f"{out.deliveries} (windows: {' '.join(str(s) for s in out.deliveries_per_window)})",
            f"{out.deliveries_expected} ± {settings.uris}, each window {settings.uris}",
            "ok" if _deliveries_ok(settings, out) else "MISS",
        )
    )
    if out.rtt is not None:
        table.append(
            (
                "flood: trigger.list round trip p50 / p99 (outside view of loop lag)",
                f"{out.rtt.p50_ms:.1f} / {out.rtt.p99_ms:.1f} ms",
                f"p99 < {LAG_TARGET_MS:g} ms",
                "ok" if out.rtt.p99_ms < LAG_TARGET_MS else "MISS",
            )
        )
    if out.idle_rtt is not None:
        table.append(
            (
                "control: the same round trip, daemon idle, p50 / p99",
                f"{out.idle_rtt.p50_ms:.1f} / {out.idle_rtt.p99_ms:.1f} ms",
                "-",
                "info",
            )
        )
    if out.loop_lag_buckets:
        total = out.loop_lag_buckets.get("+Inf", 0.0)
        within = out.loop_lag_buckets.get("0.025", 0.0)
        under10 = out.loop_lag_buckets.get("0.01", 0.0)
        table.append(
            (
                "flood: daemon's own loop-lag samples ≤ 10 ms / ≤ 25 ms",
                f"{under10:.0f} / {within:.0f} of {total:.0f}",
                "all < 20 ms",
                "ok" if within == total else "MISS",
            )
        )
    if out.arrival_gap is not None:
        gap = out.arrival_gap
        table.append(
            (
                "flood: changes reaching the daemon; per-URI gap p50 / p99 / max",
                f"{out.arrivals}; {gap.p50_ms:.0f} / {gap.p99_ms:.0f} / {gap.max_ms:.0f} ms",
                "-",
                "info",
            )
        )
        table.append(
            (
                f"flood: per-URI gaps > debounce ({settings.flood_debounce_ms} ms): extra deliveries",
                f"{out.arrival_gaps_over_debounce}",
                "0",
                "info",
            )
        )
    table.append(("flood: daemon RSS start → end", _growth(out.daemon_rss_mb) + " MiB", "no growth", "info"))
    table.append(("flood: watcher RSS start → end", _growth(out.watcher_rss_mb) + " MiB", "-", "info"))
    table.append(("flood: fixture server RSS start → end", _growth(out.server_rss_mb) + " MiB", "-", "info"))
    table.append(
        (
            "flood: CPU s daemon / watcher / fixture",
            f"{out.daemon_cpu_s} / {out.watcher_cpu_s} / {out.server_cpu_s}",
            "-",
            "info",
        )
    )
    return table


def _deliveries_ok(settings: Settings, out: Results) -> bool:
    windows = out.deliveries_per_window
    # Every full window delivers each URI once; the last (trailing) one may be partial.
    return (
        abs(out.deliveries - out.deliveries_expected) <= settings.uris
        and all(n == settings.uris for n in windows[:-1])
        and bool(windows)
        and windows[-1] <= settings.uris
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="small counts: checks it runs")
    parser.add_argument("--samples", type=int, default=None, help="latency samples")
    parser.add_argument("--duration", type=float, default=None, help="flood seconds")
    parser.add_argument("--rate", type=int, default=None, help="flood notifications per second")
    parser.add_argument("--uris", type=int, default=None, help="flood URIs")
    parser.add_argument("--flood-debounce-ms", type=int, default=None)
    parser.add_argument("--flood-max-wait-ms", type=int, default=None)
    parser.add_argument(
        "--arrivals", action="store_true", help="flood: log every change the daemon gets (debug; costs)"
    )
    parser.add_argument(
        "--no-wake", action="store_true", help="latency: let the fixture notice a change at its 20 ms poll"
    )
    parser.add_argument("--phases", default="latency,fixture,flood")
    parser.add_argument("--dir", default=None, help="where the daemons' state lives (default: $TMPDIR)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    settings = SMOKE if args.smoke else DEFAULT
    overrides = {
        "samples": args.samples,
        "duration_s": args.duration,
        "rate": args.rate,
        "uris": args.uris,
        "flood_debounce_ms": args.flood_debounce_ms,
        "flood_max_wait_ms": args.flood_max_wait_ms,
    }
    settings = Settings(**{**asdict(settings), **{k: v for k, v in overrides.items() if v is not None}})
    phases = set(args.phases.split(","))
    out = Results()
    pids: list[int] = []
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="agentd-bench-trig-", dir=args.dir) as tmp:
            if "latency" in phases:
                measure_latency(settings, Path(tmp), out, pids, wake=not args.no_wake)
            if "fixture" in phases:
                measure_fixture(settings, Path(tmp), out)
            if "flood" in phases:
                measure_flood(settings, Path(tmp), out, pids, args.arrivals)
    finally:
        left = strays([*pids, os.getpid()])
        kill_all(left)
    table = rows(settings, out)
    mode = "smoke (counts too small to judge the targets)" if args.smoke else "default"
    print(f"agentd triggers bench, {mode}; {os.cpu_count()} CPUs; {time.monotonic() - started:.0f} s")
    print(f"load average during the flood: {out.load[:1]} … {out.load[-1:]}")
    width = max(len(r[0]) for r in table)
    print(f"{'figure':<{width}}  {'measured':>34}  {'target':<14} verdict")
    for figure, value, target_text, verdict in table:
        print(f"{figure:<{width}}  {value:>34}  {target_text:<14} {verdict}")
    print(f"processes left at the end: {len(left)}")
    document = {
        "benchmark": "triggers",
        "mode": "smoke" if args.smoke else "default",
        "settings": asdict(settings),
        "table": [dict(zip(("figure", "value", "target", "verdict"), r, strict=True)) for r in table],
        "results": asdict(out),
        "processes_left": len(left),
    }
    write_json(args.out, document)
    return 2 if left else 0


if __name__ == "__main__":
    raise SystemExit(main())
