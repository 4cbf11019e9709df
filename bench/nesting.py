"""Nested subagents: spawn → the child's first model request, and the cost of accounting.

1. A real daemon and real subagents against the fake OpenAI-compatible server: the root's first
   reply asks for `subagent_spawn`; the figure is the time from that reply to the child's first
   model request (the parent's tool call, `sup/spawn`, the supervisor's checks and spawn, the
   child's boot), p50 over `--spawns` tasks once `daemon.status` says the zygote is warm; the
   daemon's `subagent.spawn` lines say whether each child was forked from it (`via`).
2. The supervisor's accounting per `ev/usage` frame with 100 live nodes: decoding the frame, its
   usage (`call_usage`) and `Tree.record_usage` (which checks the node and its ancestors against
   their grants).

    python bench/nesting.py [--spawns 20] [--frames 20000] [--smoke] [--out bench/results/nesting.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TARGET_P50_MS = 50.0
sys.path.insert(0, str(REPO))

from agentd.supervision.task_run import call_usage  # noqa: E402
from agentd.supervision.tree import LIFETIME_CAP, Budget, ChildRequest, Grant, Tree  # noqa: E402
from bench.samples import write_json  # noqa: E402
from protocol import control  # noqa: E402
from protocol.framing import decode, encode  # noqa: E402
from tests.support.daemon import Daemon, running_daemon  # noqa: E402
from tests.support.fake_llm import FakeLLM, chat, tool_call  # noqa: E402


def zygote_warm(daemon: Daemon, timeout_s: float = 60.0) -> float:
    """Seconds until `daemon.status` says the zygote is warm (the bench measures forks, not its warm-up)."""
    started = time.monotonic()
    while True:
        status = daemon.call("daemon.status")
        assert isinstance(status, dict)
        if status["zygote"] == "warm":
            return time.monotonic() - started
        assert status["zygote"] == "starting", f"the zygote is {status['zygote']}"
        assert time.monotonic() - started < timeout_s, "the zygote never became warm"
        time.sleep(0.05)


def spawn_latency(spawns: int) -> dict[str, Any]:
    """Nested spawn → the child's first model request, ms, and how each child was started; and, for
    reference on the same machine at the same moment, the root's submit → its first model request."""
    samples: list[float] = []
    roots: list[float] = []
    with FakeLLM() as fake, tempfile.TemporaryDirectory() as tmp:
        body = (
            f'[intelligence.fake]\nkind = "openai"\nbase_url = "{fake.base_url}"\nmodel = "m"\n'
            '[defaults]\nmodel = "fake"\n'
        )
        with running_daemon(Path(tmp), body) as daemon:
            warm_s = zygote_warm(daemon)
            for i in range(spawns):
                before = len(fake.requests)
                fake.enqueue(
                    chat("", tool_calls=[tool_call("subagent_spawn", {"instruction": f"child {i}"})]),
                    chat("child done"),
                    chat("root done"),
                )
                started = time.monotonic()
                view = daemon.wait(daemon.submit(f"root {i}"), timeout_s=120)
                assert view.status.value == "completed" if view.status else False, view
                requests = fake.requests[before:]
                samples.append((requests[1].at - requests[0].at) * 1000)
                roots.append((requests[0].at - started) * 1000)
            via = [
                str(line["via"])
                for line in daemon.log()
                if line.get("event") == "subagent.spawn" and line.get("parent") is not None
            ]
    return {"samples_ms": samples, "root_ms": roots, "via": via, "zygote_warm_after_s": warm_s}


def build_tree(live: int) -> tuple[Tree, list[str]]:
    tree = Tree(Budget(10**6, 10**12), deadline=10**9, scope={}, now=0.0)
    handles = ["0"]
    frontier = ["0"]
    now = 0.0
    while len(handles) < live:
        parent = frontier.pop(0)
        for _ in range(8):
            if len(handles) >= live:
                break
            now += 1.0  # keep the spawn-rate bucket full
            depth = parent.count(".") + 1
            budget = ChildRequest(max_steps=64 >> (3 * (depth - 1)), max_tokens=10 ** (10 - depth))
            decision = tree.decide_spawn(parent, budget, now=now)
            assert isinstance(decision, Grant), decision
            tree.add(parent, decision)
            handles.append(decision.handle)
            frontier.append(decision.handle)
    return tree, handles


