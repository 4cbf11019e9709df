"""Journaling every step at scale: N concurrent tasks that each journal one step a second.

One real `agentd serve`, one fake OpenAI-compatible model in its own process that answers every
request after `--model-delay-s` (1 s) with a `note_write` tool call, no MCP server. Each task runs
`--steps` model steps (its `max_steps`; it then ends `exhausted_steps`), so every second each task
journals a reply, a call's start and its result (docs/durability.md). A prober calls `task.get` and
`daemon.status` every few milliseconds on its own connection (`bench/thousand.py`). Rows:

1. the steps journaled per second while all run (what the machine allowed: on 2 cores the
   subagents' own CPU per turn bounds it below N a second);
2. API latency while they run: p99 ≤ 100 ms;
3. the daemon's RSS, its peak over the run and at its end: ≤ 150 MiB, and not growing with the
   transcripts stored;
4. the journal's bytes per step (`steps.bytes` summed over the model steps journaled).

    .venv/bin/python -m bench.journal_steps [--tasks 1000] [--steps 60] [--smoke] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

import psutil

from bench.daemon_procs import MIB, BenchDaemon, strays
from bench.machine import CpuMeter
from bench.samples import write_json
from bench.thousand import (
    SUBMITTERS,
    ProberProcess,
    check_limits,
    config_body,
    model_process,
    submit_all,
    wait_all_ready,
    wait_all_terminal,
    wait_answering,
)
from protocol.api import SpecLimits, TaskSpec
from tests.support.daemon import start_daemon, write_config

RESULTS = Path(__file__).resolve().parent / "results"
API_P99_TARGET_MS = 100.0
DAEMON_RSS_TARGET_MB = 150.0


def serve_model(delay_s: float) -> None:
    """Run the fake model until stdin closes; print its port first. Every reply is one step."""
    from tests.support.fake_llm import FakeLLM, chat, tool_call

    reply = chat("noting", tool_calls=[tool_call("note_write", {"text": "step done; next one\n"})])
    with FakeLLM(default=type(reply)(reply.status, reply.body, reply.headers, delay_s)) as fake:
        print(fake.port, flush=True)
        sys.stdin.read()


class RssSampler:
    """The daemon's RSS every 0.5 s until stopped: its samples as (monotonic, MiB)."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.5):
            with contextlib.suppress(psutil.Error):
                self.samples.append((time.monotonic(), self.proc.memory_info().rss / MIB))

    def finish(self) -> list[tuple[float, float]]:
        self.stop.set()
        self.thread.join(timeout=5)
        return self.samples


