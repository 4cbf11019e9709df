"""Subagent costs: time to `ev/ready`, time to the first model request, child CPU per turn.

Runs the real `python -m subagent` against the fake OpenAI-compatible server on loopback; each turn
calls a local self-tool (`note_read`) or a real stdio MCP tool (the fixture's `counter`). Every
reply is an SSE stream whose events are 20 ms apart, so the child is idle — waiting on the model —
when its CPU time is sampled at each request. Prints a table of medians over `--runs` runs and
writes JSON.

With `--traced`, runs with the local tool alternate untraced and traced (the `OTEL_*` variables
pointing at a local OTLP receiver, a sampled `traceparent` in the payload) and it prints what
tracing adds to a turn's CPU: the mean from the first request to the last, so that the batch
thread's exports (every 10 turns here, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE=30`, as a 30 s delay
would with real turns of ≈3 s) are counted, not just the median turn (docs/tracing.md "Overhead").

    python bench/child_turns.py [--turns 50] [--runs 3] [--out bench/results/child.json] [--traced]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from protocol import control  # noqa: E402
from protocol.spawn import EndpointSpec, McpServerSpec, SpawnPayload  # noqa: E402
from tests.support.child import spawn_child  # noqa: E402
from tests.support.fake_llm import FakeLLM, chat_chunks, sse  # noqa: E402

SERVER = str(REPO / "tests" / "fixtures" / "mcp_basic.py")


def _cpu_s(pid: int) -> float:
    """CPU time of every thread of `pid`, in seconds, at nanosecond resolution (schedstat)."""
    total_ns = 0
    for tid in Path(f"/proc/{pid}/task").iterdir():
        try:
            total_ns += int((tid / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue
    return total_ns / 1e9


def _traced_env(endpoint: str) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "30"}


async def one_run(turns: int, with_mcp: bool, otlp: str | None = None) -> dict[str, Any]:
    with FakeLLM() as fake:
        for i in range(turns - 1):
            tool = "demo__counter" if with_mcp else "note_read"
            calls = [(f"c{i}", tool, "{}")]
            fake.enqueue(sse(chat_chunks(f"turn {i}", tool_calls=calls, usage=(1000, 20)), delay_s=0.02))
        fake.enqueue(sse(chat_chunks("all done", usage=(1000, 5)), delay_s=0.02))
        payload = SpawnPayload(
            task_id="t_bench",
            run_id="r_bench",
            instruction="count until told to stop",
            intelligence=[EndpointSpec(kind="openai", base_url=fake.base_url, model="fake", stream=True)],
            mcp_servers=[McpServerSpec(name="demo", transport="stdio", command=[sys.executable, SERVER])]
            if with_mcp
            else [],
            limits={"max_steps": turns + 5, "max_tokens": 10_000_000},
            loop={"repeat_cap": 1000, "idle_limit": 1000},
            telemetry={"traceparent": f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"} if otlp else {},
        )
        started = time.monotonic()
        async with spawn_child(payload, env=_traced_env(otlp) if otlp else None) as child:
            await child.wait_for(lambda f: isinstance(f, control.Ready), timeout_s=30)
            ready_s = time.monotonic() - started
            cpu: list[float] = []
            first_request_s = 0.0
            for n in range(1, turns + 1):
                await fake.wait_requests(n, timeout_s=60)
                if n == 1:
                    first_request_s = fake.requests[0].at - started
                cpu.append(_cpu_s(child.pid))
            result = await child.result(timeout_s=60)
            assert result.status.value == "completed", result
            await child.wait_exit(timeout_s=30)
    per_turn = [(b - a) * 1000 for a, b in itertools.pairwise(cpu)]
    early, late = per_turn[: len(per_turn) // 5], per_turn[-(len(per_turn) // 5) :]
    return {
        "ready_ms": ready_s * 1000,
        "first_request_ms": first_request_s * 1000,
        "cpu_per_turn_ms": statistics.median(per_turn),
        "cpu_per_turn_early_ms": statistics.median(early),
        "cpu_per_turn_late_ms": statistics.median(late),
        "cpu_per_turn_mean_ms": (cpu[-1] - cpu[0]) * 1000 / (len(cpu) - 1),
    }


def traced_main(turns: int, runs: int) -> None:
    """Untraced and traced runs alternated, so the machine's drift hits both alike."""
    from tests.tracing.otlp_receiver import OtlpReceiver

    rows: dict[str, list[dict[str, Any]]] = {"off": [], "traced": []}
    with OtlpReceiver() as receiver:
        for _ in range(runs):
            rows["off"].append(anyio.run(one_run, turns, False))
            rows["traced"].append(anyio.run(one_run, turns, False, receiver.endpoint))
        received = len(receiver.spans)
    off_runs = [r["cpu_per_turn_mean_ms"] for r in rows["off"]]
    on_runs = [r["cpu_per_turn_mean_ms"] for r in rows["traced"]]
    off, on = statistics.median(off_runs), statistics.median(on_runs)
    paired = statistics.median(t - o for o, t in zip(off_runs, on_runs, strict=True))
    print(f"subagent, {turns}-turn task, local tool, {runs} runs each, alternated; spans: {received}")
    print(f"CPU per turn (mean over the run, exports included): off {off:.2f} ms, traced {on:.2f} ms")
    print(f"tracing adds {on - off:+.2f} ms ({(on - off) / off:+.1%}); paired runs, median: {paired:+.2f} ms")
    pairs = ", ".join(f"{o:.2f} → {t:.2f}" for o, t in zip(off_runs, on_runs, strict=True))
    print(f"each pair, off → traced (ms): {pairs}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "child.json"))
    parser.add_argument("--traced", action="store_true", help="tracing off vs on, in one run")
    args = parser.parse_args()
    if args.traced:
        traced_main(args.turns, args.runs)
        return
    rows: dict[str, dict[str, float]] = {}
    for label, with_mcp in (("local tool", False), ("MCP stdio tool", True)):
        runs = [anyio.run(one_run, args.turns, with_mcp) for _ in range(args.runs)]
        rows[label] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"subagent, {args.turns}-turn task, median of {args.runs} runs (ms)")
    print(f"{'':16} {'ev/ready':>9} {'1st request':>12} {'CPU/turn':>9} {'early':>7} {'late':>7}")
    for label, r in rows.items():
        print(
            f"{label:16} {r['ready_ms']:9.0f} {r['first_request_ms']:12.0f} {r['cpu_per_turn_ms']:9.2f}"
            f" {r['cpu_per_turn_early_ms']:7.2f} {r['cpu_per_turn_late_ms']:7.2f}"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"turns": args.turns, "runs": args.runs, "results": rows}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
