"""Tasks through Temporal workers against the same tasks run locally (docs/temporal.md).

Everything is real and on this one machine: a Temporal dev server (`temporal server start-dev
--headless`, in memory), `agentd serve` as the front door, `agentd worker` processes, real
subagents, and `FakeLLM` (an HTTP server in this process) as the model, so one monotonic clock
sees the submit and the model request.

1. **Submit → first model request**, p50 over `--samples` tasks, through Temporal and locally
   (the same config without `[executor]`), after one warm-up task each; the ratio of the medians.
2. **Throughput**: `--tasks` one-turn tasks submitted at once, with 1 and then 2 workers; tasks
   per second from the first `created_at` to the last `ended_at` (the journal's wall clock).
3. **RSS** of the dev server, the front door and each worker (its own process, not its children),
   at the end of the 2-worker run.

A real cluster's figures differ: a remote frontend adds network round trips, a persistent store
(Cassandra, PostgreSQL) adds its commit latency, and workers on their own hosts do not share two
cores with the server and the front door as they do here.

    .venv/bin/python -m bench.temporal [--smoke] [--samples 20] [--tasks 40]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # also runnable as `python bench/temporal.py`
    sys.path.insert(0, str(REPO))

from tests.support.daemon import Daemon, running_daemon  # noqa: E402
from tests.support.fake_llm import FakeLLM, chat  # noqa: E402
from tests.support.temporal import TemporalServer, Worker, running_worker, temporal_server  # noqa: E402

MIB = 1024 * 1024


def _model(fake: FakeLLM) -> str:
    endpoint = f'[intelligence.fake]\nkind = "openai"\nbase_url = "{fake.base_url}"\nmodel = "m"\n'
    return endpoint + '[defaults]\nmodel = "fake"\n'


def _first_requests(daemon: Daemon, fake: FakeLLM, samples: int) -> list[float]:
    """Submit → the task's first model request at `fake`, one task at a time, in seconds."""
    out = []
    for i in range(samples + 1):  # the first is a warm-up (zygote, imports, Temporal's caches)
        seen = len(fake.requests)
        started = time.monotonic()
        task_id = daemon.submit(f"sample {i}")
        fake.wait_requests_blocking(seen + 1, timeout_s=120)
        arrived = fake.requests[seen].at
        daemon.wait(task_id, timeout_s=120)
        if i:
            out.append(arrived - started)
    return out


def _throughput(daemon: Daemon, tasks: int) -> float:
    ids = [daemon.submit(f"throughput {i}") for i in range(tasks)]
    views = [daemon.wait(task_id, timeout_s=600) for task_id in ids]
    assert all(v.status == "completed" for v in views), [v.status for v in views]
    first = min(v.created_at for v in views)
    last = max(v.ended_at or 0.0 for v in views)
    return tasks / (last - first)


def _rss_mib(pid: int) -> float:
    rss: int = psutil.Process(pid).memory_info().rss
    return rss / MIB


@contextlib.contextmanager
def _front(workdir: Path, fake: FakeLLM, server: TemporalServer | None) -> Iterator[Daemon]:
    body = _model(fake) + (server.executor_toml() if server is not None else "")
    with running_daemon(workdir, body) as daemon:
        yield daemon


def run(samples: int, tasks: int) -> dict[str, Any]:
    result: dict[str, Any] = {"samples": samples, "tasks": tasks}
    with tempfile.TemporaryDirectory(prefix="agentd-bench-temporal-") as tmp:
        root = Path(tmp)
        with FakeLLM(default=chat("done")) as fake:
            local_dir = root / "local"
            local_dir.mkdir()
            with _front(local_dir, fake, None) as daemon:
                local = _first_requests(daemon, fake, samples)
            remote_dir = root / "remote"
            remote_dir.mkdir()
            with (
                temporal_server(remote_dir) as server,
                _front(remote_dir, fake, server) as daemon,
                running_worker(remote_dir, daemon.config, "worker-a") as a,
            ):
                a.wait_log("proc.ready", process="zygote", timeout_s=120)
                remote = _first_requests(daemon, fake, samples)
                result["tasks_per_s_1_worker"] = _throughput(daemon, tasks)
                with running_worker(remote_dir, daemon.config, "worker-b") as b:
                    b.wait_log("proc.ready", process="zygote", timeout_s=120)
                    result["tasks_per_s_2_workers"] = _throughput(daemon, tasks)
                    result["rss_mib"] = {
                        "dev_server": _rss_mib(server.proc.pid),
                        "front_door": _rss_mib(daemon.pid),
                        "worker_a": _rss_mib(a.proc.pid),
                        "worker_b": _rss_mib(b.proc.pid),
                    }
                    result["by_worker"] = _by_worker(daemon, [a, b])
    result["first_request_s"] = {
        "local_p50": statistics.median(local),
        "temporal_p50": statistics.median(remote),
        "ratio": statistics.median(remote) / statistics.median(local),
    }
    return result


def _by_worker(daemon: Daemon, workers: list[Worker]) -> dict[str, int]:
    listed = daemon.call("task.list", {"limit": 1000})
    assert isinstance(listed, list)
    workers_of = [t.get("worker") for t in listed if isinstance(t, dict)]
    return {w.identity: workers_of.count(w.identity) for w in workers}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="2 samples and 4 tasks: check it runs")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=40)
    args = parser.parse_args()
    samples, tasks = (2, 4) if args.smoke else (args.samples, args.tasks)
    result = run(samples, tasks)
    first = result["first_request_s"]
    print(
        f"submit → first model request p50: local {first['local_p50'] * 1000:.0f} ms, "
        f"temporal {first['temporal_p50'] * 1000:.0f} ms (ratio {first['ratio']:.2f})"
    )
    one, two = result["tasks_per_s_1_worker"], result["tasks_per_s_2_workers"]
    print(f"tasks/s: 1 worker {one:.2f}, 2 workers {two:.2f}; by worker {result['by_worker']}")
    print("RSS MiB: " + ", ".join(f"{k} {v:.0f}" for k, v in result["rss_mib"].items()))
    out = REPO / "bench" / "results" / "temporal.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