def daemon_cpu_s(pid: int) -> tuple[float, float]:
    """The daemon's CPU seconds so far: (user, system)."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user), float(times.system)


def journal_bytes(state_dir: Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(f"file:{state_dir / 'agentd.db'}?mode=ro", uri=True)) as db:
        total, items, replies = db.execute(
            "SELECT COALESCE(SUM(bytes), 0), COUNT(*), COALESCE(SUM(kind = 'reply'), 0) FROM steps"
        ).fetchone()
    return {"bytes": int(total), "items": int(items), "steps": int(replies)}


def run(
    tasks: int, steps: int, delay_s: float, workdir: Path, nice: int | None, profile: Path | None
) -> dict[str, object]:
    check_limits(tasks)
    with model_process(delay_s, module="bench.journal_steps") as base_url:
        daemon_lines, body = config_body(base_url, tasks, nice=nice)
        config = write_config(workdir, body, daemon=daemon_lines, fast=False)
        meter = CpuMeter()
        sampler = str(Path(__file__).with_name("loop_sampler.py"))
        launcher = (sys.executable, sampler, str(profile)) if profile else ()
        bench = BenchDaemon(start_daemon(workdir, config, wait=False, launcher=launcher))
        prober: ProberProcess | None = None
        try:
            wait_answering(bench)
            rss = RssSampler(bench.pid)
            prober = ProberProcess(bench.socket)
            spec = TaskSpec(
                instruction="note a step a second", model="fake", limits=SpecLimits(max_steps=steps)
            )
            ids, _, submit_errors = submit_all(bench.socket, tasks, SUBMITTERS, prober.probe_task, spec)
            wait_all_ready(bench, ids, timeout_s=120)
            all_ready = time.monotonic()
            cpu_at_ready = daemon_cpu_s(bench.pid)
            steps_at_ready = journal_bytes(workdir / "state")["steps"]
            outcome = wait_all_terminal(bench.socket, ids, timeout_s=steps * delay_s * 20 + 300)
            done = time.monotonic()
            user, system = (b - a for a, b in zip(cpu_at_ready, daemon_cpu_s(bench.pid), strict=True))
            probe = prober.finish()
            samples = rss.finish()
        finally:
            if prober is not None and prober.proc.poll() is None:
                prober.proc.kill()
                prober.proc.wait()
            bench.stop()
        machine = meter.stop()
    journal = journal_bytes(workdir / "state")
    new_steps = max(journal["steps"] - steps_at_ready, 1)
    running = [mb for t, mb in samples if all_ready <= t <= done]
    return {
        "tasks": tasks,
        "steps_per_task": steps,
        "model_delay_s": delay_s,
        "submit_errors": submit_errors[:5],
        "outcomes": {s: sum(1 for v in outcome.values() if v == s) for s in set(outcome.values())},
        "lost": len(ids) - len(outcome),
        "run_s": round(done - all_ready, 1),
        "steps_per_s": round(journal["steps"] / max(done - all_ready, 1e-9), 1),
        "api_while_running": asdict(probe.between(all_ready, done)),
        "api_errors": probe.errors[:5],
        "daemon_rss_mb": {
            "at_all_alive": round(running[0], 1) if running else None,
            "peak": round(max(running), 1) if running else None,
            "at_end": round(running[-1], 1) if running else None,
        },
        "journal": journal,
        "daemon_cpu_ms_per_step": round(1000 * (user + system) / new_steps, 2),
        "daemon_cpu_split_ms_per_step": {
            "user": round(1000 * user / new_steps, 2),
            "system": round(1000 * system / new_steps, 2),
        },
        "subagent_nice": nice,
        "bytes_per_step": round(journal["bytes"] / max(journal["steps"], 1)),
        "strays": len(strays([bench.pid])),
        "machine": asdict(machine),
    }


def rows(result: dict[str, object]) -> list[tuple[str, str, str, bool | None]]:
    api = result["api_while_running"]
    rss = result["daemon_rss_mb"]
    assert isinstance(api, dict) and isinstance(rss, dict)
    return [
        (
            "steps journaled per second while all run",
            f"{result['steps_per_s']} ({result['journal']})",
            f"{result['tasks']} asked",
            None,
        ),
        (
            "API p50 / p99 / max while they run",
            f"{api['p50_ms']} / {api['p99_ms']} / {api['max_ms']} ms (n={api['count']})",
            f"p99 ≤ {API_P99_TARGET_MS:g} ms",
            float(api["p99_ms"]) <= API_P99_TARGET_MS,
        ),
        (
            "daemon RSS: all alive / peak / at the end",
            f"{rss['at_all_alive']} / {rss['peak']} / {rss['at_end']} MiB",
            f"≤ {DAEMON_RSS_TARGET_MB:g} MiB",
            rss["peak"] is not None and float(rss["peak"]) <= DAEMON_RSS_TARGET_MB,
        ),
        (
            "daemon CPU per step journaled while all run",
            f"{result['daemon_cpu_ms_per_step']} ms ({result['daemon_cpu_split_ms_per_step']})",
            "—",
            None,
        ),
        ("journal bytes per step", f"{result['bytes_per_step']} B", "—", None),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=60, help="model steps per task, one a second")
    parser.add_argument("--model-delay-s", type=float, default=1.0)
    parser.add_argument("--nice", type=int, default=None, help="supervision.subagent_nice for the run")
    parser.add_argument("--profile", type=Path, default=None, help="sample the daemon's loop into this file")
    parser.add_argument("--smoke", action="store_true", help="6 tasks of 3 steps; judges no target")
    parser.add_argument("--dir", type=Path, default=None, help="where the daemon's state goes")
    parser.add_argument("--out", type=Path, default=RESULTS / "journal_steps.json")
    parser.add_argument("--serve-model", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_model is not None:
        serve_model(args.serve_model)
        return 0
    tasks, steps = (6, 3) if args.smoke else (args.tasks, args.steps)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="agentd-journal-steps-") as tmp:
        result = run(tasks, steps, args.model_delay_s, Path(tmp), args.nice, args.profile)
    machine = result["machine"]
    assert isinstance(machine, dict)
    print(
        f"\n{tasks} tasks of {steps} steps, model answers after {args.model_delay_s:g} s; load avg at start"
        f" {machine['load_avg_at_start']}, subagent nice {'default' if args.nice is None else args.nice},"
        f" CPU busy {machine['busy_pct']} % (ours {machine['ours_pct']} %)"
    )
    print(f"{'what':<44} {'figure':<60} {'target':<16} verdict")
    for what, figure, target, met in rows(result):
        verdict = "" if met is None or args.smoke else ("met" if met else "MISSED")
        print(f"{what:<44} {figure:<60} {target:<16} {verdict}")
    print(f"outcomes {result['outcomes']}, lost {result['lost']}, strays {result['strays']}")
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
