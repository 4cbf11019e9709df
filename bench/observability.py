"""What observability costs: per-turn CPU and submit throughput with metrics and traces on and off.

Each mode runs its own real daemon (zygote spawner, the scripted model): `off` has no
`[metrics]` and no `OTEL_*`; `metrics` serves the listener and is scraped every second while it
works; `metrics+traces` also exports every span over OTLP/HTTP to a local receiver (the test
suite's, which decodes each batch). Modes alternate round by round, so the shared machine's drift
hits them alike. Per-turn CPU is the
daemon's own CPU plus its reaped subagents' (`RUSAGE_CHILDREN`, which is where a subagent's CPU
lands once the daemon reaps it) over tasks of `turns` turns each, divided by the turns; submit
throughput is 8 clients submitting back to back (bench/daemon_intake.py) while one long task
holds the daemon's only slot, so the submits queue and what is measured is intake.

    .venv/bin/python -m bench.observability [--smoke] [--rounds 3] [--modes off,metrics+traces]
                                            [--out bench/results/observability.json]

Each round also prints every mode's ratio to that round's `off`, and the summary gives the
median of those paired ratios beside the ratio of the medians: on a shared machine a round's
modes run minutes apart rather than hours, so the paired figure is the steadier one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from bench import daemon_intake
from bench.daemon_procs import BenchDaemon, kill_all, open_daemon, strays
from protocol.api import (
    LoopOverrides,
    SpecLimits,
    SubmitParams,
    SubmitRequest,
    TaskSpec,
    WaitParams,
    WaitRequest,
)
from tests.support.daemon import scripted
from tests.tracing.otlp_receiver import OtlpReceiver

RESULTS = Path(__file__).resolve().parent / "results" / "observability.json"
MODES = ("off", "metrics", "metrics+traces")


@dataclass(frozen=True, slots=True)
class Settings:
    rounds: int
    turns: int
    tasks: int
    intake_s: float


DEFAULT = Settings(rounds=3, turns=90, tasks=4, intake_s=3.0)
SMOKE = Settings(rounds=1, turns=6, tasks=1, intake_s=0.5)


def _body(workdir: Path, mode: str, turns: int) -> str:
    workdir.mkdir(parents=True, exist_ok=True)
    turn: dict[str, object] = {"tool_calls": [{"name": "note_read", "arguments": {}}]}
    script = [turn] * (turns - 1) + [{"text": "done"}]
    short = [
        {"match": "^short", "turns": [{"text": "done"}]},
        {"match": "^hold", "turns": [{"text": "held", "delay_s": 600}]},
    ]
    body = scripted("m", script, workdir, roles=short) + '[defaults]\nmodel = "m"\n'
    if mode != "off":
        body += '[metrics]\nlisten = "127.0.0.1:0"\n'
    return body


def _cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system + times.children_user + times.children_system)


def _scraper(daemon: BenchDaemon, stop: threading.Event) -> None:
    """Scrape once a second, as Prometheus would, while the daemon works."""
    address = str(daemon.daemon.wait_log("proc.metrics")["listen"])
    while not stop.wait(1.0):
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
            response.read()


def _task_cpu_s(daemon: BenchDaemon, instruction: str, turns: int) -> float:
    """CPU of the daemon and its subagents while one task of `turns` turns runs to its end."""
    spec = TaskSpec(
        instruction=instruction,
        limits=SpecLimits(max_steps=turns + 5),
        loop=LoopOverrides(repeat_cap=100, idle_limit=100),
    )
    with daemon.daemon.client(timeout_s=120) as api:
        before = _cpu_s(daemon.pid)
        task_id = api.call(SubmitRequest(params=SubmitParams(spec=spec))).task_id
        view = api.call(WaitRequest(params=WaitParams(task_id=task_id, timeout_s=120)), timeout_s=125)
        assert view.status is not None and view.status.value == "completed", view
        assert view.usage.steps == turns, view.usage
        deadline = time.monotonic() + 10  # the child is reaped just after its result is recorded
        while time.monotonic() < deadline and any(p.name() != "agentd-zygote" for p in daemon.observe()):
            time.sleep(0.02)
        return _cpu_s(daemon.pid) - before


def per_turn_cpu_ms(daemon: BenchDaemon, settings: Settings) -> float:
    """The marginal CPU of one turn: (a long task - a one-turn task) / the extra turns, so the
    subagent's start and connect, paid once per task, are not spread over its turns."""
    extra: list[float] = []
    for _ in range(settings.tasks):
        long = _task_cpu_s(daemon, "read the notes until told to stop", settings.turns)
        short = _task_cpu_s(daemon, "short: answer at once", 1)
        extra.append((long - short) * 1000 / (settings.turns - 1))
    return round(statistics.median(extra), 2)


