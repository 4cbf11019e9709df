"""A `TaskRun` built from its ports alone, without a `Supervisor`: write-ahead order around a spawn
(the `starting` write overlapping the fork), a task that already ended, a failed spawn, a run started during a drain, one deadline per node."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from agentd.supervision.ports import DrainState, RunOptions, RunPorts
from agentd.supervision.task_run import TaskRun
from processes.ladder import LadderPolicy
from protocol.api import TaskState
from protocol.result import RunUsage
from protocol.result import TerminalStatus as S
from protocol.spawn import EndpointSpec, SpawnPayload
from tests.support.run_ports import Ledger, RecordingJournal, RecordingSpawner, queued_record

ROGUE = Path(__file__).resolve().parents[1] / "fixtures" / "rogue_child.py"
# The rogue child stands in for a subagent; a ladder roomy enough that SIGTERM always suffices.
OPTIONS = RunOptions(
    child_argv=(sys.executable, str(ROGUE)),
    ladder=LadderPolicy(cancel_grace_s=2.0, term_grace_s=10.0, kill_reap_s=2.0),
)
RUN_TIMEOUT_S = 30.0

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def task_run(
    ledger: Ledger,
    mode: str,
    *,
    state: TaskState = "queued",
    fail_spawn: bool = False,
    drain: DrainState | None = None,
) -> TaskRun:
    """A run of one task whose root is the rogue child in `mode`, its ports writing to `ledger`."""
    record = queued_record(mode)
    ports = RunPorts(
        journal=RecordingJournal(ledger, record, state=state),
        spawner=RecordingSpawner(ledger, fail=fail_spawn),
        drain=drain or DrainState(),
        options=OPTIONS,
    )
    endpoint = EndpointSpec(kind="openai", base_url="http://127.0.0.1:9/v1", model="unused")
    payload = SpawnPayload(
        task_id=record.task_id, run_id=record.run_id, instruction=mode, intelligence=[endpoint]
    )
    return TaskRun(ports, record, payload)


@pytest.mark.processes
async def test_a_run_whose_task_already_ended_kills_its_child_before_giving_it_the_task() -> None:
    # The `starting` write runs while the child is forked, so the child exists when the write
    # says the task is gone: it is killed and reaped unsent, and nothing else is written.
    ledger: Ledger = []
    # `complete` would report at once if it were ever sent its task.
    run = task_run(ledger, "complete", state="terminal")
    with anyio.fail_after(RUN_TIMEOUT_S):
        assert await run.run() is None
    assert [line for line in ledger if not line.startswith("event")] == ["spawn 0"]
    assert run.root_child is not None and run.root_child.exited
    assert run.root_child.result is None


@pytest.mark.processes
async def test_the_starting_write_and_the_spawn_overlap_and_the_child_waits_for_both() -> None:
    # A journal whose `starting` commit cannot finish until the spawn was asked for: with the
    # write awaited before the spawn (the order before), this run would never get anywhere.
    ledger: Ledger = []
    run = task_run(ledger, "complete")
    spawned = anyio.Event()
    journal, spawner = run.ports.journal, run.ports.spawner
    assert isinstance(journal, RecordingJournal) and isinstance(spawner, RecordingSpawner)
    journal.tasks.before_starting = spawned.wait
    spawner.on_spawn = spawned.set
    with anyio.fail_after(RUN_TIMEOUT_S):
        result = await run.run()
    assert result is not None and result.status is S.COMPLETED, result
    assert ledger[:3] == ["spawn 0", "starting 0", "running 0"]
    assert ledger.index("event subagent.ready") > ledger.index("running 0")


async def test_a_failed_spawn_comes_after_the_starting_write_and_ends_the_task_crashed() -> None:
    ledger: Ledger = []
    run = task_run(ledger, "complete", fail_spawn=True)
    result = await run.run()
    assert result is not None
    assert result.status is S.CRASHED
    assert result.error is not None and result.error.kind == "spawn"
    assert sorted(ledger[:2]) == ["spawn 0", "starting 0"]
    assert ledger[2:] == ["end 0 crashed"]


@pytest.mark.processes
async def test_the_root_is_journaled_starting_before_its_spawn_and_running_before_it_reports() -> None:
    ledger: Ledger = []
    run = task_run(ledger, "complete")
    with anyio.fail_after(RUN_TIMEOUT_S):
        result = await run.run()
    assert result is not None
    assert result.status is S.COMPLETED, result.error
    assert result.usage == RunUsage(tokens_in=1, tokens_out=1, steps=1, model_calls=1)
    # `starting` commits while the child is forked (in either order); `running` after both.
    assert sorted(ledger[:2]) == ["spawn 0", "starting 0"]
    assert ledger[2] == "running 0"
    assert ledger.index("event subagent.ready") > ledger.index("running 0")
    assert ledger[-2:] == ["event subagent.exit", "end 0 completed"]


@pytest.mark.processes
async def test_the_root_child_is_supervised_to_the_deadline_the_task_was_admitted_with() -> None:
    ledger: Ledger = []
    run = task_run(ledger, "complete")
    admitted = run.tree.nodes["0"].deadline
    with anyio.fail_after(RUN_TIMEOUT_S):
        await run.run()
    assert run.root_child is not None
    assert run.root_child.deadline == admitted


@pytest.mark.processes
async def test_a_run_started_during_a_drain_stops_its_root_before_giving_it_the_task() -> None:
    ledger: Ledger = []
    # `complete` would report at once if it were ever sent its task.
    run = task_run(ledger, "complete", drain=DrainState(draining=True))
    with anyio.fail_after(RUN_TIMEOUT_S):
        result = await run.run()
    assert result is not None
    assert result.status is S.CANCELLED
    assert result.error is not None and result.error.kind == "cancelled"
    assert sorted(ledger[:2]) == ["spawn 0", "starting 0"]
    assert ledger[2:] == [
        "running 0",
        "event subagent.signal",
        "event subagent.exit",
        "end 0 cancelled",
    ]
