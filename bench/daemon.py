"""The daemon against docs/design.md §10: intake, cancel latency, ping RTT, memory, first model request.

Starts real `agentd serve` processes (and one in-process `Supervisor` for ping RTT), measures,
prints one table of figure / target / verdict with the machine's load, writes
`bench/results/daemon.json`, and checks that no process it started is left. Many-children figures
use the light stand-in child (`tests/fixtures/rogue_child.py idle`), not the real subagent.

    .venv/bin/python -m bench.daemon [--smoke] [--dir /var/tmp] [--strict]
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import anyio
import psutil

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # also runnable as `python bench/daemon.py`
    sys.path.insert(0, str(REPO))

from bench import daemon_children, daemon_intake, daemon_subagent  # noqa: E402
from bench.daemon_children import DaemonWithChildren, RttResult  # noqa: E402
from bench.daemon_intake import IntakeRun  # noqa: E402
from bench.daemon_procs import MIB, BenchDaemon, kill_all, open_daemon, strays  # noqa: E402
from bench.daemon_subagent import CancelResult, FirstRequestResult  # noqa: E402
from bench.machine import CpuMeter, MachineShare  # noqa: E402
from bench.samples import Summary, write_json  # noqa: E402
from tests.support.daemon import FAST_SUPERVISION, rogue_command, scripted  # noqa: E402
from tests.support.fake_llm import FakeLLM, Hang  # noqa: E402

RESULTS = REPO / "bench" / "results" / "daemon.json"


@dataclass(frozen=True, slots=True)
class Settings:
    intake_clients: tuple[int, ...]
    intake_duration_s: float
    children: int
    ping_interval_s: float
    rtt_window_s: float
    first_request_samples: int
    cancel_samples: int
    cancel_batch: int


DEFAULT = Settings((1, 8, 32), 3.0, 100, 0.2, 10.0, 12, 40, 10)
SMOKE = Settings((1, 8, 32), 0.5, 10, 0.2, 2.0, 2, 3, 3)


@dataclass(frozen=True, slots=True)
class Row:
    figure: str
    value: str
    target: str
    verdict: str


@dataclass(frozen=True, slots=True)
class Drain:
    exit_code: int | None
    left_after_drain: int


@dataclass
class Results:
    """Filled phase by phase; a phase that raised leaves its fields unset."""

    machine: dict[str, MachineShare] = field(default_factory=dict)  # per phase, and "run"
    rss_idle_mb: float | None = None
    rss_after_intake_mb: float | None = None
    intake: list[IntakeRun] = field(default_factory=list)
    intake_acked: int | None = None
    intake_tasks_held: int | None = None  # queued + running afterwards: must equal intake_acked
    children_daemon: DaemonWithChildren | None = None
    rtt: RttResult | None = None
    bare_loop: Summary | None = None
    first_request: FirstRequestResult | None = None
    first_request_exec: FirstRequestResult | None = None
    cancel: CancelResult | None = None
    drains: dict[str, Drain] = field(default_factory=dict)


def _log(message: str) -> None:
    print(f"[bench.daemon {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _stand_in_body(workdir: Path) -> str:
    # The stand-in reads its behaviour from the instruction; the model section is never used.
    workdir.mkdir(parents=True, exist_ok=True)
    return (
        scripted("m", [{"text": "unused"}], workdir)
        + '[defaults]\nmodel = "m"\n'
        + FAST_SUPERVISION
        + rogue_command()
    )


def _drained(daemon: BenchDaemon) -> Drain:
    return Drain(daemon.drain_exit_code, daemon.left_after_drain)


def measure_intake(settings: Settings, base: Path, out: Results, daemons: list[int]) -> None:
    workdir = base / "intake"
    # One client uid submits thousands of tasks back to back: lift the per-uid caps (a policy;
    # with them on, their check reads at most the capped number of a uid's unfinished tasks).
    lines = (
        "max_concurrent_tasks = 1\nmax_connections_per_uid = 128\n"
        'max_queued_per_uid = "infinity"\nmax_pending_bytes_per_uid = "infinity"\n'
    )
    with open_daemon(workdir, _stand_in_body(workdir), daemon_lines=lines) as daemon:
        daemons.append(daemon.pid)
        time.sleep(1.0)  # idle means settled after start, not mid-start
        out.rss_idle_mb = daemon.rss_mb()
        warm_up = daemon_intake.measure(daemon, 8, min(0.3, settings.intake_duration_s))
        for clients in settings.intake_clients:
            out.intake.append(daemon_intake.measure(daemon, clients, settings.intake_duration_s))
        out.intake_acked = warm_up.submits + sum(run.submits for run in out.intake)
        out.intake_tasks_held = daemon_intake.queued_and_running(daemon)
        out.rss_after_intake_mb = daemon.rss_mb()
    out.drains["intake"] = _drained(daemon)


def measure_many_children(settings: Settings, base: Path, out: Results, daemons: list[int]) -> None:
    workdir = base / "children"
    lines = f"max_concurrent_tasks = {settings.children + 8}\nmax_connections_per_uid = 128\n"
    with open_daemon(workdir, _stand_in_body(workdir), daemon_lines=lines) as daemon:
        daemons.append(daemon.pid)
        out.children_daemon = daemon_children.measure_daemon(daemon, settings.children, cpu_window_s=3.0)
    out.drains["children"] = _drained(daemon)


def measure_rtt(settings: Settings, base: Path, out: Results) -> None:
    out.bare_loop = daemon_children.measure_bare_loop(
        settings.children, settings.ping_interval_s, settings.rtt_window_s
    )
    # In-process: its orphan sweep would kill any daemon of ours still running (none is by now).
    out.rtt = anyio.run(
        daemon_children.measure_rtt,
        base / "rtt",
        settings.children,
        settings.ping_interval_s,
        settings.rtt_window_s,
    )


def measure_subagent(settings: Settings, base: Path, out: Results, daemons: list[int]) -> None:
    with FakeLLM() as quick, FakeLLM(default=Hang()) as hang:
        lines = f"max_concurrent_tasks = {settings.cancel_batch}\n"
        body = daemon_subagent.endpoints_toml(quick, hang)
        exec_body = body + '[supervision]\nspawner = "exec"\n'
        with open_daemon(base / "exec", exec_body, daemon_lines=lines, fast=False) as daemon:
            daemons.append(daemon.pid)
            out.first_request_exec = daemon_subagent.measure_first_request(
                daemon, quick, settings.first_request_samples
            )
        out.drains["exec"] = _drained(daemon)
        # Default supervision (5 s cancel grace): a slow cancel shows as slow, not as a SIGTERM.
        with open_daemon(base / "subagent", body, daemon_lines=lines, fast=False) as daemon:
            daemons.append(daemon.pid)
            daemon_subagent.wait_zygote(daemon)
            out.first_request = daemon_subagent.measure_first_request(
                daemon, quick, settings.first_request_samples
            )
            _log(f"first request p50 {out.first_request.submit_to_request.p50_ms} ms; now cancel")
            out.cancel = daemon_subagent.measure_cancel(
                daemon, hang, settings.cancel_samples, settings.cancel_batch
            )
        out.drains["subagent"] = _drained(daemon)


def run_all(settings: Settings, base: Path, out: Results, daemons: list[int]) -> None:
    phases: list[tuple[str, Callable[[], None]]] = [
        ("intake", lambda: measure_intake(settings, base, out, daemons)),
        ("children", lambda: measure_many_children(settings, base, out, daemons)),
        ("rtt", lambda: measure_rtt(settings, base, out)),
        ("subagent", lambda: measure_subagent(settings, base, out, daemons)),
    ]
    whole = CpuMeter()
    try:
        for name, phase in phases:
            meter = CpuMeter()
            _log(f"{name} (load {os.getloadavg()[0]:.2f})")
            try:
                phase()
            finally:
                out.machine[name] = meter.stop()
    finally:
        out.machine["run"] = whole.stop()


def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISS"


def table(out: Results) -> list[Row]:
    rows: list[Row] = []
    for run in out.intake:
        lat = run.latency
        rows.append(
            Row(
                f"durable submits/s, {run.clients} {'clients' if run.clients > 1 else 'client'}"
                f" (ack p50/p99 {lat.p50_ms:.1f}/{lat.p99_ms:.1f}ms)",
                f"{run.submits_per_s:.0f}/s",
                ">= 500/s",
                _verdict(run.submits_per_s >= 500),
            )
        )
    if out.intake_acked is not None:
        rows.append(
            Row(
                "  acked submits / tasks the daemon holds afterwards",
                f"{out.intake_acked} / {out.intake_tasks_held}",
                "equal",
                _verdict(out.intake_acked == out.intake_tasks_held),
            )
        )
    if out.cancel is not None:
        c = out.cancel.cancel_to_terminal
        rows.append(
            Row(
                f"cancel -> cancelled recorded, p50/p99 (n={c.count}, real subagent)",
                f"{c.p50_ms:.1f} / {c.p99_ms:.1f} ms",
                "p99 <= 100 ms",
                _verdict(c.p99_ms <= 100),
            )
        )
        for span, median_ms in out.cancel.breakdown_ms.items():
            rows.append(Row(f"  of which (median): {span}", f"{median_ms:.0f} ms", "-", "info"))
    if out.rtt is not None:
        r = out.rtt.rtt
        bare_p99 = out.bare_loop.p99_ms if out.bare_loop is not None else None
        rows.append(
            Row(
                f"ping RTT, {out.rtt.children} stand-in children @ {out.rtt.ping_interval_s} s (n={r.count})",
                f"{r.p50_ms:.2f} / {r.p99_ms:.2f} ms",
                "p99 <= 1.5x bare loop's",
                _verdict(bare_p99 is not None and r.p99_ms <= 1.5 * bare_p99),
            )
        )
    if out.bare_loop is not None and out.rtt is not None:
        bare = out.bare_loop
        rows.append(
            Row(
                f"  control: bare anyio loop, {out.rtt.children} stand-ins, no supervisor (n={bare.count})",
                f"{bare.p50_ms:.2f} / {bare.p99_ms:.2f} ms",
                "-",
                "info",
            )
        )
    if out.rss_idle_mb is not None:
        idle_mb = out.rss_idle_mb * MIB / 1e6
        rows.append(
            Row(
                "daemon RSS, idle after start",
                f"{out.rss_idle_mb:.1f} MiB = {idle_mb:.1f} MB",
                "<= 60 MB",
                _verdict(idle_mb <= 60),
            )
        )
    if out.children_daemon is not None:
        kids = out.children_daemon
        mem = kids.memory
        rows.append(
            Row(
                f"daemon RSS with {kids.children} live stand-in children",
                f"{kids.daemon_rss_mb:.1f} MiB",
                "-",
                "info",
            )
        )
        rows.append(
            Row(
                f"  children ({mem.count}): RSS total / mean, USS total",
                f"{mem.rss_total_mb:.0f} / {mem.rss_mean_mb:.1f} / {mem.uss_total_mb:.0f} MiB",
                "-",
                "info",
            )
        )
    for label, first in (("zygote", out.first_request), ("exec", out.first_request_exec)):
        if first is None:
            continue
        f = first.submit_to_request
        rows.append(
            Row(
                f"submit -> first model request, median (n={f.count}, {label} spawner, real subagent)",
                f"{f.p50_ms:.0f} ms",
                "<= 25 ms (zygote)" if label == "zygote" else "-",
                _verdict(f.p50_ms <= 25) if label == "zygote" else "info",
            )
        )
        rows.append(
            Row(
                "  of which: queued, spawn -> ev/ready (medians)",
                f"{first.queued.p50_ms:.1f} ms, {first.spawn_to_ready.p50_ms:.0f} ms",
                "-",
                "info",
            )
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--smoke", action="store_true", help="tiny counts (CI): checks it runs, not the targets"
    )
    parser.add_argument("--dir", default=None, help="where the daemons' state lives (default: $TMPDIR)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    settings = SMOKE if args.smoke else DEFAULT
    started = time.monotonic()
    daemons: list[int] = []
    out = Results()
    try:
        with tempfile.TemporaryDirectory(prefix="agentd-bench-", dir=args.dir) as tmp:
            run_all(settings, Path(tmp), out, daemons)
    finally:
        left = strays([*daemons, os.getpid()])
        kill_all(left)
        elapsed = time.monotonic() - started
        rows = table(out)
        report(args, settings, out, rows, left=len(left), elapsed_s=elapsed)
    if left:
        return 2
    return 1 if args.strict and any(row.verdict == "MISS" for row in rows) else 0


def report(
    args: argparse.Namespace,
    settings: Settings,
    out: Results,
    rows: list[Row],
    *,
    left: int,
    elapsed_s: float,
) -> None:
    """Print the table and write the JSON (also after a failed phase: what was measured)."""
    mode = "smoke (counts too small to judge the targets)" if args.smoke else "default"
    print(f"agentd daemon bench, {mode}; {os.cpu_count()} CPUs; {elapsed_s:.0f} s")
    print("machine, as % of all CPUs: busy = this bench's processes + others (+ hypervisor steal)")
    for name, share in out.machine.items():
        print(
            f"  {name:<9} {share.seconds:6.1f} s  load avg at start {share.load_avg_at_start[0]:5.2f}"
            f"  busy {share.busy_pct:5.1f}%  ours {share.ours_pct:5.1f}%  others {share.others_pct:5.1f}%"
            f"  steal {share.steal_pct:4.1f}%"
        )
    if rows:
        width = max(len(row.figure) for row in rows)
        print(f"{'figure':<{width}}  {'measured':>20}  {'target':<18} verdict")
        for row in rows:
            print(f"{row.figure:<{width}}  {row.value:>20}  {row.target:<18} {row.verdict}")
    print(f"processes left at the end: {left}")
    document = {
        "benchmark": "daemon",
        "mode": "smoke" if args.smoke else "default",
        "settings": asdict(settings),
        "elapsed_s": round(elapsed_s, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "memory_gb": round(psutil.virtual_memory().total / 1e9, 1),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "state_dir": args.dir or tempfile.gettempdir(),
        },
        "child_stand_in": "tests/fixtures/rogue_child.py idle (RTT and many-children memory)",
        "table": [asdict(row) for row in rows],
        "results": asdict(out),
        "processes_left": left,
    }
    write_json(args.out, document)


if __name__ == "__main__":
    raise SystemExit(main())
