"""A thousand agents on one small machine: spawn at scale, API latency, memory.

One real `agentd serve`, one fake OpenAI-compatible model in its own process that answers every
request after `--model-delay-s` (30 s), no MCP server. The tasks are submitted the moment the
daemon's socket answers (the zygote is still starting then), by several clients at once, while a
prober calls `task.get` and `daemon.status` every `PROBE_EVERY_S` on its own connection. Rows:

1. all N alive at once (`subagent.ready`) within 15 s of the first submit; all complete; none lost;
2. API latency while they spawn (first submit → the last `ev/ready`) and while they run:
   p99 ≤ 100 ms, max ≤ 250 ms;
3. memory once all are alive: USS per subagent (median), PSS summed over the subagents, the
   daemon's RSS (≤ 150 MiB).

    .venv/bin/python -m bench.thousand [--tasks 1000] [--smoke] [--dir /var/tmp] [--out FILE]

1,000 subagents need `max_concurrent_tasks` and `max_queued_per_uid` raised (the bench's config
does it) and about 4 fds each in the daemon (3 pipes and a pidfd): the daemon raises its open-files
soft limit to the hard one, so the hard `nofile` must be ≥ ~5,000 (`ulimit -Hn`); `nproc` must
allow ~1,100 processes of this uid. The bench checks both before starting. `--smoke` runs 6
tasks with a 2 s model and judges no target (tests/bench/test_thousand.py runs it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from agentd.api.client import ApiClient
from agentd.errors import ApiClientError
from bench import fork_floor
from bench.daemon_procs import MIB, BenchDaemon, strays
from bench.machine import CpuMeter
from bench.samples import Summary, summarize, write_json
from protocol.api import (
    GetRequest,
    StatusRequest,
    SubmitParams,
    SubmitRequest,
    TaskRef,
    TaskSpec,
)
from protocol.result import TerminalStatus
from tests.support.daemon import start_daemon, write_config

RESULTS = Path(__file__).resolve().parent / "results"
PROBE_EVERY_S = 0.05
SUBMITTERS = 8
START_TIMEOUT_S = 60.0
ALIVE_TARGET_S = 15.0
API_P99_TARGET_MS = 100.0
API_MAX_TARGET_MS = 250.0
DAEMON_RSS_TARGET_MB = 150.0
USS_TARGET_MB = 8.0


@dataclass(frozen=True, slots=True)
class Settings:
    tasks: int
    model_delay_s: float
    smoke: bool
    # `supervision.spawn_window`, `batch_scheduling` and `subagent_nice` for the run; None leaves
    # the default.
    spawn_window: int | None = None
    batch: bool | None = None
    nice: int | None = None
    gc_freeze: bool | None = None  # `daemon.gc_freeze`; None leaves the default


@dataclass
class Probe:
    """API round trips measured by a client of their own, with when each was sent."""

    samples: list[tuple[float, str, float]] = field(default_factory=list)  # (sent at, method, seconds)
    errors: list[str] = field(default_factory=list)

    def between(self, start: float, end: float, method: str | None = None) -> Summary:
        """The calls sent in [start, end), of `method` only when given."""
        return summarize([dt for at, m, dt in self.samples if start <= at < end and method in (None, m)])


@dataclass(frozen=True, slots=True)
class Memory:
    subagents: int
    uss_median_mb: float
    uss_max_mb: float
    pss_sum_mb: float
    rss_sum_mb: float
    daemon_rss_mb: float
    zygote_rss_mb: float | None


# ---- the fake model, in its own process ---------------------------------------------------------


def serve_model(delay_s: float) -> None:
    """Run the fake model until stdin closes; print its port first."""
    from tests.support.fake_llm import FakeLLM, chat

    reply = chat("done")
    with FakeLLM(default=type(reply)(reply.status, reply.body, reply.headers, delay_s)) as fake:
        print(fake.port, flush=True)
        sys.stdin.read()


@contextlib.contextmanager
def model_process(delay_s: float, module: str = "bench.thousand") -> Iterator[str]:
    """`module --serve-model DELAY` in its own process: the fake model's base URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--serve-model", str(delay_s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- the run ---------------------------------------------------------------------------------------


