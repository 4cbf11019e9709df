"""What the daemon's garbage collector walks: its tracked objects, by type, on request.

    python bench/gc_census.py DIR python -m agentd serve --config ...

runs `agentd` in this process (the daemon keeps this pid), with a thread that waits for a file
`DIR/<label>.request` and answers it with `DIR/<label>.json`: the objects the collector tracks
(frozen ones included, and frozen again after: a census leaves every survivor frozen), by type
— coroutines and functions by their qualified name, so a task's own coroutines show — after a
`gc.collect()`, and the pauses
every collection took so far. A census and the daemon's collector step (`daemon.gc_freeze`, which
freezes and unfreezes from the event loop's thread) exclude each other: a step between a census's
own unfreeze and freeze would move what the census is about to count out of its sight. A label
starting `promote` runs a young collection instead, as the daemon's own allocations would, so that
the collector's next step has promotions to act on.
`take(DIR, label)` asks for one and waits (bounded) for the answer;
`per_task(before, after, n)` is the difference per task. `bench/tracked_objects.py` and
`tests/daemon/test_tracked_objects.py` drive it.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import runpy
import signal
import sys
import threading
import time
import weakref
from collections import Counter
from pathlib import Path
from types import CoroutineType, GeneratorType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentd.service.collector_policy import Step

POLL_S = 0.02
# Held by a census, and by the daemon's collector step (`_serialise_collector`).
CENSUS_LOCK = threading.Lock()
DAEMON_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR2}


def _kind(obj: object) -> str:
    kind = type(obj)
    name = f"{kind.__module__}.{kind.__qualname__}" if kind.__module__ != "builtins" else kind.__qualname__
    if isinstance(obj, CoroutineType):
        return f"{name}:{obj.cr_code.co_qualname}"
    if isinstance(obj, GeneratorType):
        return f"{name}:{obj.gi_code.co_qualname}"
    if kind.__name__ == "function":
        return f"function:{getattr(obj, '__qualname__', '?')}"
    return name


# Containers are named by what holds them too (`set<-CancelScope`): a bare `set` says little.
CONTAINERS = frozenset(
    {
        "set",
        "cell",
        "list",
        "dict",
        "tuple",
        "collections.deque",
        "weakref.ReferenceType",
        "method",
        "_contextvars.Context",
        "builtin_function_or_method",
        "frozenset",
    }
)


def _owners(objects: list[object], kinds: list[str]) -> Counter[str]:
    """`container<-owner` counts: each container by the kind of the first object found holding it."""
    wanted = {id(obj): i for i, obj in enumerate(objects) if kinds[i] in CONTAINERS}
    owner: dict[int, str] = {}
    for i, obj in enumerate(objects):
        for ref in gc.get_referents(obj):
            at = wanted.get(id(ref))
            if at is not None and at not in owner and at != i:
                owner[at] = kinds[i]
    return Counter(f"{kinds[at]}<-{owner.get(at, '?')}" for at in wanted.values())


def census(*, garbage: bool = False) -> dict[str, object]:
    """The tracked objects now, before and after a full collection; by type after it. With
    `garbage`, also what that collection found unreachable (cyclic garbage), by type."""
    before = sum(len(gc.get_objects(generation)) for generation in range(3))
    # Frozen objects (`daemon.gc_freeze`, and what start-up froze) are held as much as any: counted
    # too, then frozen again.
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    started, cpu = time.perf_counter(), time.thread_time()
    if garbage:
        gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    collect_s, collect_cpu_s = time.perf_counter() - started, time.thread_time() - cpu
    found = Counter(_kind(obj) for obj in gc.garbage)
    if garbage:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.collect()
    # Dead weak references are counted apart: sqlite3 keeps one for every cursor a connection made
    # and drops the dead ones only every 200 cursors, so how many there are depends on where in that
    # cycle the census falls, not on what the tasks hold.
    tracked = gc.get_objects()
    objects = [obj for obj in tracked if not (type(obj) is weakref.ReferenceType and obj() is None)]
    dead_weakrefs = len(tracked) - len(objects)
    del tracked
    kinds = [_kind(obj) for obj in objects]
    owners = _owners(objects, kinds)
    del objects
    counted = Counter(kinds)
    gc.freeze()
    return {
        "walked_before_collect": before,
        "tracked": len(kinds),
        "dead_weakrefs": dead_weakrefs,
        "frozen_before": frozen,
        "collect_s": round(collect_s, 4),
        "collect_cpu_s": round(collect_cpu_s, 4),
        "by_type": dict(counted.most_common()),
        "by_owner": dict(owners.most_common()),
        "garbage": sum(found.values()),
        "garbage_by_type": dict(found.most_common()),
    }


class Pauses:
    """Every collection's wall time, per generation: count, total and longest (seconds)."""

    def __init__(self) -> None:
        self.by_generation = {0: [0, 0.0, 0.0], 1: [0, 0.0, 0.0], 2: [0, 0.0, 0.0]}
        self._started = 0.0
        self.enabled = True

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        if not self.enabled:
            return
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        entry = self.by_generation[info["generation"]]
        entry[0] += 1
        entry[1] += took
        entry[2] = max(entry[2], took)

    def summary(self) -> dict[str, dict[str, float]]:
        return {
            str(g): {"count": c, "total_s": round(t, 4), "max_s": round(m, 4)}
            for g, (c, t, m) in self.by_generation.items()
        }


