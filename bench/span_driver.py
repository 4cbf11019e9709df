"""What tracing costs a turn inside the subagent, measured in process (docs/tracing.md "Overhead").

`python -m bench.observability` measures the whole daemon, where a loaded machine's noise (±15 %
between rounds of the same mode) hides anything under ≈0.5 ms per turn. This isolates the span
driver: the events of `turns` turns (a model call and a tool call each, as the scripted bench
task makes) drive a real `SpanDriver`, whose spans go through the SDK's `BatchSpanProcessor` and
the official OTLP/HTTP exporter to a local receiver in another process (so its CPU is not
counted). Between events the thread sleeps briefly, as the loop's own work would take it away,
so caches are as cold as in a real turn. Reported per turn: the CPU of the emitting thread (on
the turn's path), of the whole process once the batch is flushed (the exporter's thread
included), and the Python calls on the turn's path (exact; cProfile).

    .venv/bin/python -m bench.span_driver [--turns 90] [--runs 8]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from protocol.spawn import EndpointSpec, SpawnPayload, Telemetry

GAP_S = 0.0005  # between two events: the loop's own work
RECEIVER = "from tests.tracing.otlp_receiver import OtlpReceiver\nimport sys\nwith OtlpReceiver() as r:\n"
RECEIVER += "    print(r.endpoint, flush=True)\n    sys.stdin.read()\n"

Sink = Callable[[str, dict[str, Any]], None]


def _events(turn: int) -> Iterator[tuple[str, dict[str, Any]]]:
    yield "intel.call", {"endpoint": "m", "model": "m", "attempt": 1}
    usage = {"tokens_in": 1000, "tokens_out": 20, "finish_reason": "tool_calls"}
    yield "intel.result", {"endpoint": "m", "attempt": 1, "outcome": "ok", **usage}
    yield "tool.call", {"tool": "note_read", "call_id": f"c{turn}", "server": None}
    yield "tool.result", {"tool": "note_read", "call_id": f"c{turn}", "err": None}
    yield "loop.step", {"step": turn, "kind": "tools", "tool_calls": 1}


def _payload() -> SpawnPayload:
    return SpawnPayload(
        task_id="t_bench",
        run_id="r_bench",
        instruction="read the notes",
        intelligence=[EndpointSpec(name="m", kind="scripted", model="m", script_path="/dev/null")],
        telemetry=Telemetry(traceparent=f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"),
    )


def one_run(traced: bool, turns: int) -> tuple[float, float]:
    """(emitting thread, whole process) CPU per turn in ms, the flush included."""
    from subagent import spans

    export = spans.Export.from_environment("bench") if traced else None
    sink: Sink = lambda event, fields: None  # noqa: E731
    if export is not None:
        payload = _payload()
        run = spans.run_context(payload, export.sampler)
        assert run is not None
        sink = spans.SpanDriver(payload, export, run)  # type: ignore[assignment]
    thread0, process0 = time.thread_time(), time.process_time()
    sink("loop.start", {})
    for turn in range(1, turns + 1):
        for event, fields in _events(turn):
            sink(event, fields)
            time.sleep(GAP_S)
    sink("loop.final", {"status": "completed", "steps": turns})
    thread1 = time.thread_time()
    if export is not None:
        export.flush()
        export.shutdown()
    process1 = time.process_time()
    return (thread1 - thread0) * 1000 / turns, (process1 - process0) * 1000 / turns


def calls_per_turn(turns: int) -> float:
    """Python calls on the turn's path (the emitting thread) per turn: exact, unlike time."""
    from subagent import spans

    export = spans.Export.from_environment("bench")
    payload = _payload()
    run = spans.run_context(payload, export.sampler)
    assert run is not None
    driver = spans.SpanDriver(payload, export, run)
    driver("loop.start", {})
    batches = [list(_events(turn)) for turn in range(1, turns + 1)]
    profile = cProfile.Profile()
    profile.enable()
    for batch in batches:
        for event, fields in batch:
            driver(event, fields)  # type: ignore[arg-type]
    profile.disable()
    export.shutdown()
    calls = sum(row.callcount for row in profile.getstats())
    return calls / turns


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=90)
    parser.add_argument("--runs", type=int, default=8)
    args = parser.parse_args()
    receiver = subprocess.Popen(
        [sys.executable, "-c", RECEIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert receiver.stdout is not None
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.stdout.readline().strip()
        rows: dict[str, list[tuple[float, float]]] = {"off": [], "traced": []}
        for _ in range(args.runs):  # alternated, so drift hits both alike
            rows["off"].append(one_run(False, args.turns))
            rows["traced"].append(one_run(True, args.turns))
        calls = calls_per_turn(min(args.turns, 300))
    finally:
        receiver.communicate("", timeout=10)
    off_thread = statistics.median(r[0] for r in rows["off"])
    off_process = statistics.median(r[1] for r in rows["off"])
    on_thread = statistics.median(r[0] for r in rows["traced"])
    on_process = statistics.median(r[1] for r in rows["traced"])
    print(f"span driver, {args.turns} turns x {args.runs} runs, 3 spans a turn; medians, ms of CPU per turn")
    print(f"on the turn's path (emitting thread): {on_thread - off_thread:.3f} ms")
    print(f"all of it (the exporter's thread: encoding, the HTTP request): {on_process - off_process:.3f} ms")
    print(f"Python calls per turn on the turn's path: {calls:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
