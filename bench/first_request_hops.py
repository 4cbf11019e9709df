"""Where submit → first model request goes: the time of each hop, from the daemon's own log lines.

A real daemon (zygote spawner, warm) and real subagents against the fake OpenAI-compatible model.
Tasks are submitted one at a time; for each, the bench notes the submit and its ack, the daemon's
log lines for the task (`task.submitted` once committed, `subagent.spawn` once forked and journaled
`starting`, `task.started` once journaled `running`, `subagent.ready` once the child read its task,
`loop.start`) and the fake model's arrival time of the first request. Each hop is printed as the
median time since the submit (log lines carry milliseconds, so hops are ±1 ms). No target of its
own: it says which part of the 25 ms (root) / 50 ms (nested) budget each stage spends.

    python bench/first_request_hops.py [--tasks 30] [--smoke] [--out bench/results/first_request_hops.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from agentd.api.client import ApiClient  # noqa: E402
from bench.daemon_procs import open_daemon, strays  # noqa: E402
from bench.daemon_subagent import endpoints_toml  # noqa: E402
from bench.samples import write_json  # noqa: E402
from bench.throughput import zygote_warm  # noqa: E402
from protocol.api import SubmitParams, SubmitRequest, TaskSpec, WaitParams, WaitRequest  # noqa: E402
from tests.support.fake_llm import FakeLLM  # noqa: E402

# The daemon's lines for a task, in the order a spawn passes them.
HOPS = ("task.submitted", "subagent.spawn", "task.started", "subagent.ready", "loop.start")
WARMUP = 2
TIMEOUT_S = 60.0


def _wall(ts: str) -> float:
    moment = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.replace(tzinfo=datetime.UTC).timestamp()


def measure(tasks: int) -> dict[str, list[float]]:
    """Per hop, each task's ms since its submit (the first `WARMUP` tasks left out)."""
    # The fake model stamps requests on the monotonic clock, the daemon's log on the wall clock.
    offset = time.time() - time.monotonic()
    samples: list[tuple[str, float, float, float]] = []
    with (
        FakeLLM() as quick,
        FakeLLM() as hang,
        tempfile.TemporaryDirectory() as tmp,
        open_daemon(Path(tmp), endpoints_toml(quick, hang)) as bench,
    ):
        zygote_warm(bench)
        with ApiClient(bench.socket, timeout_s=TIMEOUT_S) as api:
            for index in range(tasks + WARMUP):
                seen = len(quick.requests)
                spec = TaskSpec(instruction=f"one word ({index})", model="quick")
                submitted = time.time()
                task_id = api.call(SubmitRequest(params=SubmitParams(spec=spec))).task_id
                acked = time.time()
                request = quick.wait_requests_blocking(seen + 1, timeout_s=TIMEOUT_S)[seen]
                api.call(WaitRequest(params=WaitParams(task_id=task_id, timeout_s=TIMEOUT_S)))
                samples.append((task_id, submitted, acked, request.at + offset))
        text = bench.daemon.log_path.read_text(errors="replace")
    lines = [json.loads(line) for line in text.splitlines() if line[:1] == "{"]
    first: dict[tuple[str, str], float] = {}
    for line in lines:
        if line.get("event") in HOPS and isinstance(line.get("task_id"), str):
            first.setdefault((line["task_id"], line["event"]), _wall(line["ts"]))
    hops: dict[str, list[float]] = {name: [] for name in ("ack", *HOPS, "first model request")}
    for task_id, submitted, acked, requested in samples[WARMUP:]:
        hops["ack"].append((acked - submitted) * 1000)
        for name in HOPS:
            if (task_id, name) in first:
                hops[name].append((first[(task_id, name)] - submitted) * 1000)
        hops["first model request"].append((requested - submitted) * 1000)
    return hops


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--smoke", action="store_true", help="3 tasks (CI): runs, not figures")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "first_request_hops.json"))
    args = parser.parse_args(argv)
    tasks = 3 if args.smoke else args.tasks
    load = tuple(round(x, 2) for x in os.getloadavg())
    hops = measure(tasks)
    left = strays([])
    mode = "smoke" if args.smoke else "default"
    print(f"submit -> first model request, by hop (ms since the submit); {mode}; load at start {load}")
    print(f"{'hop':<22} {'p50':>7} {'min':>7} {'max':>7} {'n':>4}")
    table: dict[str, dict[str, float]] = {}
    for name, values in hops.items():
        if not values:
            continue
        row = {"p50": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}
        table[name] = row
        print(f"{name:<22} {row['p50']:>7.1f} {row['min']:>7.1f} {row['max']:>7.1f} {len(values):>4}")
    print(f"processes left: {len(left)}")
    results: dict[str, Any] = {
        "benchmark": "first_request_hops",
        "mode": mode,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_start": load},
        "hops_ms": table,
        "samples_ms": hops,
        "left": len(left),
    }
    write_json(Path(args.out), results)
    complete = all(len(values) == tasks for values in hops.values())
    return 0 if complete and not left else 1


if __name__ == "__main__":
    sys.exit(main())