def serve_requests(directory: Path, pauses: Pauses) -> None:
    # The daemon blocks the signals it takes with `sigwaitinfo` only once it runs, in its main
    # thread: this thread, started before, must block them too, or the kernel could pick it for a
    # SIGTERM and its default action would kill the daemon instead of draining it.
    signal.pthread_sigmask(signal.SIG_BLOCK, DAEMON_SIGNALS)
    while True:
        time.sleep(POLL_S)
        for request in sorted(directory.glob("*.request")):
            label = request.stem
            if label.startswith("disable"):  # no automatic collection until the next census
                gc.disable()
                result: dict[str, object] = {"label": label, "disabled": True}
            elif label.startswith("promote"):
                with CENSUS_LOCK:
                    gc.collect(1)
                result = {"label": label, "promoted": True}
            else:
                pauses.enabled = False  # the census's own collection is not the daemon's pause
                try:
                    with CENSUS_LOCK:
                        result = {"label": label, **census(garbage=label.startswith("garbage"))}
                except Exception as exc:  # noqa: BLE001 - answered, so the asker fails at once
                    result = {"label": label, "error": repr(exc)}
                finally:
                    pauses.enabled = True
                    gc.enable()
            result["pauses"] = pauses.summary()
            partial = directory / f"{label}.json.part"
            partial.write_text(json.dumps(result, indent=1))
            os.replace(partial, directory / f"{label}.json")
            request.unlink()


def take(directory: Path, label: str, timeout_s: float = 30.0) -> dict[str, object]:
    """Ask the daemon under this launcher for a census; its answer (bounded wait)."""
    answer = directory / f"{label}.json"
    with contextlib.suppress(FileNotFoundError):
        answer.unlink()
    (directory / f"{label}.request").write_text(label)
    deadline = time.monotonic() + timeout_s
    while not answer.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no census {label!r} within {timeout_s} s")
        time.sleep(POLL_S)
    data: dict[str, object] = json.loads(answer.read_text())
    if "error" in data:
        raise RuntimeError(f"census {label!r} failed in the daemon: {data['error']}")
    return data


def per_task(
    before: dict[str, object], after: dict[str, object], tasks: int, key: str = "by_type"
) -> dict[str, float]:
    """Tracked objects per task between two censuses, by type (the largest first), and in all."""
    old, new = before[key], after[key]
    assert isinstance(old, dict) and isinstance(new, dict)
    diff = {k: (new.get(k, 0) - old.get(k, 0)) / tasks for k in new.keys() | old.keys()}
    shown = {k: round(v, 2) for k, v in sorted(diff.items(), key=lambda kv: -abs(kv[1])) if abs(v) >= 0.05}
    total = (int(str(after["tracked"])) - int(str(before["tracked"]))) / tasks
    return {"total": round(total, 1), **shown}


def _serialise_collector() -> None:
    """Make the daemon's collector step take `CENSUS_LOCK` (the class is the daemon's own: it is
    imported here first, and the daemon imports the same module)."""
    from agentd.service.collector import Collector

    step = Collector.step

    def locked_step(self: Collector, now: float) -> Step:
        with CENSUS_LOCK:
            return step(self, now)

    Collector.step = locked_step  # type: ignore[method-assign]


def main() -> None:
    directory = Path(sys.argv[1])
    directory.mkdir(parents=True, exist_ok=True)
    module_at = sys.argv.index("-m")
    module = sys.argv[module_at + 1]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    _serialise_collector()
    pauses = Pauses()
    gc.callbacks.append(pauses.on_gc)
    threading.Thread(target=serve_requests, args=(directory, pauses), name="gc-census", daemon=True).start()
    sys.argv = [module, *sys.argv[module_at + 2 :]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
