"""What this machine charges for a process per task, before agentd does any work of its own.

The one-turn throughput row (>= 150 tasks/s on 2 CPUs) leaves 13.3 ms of CPU per task for the
whole tree: daemon, zygote and subagent. This bench measures how much of that the machine and the
runtime take by themselves, in a separate process built as the zygote builds itself (its imports
and warm-up runs, then `gc.freeze`):

- *page faults*: microseconds per first write of an anonymous page, for fresh memory and for
  pages just freed (what a forked child pays for each page it copies or allocates);
- *fork floor*: that process forks children `--parallel` at a time, children that (a) exit at
  once (`os._exit`), or (b) run an empty `anyio.run` first, the least a subagent does. Their rate
  is a ceiling on tasks/s for any design that forks a warm CPython per task on this machine, and
  their CPU (the forking parent's plus the child's) a floor under a task's CPU.

    python -m bench.fork_floor [--children 400] [--parallel 4] [--smoke]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.samples import write_json  # noqa: E402

TASK_BUDGET_MS = 2 * 1000 / 150  # the throughput target: 150 tasks/s on 2 CPUs
FAULT_MIB = 256
ROUNDS = 3
KINDS = ("exit", "anyio")
CHILDREN, SMOKE_CHILDREN = 400, 20  # forked per round
PARALLEL = 2 * (os.cpu_count() or 1)  # children alive at once: every CPU busy while others exit


def fault_us_per_page(mib: int) -> dict[str, float]:
    """CPU per first write of an anonymous page: a fresh mapping, then one over the pages just freed."""
    libc = ctypes.CDLL(None)
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    libc.memset.restype = ctypes.c_void_p
    size = mib << 20
    pages = size // mmap.PAGESIZE
    figures = {}
    for label in ("first_touch", "again_at_once"):
        region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        view = (ctypes.c_char * size).from_buffer(region)
        started = time.process_time()
        libc.memset(ctypes.addressof(view), 1, size)
        figures[label] = round((time.process_time() - started) * 1e6 / pages, 2)
        del view
        region.close()
    return figures


def _child(kind: str) -> None:
    if kind == "anyio":
        import anyio

        async def nothing() -> None:
            await anyio.lowlevel.checkpoint()

        anyio.run(nothing)
    os._exit(0)


def fork_round(kind: str, children: int, parallel: int) -> dict[str, float]:
    live: set[int] = set()
    started = 0
    before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    before_self = resource.getrusage(resource.RUSAGE_SELF)
    began = time.perf_counter()
    while started < children or live:
        while started < children and len(live) < parallel:
            pid = os.fork()
            if pid == 0:
                _child(kind)
            live.add(pid)
            started += 1
        pid, _ = os.wait()
        live.discard(pid)
    elapsed = time.perf_counter() - began
    after_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    after_self = resource.getrusage(resource.RUSAGE_SELF)

    def cpu(after: resource.struct_rusage, before: resource.struct_rusage) -> float:
        return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000 / children

    return {
        "per_s": children / elapsed,
        "child_cpu_ms": cpu(after_children, before_children),
        "parent_cpu_ms": cpu(after_self, before_self),
        "child_minor_faults": (after_children.ru_minflt - before_children.ru_minflt) / children,
    }


def measure_here(children: int, parallel: int) -> dict[str, Any]:
    """In this process: faults first (before the imports grow it), then the zygote's image, then forks."""
    import gc

    from subagent import zygote

    faults = fault_us_per_page(FAULT_MIB)
    zygote._warm_imports()
    gc.collect()
    gc.freeze()
    with open("/proc/self/statm") as statm:
        rss_mib = int(statm.read().split()[1]) * mmap.PAGESIZE / (1 << 20)
    forks: dict[str, Any] = {}
    for kind in KINDS:
        rounds = [fork_round(kind, children, parallel) for _ in range(ROUNDS)]
        forks[kind] = {key: round(statistics.median(r[key] for r in rounds), 2) for key in rounds[0]} | {
            "per_s_rounds": [round(r["per_s"], 1) for r in rounds]
        }
        forks[kind]["cpu_ms"] = round(forks[kind]["child_cpu_ms"] + forks[kind]["parent_cpu_ms"], 2)
    return {"fault_us_per_page": faults, "image_rss_mib": round(rss_mib, 1), "forks": forks}


def measure(children: int, parallel: int) -> dict[str, Any]:
    """`measure_here` in a fresh interpreter, so that neither process's image skews the other's."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.fork_floor",
            "--inner",
            "--children",
            str(children),
            "--parallel",
            str(parallel),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the fork-floor process exited {done.returncode}: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def same_run(smoke: bool) -> dict[str, Any]:
    """Measure and print the floor at the end of another bench (its JSON keeps what this returns)."""
    floor = measure(SMOKE_CHILDREN if smoke else CHILDREN, PARALLEL)
    report(floor)
    return floor


def report(floor: dict[str, Any]) -> None:
    faults = floor["fault_us_per_page"]
    print(
        f"page faults: {faults['first_touch']} us per page first touched, {faults['again_at_once']} us over"
        f" pages just freed; the zygote's image {floor['image_rss_mib']} MiB"
    )
    print(
        f"{'children':>10} {'per s':>8} {'CPU ms: all':>12} {'parent':>7} {'child':>7} {'faults':>7}"
        f" {'of 13.3 ms':>11}"
    )
    for kind, row in floor["forks"].items():
        share = row["cpu_ms"] / TASK_BUDGET_MS
        print(
            f"{kind:>10} {row['per_s']:>8.1f} {row['cpu_ms']:>12.2f} {row['parent_cpu_ms']:>7.2f}"
            f" {row['child_cpu_ms']:>7.2f} {row['child_minor_faults']:>7.0f} {share:>10.0%}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--children", type=int, default=CHILDREN, help="children forked per round (3 rounds per kind)"
    )
    parser.add_argument("--parallel", type=int, default=PARALLEL, help="children alive at once")
    parser.add_argument("--smoke", action="store_true", help="20 children (CI): runs, no figures to meet")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "fork_floor.json"))
    args = parser.parse_args()
    children = SMOKE_CHILDREN if args.smoke else args.children
    if args.inner:
        print(json.dumps(measure_here(children, args.parallel)))
        return 0
    load = tuple(round(x, 2) for x in os.getloadavg())
    floor = measure(children, args.parallel)
    mode = "smoke" if args.smoke else "default"
    print(
        f"fork floor ({mode}; {os.cpu_count()} CPUs; {args.parallel} children at once; load at start {load})"
    )
    report(floor)
    write_json(Path(args.out), {"benchmark": "fork_floor", "mode": mode, "load_at_start": load, **floor})
    return 0


if __name__ == "__main__":
    sys.exit(main())
