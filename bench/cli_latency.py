"""How fast a client command answers: median wall time of `agentd status`, `submit --json`, `list`.

A real daemon on the embedded defaults (a configuration with nothing but its socket and state
directory: the scripted model) in a temporary directory; each command runs `--runs` times as a
fresh process (`python -m agentd`; `status` also as the `agentd` console script a person's shell
runs, when the interpreter has one beside it), one after the other, with a private HOME and no
`AGENTD_*` variable, so no other configuration is read. Each command runs once unmeasured first,
with bytecode written to a private cache (`PYTHONPYCACHEPREFIX`, even where the environment says
`PYTHONDONTWRITEBYTECODE`): an installed package has its bytecode, and compiling the sources on
every run would measure the compiler. `python -c pass` is the floor: the interpreter's own start
with this environment's site-packages. `status` asks about a task that has ended; every
`submit --json` queues a task the daemon then runs, so `submit` is measured last. Wall time is
the parent's clock around each process; CPU is the child's user + system time
(`RUSAGE_CHILDREN`). Target: ≤ 0.3 s wall for `status` and `submit --json` on a quiet machine
(docs/decisions.md, "A read path without the models").

    python bench/cli_latency.py [--runs 20] [--smoke] [--out bench/results/cli_latency.json]
"""

from __future__ import annotations

import argparse
import json
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

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.daemon_procs import open_daemon, strays  # noqa: E402
from bench.samples import write_json  # noqa: E402

TARGET_S = 0.3
TARGETED = ("agentd status TASK", "status, console script", "agentd submit … --json")
COMMAND_TIMEOUT_S = 60.0


def _env(home: Path, pycache: Path) -> dict[str, str]:
    skip = ("AGENTD_", "XDG_", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    return {**clean, "HOME": str(home), "PYTHONPYCACHEPREFIX": str(pycache)}


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """One command: its wall time, its CPU time (s) and its stdout; it must exit 0."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=COMMAND_TIMEOUT_S)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[2:])} exited {done.returncode}: {done.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def _row(name: str, samples: list[tuple[float, float]]) -> dict[str, Any]:
    walls = sorted(w for w, _ in samples)
    cpus = sorted(c for _, c in samples)
    return {
        "command": name,
        "runs": len(samples),
        "wall_median_s": round(statistics.median(walls), 3),
        "wall_min_s": round(walls[0], 3),
        "wall_max_s": round(walls[-1], 3),
        "cpu_median_s": round(statistics.median(cpus), 3),
    }


def measure(runs: int, workdir: Path) -> list[dict[str, Any]]:
    env = _env(workdir / "home", workdir / "pycache")
    with open_daemon(workdir / "daemon", "", fast=False) as bench:
        agentd = [sys.executable, "-m", "agentd"]
        where = ["--socket", str(bench.socket)]
        task_id = json.loads(_timed([*agentd, "submit", "warm up", "--wait", "--json", *where], env)[2])[
            "task_id"
        ]
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "agentd status TASK": [*agentd, "status", task_id, *where],
        }
        script = Path(sys.executable).with_name("agentd")
        if script.exists():
            commands["status, console script"] = [str(script), "status", task_id, *where]
        commands["agentd list"] = [*agentd, "list", *where]
        commands["agentd submit … --json"] = [*agentd, "submit", "measure me", "--json", *where]
        rows = []
        for name, argv in commands.items():
            _timed(argv, env)  # bytecode written, caches warm
            samples = [_timed(argv, env)[:2] for _ in range(runs)]
            rows.append(_row(name, samples))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="3 runs each (CI): no verdict")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "cli_latency.json"))
    args = parser.parse_args()
    runs = 3 if args.smoke else args.runs
    load = tuple(round(x, 2) for x in os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        rows = measure(runs, Path(tmp))
    load_end = tuple(round(x, 2) for x in os.getloadavg())
    left = strays([])
    print(
        f"client command latency, {runs} runs each, a daemon on the embedded defaults;"
        f" load {load} -> {load_end}"
    )
    print(f"{'command':<24} {'wall p50 s':>10} {'min':>6} {'max':>6} {'CPU p50 s':>10} {'target':>7}")
    for row in rows:
        target = f"≤ {TARGET_S:g}" if row["command"] in TARGETED else ""
        print(
            f"{row['command']:<24} {row['wall_median_s']:>10.3f} {row['wall_min_s']:>6.3f}"
            f" {row['wall_max_s']:>6.3f} {row['cpu_median_s']:>10.3f} {target:>7}"
        )
    print(f"left behind: {len(left)} processes")
    write_json(
        Path(args.out),
        {
            "bench": "cli_latency",
            "mode": "smoke" if args.smoke else "default",
            "date": time.strftime("%Y-%m-%d"),
            "load": [load, load_end],
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
            "runs": runs,
            "target_wall_s": TARGET_S,
            "rows": rows,
            "strays": len(left),
        },
    )
    return 0 if not left else 1


if __name__ == "__main__":
    sys.exit(main())
