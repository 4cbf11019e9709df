"""Ping round trip with many live children: the supervisor against a bare anyio loop, same run.

Two ways of pinging `--children` idle stand-in children (`tests/fixtures/rogue_child.py idle`,
which answers `ctrl/ping` from a thread) every `--interval` seconds for `--window` seconds:

- **supervisor**: an in-process `Supervisor` (the daemon's scheduler, journal, spawner and
  liveness), RTTs from each `SupervisedChild`'s samples (`bench/daemon_children.py`);
- **bare**: a bare anyio loop writing the same JSON-RPC ping to each child's pipe and waiting for
  the line back — the machine and the event loop, nothing of agentd.

Rounds alternate bare / supervisor so both see the same machine; the verdict is the supervisor's
p99 over all its samples against the bare loop's, target ≤ 1.5×. The absolute p99 of either is
mostly the shared machine's scheduling (a VM's vCPUs woken under other tenants' load).

    python bench/ping.py [--children 100] [--rounds 2] [--window 10] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import daemon_children  # noqa: E402
from bench.daemon_procs import strays  # noqa: E402
from bench.samples import Summary, write_json  # noqa: E402

TARGET_RATIO = 1.5


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--children", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--smoke", action="store_true", help="10 children, 1 round of 2 s (CI): no verdict")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "ping.json"))
    args = parser.parse_args()
    children, rounds, window = (10, 1, 2.0) if args.smoke else (args.children, args.rounds, args.window)
    load = tuple(round(x, 2) for x in os.getloadavg())
    bare: list[Summary] = []
    supervised: list[daemon_children.RttResult] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            bare.append(daemon_children.measure_bare_loop(children, args.interval, window))
            supervised.append(
                anyio.run(daemon_children.measure_rtt, Path(tmp) / f"r{i}", children, args.interval, window)
            )
    load_end = tuple(round(x, 2) for x in os.getloadavg())
    left = strays([])
    ratios = [s.rtt.p99_ms / b.p99_ms for s, b in zip(supervised, bare, strict=True)]
    worst_bare = max(b.p99_ms for b in bare)
    worst_sup = max(s.rtt.p99_ms for s in supervised)
    ratio = worst_sup / worst_bare
    verdict = "ok" if args.smoke or ratio <= TARGET_RATIO else "MISS"
    mode = "smoke" if args.smoke else "default"
    print(
        f"ping RTT, {children} live stand-in children @ {args.interval} s, {rounds} x {window:g} s per mode;"
        f" {mode}; load {load} -> {load_end}"
    )
    print(f"{'round':>5} {'mode':>10} {'n':>6} {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'max ms':>7}")
    for i, (b, s) in enumerate(zip(bare, supervised, strict=True)):
        for name, r in (("bare", b), ("supervisor", s.rtt)):
            print(
                f"{i + 1:>5} {name:>10} {r.count:>6} {r.p50_ms:>7.2f} {r.p90_ms:>7.2f}"
                f" {r.p99_ms:>7.2f} {r.max_ms:>7.2f}"
            )
    print(
        f"supervisor p99 / bare p99: worst rounds {ratio:.2f}x, per round"
        f" {' '.join(f'{r:.2f}x' for r in ratios)}; target <= {TARGET_RATIO}x: {verdict};"
        f" pongs missing at the end {sum(s.pongs_missing_at_end for s in supervised)};"
        f" processes left {len(left)}"
    )
    results: dict[str, Any] = {
        "benchmark": "ping",
        "mode": mode,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_avg": {"start": load, "end": load_end},
        "children": children,
        "bare": [asdict(b) for b in bare],
        "supervisor": [asdict(s) for s in supervised],
        "ratio_p99_worst_rounds": ratio,
        "ratio_p99_per_round": ratios,
        "target_ratio": TARGET_RATIO,
        "verdict": verdict,
        "left": len(left),
    }
    out = Path(args.out)
    write_json(out, results)
    return 0 if verdict == "ok" and not left else 1


if __name__ == "__main__":
    sys.exit(main())