def check_limits(tasks: int) -> None:
    """Fail early, with the fix, when this uid's limits cannot hold `tasks` subagents."""
    _, hard_nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    need_fds = 4 * tasks + 200
    if hard_nofile != resource.RLIM_INFINITY and hard_nofile < need_fds:
        raise SystemExit(f"the hard open-files limit is {hard_nofile}; {tasks} tasks need ~{need_fds}")
    soft_nproc, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft_nproc != resource.RLIM_INFINITY and soft_nproc < tasks + 200:
        raise SystemExit(f"the process limit (ulimit -u) is {soft_nproc}; {tasks} tasks need ~{tasks + 200}")


def config_body(
    base_url: str,
    tasks: int,
    spawn_window: int | None = None,
    batch: bool | None = None,
    gc_freeze: bool | None = None,
    nice: int | None = None,
) -> tuple[str, str]:
    daemon_lines = (
        f"max_concurrent_tasks = {tasks}\n"
        'max_queued_per_uid = "infinity"\n'
        'max_pending_bytes_per_uid = "infinity"\n'
        "max_connections_per_uid = 64\n"
    )
    if gc_freeze is not None:
        daemon_lines += f"gc_freeze = {str(gc_freeze).lower()}\n"
    body = f'[intelligence.fake]\nkind = "openai"\nbase_url = "{base_url}"\nmodel = "fake"\n'
    body += "[supervision]\n"
    if spawn_window is not None:
        body += f"spawn_window = {spawn_window}\n"
    if batch is not None:
        body += f"batch_scheduling = {str(batch).lower()}\n"
    if nice is not None:
        body += f"subagent_nice = {nice}\n"
    return daemon_lines, body


def wait_answering(daemon: BenchDaemon) -> float:
    """Poll the socket until `daemon.status` answers; the monotonic time it did."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if daemon.daemon.proc.poll() is not None:
            tail = daemon.daemon.log_path.read_text()[-3000:]
            raise RuntimeError(f"the daemon exited during start:\n{tail}")
        with contextlib.suppress(ApiClientError, OSError), ApiClient(daemon.socket, timeout_s=2) as api:
            api.call(StatusRequest())
            return time.monotonic()
        time.sleep(0.005)
    raise RuntimeError("the daemon did not answer within its start timeout")


def submit_all(
    socket: Path, count: int, clients: int, on_first: Callable[[str], None], spec: TaskSpec | None = None
) -> tuple[list[str], list[float], list[str]]:
    """Submit `count` tasks over `clients` connections at once; ids, per-submit seconds, errors."""
    spec = spec or TaskSpec(instruction="say done", model="fake", labels={"bench": "thousand"})
    ids: list[str] = []
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def one_client(n: int, client: int) -> None:
        request = SubmitRequest(params=SubmitParams(spec=spec))
        try:
            with ApiClient(socket, timeout_s=120) as api:
                for _ in range(n):
                    sent = time.monotonic()
                    task_id = api.call(request).task_id
                    with lock:
                        if not ids:
                            on_first(task_id)
                        ids.append(task_id)
                        latencies.append(time.monotonic() - sent)
        except (ApiClientError, OSError) as exc:
            with lock:
                errors.append(f"client {client}: {exc}")

    share, extra = divmod(count, clients)
    threads = [
        threading.Thread(target=one_client, args=(share + (1 if i < extra else 0), i)) for i in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return ids, latencies, errors


def run_prober(socket: Path) -> None:
    """The prober's own process (`--probe`): a client sharing no GIL with the bench's submitters
    and log parsing. Reads the task id to `task.get` from stdin, probes until stdin closes, then
    prints its samples (monotonic clock: the same across processes) as JSON."""
    probe, stop, task_id = Probe(), threading.Event(), []

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip():
                task_id.append(line.strip())
        stop.set()

    threading.Thread(target=read_stdin, daemon=True).start()
    probe_forever(socket, task_id, probe, stop)
    stop.wait()
    print(json.dumps({"samples": probe.samples, "errors": probe.errors}))


class ProberProcess:
    def __init__(self, socket: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.thousand", "--probe", str(socket)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )

    def probe_task(self, task_id: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(task_id + "\n")
        self.proc.stdin.flush()

    def finish(self) -> Probe:
        try:
            out, _ = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return Probe(errors=["the prober did not finish"])
        data = json.loads(out or '{"samples": [], "errors": ["the prober printed nothing"]}')
        return Probe(samples=[tuple(x) for x in data["samples"]], errors=data["errors"])


class LogTail:
    """The first time (epoch s) of each task's `event` lines, reading only what was appended."""

    def __init__(self, path: Path, event: str) -> None:
        self.path, self.event, self.offset = path, event, 0
        self.found: dict[str, float] = {}

    def poll(self) -> dict[str, float]:
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            data = log.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        needle = f'"event": "{self.event}"'.encode()
        for raw in data[:end].splitlines():
            if needle not in raw:
                continue
            with contextlib.suppress(ValueError):
                line = json.loads(raw)
                if isinstance(line.get("task_id"), str):
                    self.found.setdefault(line["task_id"], _epoch(str(line["ts"])))
        return self.found


