"""What one live task costs the daemon's garbage collector, held under a measured bound.

A real daemon under `bench/gc_census.py` (the census of tracked objects, by type), a model that
holds every request: the objects a parked task keeps alive in the daemon, per task, stay under
`LIVE_BOUND`; a finished task leaves (next to) no cyclic garbage, so what `daemon.gc_freeze`
froze of it is freed by reference counts; and the daemon does freeze its live tasks' state.
Measured on this machine (bench/tracked_objects.py): 258 per live task before the
cuts described in docs/decisions.md, 210 after, 224 since (±1 from run to run, loaded or not);
cyclic garbage per finished task 164 → under 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.tracked_objects import measure_garbage, measure_live

pytestmark = pytest.mark.processes

TASKS = 20
LIVE_BOUND = 235  # measured 224 per live task (258 before the cuts)
GARBAGE_BOUND = 5.0  # measured 0.8 per finished task (164 before)


@pytest.mark.alone  # the census counts what the collector froze: another test's load skews both
def test_a_live_task_holds_fewer_tracked_objects_in_the_daemon_than_the_bound(tmp_path: Path) -> None:
    census = measure_live(tmp_path, TASKS)
    per_task = census.per_task
    assert per_task["total"] <= LIVE_BOUND, per_task
    # `daemon.gc_freeze` froze what the live tasks hold: the census found it in the permanent
    # generation, out of the automatic collections' walk.
    frozen_since_base = int(str(census.live["frozen_before"])) - int(str(census.base["frozen_before"]))
    assert frozen_since_base >= TASKS * per_task["total"] // 2, (census.live["frozen_before"], per_task)
    assert census.drain_exit_code == 0 and census.left_behind == 0


def test_a_finished_task_leaves_next_to_no_cyclic_garbage(tmp_path: Path) -> None:
    garbage = measure_garbage(tmp_path, TASKS)
    assert float(str(garbage["per_task"])) <= GARBAGE_BOUND, garbage
    assert garbage["drain_exit_code"] == 0 and garbage["left_behind"] == 0
