"""A warm session over a real journal and real subagent processes, for the warm-session tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from agentd.journal.records import TaskRecord
from agentd.journal.store import Journal, JournalOptions, open_journal
from agentd.spawning.spawner import ExecSpawner
from agentd.supervision.ports import RunOptions, RunPorts
from agentd.supervision.supervisor import Supervisor
from agentd.supervision.warm_policy import ExitDecision, TurnOutcome
from agentd.supervision.warm_session import Restart, WarmSession
from processes.ladder import LadderPolicy
from protocol.api import TaskSpec
from protocol.result import RunResult
from protocol.spawn import SpawnPayload
from tests.support.fake_llm import FakeLLM

LADDER = LadderPolicy(cancel_grace_s=2.0, term_grace_s=5.0, kill_reap_s=2.0)
INSTRUCTION = "You watch the feed. On each change, read it and say what is new."


@dataclass
class Recorder:
    """The owner's side: every turn, every exit, every restart asked (and the answer given)."""

    allow_restarts: int = 5
    turns: list[TurnOutcome] = field(default_factory=list)
    exits: list[tuple[TaskRecord, RunResult, ExitDecision]] = field(default_factory=list)
    restarts: list[Restart] = field(default_factory=list)
    changed: anyio.Event = field(default_factory=anyio.Event)

    def on_turn(self, session: WarmSession, outcome: TurnOutcome) -> None:
        self.turns.append(outcome)
        self._notify()

    def on_exit(
        self, session: WarmSession, record: TaskRecord, result: RunResult, decision: ExitDecision
    ) -> None:
        self.exits.append((record, result, decision))
        self._notify()

    async def restart(self, restart: Restart) -> bool:
        self.restarts.append(restart)
        self._notify()
        return len(self.restarts) <= self.allow_restarts

    def _notify(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    async def wait_exits(self, count: int, timeout_s: float = 20.0) -> None:
        with anyio.fail_after(timeout_s):
            while len(self.exits) < count:
                await self.changed.wait()


def warm_payload(fake: FakeLLM, **fields: Any) -> SpawnPayload:
    session = {"idle_timeout_s": 60.0, **fields.pop("session", {})}
    base: dict[str, Any] = {
        "task_id": "t_pending",
        "run_id": "r_pending",
        "instruction": INSTRUCTION,
        "intelligence": [{"kind": "openai", "base_url": fake.base_url, "model": "fake-model"}],
        "loop": {"backoff_initial_s": 0.01, "backoff_max_s": 0.05},
        "warm": True,
        "session": session,
    }
    return SpawnPayload.model_validate(base | fields)


@asynccontextmanager
async def open_session(
    tmp_path: Path, payload: SpawnPayload, recorder: Recorder, *, supervised: bool = False
) -> AsyncIterator[tuple[WarmSession, Journal]]:
    """A started warm session; on exit it is stopped and waited for (bounded). `supervised`: a
    `Supervisor` over the same journal is its registry (`session.registry`)."""
    async with open_journal(tmp_path / "state", JournalOptions(event_flush_interval_s=0.01)) as journal:
        spawner = ExecSpawner()
        ports = RunPorts(journal=journal, spawner=spawner, options=RunOptions(ladder=LADDER))
        registry = Supervisor(journal, lambda record: payload, spawner) if supervised else None
        session = WarmSession(
            ports,
            journal,
            TaskSpec(instruction=payload.instruction),
            0,
            payload,
            restart=recorder.restart,
            listener=recorder,
            registry=registry,
            name="feed",
        )
        async with anyio.create_task_group() as tg:
            await tg.start(session.run)
            try:
                yield session, journal
            finally:
                session.stop("the test ended")
                with anyio.fail_after(20):
                    await session.wait_ended()