def hold_the_slot(daemon: BenchDaemon) -> None:
    """Occupy the daemon's one task slot, so the intake run's submits all stay queued."""
    with daemon.daemon.client() as api:
        api.call(SubmitRequest(params=SubmitParams(spec=TaskSpec(instruction="hold the slot"))))
    daemon.daemon.wait_log("subagent.ready", timeout_s=60)


def one(base: Path, mode: str, round_no: int, settings: Settings, otlp: str) -> dict[str, float]:
    workdir = base / f"{mode.replace('+', '-')}-{round_no}"
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp, "OTEL_SERVICE_NAME": "bench"} if "traces" in mode else {}
    lines = (
        'max_concurrent_tasks = 1\nmax_queued_per_uid = "infinity"\nmax_pending_bytes_per_uid = "infinity"\n'
    )
    lines += "max_connections_per_uid = 128\n"
    with open_daemon(
        workdir, _body(workdir, mode, settings.turns), daemon_lines=lines, fast=False, env=env
    ) as daemon:
        stop = threading.Event()
        scraper = None
        if mode != "off":
            scraper = threading.Thread(target=_scraper, args=(daemon, stop), daemon=True)
            scraper.start()
        try:
            per_turn = per_turn_cpu_ms(daemon, settings)
            hold_the_slot(daemon)
            intake = daemon_intake.measure(daemon, 8, settings.intake_s)
        finally:
            stop.set()
            if scraper is not None:
                scraper.join(timeout=15)
    return {"cpu_per_turn_ms": per_turn, "submits_per_s": intake.submits_per_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="tiny counts (CI): checks it runs")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    settings = SMOKE if args.smoke else DEFAULT
    if args.rounds:
        settings = Settings(args.rounds, settings.turns, settings.tasks, settings.intake_s)
    modes = tuple(m for m in MODES if m in args.modes.split(","))
    if not modes:
        parser.error(f"--modes: none of {', '.join(MODES)}")
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="agentd-bench-obs-") as tmp, OtlpReceiver() as receiver:
            for round_no in range(settings.rounds):
                for mode in modes if round_no % 2 == 0 else reversed(modes):
                    runs[mode].append(one(Path(tmp), mode, round_no, settings, receiver.endpoint))
                    print(f"[bench.observability] round {round_no} {mode}: {runs[mode][-1]}", file=sys.stderr)
    finally:
        left = strays([os.getpid()])
        kill_all(left)
    medians = {
        mode: {
            key: statistics.median(r[key] for r in results) for key in ("cpu_per_turn_ms", "submits_per_s")
        }
        for mode, results in runs.items()
        if results
    }
    print(f"agentd observability overhead, {'smoke' if args.smoke else 'default'}: {settings}")
    print(f"{'mode':<16} {'CPU per turn (daemon + subagents)':>34} {'submits/s (8 clients)':>22}")
    for mode, m in medians.items():
        print(f"{mode:<16} {m['cpu_per_turn_ms']:>31.2f} ms {m['submits_per_s']:>22.0f}")
    paired: dict[str, float] = {}
    for mode in modes:
        if mode != "off" and "off" in medians:
            off, on = medians["off"], medians[mode]
            cpu = 100 * (on["cpu_per_turn_ms"] / off["cpu_per_turn_ms"] - 1)
            rate = 100 * (on["submits_per_s"] / off["submits_per_s"] - 1)
            ratios = [
                100 * (r["cpu_per_turn_ms"] / o["cpu_per_turn_ms"] - 1)
                for r, o in zip(runs[mode], runs["off"], strict=True)
            ]
            paired[mode] = round(statistics.median(ratios), 1)
            extra = statistics.median(
                r["cpu_per_turn_ms"] - o["cpu_per_turn_ms"]
                for r, o in zip(runs[mode], runs["off"], strict=True)
            )
            print(
                f"{mode} vs off: CPU per turn {cpu:+.1f}% (median of rounds {paired[mode]:+.1f}%, "
                f"{extra:+.2f} ms), submits/s {rate:+.1f}%"
            )
    print(f"processes left at the end: {len(left)}; {time.monotonic() - started:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "settings": asdict(settings),
        "smoke": args.smoke,
        "runs": runs,
        "medians": medians,
        "paired_cpu_ratio_pct": paired,
    }
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    return 2 if left else 0


if __name__ == "__main__":
    sys.exit(main())
