"""Provider limits under load: a provider that allows 2 requests in flight and 60 a minute (and
answers 429 + Retry-After over them), 200 one-turn tasks at a concurrency of 8, with and without
the daemon's `[intelligence.NAME]` limits.

Reported per run: the provider's 429 count (target with limits: ≤ 1 % of requests), tasks
completed, wall time, and the slot overhead per request — `slot_ms` of `intel.result`, measured in
the subagent from asking for a slot to holding it: the round trip to the supervisor, or taking a
standing slot and reporting its start — p50 in a third run whose limits never bind (target
≤ 1 ms), with how many requests started under a standing slot. `--quick` is the CI smoke size.
Prints a table and writes JSON to `bench/results/provider_limits.json`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.daemon_procs import open_daemon
from bench.samples import Summary, summarize
from protocol.api import (
    EventsParams,
    EventsRequest,
    EventView,
    SubmitParams,
    SubmitRequest,
    TaskSpec,
    WaitParams,
    WaitRequest,
)
from tests.support.daemon import Daemon
from tests.support.fake_llm import FakeLLM, ProviderLimits, chat

RESULTS = Path(__file__).parent / "results" / "provider_limits.json"
WAIT_S = 900.0


@dataclass(frozen=True, slots=True)
class Run:
    name: str
    tasks: int
    completed: int
    requests: int
    rejected_429: int
    wall_s: float
    slot: Summary
    standing: int


def endpoint(fake: FakeLLM, limits: str) -> str:
    return (
        f'[intelligence.p]\nkind = "openai"\nbase_url = "{fake.base_url}"\nmodel = "m"\n{limits}'
        '[defaults]\nmodel = "p"\n[loop]\ntransport_retries = 10\n'
    )


def run_tasks(daemon: Daemon, count: int) -> tuple[int, list[float], int]:
    """Submit `count` tasks and wait for all; how many completed, every `slot_ms` seen, and how
    many requests started under a standing slot."""
    with daemon.client(timeout_s=WAIT_S + 30) as client:
        ids = [
            client.call(SubmitRequest(params=SubmitParams(spec=TaskSpec(instruction=f"task {i}")))).task_id
            for i in range(count)
        ]

    def wait(task_id: str) -> tuple[bool, list[float], int]:
        with daemon.client(timeout_s=WAIT_S + 30) as client:
            view = client.call(WaitRequest(params=WaitParams(task_id=task_id, timeout_s=WAIT_S)))
            events = [
                item
                for item in client.stream(
                    EventsRequest(params=EventsParams(task_id=task_id)), idle_timeout_s=30
                )
                if isinstance(item, EventView)
            ]
        slots = [
            float(slot) / 1000
            for e in events
            if e.event == "intel.result" and isinstance(slot := e.fields.get("slot_ms"), int | float)
        ]
        standing = sum(e.event == "intel.result" and e.fields.get("slot_standing") is True for e in events)
        return view.status is not None and view.status.value == "completed", slots, standing

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(wait, ids))
    slots = [s for _, task_slots, _ in results for s in task_slots]
    return sum(ok for ok, _, _ in results), slots, sum(standing for _, _, standing in results)


def one_run(name: str, args: argparse.Namespace, provider: ProviderLimits, limits: str, workdir: Path) -> Run:
    reply = dataclasses.replace(chat("done"), delay_s=args.reply_s)
    with FakeLLM(reply, limits=provider) as fake:
        # Every task is submitted at once: more than the per-user queue cap's default.
        lines = f"max_concurrent_tasks = {args.concurrency}\nmax_queued_per_uid = {max(args.tasks, 100)}\n"
        # The default supervision: a throttled task waits minutes for its slot at 60 a minute, and the
        # tests' 0.6 s pong bound judged children unresponsive whenever the loaded machine paused.
        with open_daemon(workdir / name, endpoint(fake, limits), daemon_lines=lines, fast=False) as bench:
            started = time.monotonic()
            completed, slots, standing = run_tasks(bench.daemon, args.tasks)
            wall_s = time.monotonic() - started
        requests, rejected = len(fake.requests), fake.rejected
        wall = round(wall_s, 2)
        return Run(name, args.tasks, completed, requests, rejected, wall, summarize(slots), standing)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--in-flight", type=int, default=2, help="the provider's concurrent requests")
    parser.add_argument("--per-minute", type=int, default=60, help="the provider's requests a minute")
    parser.add_argument("--reply-s", type=float, default=0.05, help="the provider's time to answer")
    parser.add_argument("--quick", action="store_true", help="smoke: 40 tasks (unless --tasks), 600 a minute")
    args = parser.parse_args()
    if args.quick:
        args.tasks = 40 if args.tasks == 200 else args.tasks
        args.per_minute = 600
    provider = ProviderLimits(max_in_flight=args.in_flight, per_minute=args.per_minute, retry_after="1")
    limited = f"max_concurrent_requests = {args.in_flight}\nrequests_per_minute = {args.per_minute}\n"
    generous = "max_concurrent_requests = 10000\n"
    with tempfile.TemporaryDirectory(prefix="agentd-bench-limits-") as tmp:
        workdir = Path(tmp)
        runs = [
            one_run("with limits", args, provider, limited, workdir),
            one_run("without limits", args, provider, "", workdir),
            one_run("limits never binding", args, ProviderLimits(), generous, workdir),
        ]
    head = f"{'run':<22} {'tasks':>5} {'done':>5} {'requests':>8} {'429s':>5} {'429 %':>6} {'wall s':>7}"
    print(f"{head} {'slot p50 ms':>11} {'standing':>8}")
    for run in runs:
        share = 100 * run.rejected_429 / max(run.requests, 1)
        slot = f"{run.slot.p50_ms:.3f}" if run.slot.count else "-"
        print(
            f"{run.name:<22} {run.tasks:>5} {run.completed:>5} {run.requests:>8} {run.rejected_429:>5} "
            f"{share:>6.1f} {run.wall_s:>7.1f} {slot:>11} {run.standing:>8}"
        )
    limited_run, _, free_run = runs
    verdict = {
        "429_share_with_limits_le_1pct": limited_run.rejected_429 <= 0.01 * max(limited_run.requests, 1),
        "slot_p50_le_1ms_unthrottled": free_run.slot.count > 0 and free_run.slot.p50_ms <= 1.0,
    }
    print("targets:", ", ".join(f"{k}: {'met' if v else 'missed'}" for k, v in verdict.items()))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
                "args": vars(args),
                "runs": [dataclasses.asdict(run) for run in runs],
                "targets": verdict,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
