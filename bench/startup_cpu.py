"""What starting agentd costs in CPU: the daemon until its zygote is warm, and `agentd list`.

    python bench/startup_cpu.py [--runs 7] [--smoke] [--out bench/results/startup_cpu.json]

Each run starts a real `agentd serve` on the embedded defaults in a temporary directory, waits
until it logs its zygote ready (`proc.ready`), and reads the CPU time (user + system, psutil)
the daemon and its zygote have spent by then: the daemon's imports, configuration and journal,
the zygote's imports of the whole subagent stack and its warm-up tasks. Then `agentd list`
runs once unmeasured and once measured (its CPU from `RUSAGE_CHILDREN`), and the daemon stops.
Bytecode goes to a private cache written on the first run, as an installed package has its own.
Medians over the runs; the figures are CPU, so a busy machine changes them less than wall times.
A test suite or a machine that starts many daemons pays these per start (docs/testing.md,
"Running time").
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.daemon_procs import BenchDaemon, strays  # noqa: E402
from bench.samples import write_json  # noqa: E402
from tests.support.daemon import start_daemon, write_config  # noqa: E402

WARM_TIMEOUT_S = 60.0
COMMAND_TIMEOUT_S = 60.0


def _zygote(daemon: psutil.Process) -> psutil.Process | None:
    named = [c for c in daemon.children() if c.name() == "agentd-zygote"]
    return named[0] if named else None


def _wait_warm(bench: BenchDaemon) -> None:
    """Until the daemon logs its zygote ready: read from its log file, so that waiting costs the
    daemon nothing (a `daemon.status` poll would add its own CPU to the daemon's figure)."""
    deadline = time.monotonic() + WARM_TIMEOUT_S
    while not _ready_logged(bench):
        if time.monotonic() > deadline:
            raise SystemExit(f"the zygote was not warm within {WARM_TIMEOUT_S:.0f} s")
        time.sleep(0.05)


def _ready_logged(bench: BenchDaemon) -> bool:
    return any(
        '"proc.ready"' in line and '"process": "zygote"' in line
        for line in bench.daemon.log_path.read_text().splitlines()
    )


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def _list_cpu(socket: Path, env: dict[str, str]) -> float:
    argv = [sys.executable, "-m", "agentd", "list", "--socket", str(socket)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        argv, capture_output=True, text=True, env={**os.environ, **env}, timeout=COMMAND_TIMEOUT_S
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"agentd list exited {done.returncode}: {done.stderr.strip()}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def one_run(workdir: Path, env: dict[str, str]) -> dict[str, float]:
    workdir.mkdir(parents=True)
    config = write_config(workdir, "", fast=False)
    bench = BenchDaemon(start_daemon(workdir, config, env))
    try:
        _wait_warm(bench)
        daemon = psutil.Process(bench.pid)
        zygote = _zygote(daemon)
        if zygote is None:
            raise SystemExit("the daemon reports its zygote warm, but has no agentd-zygote child")
        figures = {"daemon_s": _cpu(daemon), "zygote_s": _cpu(zygote)}
        _list_cpu(bench.socket, env)  # its bytecode written
        figures["list_s"] = _list_cpu(bench.socket, env)
        return figures
    finally:
        bench.stop()


def measure(runs: int, workdir: Path) -> dict[str, list[float]]:
    # The daemon's environment is this process's with `env` over it (tests/support/daemon.py): what
    # must not reach it is taken out here.
    for name in [k for k in os.environ if k.startswith(("AGENTD_", "XDG_", "PYTHONDONTWRITEBYTECODE"))]:
        del os.environ[name]
    env = {"HOME": str(workdir / "home"), "PYTHONPYCACHEPREFIX": str(workdir / "pycache")}
    one_run(workdir / "warm-up", env)
    samples: dict[str, list[float]] = {}
    for n in range(runs):
        for name, value in one_run(workdir / f"run-{n}", env).items():
            samples.setdefault(name, []).append(value)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="one run after the warm-up (CI)")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "startup_cpu.json"))
    args = parser.parse_args()
    runs = 1 if args.smoke else args.runs
    load = tuple(round(x, 2) for x in os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        samples = measure(runs, Path(tmp))
    load_end = tuple(round(x, 2) for x in os.getloadavg())
    left = strays([])
    rows: list[dict[str, Any]] = [
        {
            "process": name,
            "runs": len(values),
            "cpu_median_s": round(statistics.median(values), 3),
            "cpu_min_s": round(min(values), 3),
            "cpu_max_s": round(max(values), 3),
        }
        for name, values in samples.items()
    ]
    print(f"start-up CPU, {runs} runs, a daemon on the embedded defaults; load {load} -> {load_end}")
    print(f"{'process':<12} {'CPU p50 s':>10} {'min':>6} {'max':>6}")
    for row in rows:
        low, high = row["cpu_min_s"], row["cpu_max_s"]
        print(f"{row['process']:<12} {row['cpu_median_s']:>10.3f} {low:>6.3f} {high:>6.3f}")
    print(f"left behind: {len(left)} processes")
    write_json(
        Path(args.out),
        {
            "bench": "startup_cpu",
            "mode": "smoke" if args.smoke else "default",
            "date": time.strftime("%Y-%m-%d"),
            "load": [load, load_end],
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
            "runs": runs,
            "rows": rows,
            "strays": len(left),
        },
    )
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