def _epoch(ts: str) -> float:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def probe_forever(socket: Path, task_id: list[str], probe: Probe, stop: threading.Event) -> None:
    """`task.get` (of the first task, once there is one) and `daemon.status`, alternately."""
    status = StatusRequest()
    with ApiClient(socket, timeout_s=30) as api:
        turn = 0
        while not stop.is_set():
            turn += 1
            sent = time.monotonic()
            try:
                if task_id and turn % 2:
                    method = "task.get"
                    api.call(GetRequest(params=TaskRef(task_id=task_id[0])))
                else:
                    method = "daemon.status"
                    api.call(status)
            except (ApiClientError, OSError) as exc:
                probe.errors.append(f"{method}: {exc}")
                return
            probe.samples.append((sent, method, time.monotonic() - sent))
            stop.wait(PROBE_EVERY_S)


def subagent_memory(daemon: BenchDaemon, zygote_pid: int | None) -> Memory:
    uss: list[int] = []
    pss = rss = 0
    zygote_rss = None
    for proc in daemon.observe():
        try:
            info = proc.memory_full_info()
        except psutil.Error:
            continue
        if proc.pid == zygote_pid:
            zygote_rss = round(info.rss / MIB, 1)
            continue
        uss.append(info.uss)
        pss += info.pss
        rss += info.rss
    return Memory(
        subagents=len(uss),
        uss_median_mb=round(statistics.median(uss) / MIB, 2) if uss else 0.0,
        uss_max_mb=round(max(uss) / MIB, 2) if uss else 0.0,
        pss_sum_mb=round(pss / MIB, 1),
        rss_sum_mb=round(rss / MIB, 1),
        daemon_rss_mb=daemon.rss_mb(),
        zygote_rss_mb=zygote_rss,
    )


def log_times(daemon: BenchDaemon, event: str) -> dict[str, float]:
    """`task_id` → the wall-clock time (epoch s) of its first `event` line in the daemon log."""
    found: dict[str, float] = {}
    for line in daemon.daemon.log():
        if line.get("event") == event and isinstance(line.get("task_id"), str):
            found.setdefault(str(line["task_id"]), _epoch(str(line["ts"])))
    return found


def wait_all_ready(daemon: BenchDaemon, ids: list[str], timeout_s: float) -> int:
    tail, wanted = LogTail(daemon.daemon.log_path, "subagent.ready"), set(ids)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(tail.poll().keys() & wanted) == len(ids):
            return len(ids)
        time.sleep(0.25)
    return len(tail.poll().keys() & wanted)


def wait_all_terminal(socket: Path, ids: list[str], timeout_s: float) -> dict[str, str]:
    """Each task's final status (or its state when the bound passed); a crash names its kind."""
    deadline = time.monotonic() + timeout_s
    outcome: dict[str, str] = {}
    with ApiClient(socket, timeout_s=30) as api:
        while time.monotonic() < deadline:
            status = api.call(StatusRequest())
            if status.queued == 0 and status.running == 0:
                break
            time.sleep(0.5)
        for task_id in ids:
            view = api.call(GetRequest(params=TaskRef(task_id=task_id)))
            outcome[task_id] = view.status.value if view.status is not None else view.state
            if view.status is TerminalStatus.CRASHED and view.error is not None:
                outcome[task_id] += f" ({view.error.kind})"  # why, for a run that lost tasks
    return outcome


