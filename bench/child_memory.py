"""Subagent memory with many live children forked from the zygote: USS each, PSS sum, daemon RSS.

A real `agentd serve` (zygote spawner, no MCP server) and a fake model that accepts every request
and never answers, so each task's subagent is alive and parked in its first model call — the
state a long model call leaves it in. Once the zygote is warm, `--children` tasks are submitted;
when the model has seen all their requests the bench reads each subagent's USS (the pages only it
has: what it wrote after the fork), PSS and RSS from /proc/PID/smaps_rollup, and the daemon's RSS.
The target (at 1,000 children) is USS ≤ 8 MiB each. It also prints each child's minor
faults (copy-on-write copies, mostly) and CPU from its fork to the measurement, medians.

    python bench/child_memory.py [--children 100] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from agentd.api.client import ApiClient  # noqa: E402
from bench.daemon_procs import MIB, open_daemon, strays  # noqa: E402
from bench.samples import write_json  # noqa: E402
from bench.throughput import zygote_warm  # noqa: E402
from protocol.api import SubmitParams, SubmitRequest, TaskSpec  # noqa: E402
from tests.support.fake_llm import FakeLLM, Hang  # noqa: E402

TARGET_USS_MIB = 8.0
WAIT_S = 300.0


def fork_costs(pid: int) -> tuple[int, float]:
    """A child's minor page faults (each a copy-on-write copy or a first touch) and CPU so far (ms,
    every thread's run time from /proc/PID/task/*/schedstat), both counted from its fork."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    minflt = int(fields[7])  # field 10 of proc(5), counted after the ")" that ends the name
    ns = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            ns += int(f.read().split()[0])
    return minflt, ns / 1e6


def measure(children: int, base: Path) -> dict[str, Any]:
    with FakeLLM(default=Hang()) as fake:
        body = (
            f'[intelligence.fake]\nkind = "openai"\nbase_url = "{fake.base_url}"\nmodel = "m"\n'
            '[defaults]\nmodel = "fake"\n'
        )
        lines = f"max_concurrent_tasks = {children}\n"
        with open_daemon(base, body, daemon_lines=lines) as bench:
            zygote_warm(bench)
            with ApiClient(bench.socket, timeout_s=30) as api:
                for i in range(children):
                    api.call(SubmitRequest(params=SubmitParams(spec=TaskSpec(instruction=f"park {i}"))))
            fake.wait_requests_blocking(children, timeout_s=WAIT_S)
            time.sleep(1.0)  # let each child settle in its wait (its last frames, its heartbeat)
            uss, pss, rss, faults, cpu_ms = [], [], [], [], []
            for proc in bench.observe():
                try:
                    if proc.name() != "agentd-subagent":
                        continue
                    info = proc.memory_full_info()
                    minflt, ms = fork_costs(proc.pid)
                except (psutil.Error, OSError):
                    continue
                uss.append(info.uss / MIB)
                pss.append(info.pss / MIB)
                rss.append(info.rss / MIB)
                faults.append(minflt)
                cpu_ms.append(ms)
            daemon_rss = bench.rss_mb()
    if len(uss) != children:
        raise RuntimeError(f"measured {len(uss)} subagents, expected {children}")
    return {
        "children": children,
        "uss_mib": {"mean": statistics.fmean(uss), "median": statistics.median(uss), "max": max(uss)},
        "pss_sum_mib": sum(pss),
        "minor_faults_median": statistics.median(faults),
        "cpu_ms_median": statistics.median(cpu_ms),
        "rss_mean_mib": statistics.fmean(rss),
        "daemon_rss_mib": daemon_rss,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--children", type=int, default=100)
    parser.add_argument("--smoke", action="store_true", help="5 children (CI): runs, not targets")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "child_memory.json"))
    args = parser.parse_args()
    children = 5 if args.smoke else args.children
    load = tuple(round(x, 2) for x in os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        row = measure(children, Path(tmp))
    left = strays([])
    uss = row["uss_mib"]
    verdict = "ok" if args.smoke or uss["median"] <= TARGET_USS_MIB else "MISS"
    mode = "smoke" if args.smoke else "default"
    print(f"subagent memory, {children} live subagents forked from the zygote; {mode}; load {load}")
    print(f"USS each: median {uss['median']:.2f}, mean {uss['mean']:.2f}, max {uss['max']:.2f} MiB")
    print(f"PSS sum {row['pss_sum_mib']:.1f} MiB; RSS mean {row['rss_mean_mib']:.1f} MiB;")
    faults, cpu = row["minor_faults_median"], row["cpu_ms_median"]
    print(f"per child (median): {faults:.0f} minor faults, {cpu:.1f} ms CPU")
    print(f"daemon RSS {row['daemon_rss_mib']:.1f} MiB; target USS <= {TARGET_USS_MIB:g} MiB: {verdict}")
    print(f"processes left {len(left)}")
    results = {
        "benchmark": "child_memory",
        "mode": mode,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_start": load},
        **row,
        "target_uss_mib": TARGET_USS_MIB,
        "verdict": verdict,
        "left": len(left),
    }
    out = Path(args.out)
    write_json(out, results)
    return 0 if verdict == "ok" and not left else 1


if __name__ == "__main__":
    sys.exit(main())