def accounting_cost(frames: int, live: int = 100) -> dict[str, float]:
    """Per-frame cost over `live` nodes. One task holds at most 65 nodes (the root and the
    64-subagent lifetime cap), so 100 live nodes are a full tree plus a second one."""
    trees: list[tuple[Tree, list[str]]] = []
    remaining = live
    while remaining > 0:
        size = min(remaining, LIFETIME_CAP + 1)
        trees.append(build_tree(size))
        remaining -= size
    usage = control.UsageParams(tokens_in=10, tokens_out=1, steps=0, model="m")
    line = encode(control.Usage(params=usage))[:-1]
    costs: list[float] = []
    for i in range(frames):
        tree, handles = trees[i % len(trees)]
        handle = handles[(i * 7) % len(handles)]
        started = time.perf_counter_ns()
        message = decode(line, control.UP_ADAPTER)
        assert isinstance(message, control.Usage)
        call = call_usage(message.params)
        tree.record_usage(handle, Budget(call.steps, call.tokens))
        costs.append((time.perf_counter_ns() - started) / 1000)
    costs.sort()
    return {
        "nodes": float(sum(len(t.nodes) for t, _ in trees)),
        "trees": float(len(trees)),
        "p50_us": costs[len(costs) // 2],
        "p99_us": costs[int(len(costs) * 0.99)],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--spawns", type=int, default=20)
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--smoke", action="store_true", help="3 spawns, 2,000 frames (CI): runs, not targets")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "nesting.json"))
    args = parser.parse_args()
    spawns, frames = (3, 2_000) if args.smoke else (args.spawns, args.frames)
    latency = spawn_latency(spawns)
    accounting = accounting_cost(frames)
    ms = sorted(latency["samples_ms"])
    p50 = statistics.median(ms)
    forked = latency["via"].count("zygote")
    nodes, trees = accounting["nodes"], accounting["trees"]
    rows = [
        (
            "nested spawn -> child's first model request, p50",
            f"{p50:.0f} ms (max {ms[-1]:.0f})",
            "<= 50 ms",
            "ok" if args.smoke or p50 <= TARGET_P50_MS else "MISS",
        ),
        (
            "reference, same run: root submit -> first model request, p50",
            f"{statistics.median(latency['root_ms']):.0f} ms",
            "-",
            "ok",
        ),
        (
            "nested children forked from the zygote",
            f"{forked} of {len(latency['via'])}",
            "all",
            "ok" if forked == len(latency["via"]) == spawns else "MISS",
        ),
        (
            f"accounting per ev/usage frame, {nodes:.0f} live nodes in {trees:.0f} trees",
            f"p50 {accounting['p50_us']:.1f} us, p99 {accounting['p99_us']:.1f} us",
            "-",
            "ok",
        ),
    ]
    mode = "smoke" if args.smoke else "default"
    warm_s = latency["zygote_warm_after_s"]
    print(f"agentd nesting bench, {mode}; {os.cpu_count()} CPUs; zygote warm {warm_s:.1f} s after the socket")
    width = max(len(r[0]) for r in rows)
    for figure, value, target, verdict in rows:
        print(f"{figure:<{width}}  {value:>28}  {target:<9} {verdict}")
    results: dict[str, Any] = {
        "benchmark": "nesting",
        "mode": mode,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "nested_spawn_to_first_request_ms": {
            "p50": p50,
            "max": ms[-1],
            "samples": latency["samples_ms"],
            "via": latency["via"],
        },
        "root_submit_to_first_request_ms": {
            "p50": statistics.median(latency["root_ms"]),
            "samples": latency["root_ms"],
        },
        "zygote_warm_after_s": latency["zygote_warm_after_s"],
        "accounting_per_usage_frame": accounting,
        "table": [dict(zip(("figure", "value", "target", "verdict"), r, strict=True)) for r in rows],
    }
    out = Path(args.out)
    write_json(out, results)
    return 0 if all(r[3] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
