"""How many objects the daemon's garbage collector walks per live task, and of which types.

    .venv/bin/python -m bench.tracked_objects [--tasks 100] [--out FILE]

One real `agentd serve` under `bench/gc_census.py`, two fake models in this process: a fast one
for the warm-up and a slow one that holds every request (a parked task: its subagent waits on its
model call). Censuses, each after a full collection:

- `base`: `WARM` parked tasks alive (so one-time caches and the first task's imports are out of
  the difference), after `WARM` fast tasks completed;
- `live`: `--tasks` more parked, each past its first model request and its spawn-window hold;
- `spawning`: the same count again, submitted with `supervision.spawn_window = 1`, while most of
  them wait for their place (journaled `starting`, nothing forked yet).

The difference per task, by type, is what the full collection pays for each live task (a
thousand of them: a thousand times that). `tests/daemon/test_tracked_objects.py` holds the bound.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench import gc_census
from bench.daemon_procs import BenchDaemon, strays
from tests.support.daemon import start_daemon, write_config
from tests.support.fake_llm import FakeLLM, Hang, chat

RESULTS = Path(__file__).resolve().parent / "results"
WARM = 5
SETTLE_S = 30.0


@dataclass(frozen=True, slots=True)
class Census:
    base: dict[str, object]
    live: dict[str, object]
    tasks: int
    # How the daemon ended: its drain's exit code, and processes it left (none expected).
    drain_exit_code: int | None = None
    left_behind: int = 0

    @property
    def per_task(self) -> dict[str, float]:
        return gc_census.per_task(self.base, self.live, self.tasks)


def _config(workdir: Path, fast: str, slow: str, tasks: int, window: int | None) -> Path:
    daemon = (
        f"max_concurrent_tasks = {tasks + 2 * WARM + 10}\n"
        'max_queued_per_uid = "infinity"\nmax_pending_bytes_per_uid = "infinity"\n'
    )
    body = (
        f'[intelligence.fast]\nkind = "openai"\nbase_url = "{fast}"\nmodel = "fast"\n'
        f'[intelligence.slow]\nkind = "openai"\nbase_url = "{slow}"\nmodel = "slow"\n'
        "[supervision]\n" + (f"spawn_window = {window}\n" if window is not None else "")
    )
    return write_config(workdir, body, daemon=daemon, fast=False)


@contextmanager
def censused_daemon(
    workdir: Path, tasks: int, window: int | None = None
) -> Iterator[tuple[BenchDaemon, FakeLLM]]:
    """A daemon under the census launcher, the slow model (holding every request), warmed up."""
    workdir.mkdir(parents=True, exist_ok=True)
    census_dir = workdir / "census"
    with FakeLLM(chat("done")) as fast, FakeLLM(Hang()) as slow:
        config = _config(workdir, fast.base_url, slow.base_url, tasks, window)
        launcher = (sys.executable, str(Path(gc_census.__file__)), str(census_dir))
        bench = BenchDaemon(start_daemon(workdir, config, launcher=launcher))
        try:
            done = [bench.daemon.submit("say done", model="fast") for _ in range(WARM)]
            for task_id in done:
                assert bench.daemon.wait(task_id).status is not None
            for _ in range(WARM):
                bench.daemon.submit("wait", model="slow")
            slow.wait_requests_blocking(WARM, timeout_s=SETTLE_S)
            yield bench, slow
        finally:
            bench.stop()


def settled(bench: BenchDaemon, label: str) -> dict[str, object]:
    """A census once every spawn-window hold has ended (each at most `HOLD_AFTER_READY_S`), then a
    young collection has promoted what survives (as the daemon's own allocations would, sooner or
    later) and the collector policy has had two of its steps since: what it froze is counted."""
    from agentd.service.collector import TICK_S
    from agentd.supervision.spawn_window import HOLD_AFTER_READY_S

    census_dir = bench.daemon.workdir / "census"
    time.sleep(HOLD_AFTER_READY_S + 0.5)
    gc_census.take(census_dir, f"promote-{label}")
    time.sleep(2 * TICK_S + 0.5)
    return gc_census.take(census_dir, label)


def measure_live(workdir: Path, tasks: int) -> Census:
    """Tracked objects with `WARM` parked tasks, then with `tasks` more."""
    with censused_daemon(workdir, tasks) as (bench, slow):
        base = settled(bench, "base")
        for _ in range(tasks):
            bench.daemon.submit("wait", model="slow")
        slow.wait_requests_blocking(WARM + tasks, timeout_s=SETTLE_S + tasks * 0.2)
        live = settled(bench, "live")
    return Census(base, live, tasks, bench.drain_exit_code, _left(bench))


def _left(bench: BenchDaemon) -> int:
    return bench.left_after_drain + len(strays([bench.pid]))


def measure_garbage(workdir: Path, tasks: int) -> dict[str, object]:
    """Cyclic garbage per completed task: the collector off while `tasks` fast tasks run to the end."""
    with censused_daemon(workdir, tasks) as (bench, _slow):
        census_dir = bench.daemon.workdir / "census"
        gc_census.take(census_dir, "base")
        gc_census.take(census_dir, "disable")
        ids = [bench.daemon.submit("say done", model="fast") for _ in range(tasks)]
        for task_id in ids:
            assert bench.daemon.wait(task_id).status is not None
        found = gc_census.take(census_dir, "garbage")
    by_type = found["garbage_by_type"]
    assert isinstance(by_type, dict)
    return {
        "per_task": round(int(str(found["garbage"])) / tasks, 1),
        "by_type": {k: round(v / tasks, 2) for k, v in by_type.items() if v / tasks >= 0.5},
        "drain_exit_code": bench.drain_exit_code,
        "left_behind": _left(bench),
    }


def measure_spawning(workdir: Path, tasks: int) -> tuple[Census, int]:
    """Tracked objects while `tasks` wait for a place in a spawn window of one; how many waited."""
    with censused_daemon(workdir, tasks, window=1) as (bench, _slow):
        base = settled(bench, "base")
        for _ in range(tasks):
            bench.daemon.submit("wait", model="slow")
        status = bench.daemon.call("daemon.status")
        spawning = gc_census.take(bench.daemon.workdir / "census", "spawning")
        assert isinstance(status, dict)
        return Census(base, spawning, tasks), int(str(status.get("running", 0)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", type=Path, default=RESULTS / "tracked_objects.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="agentd-tracked-") as tmp:
        live = measure_live(Path(tmp) / "live", args.tasks)
    with tempfile.TemporaryDirectory(prefix="agentd-tracked-") as tmp:
        spawning, _ = measure_spawning(Path(tmp) / "spawning", args.tasks)
    with tempfile.TemporaryDirectory(prefix="agentd-tracked-") as tmp:
        garbage = measure_garbage(Path(tmp) / "garbage", args.tasks)
    result = {
        "tasks": args.tasks,
        "garbage_per_completed_task": garbage,
        "live": {
            "base": live.base["tracked"],
            "with": live.live["tracked"],
            "per_task": live.per_task,
            "by_owner": gc_census.per_task(live.base, live.live, live.tasks, "by_owner"),
            "collect_s": live.live["collect_s"],
            "collect_cpu_s": live.live["collect_cpu_s"],
        },
        "spawning": {
            "base": spawning.base["tracked"],
            "with": spawning.live["tracked"],
            "per_task": spawning.per_task,
            "by_owner": gc_census.per_task(spawning.base, spawning.live, spawning.tasks, "by_owner"),
        },
        "pauses": live.live["pauses"],
    }
    for what in ("live", "spawning"):
        entry = result[what]
        assert isinstance(entry, dict)
        per = entry["per_task"]
        print(f"\n{what}: {entry['base']} → {entry['with']} tracked; per task {per['total']}")
        for kind, count in list(per.items())[1 : args.top + 1]:
            print(f"  {count:8.2f}  {kind}")
        print("  containers by holder:")
        for kind, count in list(entry["by_owner"].items())[: args.top]:
            print(f"  {count:8.2f}  {kind}")
    print(f"\ncyclic garbage per completed task: {json.dumps(garbage, indent=1)}")
    print(f"\npauses while live: {json.dumps(result['pauses'])}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
