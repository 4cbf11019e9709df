"""A hostile socket user cannot take the supervisor down.

Cancels racing a task's start, and a task whose run raises something unexpected, end that task
with one terminal status; the daemon and every other task carry on.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path

import anyio
import pytest
from pydantic import JsonValue

from agentd.config.load import load_config
from agentd.journal.store import open_journal
from agentd.options import journal_options, supervisor_options
from agentd.root_payload import build_payload
from agentd.spawning.spawner import ExecSpawner
from agentd.supervision.supervisor import Supervisor
from protocol.api import (
    CancelParams,
    CancelRequest,
    SubmitParams,
    SubmitRequest,
    TaskSpec,
    WaitParams,
    WaitRequest,
)
from protocol.result import TerminalStatus as S
from tests.support.daemon import running_daemon, scripted

pytestmark = [pytest.mark.processes, pytest.mark.anyio]

# 400 races: each submit and cancel is an fsync'd journal write, so 1,000 took 38 s on a quiet
# machine and over 120 s at load 7; 400 still cancel about 300 tasks, queued and starting alike.
ITERATIONS = 400


def test_cancels_racing_submits_never_crash_the_daemon_and_each_task_ends_once(tmp_path: Path) -> None:
    rng = random.Random(17)
    body = scripted("quick", [{"text": "done"}], tmp_path) + '[defaults]\nmodel = "quick"\n'
    with running_daemon(tmp_path, body, daemon_lines="max_concurrent_tasks = 4\n") as daemon:
        task_ids: list[str] = []
        with daemon.client(timeout_s=30) as client:
            for i in range(ITERATIONS):
                spec = TaskSpec(instruction=f"race {i}")
                task_id = client.call(SubmitRequest(params=SubmitParams(spec=spec))).task_id
                task_ids.append(task_id)
                # Cancel now, after a short random pause, or a task submitted earlier (often
                # still queued); some tasks are never cancelled and must complete.
                roll = rng.random()
                if roll < 0.4:
                    client.call(CancelRequest(params=CancelParams(task_id=task_id)))
                elif roll < 0.7:
                    wait_ms = rng.uniform(0, 6)
                    client.call(WaitRequest(params=WaitParams(task_id=task_id, timeout_s=wait_ms / 1000)))
                    client.call(CancelRequest(params=CancelParams(task_id=task_id)))
                elif roll < 0.85 and len(task_ids) > 3:
                    client.call(CancelRequest(params=CancelParams(task_id=rng.choice(task_ids[-4:-1]))))
            views = [
                client.call(WaitRequest(params=WaitParams(task_id=t, timeout_s=60)), timeout_s=70)
                for t in task_ids
            ]
        assert daemon.proc.poll() is None, daemon.log_path.read_text()[-3000:]
        assert all(v.state == "terminal" for v in views)
        assert {v.status for v in views} <= {S.COMPLETED, S.CANCELLED}
        assert any(v.status is S.CANCELLED for v in views)
        assert any(v.status is S.COMPLETED for v in views)
        # Exactly one terminal status per task: one task.terminal line each in the daemon's log.
        log = daemon.log()
        terminal = [str(line["task_id"]) for line in log if line.get("event") == "task.terminal"]
        assert sorted(terminal) == sorted(task_ids)
        cancelled = {v.task_id for v in views if v.status is S.CANCELLED}
        started = {str(line["task_id"]) for line in log if line.get("event") == "subagent.spawn"}
        print(
            f"{len(cancelled)} cancelled ({len(cancelled & started)} after their subagent was spawned), "
            f"{len(task_ids) - len(cancelled)} completed"
        )


async def test_a_task_whose_run_raises_ends_crashed_while_its_siblings_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real supervisor, journal and subagent processes; our own code fails inside one run."""
    script = tmp_path / "slow.json"
    script.write_text(json.dumps({"model": "scripted-slow", "turns": [{"text": "done", "delay_s": 0.5}]}))
    config_path = tmp_path / "agentd.toml"
    config_path.write_text(
        f'[intelligence.slow]\nkind = "scripted"\nscript = "{script}"\n[defaults]\nmodel = "slow"\n'
    )
    config = load_config(str(config_path), socket=str(tmp_path / "s.sock"), state_dir=str(tmp_path / "state"))
    async with open_journal(config.state_dir, journal_options(config)) as journal:
        sup = Supervisor(
            journal, lambda record: build_payload(config, record), ExecSpawner(), supervisor_options(config)
        )
        siblings = [
            (await journal.tasks.submit(TaskSpec(instruction=f"sibling {i}"), 0))[0] for i in range(2)
        ]
        doomed, _ = await journal.tasks.submit(TaskSpec(instruction="doomed"), 0)
        append_event = journal.append_event

        def faulty(task_id: str, event: str, fields: Mapping[str, JsonValue] | None = None) -> None:
            if task_id == doomed.task_id and event == "subagent.ready":
                raise RuntimeError("a bug in the supervisor")
            append_event(task_id, event, fields)

        monkeypatch.setattr(journal, "append_event", faulty)
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(sup.serve)
                for record in [*siblings, doomed]:
                    await sup.terminal_event(record.task_id).wait()
                sup.drain()
                await sup.wait_drained()
        crashed = await journal.tasks.get(doomed.task_id)
        assert crashed is not None
        assert crashed.status is S.CRASHED
        assert crashed.error is not None
        assert crashed.error.kind == "internal"
        assert "a bug in the supervisor" in crashed.error.message
        for sibling in siblings:
            done = await journal.tasks.get(sibling.task_id)
            assert done is not None
            assert done.status is S.COMPLETED, done.error
