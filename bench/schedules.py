"""Scheduler overhead with many schedules registered (docs/design.md §11; targets in docs/benchmarks.md).

Starts a real `agentd serve`, registers `registered` interval schedules through the socket (due
an hour later, so they only weigh on the timetable and the journal), then runs `firing` interval
schedules every `every_s` for `window_s` and reads each fire's `schedule.fired` log line:
`lag_ms` (due → the fire's task committed: fire accuracy) and `wake_ms` (due → the scheduler woke:
event-loop lag as a timer sees it). A client also samples `daemon.status` round trips throughout.
Fires run the light stand-in child (`rogue_child.py idle`, one at a time; the rest queue), so what
is measured is the scheduler, not subagents. Prints a table, writes `bench/results/schedules.json`,
and checks no process is left.

    .venv/bin/python -m bench.schedules [--smoke] [--dir /var/tmp]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # also runnable as `python bench/schedules.py`
    sys.path.insert(0, str(REPO))

from agentd.api.client import ApiClient  # noqa: E402
from bench.daemon_procs import BenchDaemon, kill_all, open_daemon, strays  # noqa: E402
from bench.samples import Summary, summarize, write_json  # noqa: E402
from protocol.api import (  # noqa: E402
    ScheduleCreateParams,
    ScheduleCreateRequest,
    ScheduleSpec,
    StatusRequest,
    TaskSpec,
)
from tests.support.daemon import rogue_command, scripted  # noqa: E402

RESULTS = REPO / "bench" / "results" / "schedules.json"
LAG_TARGET_MS = 20.0
ACCURACY_TARGET_MS = 100.0


@dataclass(frozen=True, slots=True)
class Settings:
    registered: int
    firing: int
    every_s: float
    window_s: float
    clients: int


DEFAULT = Settings(registered=10_000, firing=20, every_s=2.0, window_s=30.0, clients=8)
SMOKE = Settings(registered=200, firing=5, every_s=1.0, window_s=4.0, clients=4)


@dataclass
class Results:
    rss_before_mb: float = 0.0
    rss_registered_mb: float = 0.0
    rss_end_mb: float = 0.0
    register_s: float = 0.0
    registered_per_s: float = 0.0
    fires: int = 0
    skipped: int = 0  # occurrences of the firing schedules not fired (must be 0)
    accuracy: Summary | None = None
    wake_lag: Summary | None = None
    status_rtt: Summary | None = None


def register(daemon: BenchDaemon, settings: Settings) -> float:
    """`settings.registered` schedules through `clients` connections; returns the seconds taken."""
    spec = TaskSpec(instruction="idle", labels={"bench": "schedules"})
    errors: list[Exception] = []
    per_client = -(-settings.registered // settings.clients)

    def client(index: int) -> None:
        try:
            with ApiClient(daemon.socket, timeout_s=60) as api:
                for n in range(index * per_client, min(settings.registered, (index + 1) * per_client)):
                    # Due in an hour or more: registered, not firing during the window.
                    trigger = ScheduleSpec(kind="interval", every_s=3600.0 + n % 600)
                    api.call(ScheduleCreateRequest(params=ScheduleCreateParams(spec=spec, trigger=trigger)))
        except Exception as exc:  # noqa: BLE001 - re-raised by the main thread
            errors.append(exc)

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(settings.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    if errors:
        raise RuntimeError(f"registering failed: {errors[0]!r}") from errors[0]
    return time.perf_counter() - started


def sample_status(daemon: BenchDaemon, until: float, out: list[float]) -> None:
    with ApiClient(daemon.socket, timeout_s=30) as api:
        while time.monotonic() < until:
            started = time.perf_counter()
            api.call(StatusRequest())
            out.append(time.perf_counter() - started)
            time.sleep(0.05)


def run(settings: Settings, workdir: Path, out: Results, pids: list[int]) -> None:
    body = (
        scripted("m", [{"text": "unused"}], workdir)
        + '[defaults]\nmodel = "m"\n'
        + "[supervision]\nping_interval_s = 1\norphan_sweep_interval_s = 5\n"
        + rogue_command()
    )
    # Fires pile up behind the one running stand-in: the per-uid caps (a policy, not the
    # scheduler's cost) are lifted, as for the intake bench.
    lines = (
        'max_concurrent_tasks = 1\nlog_level = "info"\n'
        'max_queued_per_uid = "infinity"\nmax_pending_bytes_per_uid = "infinity"\n'
    )
    with open_daemon(workdir, body, daemon_lines=lines, fast=False) as daemon:
        pids.append(daemon.pid)
        out.rss_before_mb = daemon.rss_mb()
        out.register_s = round(register(daemon, settings), 2)
        out.registered_per_s = round(settings.registered / out.register_s, 1)
        out.rss_registered_mb = daemon.rss_mb()
        ids = []
        with ApiClient(daemon.socket, timeout_s=30) as api:
            for _ in range(settings.firing):
                trigger = ScheduleSpec(kind="interval", every_s=settings.every_s, overlap="allow")
                spec = TaskSpec(instruction="idle", labels={"bench": "firing"})
                created = api.call(
                    ScheduleCreateRequest(params=ScheduleCreateParams(spec=spec, trigger=trigger))
                )
                ids.append(created.schedule_id)
        rtts: list[float] = []
        until = time.monotonic() + settings.window_s
        sampler = threading.Thread(target=sample_status, args=(daemon, until, rtts))
        sampler.start()
        sampler.join(timeout=settings.window_s + 60)
        out.rss_end_mb = daemon.rss_mb()
        wanted = set(ids)
        fired = [
            line
            for line in daemon.daemon.log()
            if line.get("event") == "schedule.fired"
            and line.get("schedule_id") in wanted
            and "lag_ms" in line
        ]
        out.fires = len(fired)
        out.skipped = sum(
            1
            for line in daemon.daemon.log()
            if line.get("event") == "schedule.skipped" and line.get("schedule_id") in wanted
        )
        out.accuracy = summarize([float(line["lag_ms"]) / 1000 for line in fired])  # type: ignore[arg-type]
        out.wake_lag = summarize([float(line["wake_ms"]) / 1000 for line in fired])  # type: ignore[arg-type]
        out.status_rtt = summarize(rtts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="small counts (CI): checks it runs")
    parser.add_argument("--dir", default=None, help="where the daemon's state lives (default: $TMPDIR)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    settings = SMOKE if args.smoke else DEFAULT
    out = Results()
    pids: list[int] = []
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="agentd-bench-sched-", dir=args.dir) as tmp:
            run(settings, Path(tmp), out, pids)
    finally:
        left = strays([*pids, os.getpid()])
        kill_all(left)
    rows = [
        ("schedules registered", f"{settings.registered}", "-", "info"),
        ("registration rate (durable)", f"{out.registered_per_s:.0f}/s", "-", "info"),
        (
            "daemon RSS before / registered / end",
            f"{out.rss_before_mb} / {out.rss_registered_mb} / {out.rss_end_mb} MiB",
            "-",
            "info",
        ),
        (
            "fires measured / skipped",
            f"{out.fires} / {out.skipped}",
            "- / 0",
            "ok" if not out.skipped else "MISS",
        ),
    ]
    for name, summary, target in (
        ("fire accuracy (due -> journaled) p50 / p99", out.accuracy, ACCURACY_TARGET_MS),
        ("event-loop lag (timer wake) p50 / p99", out.wake_lag, LAG_TARGET_MS),
    ):
        assert summary is not None
        verdict = "ok" if summary.p99_ms < target else "MISS"
        rows.append(
            (name, f"{summary.p50_ms:.1f} / {summary.p99_ms:.1f} ms", f"p99 < {target:g} ms", verdict)
        )
    if out.status_rtt is not None:
        rtt = out.status_rtt
        rows.append(
            ("daemon.status round trip p50 / p99", f"{rtt.p50_ms:.1f} / {rtt.p99_ms:.1f} ms", "-", "info")
        )
    mode = "smoke (counts too small to judge the targets)" if args.smoke else "default"
    print(f"agentd schedules bench, {mode}; {os.cpu_count()} CPUs; {time.monotonic() - started:.0f} s")
    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  {'measured':>28}  {'target':<14} verdict")
    for figure, value, target_text, verdict in rows:
        print(f"{figure:<{width}}  {value:>28}  {target_text:<14} {verdict}")
    print(f"processes left at the end: {len(left)}")
    document = {
        "benchmark": "schedules",
        "mode": "smoke" if args.smoke else "default",
        "settings": asdict(settings),
        "table": [dict(zip(("figure", "value", "target", "verdict"), r, strict=True)) for r in rows],
        "results": asdict(out),
        "processes_left": len(left),
    }
    write_json(args.out, document)
    return 2 if left else 0


if __name__ == "__main__":
    raise SystemExit(main())