def run(settings: Settings, workdir: Path, profile: Path | None = None) -> dict[str, object]:
    check_limits(settings.tasks)
    with model_process(settings.model_delay_s) as base_url:
        daemon_lines, body = config_body(
            base_url, settings.tasks, settings.spawn_window, settings.batch, settings.gc_freeze, settings.nice
        )
        config = write_config(workdir, body, daemon=daemon_lines, fast=False)
        meter = CpuMeter()
        started = time.monotonic()
        sampler = str(Path(__file__).with_name("loop_sampler.py"))
        launcher = (sys.executable, sampler, str(profile)) if profile else ()
        bench = BenchDaemon(start_daemon(workdir, config, wait=False, launcher=launcher))
        prober: ProberProcess | None = None
        try:
            answered = wait_answering(bench)
            prober = ProberProcess(bench.socket)
            first_submit_wall, first_submit = time.time(), time.monotonic()
            ids, submit_s, submit_errors = submit_all(
                bench.socket, settings.tasks, SUBMITTERS, on_first=prober.probe_task
            )
            submitted = time.monotonic()
            ready = wait_all_ready(bench, ids, timeout_s=settings.model_delay_s + 120)
            all_ready = time.monotonic()
            zygote = [p.pid for p in bench.observe() if "agentd-zygote" in _name(p)]
            memory = subagent_memory(bench, zygote[0] if zygote else None)
            status = ApiClient(bench.socket, timeout_s=30).call(StatusRequest())
            outcome = wait_all_terminal(bench.socket, ids, timeout_s=settings.model_delay_s + 300)
            done = time.monotonic()
            cpu = cpu_split(bench.pid, zygote[0] if zygote else None)
            probe = prober.finish()
        finally:
            if prober is not None and prober.proc.poll() is None:
                prober.proc.kill()
                prober.proc.wait()
            bench.stop()
        machine = meter.stop()
    left = strays([bench.pid])
    ready_at = log_times(bench, "subagent.ready")
    ended_at = log_times(bench, "task.terminal")
    offsets = sorted(ready_at[t] - first_submit_wall for t in ids if t in ready_at)
    first_end = min((ended_at[t] for t in ids if t in ended_at), default=float("nan")) - first_submit_wall
    spawn_window = (first_submit, all_ready)
    run_window = (all_ready, done)
    vias: dict[str, int] = {}
    for line in bench.daemon.log():
        if line.get("event") == "subagent.spawn" and line.get("task_id") in ready_at:
            via = str(line.get("via"))
            vias[via] = vias.get(via, 0) + 1
    completed = sum(1 for s in outcome.values() if s == "completed")
    gc_pauses = (
        {"spawning": _pauses_within(profile, *spawn_window), "running": _pauses_within(profile, *run_window)}
        if profile is not None
        else None
    )
    return {
        # With --profile: the daemon's collector pauses of ≥ 5 ms in each window (wall and CPU).
        "gc_pauses": gc_pauses,
        "tasks": settings.tasks,
        "model_delay_s": settings.model_delay_s,
        "spawn_window": settings.spawn_window,
        "batch_scheduling": settings.batch,
        "subagent_nice": settings.nice,
        "gc_freeze": settings.gc_freeze,
        "answered_after_start_s": round(answered - started, 2),
        "submits_s": round(submitted - first_submit, 2),
        "submit_latency": asdict(summarize(submit_s)),
        "submit_errors": submit_errors[:5],
        "accepted": len(ids),
        "alive": ready,
        "all_alive_after_s": round(offsets[-1], 2) if len(offsets) == len(ids) and ids else None,
        "alive_p50_after_s": round(offsets[len(offsets) // 2], 2) if offsets else None,
        "first_terminal_after_s": round(first_end, 2),
        "all_alive_at_once": bool(offsets) and len(offsets) == len(ids) and offsets[-1] < first_end,
        "spawned_via": vias,
        "completed": completed,
        "outcomes": _count(outcome.values()),
        "lost": len(ids) - len(outcome),
        "zygote_at_peak": status.zygote,
        "api_while_spawning": asdict(probe.between(*spawn_window)),
        "api_while_running": asdict(probe.between(*run_window)),
        # Each method apart: which one the tail is (a status call walks every live child).
        "api_by_method": {
            phase: {m: asdict(probe.between(*window, m)) for m in ("task.get", "daemon.status")}
            for phase, window in (("spawning", spawn_window), ("running", run_window))
        },
        "api_errors": probe.errors[:5],
        "memory": asdict(memory),
        # CPU seconds over the whole run: the daemon's own, the zygote's, and every reaped child's
        # (the subagents and the zygote's intermediates), per task.
        "cpu_s": cpu,
        "child_cpu_per_task_ms": round(1000 * cpu["reaped_children"] / max(1, len(ids)), 1),
        "drain_exit_code": bench.drain_exit_code,
        "left_after_drain": bench.left_after_drain,
        "strays": len(left),
        "machine": asdict(machine),
    }


def _pauses_within(profile: Path, start: float, end: float) -> dict[str, object]:
    """The loop sampler's long collector pauses that began in [start, end): count, longest, per generation."""
    try:
        pauses = json.loads(profile.read_text()).get("long_gc_pauses", [])
    except (OSError, ValueError):
        return {}
    inside = [p for p in pauses if start <= p[0] < end]
    by_generation = {
        str(g): {
            "count": sum(1 for p in inside if p[1] == g),
            "max_ms": round(1000 * max((p[2] for p in inside if p[1] == g), default=0.0), 1),
            "max_cpu_ms": round(1000 * max((p[3] for p in inside if p[1] == g), default=0.0), 1),
        }
        for g in (0, 1, 2)
    }
    return {"count": len(inside), "total_ms": round(1000 * sum(p[2] for p in inside), 1), **by_generation}


def cpu_split(daemon_pid: int, zygote_pid: int | None) -> dict[str, float]:
    times = psutil.Process(daemon_pid).cpu_times()
    zygote = 0.0
    if zygote_pid is not None:
        with contextlib.suppress(psutil.Error):
            z = psutil.Process(zygote_pid).cpu_times()
            zygote = z.user + z.system
    return {
        "daemon": round(times.user + times.system, 1),
        "zygote": round(zygote, 1),
        "reaped_children": round(times.children_user + times.children_system, 1),
    }


def _name(proc: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        return str(proc.name())
    return ""


def _count(values: object) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:  # type: ignore[attr-defined]
        counts[str(value)] = counts.get(str(value), 0) + 1
    return counts


def verdicts(result: dict[str, object]) -> list[tuple[str, str, str, bool]]:
    """(what, figure, target, met) rows for the table."""
    spawning = result["api_while_spawning"]
    running = result["api_while_running"]
    memory = result["memory"]
    assert isinstance(spawning, dict) and isinstance(running, dict) and isinstance(memory, dict)
    n = result["tasks"]
    alive_s = result["all_alive_after_s"]
    at_once = bool(result["all_alive_at_once"])
    alive_ok = alive_s is not None and float(str(alive_s)) <= ALIVE_TARGET_S and at_once
    complete_ok = result["completed"] == n and result["lost"] == 0

    def api_ok(window: dict[Any, Any]) -> bool:
        return float(window["p99_ms"]) <= API_P99_TARGET_MS and float(window["max_ms"]) <= API_MAX_TARGET_MS

    return [
        (
            f"{n} tasks all alive at once, after the first submit",
            f"{alive_s} s (p50 {result['alive_p50_after_s']} s;"
            f" first ended at {result['first_terminal_after_s']} s; via {result['spawned_via']})",
            f"≤ {ALIVE_TARGET_S:g} s",
            alive_ok,
        ),
        (
            "completed / lost",
            f"{result['completed']} / {result['lost']} of {n} ({result['outcomes']})",
            f"{n} / 0",
            complete_ok,
        ),
        (
            "API p50 / p99 / max while spawning (task.get, daemon.status)",
            f"{spawning['p50_ms']} / {spawning['p99_ms']} / {spawning['max_ms']} ms (n={spawning['count']})",
            f"p99 ≤ {API_P99_TARGET_MS:g}, max ≤ {API_MAX_TARGET_MS:g} ms",
            api_ok(spawning),
        ),
        (
            "API p50 / p99 / max while running",
            f"{running['p50_ms']} / {running['p99_ms']} / {running['max_ms']} ms (n={running['count']})",
            f"p99 ≤ {API_P99_TARGET_MS:g}, max ≤ {API_MAX_TARGET_MS:g} ms",
            api_ok(running),  # its own window's verdict, not both windows'
        ),
        (
            "subagent USS median (max) / PSS sum",
            f"{memory['uss_median_mb']} ({memory['uss_max_mb']}) MiB / {memory['pss_sum_mb']} MiB"
            f" over {memory['subagents']}",
            f"USS ≤ {USS_TARGET_MB:g} MiB",
            float(memory["uss_median_mb"]) <= USS_TARGET_MB,
        ),
        (
            "daemon RSS with all alive",
            f"{memory['daemon_rss_mb']} MiB",
            f"≤ {DAEMON_RSS_TARGET_MB:g} MiB",
            float(memory["daemon_rss_mb"]) <= DAEMON_RSS_TARGET_MB,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--model-delay-s", type=float, default=30.0)
    parser.add_argument("--smoke", action="store_true", help="6 tasks, a 2 s model; judges no target")
    parser.add_argument("--dir", type=Path, default=None, help="where the daemon's state goes")
    parser.add_argument("--out", type=Path, default=RESULTS / "thousand.json")
    parser.add_argument("--profile", type=Path, default=None, help="sample the daemon's loop into this file")
    parser.add_argument(
        "--spawn-window", type=int, default=None, help="supervision.spawn_window (0: unbounded)"
    )
    parser.add_argument(
        "--batch", choices=("on", "off"), default=None, help="supervision.batch_scheduling (SCHED_BATCH)"
    )
    parser.add_argument("--gc-freeze", choices=("on", "off"), default=None, help="daemon.gc_freeze")
    parser.add_argument("--nice", type=int, default=None, help="supervision.subagent_nice")
    parser.add_argument("--keep-log", type=Path, default=None, help="copy the daemon's log here")
    parser.add_argument("--serve-model", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--probe", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe is not None:
        run_prober(args.probe)
        return 0
    if args.serve_model is not None:
        serve_model(args.serve_model)
        return 0
    settings = (
        Settings(tasks=6, model_delay_s=2.0, smoke=True)
        if args.smoke
        else Settings(
            tasks=args.tasks,
            model_delay_s=args.model_delay_s,
            smoke=False,
            spawn_window=args.spawn_window,
            batch=None if args.batch is None else args.batch == "on",
            gc_freeze=None if args.gc_freeze is None else args.gc_freeze == "on",
            nice=args.nice,
        )
    )
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="agentd-thousand-") as tmp:
        try:
            result = run(settings, Path(tmp), args.profile)
        finally:
            if args.keep_log is not None:
                shutil.copy(Path(tmp) / "daemon.log", args.keep_log)
    result["mode"] = "smoke" if settings.smoke else "default"
    rows = verdicts(result)
    machine = result["machine"]
    assert isinstance(machine, dict)
    print(
        f"\n{settings.tasks} tasks, model answers after {settings.model_delay_s:g} s;"
        f" spawn window {'default' if settings.spawn_window is None else settings.spawn_window},"
        f" batch {'default' if settings.batch is None else settings.batch},"
        f" nice {'default' if settings.nice is None else settings.nice};"
        f" load avg at start "
        f"{machine['load_avg_at_start']}, CPU busy {machine['busy_pct']} % (ours {machine['ours_pct']} %)"
    )
    if result.get("gc_pauses"):
        print(f"collector pauses ≥ 5 ms by window: {json.dumps(result['gc_pauses'])}")
    errors = result["submit_errors"] or "no errors"
    print(f"CPU s: {result['cpu_s']}; per task in its subagent: {result['child_cpu_per_task_ms']} ms")
    print(
        f"submits: {result['submits_s']} s for {result['accepted']} ({errors});"
        f" zygote at peak: {result['zygote_at_peak']}; left behind: {result['strays']}"
    )
    for what, figure, target, met in rows:
        verdict = "-" if settings.smoke else ("met" if met else "MISSED")
        print(f"  {what:<62} {figure:<60} {target:<28} {verdict}")
    by_method = result["api_by_method"]
    assert isinstance(by_method, dict)
    for phase, methods in by_method.items():
        apart = ", ".join(f"{m} {s['p50_ms']} / {s['p99_ms']} / {s['max_ms']}" for m, s in methods.items())
        print(f"    while {phase}, each method p50 / p99 / max ms: {apart}")
    result["verdicts"] = [{"what": w, "figure": f, "target": t, "met": m} for w, f, t, m in rows]
    # This machine's speed today, for comparing runs across days: the fork floor (fork_floor.py).
    result["fork_floor"] = fork_floor.same_run(settings.smoke)
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
