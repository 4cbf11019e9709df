"""`agentd mcp serve`: what an MCP client pays over the daemon's own clients, and how soon a
subscriber hears of a change.

Two phases against one real daemon (scripted models, `agentd mcp serve` over stdio, the SDK's
client):

- **round trip**: a one-turn task, `--rounds` times each, interleaved: `run_task` on a connected
  MCP client (progress asked for), the same submit-and-wait through agentd's API client on a warm
  socket (what `agentd submit --wait` does once imported), and the `agentd submit --wait` command
  itself (a process start included). Verdict: `run_task`'s median against the API's, target
  ≤ 1.2×; against the command it is reported only (the command's interpreter start dominates).
- **notifications**: `--tasks` tasks, each subscribed (`resources/subscribe`, 2025-11-25), whose
  models answer 20–29 s after starting; the delay from each task's end (`ended_at`, the daemon's
  clock) to its `notifications/resources/updated` arriving at the client (all of them heard
  through the server's one `task.watch` stream). Target p99 ≤ 100 ms.

    python bench/mcp_serve.py [--rounds 20] [--tasks 100] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import mcp_types as types  # noqa: E402
from mcp import Client, MCPDeprecationWarning, StdioServerParameters  # noqa: E402
from mcp.client.session import IncomingMessage  # noqa: E402

from agentd.api.client import ApiClient  # noqa: E402
from bench.daemon_procs import strays  # noqa: E402
from bench.samples import Summary, summarize, write_json  # noqa: E402
from protocol.api import (  # noqa: E402
    GetRequest,
    SubmitParams,
    SubmitRequest,
    TaskRef,
    TaskSpec,
    WaitParams,
    WaitRequest,
)
from tests.support.daemon import running_daemon, scripted  # noqa: E402

TARGET_RATIO = 1.2
TARGET_P99_MS = 100.0
TIMEOUT_S = 120.0
SLOW_MODELS = 10  # answer after 20, 21, … 29 s: the ends spread over ten seconds
SLOW_BASE_S = 20.0


def _body(workdir: Path) -> str:
    models = scripted("fast", [{"text": "forty-two"}], workdir)
    for k in range(SLOW_MODELS):
        models += scripted(f"slow{k}", [{"text": "late", "delay_s": SLOW_BASE_S + k}], workdir)
    return models + '[defaults]\nmodel = "fast"\n'


def _server(socket: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "agentd", "mcp", "serve", "--socket", str(socket)]
    )


# ---- round trip ----------------------------------------------------------------------------


def _api_round(socket: Path) -> float:
    started = time.perf_counter()
    with ApiClient(str(socket), timeout_s=TIMEOUT_S) as api:
        task_id = api.call(SubmitRequest(params=SubmitParams(spec=TaskSpec(instruction="answer")))).task_id
        api.call(WaitRequest(params=WaitParams(task_id=task_id, timeout_s=TIMEOUT_S)))
    return time.perf_counter() - started


def _cli_round(socket: Path) -> float:
    started = time.perf_counter()
    command = [sys.executable, "-m", "agentd", "submit", "--socket", str(socket), "--wait", "answer"]
    subprocess.run(command, check=True, capture_output=True, timeout=TIMEOUT_S)
    return time.perf_counter() - started


async def _mcp_round(client: Client) -> float:
    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        pass

    started = time.perf_counter()
    done = await client.call_tool("run_task", {"instruction": "answer"}, progress_callback=on_progress)
    elapsed = time.perf_counter() - started
    if done.is_error or done.structured_content is None or done.structured_content["status"] != "completed":
        raise RuntimeError(f"run_task did not complete: {done.content}")
    return elapsed


async def round_trips(socket: Path, rounds: int) -> dict[str, Summary]:
    samples: dict[str, list[float]] = {"run_task": [], "api": [], "cli": []}
    async with Client(_server(socket), mode="legacy", read_timeout_seconds=TIMEOUT_S) as client:
        await _mcp_round(client)  # warm: the daemon's zygote, the server's threads
        for _ in range(rounds):
            samples["run_task"].append(await _mcp_round(client))
            samples["api"].append(await anyio.to_thread.run_sync(_api_round, socket))
            samples["cli"].append(await anyio.to_thread.run_sync(_cli_round, socket))
    return {name: summarize(values) for name, values in samples.items()}


# ---- notifications -------------------------------------------------------------------------


class Heard:
    """When each URI's `resources/updated` arrived (wall clock, as the daemon's `ended_at`)."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}
        self.count = 0

    async def handle(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.last[str(message.params.uri)] = time.time()
            self.count += 1


def _submit_slow(socket: Path, tasks: int) -> list[str]:
    specs = [TaskSpec(instruction=f"wait {i}", model=f"slow{i % SLOW_MODELS}") for i in range(tasks)]
    with ApiClient(str(socket), timeout_s=TIMEOUT_S) as api:
        return [api.call(SubmitRequest(params=SubmitParams(spec=spec))).task_id for spec in specs]


def _ended_at(socket: Path, task_ids: list[str]) -> dict[str, float]:
    ended: dict[str, float] = {}
    with ApiClient(str(socket), timeout_s=TIMEOUT_S) as api:
        for task_id in task_ids:
            view = api.call(WaitRequest(params=WaitParams(task_id=task_id, timeout_s=TIMEOUT_S)))
            view = api.call(GetRequest(params=TaskRef(task_id=view.task_id)))
            if view.ended_at is not None:
                ended[task_id] = view.ended_at
    return ended


async def _until(check: Callable[[], bool], timeout_s: float, poll: Callable[[], Awaitable[None]]) -> None:
    with anyio.fail_after(timeout_s):
        while not check():
            await poll()


async def notification_delays(socket: Path, tasks: int) -> dict[str, Any]:
    heard = Heard()
    task_ids = await anyio.to_thread.run_sync(_submit_slow, socket, tasks)
    async with Client(
        _server(socket), mode="legacy", read_timeout_seconds=TIMEOUT_S, message_handler=heard.handle
    ) as client:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)  # the 2025-11-25 era's subscribe
            for task_id in task_ids:
                await client.session.subscribe_resource(f"agentd://tasks/{task_id}")
        ended = await anyio.to_thread.run_sync(_ended_at, socket, task_ids)
        uris = {task_id: f"agentd://tasks/{task_id}" for task_id in task_ids}

        def all_heard() -> bool:
            return all(heard.last.get(uris[t], 0.0) >= ended[t] for t in ended)

        await _until(all_heard, 10.0, lambda: anyio.sleep(0.05))
    delays = {t: heard.last[uris[t]] - ended[t] for t in ended}
    return {
        "tasks": tasks,
        "ended": len(ended),
        "updates": heard.count,
        "delay": summarize(list(delays.values())),
    }


