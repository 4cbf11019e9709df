"""One-turn tasks completed per second through a real daemon (scripted model, zygote spawner).

A real `agentd serve` with a scripted model whose one turn answers with text, and
`max_concurrent_tasks` raised to `--concurrency`. Once `daemon.status` says the zygote is warm,
`--clients` connections submit `--tasks` tasks back to back (each `task.submit` acknowledged after
its commit) while the bench polls `daemon.status` until nothing is queued or running; the figure
is tasks / (first submit → all terminal). Every task must end `completed`. The bench first waits
(`task.wait`) for the last task each client submitted and only then polls `daemon.status`: a
status call costs the daemon ~2 ms of CPU, so polling it every 10 ms through the whole run was
counted as ~half of the daemon's CPU per task (and took that CPU from the tasks). A warm-up batch runs
first (the first forks touch pages the rest share). The daemon's and its children's CPU over the
measured batch is printed per task, the daemon's split into its event loop's thread and the rest
(the journal writer, read workers), and so is the CPU of this bench's own submitting clients: they
run in this process, so none of it is counted as the daemon's, but on a small machine they take
CPU from the tasks. Last, the same run measures this machine's floor under any of it
(`bench/fork_floor.py`): what forking a process built as the zygote builds itself costs per child.

    python bench/throughput.py [--tasks 600] [--concurrency 8 32] [--clients 4] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from agentd.api.client import ApiClient  # noqa: E402
from bench import fork_floor  # noqa: E402
from bench.daemon_procs import BenchDaemon, open_daemon, strays  # noqa: E402
from bench.machine import CpuMeter  # noqa: E402
from bench.samples import write_json  # noqa: E402
from protocol.api import (  # noqa: E402
    ListParams,
    ListRequest,
    StatusRequest,
    SubmitParams,
    SubmitRequest,
    TaskSpec,
    WaitParams,
    WaitRequest,
)
from tests.support.daemon import scripted  # noqa: E402

TARGET_PER_S = 150.0
CALL_TIMEOUT_S = 30.0
RUN_TIMEOUT_S = 300.0
WARMUP = 20


def zygote_warm(bench: BenchDaemon, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    with ApiClient(bench.socket, timeout_s=CALL_TIMEOUT_S) as api:
        while api.call(StatusRequest()).zygote != "warm":
            if time.monotonic() > deadline:
                raise RuntimeError("the zygote never became warm")
            time.sleep(0.05)


@dataclass(frozen=True, slots=True)
class TreeCpu:
    """CPU seconds of a daemon's tree: the daemon itself, its zygote (and the zygote's reaped
    intermediates), and the subagents (reaped by the daemon, a subreaper, or still live)."""

    daemon: float
    zygote: float
    subagents: float

    def minus(self, other: TreeCpu) -> TreeCpu:
        return TreeCpu(
            self.daemon - other.daemon, self.zygote - other.zygote, self.subagents - other.subagents
        )


def _times(proc: psutil.Process) -> tuple[float, float]:
    t = proc.cpu_times()
    return t.user + t.system, t.children_user + t.children_system


def tree_cpu(pid: int) -> TreeCpu:
    daemon = zygote = subagents = 0.0
    try:
        root = psutil.Process(pid)
        daemon, subagents = _times(root)
        for proc in root.children(recursive=True):
            own, reaped = _times(proc)
            if proc.name() == "agentd-zygote":
                zygote += own + reaped
            else:
                subagents += own + reaped
    except psutil.Error:
        pass
    return TreeCpu(daemon, zygote, subagents)


def loop_thread_cpu(pid: int) -> float:
    """CPU seconds of the daemon's main thread, the one that runs its event loop."""
    try:
        with open(f"/proc/{pid}/task/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    """CPU seconds of this process (the submitting clients' threads), its children not included.
    `process_time` counts in nanoseconds, where `/proc` counts clock ticks: 20 tasks' clients (the
    smoke run) can stay under one 10 ms tick."""
    return time.process_time()


def run_batch(bench: BenchDaemon, tasks: int, clients: int, label: str) -> dict[str, float]:
    """Submit `tasks` from `clients` connections; wait until none is queued or running."""
    errors: list[BaseException] = []
    last_ids: list[str] = []
    per_client = [tasks // clients + (1 if i < tasks % clients else 0) for i in range(clients)]
    spec = TaskSpec(instruction=f"one turn ({label})", labels={"bench": label})
    submit = SubmitRequest(params=SubmitParams(spec=spec))

    def client(count: int) -> None:
        try:
            with ApiClient(bench.socket, timeout_s=CALL_TIMEOUT_S) as api:
                task_id = None
                for _ in range(count):
                    task_id = api.call(submit).task_id
            if task_id is not None:
                last_ids.append(task_id)
        except BaseException as exc:  # noqa: BLE001 — reported by the main thread
            errors.append(exc)

    cpu_before, loop_before, client_before = tree_cpu(bench.pid), loop_thread_cpu(bench.pid), own_cpu()
    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,)) for n in per_client]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=RUN_TIMEOUT_S)
    submitted_s = time.monotonic() - started
    if errors:
        raise RuntimeError(f"a submitting client failed: {errors[0]!r}") from errors[0]
    deadline = started + RUN_TIMEOUT_S
    with ApiClient(bench.socket, timeout_s=CALL_TIMEOUT_S) as api:
        for task_id in last_ids:  # one blocking call each, not a poll every 10 ms through the run
            left_s = max(1.0, deadline - time.monotonic())
            api.call(WaitRequest(params=WaitParams(task_id=task_id, timeout_s=left_s)), timeout_s=left_s + 5)
        while True:
            status = api.call(StatusRequest())
            if status.queued + status.running == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{status.queued + status.running} tasks still not terminal")
            time.sleep(0.01)
    elapsed = time.monotonic() - started
    cpu = tree_cpu(bench.pid).minus(cpu_before)
    loop_cpu, client_cpu = loop_thread_cpu(bench.pid) - loop_before, own_cpu() - client_before
    statuses = task_statuses(bench, label)
    if statuses.get("completed", 0) != tasks:
        raise RuntimeError(f"not every task completed: {statuses}")
    return {
        "tasks": tasks,
        "submitted_s": round(submitted_s, 3),
        "elapsed_s": round(elapsed, 3),
        "per_s": round(tasks / elapsed, 1),
        "cpu_ms_per_task": round((cpu.daemon + cpu.zygote + cpu.subagents) * 1000 / tasks, 2),
        "daemon_cpu_ms_per_task": round(cpu.daemon * 1000 / tasks, 2),
        "daemon_loop_cpu_ms_per_task": round(loop_cpu * 1000 / tasks, 2),
        "client_cpu_ms_per_task": round(client_cpu * 1000 / tasks, 2),
        "zygote_cpu_ms_per_task": round(cpu.zygote * 1000 / tasks, 2),
        "subagent_cpu_ms_per_task": round(cpu.subagents * 1000 / tasks, 2),
    }


def task_statuses(bench: BenchDaemon, label: str) -> dict[str, int]:
    """Terminal status (or state) of every task of batch `label`, counted."""
    counts: dict[str, int] = {}
    before: str | None = None
    with ApiClient(bench.socket, timeout_s=CALL_TIMEOUT_S) as api:
        while True:
            page = api.call(ListRequest(params=ListParams(limit=1000, before=before)))
            for task in page:
                if task.instruction != f"one turn ({label})":
                    continue
                key = task.status.value if task.status else task.state
                counts[key] = counts.get(key, 0) + 1
            if len(page) < 1000:
                return counts
            before = page[-1].task_id


def measure(concurrency: int, tasks: int, clients: int, base: Path) -> dict[str, Any]:
    workdir = base / f"c{concurrency}"
    workdir.mkdir(parents=True)
    body = scripted("one", [{"text": "done"}], workdir) + '[defaults]\nmodel = "one"\n'
    lines = f"max_concurrent_tasks = {concurrency}\nmax_queued_per_uid = {tasks + WARMUP}\n"
    with open_daemon(workdir, body, daemon_lines=lines) as bench:
        zygote_warm(bench)
        run_batch(bench, min(WARMUP, tasks), clients, "warmup")
        meter = CpuMeter()
        batch = run_batch(bench, tasks, clients, "measured")
        machine = meter.stop()
        daemon_rss_mb = bench.rss_mb()
    left = bench.left_after_drain
    return {
        "concurrency": concurrency,
        **batch,
        "machine": asdict(machine),
        "daemon_rss_mb": daemon_rss_mb,
        "left_after_drain": left,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=600)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--smoke", action="store_true", help="20 tasks at 4 (CI): runs, not targets")
    parser.add_argument("--dir", default=None, help="where the daemons' state goes (default: a temp dir)")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "throughput.json"))
    args = parser.parse_args()
    tasks, levels = (20, [4]) if args.smoke else (args.tasks, args.concurrency)
    load = tuple(round(x, 2) for x in os.getloadavg())
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for level in levels:
            rows.append(measure(level, tasks, args.clients, Path(tmp)))
    left = strays([])
    best = max(r["per_s"] for r in rows)
    verdict = "ok" if args.smoke or best >= TARGET_PER_S else "MISS"
    mode = "smoke" if args.smoke else "default"
    cpus = os.cpu_count()
    print(f"one-turn tasks per second (scripted model, zygote); {mode}; {cpus} CPUs; load at start {load}")
    print(
        f"{'concurrency':>11} {'tasks':>6} {'submits s':>10} {'all done s':>11} {'tasks/s':>8}"
        f" {'CPU ms/task: all':>17} {'daemon':>7} {'(loop)':>7} {'zygote':>7} {'subagent':>9}"
        f" {'client':>7} {'load':>6}"
    )
    for r in rows:
        print(
            f"{r['concurrency']:>11} {r['tasks']:>6} {r['submitted_s']:>10.2f} {r['elapsed_s']:>11.2f}"
            f" {r['per_s']:>8.1f} {r['cpu_ms_per_task']:>17.2f} {r['daemon_cpu_ms_per_task']:>7.2f}"
            f" {r['daemon_loop_cpu_ms_per_task']:>7.2f} {r['zygote_cpu_ms_per_task']:>7.2f}"
            f" {r['subagent_cpu_ms_per_task']:>9.2f} {r['client_cpu_ms_per_task']:>7.2f}"
            f" {r['machine']['load_avg_at_start'][0]:>6}"
        )
    print(f"best {best:.1f}/s, target >= {TARGET_PER_S:.0f}/s: {verdict}; processes left: {len(left)}")
    # The same run's floor: what forking a warm CPython per task costs here before any task work.
    floor = fork_floor.same_run(args.smoke)
    results = {
        "benchmark": "throughput",
        "mode": mode,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_start": load},
        "rows": rows,
        "best_per_s": best,
        "target_per_s": TARGET_PER_S,
        "verdict": verdict,
        "left": len(left),
        "fork_floor": floor,
    }
    out = Path(args.out)
    write_json(out, results)
    return 0 if verdict == "ok" and not left else 1


if __name__ == "__main__":
    sys.exit(main())
