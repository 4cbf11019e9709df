"""Loop CPU per turn against a bare hand-written loop, measured in the same run.

Both loops drive the same fake OpenAI-compatible model (streamed replies, each asking for one call
of the fixture MCP server's `counter` tool, over a real stdio connection) for `--turns` turns.
The figure is the CPU of the whole process tree — the loop's process and its MCP server — between
the model's 10th request and its last, divided by the turns in between: boot, connect and the
first turns (imports, warm caches) are left out, and so is the final turn. The final reply is
streamed slowly, so that the loop is still waiting on it, and its MCP server still alive, when the
window closes; a window whose server did not live through it is refused, not reported.

- **subagent**: the real `python -m subagent` (exec'd), driven by a harness that plays the
  supervisor over the control channel (`tests/support/child.py`); every frame it sends is read.
- **bare**: `bench/bare_loop.py`, httpx2 + the SDK's `ClientSession`, nothing else.

Rounds alternate subagent / bare so that both see the same machine; the verdict is the ratio of
the medians, target ≤ 1.5×.

    python bench/loop_cpu.py [--turns 200] [--rounds 3] [--smoke] [--out bench/results/loop_cpu.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
import psutil

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.samples import write_json  # noqa: E402
from protocol import control  # noqa: E402
from protocol.spawn import EndpointSpec, McpServerSpec, SpawnPayload  # noqa: E402
from tests.support.child import spawn_child  # noqa: E402
from tests.support.fake_llm import FakeLLM, chat_chunks, sse  # noqa: E402

SERVER = str(REPO / "tests" / "fixtures" / "mcp_basic.py")
BARE = str(REPO / "bench" / "bare_loop.py")
FIRST_MEASURED = 10
TARGET_RATIO = 1.5
TIMEOUT_S = 120.0
# Before each chunk of the final reply: the time the sampler has, after the last request arrives, to
# read the tree before the loop can finish and close its MCP server (a loaded machine can take
# hundreds of milliseconds to schedule it).
FINAL_CHUNK_DELAY_S = 0.4


def process_cpu_s(pid: int) -> float:
    """CPU of every thread of `pid`, in seconds, from schedstat (ns resolution)."""
    total_ns = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0.0
    for tid in tasks:
        try:
            total_ns += int((tid / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue
    return total_ns / 1e9


def tree_cpu_s(pid: int) -> tuple[float, float, frozenset[int]]:
    """CPU of `pid` itself and of its live descendants (the MCP server), in seconds, and the
    descendants' pids."""
    try:
        below = frozenset(p.pid for p in psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        below = frozenset()
    return process_cpu_s(pid), sum(process_cpu_s(p) for p in below), below


def enqueue_turns(fake: FakeLLM, turns: int) -> None:
    for i in range(turns - 1):
        calls = [(f"c{i}", "demo__counter", "{}")]
        fake.enqueue(sse(chat_chunks(f"turn {i}", tool_calls=calls, usage=(1000, 20))))
    fake.enqueue(sse(chat_chunks("all done", usage=(1000, 5)), delay_s=FINAL_CHUNK_DELAY_S))


async def sample_window(fake: FakeLLM, turns: int, pid: Callable[[], int]) -> Turn:
    """CPU per turn (ms) of `pid`'s tree between the 10th request and the last."""
    await fake.wait_requests(FIRST_MEASURED, timeout_s=TIMEOUT_S)
    loop_0, server_0, below_0 = tree_cpu_s(pid())
    await fake.wait_requests(turns, timeout_s=TIMEOUT_S)
    loop_1, server_1, below_1 = tree_cpu_s(pid())
    if not below_0 or below_1 != below_0:
        # The server's CPU would be counted at one end of the window and not the other.
        changed = f"{sorted(below_0)} -> {sorted(below_1)}"
        raise RuntimeError(f"the loop's MCP server changed during the window: {changed}")
    n = turns - FIRST_MEASURED
    return Turn((loop_1 - loop_0) * 1000 / n, (server_1 - server_0) * 1000 / n)


@dataclass(frozen=True, slots=True)
class Turn:
    """CPU per turn, ms: the loop's process and the MCP server's."""

    loop_ms: float
    server_ms: float

    @property
    def total_ms(self) -> float:
        return self.loop_ms + self.server_ms


async def subagent_run(turns: int) -> Turn:
    with FakeLLM() as fake:
        enqueue_turns(fake, turns)
        payload = SpawnPayload(
            task_id="t_bench",
            run_id="r_bench",
            instruction="count until told to stop",
            intelligence=[EndpointSpec(kind="openai", base_url=fake.base_url, model="fake", stream=True)],
            mcp_servers=[McpServerSpec(name="demo", transport="stdio", command=[sys.executable, SERVER])],
            limits={"max_steps": turns + 5, "max_tokens": 10_000_000},
            loop={"repeat_cap": 10_000, "idle_limit": 10_000},
        )
        async with spawn_child(payload) as child:
            per_turn = await sample_window(fake, turns, lambda: child.pid)
            result = await child.result(timeout_s=TIMEOUT_S)
            assert result.status.value == "completed", result
            await child.wait_exit(timeout_s=30)
            assert not child.bad_frames, child.bad_frames
            assert any(isinstance(f, control.Result) for f in child.frames)
    return per_turn


async def bare_run(turns: int) -> Turn:
    with FakeLLM() as fake:
        enqueue_turns(fake, turns)
        process = await anyio.open_process(
            [sys.executable, BARE, fake.base_url, SERVER], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            per_turn = await sample_window(fake, turns, lambda: process.pid)
            with anyio.fail_after(30):
                code = await process.wait()
            assert code == 0, f"the bare loop exited {code}"
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.aclose()
    return per_turn


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="15 turns, 1 round (CI): runs, not targets")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "loop_cpu.json"))
    args = parser.parse_args()
    turns, rounds = (FIRST_MEASURED + 5, 1) if args.smoke else (args.turns, args.rounds)
    load = tuple(round(x, 2) for x in os.getloadavg())
    sub_runs: list[Turn] = []
    bare_runs: list[Turn] = []
    for _ in range(rounds):
        sub_runs.append(anyio.run(subagent_run, turns))
        bare_runs.append(anyio.run(bare_run, turns))
    load_end = tuple(round(x, 2) for x in os.getloadavg())
    subagent, bare = [t.total_ms for t in sub_runs], [t.total_ms for t in bare_runs]
    sub_ms, bare_ms = statistics.median(subagent), statistics.median(bare)
    ratio = sub_ms / bare_ms
    paired = statistics.median(s / b for s, b in zip(subagent, bare, strict=True))
    verdict = "ok" if args.smoke or ratio <= TARGET_RATIO else "MISS"
    mode = "smoke" if args.smoke else "default"
    print(
        f"loop CPU per turn, turns {FIRST_MEASURED}->{turns}, process tree incl. the MCP server;"
        f" {rounds} rounds, {mode}; load {load} -> {load_end}"
    )
    print(f"{'':10} {'median ms':>10} {'loop':>6} {'server':>7}  rounds (total)")
    for name, runs, median in (("subagent", sub_runs, sub_ms), ("bare loop", bare_runs, bare_ms)):
        loop = statistics.median(t.loop_ms for t in runs)
        server = statistics.median(t.server_ms for t in runs)
        rounds_text = " ".join(f"{t.total_ms:.2f}" for t in runs)
        print(f"{name:10} {median:10.2f} {loop:6.2f} {server:7.2f}  {rounds_text}")
    print(
        f"ratio of medians {ratio:.2f}x (median of paired ratios {paired:.2f}x),"
        f" target <= {TARGET_RATIO}x: {verdict}"
    )
    results: dict[str, Any] = {
        "benchmark": "loop_cpu",
        "mode": mode,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_avg": {"start": load, "end": load_end},
        "turns": turns,
        "first_measured_turn": FIRST_MEASURED,
        "subagent_ms_per_turn": [asdict(t) for t in sub_runs],
        "bare_ms_per_turn": [asdict(t) for t in bare_runs],
        "ratio_of_medians": ratio,
        "median_paired_ratio": paired,
        "target_ratio": TARGET_RATIO,
        "verdict": verdict,
    }
    out = Path(args.out)
    write_json(out, results)
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