# ---- the run -------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--smoke", action="store_true", help="3 rounds, 10 tasks (CI): no verdict")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "mcp_serve.json"))
    args = parser.parse_args()
    rounds, tasks = (3, 10) if args.smoke else (args.rounds, args.tasks)
    load = tuple(round(x, 2) for x in os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        daemon_lines = f"max_concurrent_tasks = {max(8, tasks)}\n"
        with running_daemon(workdir, _body(workdir), daemon_lines=daemon_lines) as daemon:
            trips = anyio.run(round_trips, daemon.socket, rounds)
            notified = anyio.run(notification_delays, daemon.socket, tasks)
            daemon_pid = daemon.pid
    load_end = tuple(round(x, 2) for x in os.getloadavg())
    left = strays([daemon_pid])
    ratio = trips["run_task"].p50_ms / trips["api"].p50_ms
    ratio_cli = trips["run_task"].p50_ms / trips["cli"].p50_ms
    delay: Summary = notified["delay"]
    ok = ratio <= TARGET_RATIO and delay.p99_ms <= TARGET_P99_MS and notified["ended"] == tasks
    verdict = "ok" if args.smoke or ok else "MISS"
    mode = "smoke" if args.smoke else "default"
    print(f"agentd mcp serve, {rounds} rounds, {tasks} subscribed tasks; {mode}; load {load} -> {load_end}")
    print(f"{'what':>34} {'n':>5} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    rows = [
        ("run_task (MCP, stdio)", trips["run_task"]),
        ("submit + wait (API client)", trips["api"]),
        ("agentd submit --wait (command)", trips["cli"]),
        ("task end -> resources/updated", delay),
    ]
    for name, s in rows:
        print(f"{name:>34} {s.count:>5} {s.p50_ms:>8.1f} {s.p90_ms:>8.1f} {s.p99_ms:>8.1f} {s.max_ms:>8.1f}")
    print(
        f"run_task / API p50 {ratio:.2f}x (target <= {TARGET_RATIO}x), / command {ratio_cli:.2f}x;"
        f" update p99 {delay.p99_ms:.1f} ms (target <= {TARGET_P99_MS:g} ms); {verdict};"
        f" processes left {len(left)}"
    )
    results: dict[str, Any] = {
        "benchmark": "mcp_serve",
        "mode": mode,
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_avg": {"start": load, "end": load_end},
        "rounds": rounds,
        "round_trip": {name: asdict(s) for name, s in trips.items()},
        "ratio_run_task_to_api_p50": ratio,
        "ratio_run_task_to_command_p50": ratio_cli,
        "notifications": {**notified, "delay": asdict(delay)},
        "targets": {"ratio": TARGET_RATIO, "update_p99_ms": TARGET_P99_MS},
        "verdict": verdict,
        "left": len(left),
    }
    write_json(Path(args.out), results)
    return 0 if verdict == "ok" and not left else 1


if __name__ == "__main__":
    sys.exit(main())
