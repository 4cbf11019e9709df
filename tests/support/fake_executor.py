"""An executor whose runs end when a test says so (`FakeExecutor`), and a spawn payload no child
ever reads."""

from __future__ import annotations

import anyio

from agentd.journal.records import NodeEnd, TaskRecord
from agentd.supervision.executor import Run
from agentd.supervision.liveness import KillCause
from agentd.supervision.ports import RunPorts
from agentd.supervision.supervised_child import SupervisedChild
from protocol.api import NodeView
from protocol.result import RunResult, TerminalStatus
from protocol.spawn import EndpointSpec, Limits, SpawnPayload

BOUND_S = 10.0


def placeholder_payload(record: TaskRecord) -> SpawnPayload:
    return SpawnPayload(
        task_id=record.task_id,
        run_id=record.run_id,
        instruction=record.spec.instruction,
        intelligence=[EndpointSpec(kind="openai", base_url="http://127.0.0.1:9/v1", model="m")],
        limits=Limits(max_steps=4, max_tokens=1000, deadline_s=60.0, remaining_depth=1),
        notes_path="/nonexistent/notes.md",
    )


class FakeRun:
    root_child: SupervisedChild | None = None
    root_end: NodeEnd | None = None

    def __init__(self, record: TaskRecord) -> None:
        self.record = record
        self.finish = anyio.Event()
        self.detached = False
        self.cancels: list[tuple[str, KillCause]] = []

    async def run(self) -> RunResult | None:
        await self.finish.wait()
        return None if self.detached else RunResult(status=TerminalStatus.COMPLETED, result="remote")

    def cancel(self, reason: str, *, cause: KillCause = "cancel", force: bool = False) -> None:
        self.cancels.append((reason, cause))
        self.detached = cause == "drain"
        self.finish.set()

    def pids(self) -> set[int]:
        return set()

    def node_views(self) -> list[NodeView]:
        return []

    def awaiting_approval(self) -> set[str]:
        return set()


class FakeExecutor:
    name = "fake"

    def __init__(self) -> None:
        self.runs: dict[str, FakeRun] = {}
        self.changed = anyio.Event()

    async def accept(self, record: TaskRecord) -> None:
        return None

    def start(self, ports: RunPorts, record: TaskRecord, payload: SpawnPayload) -> Run:
        run = self.runs[record.task_id] = FakeRun(record)
        self.changed.set()
        self.changed = anyio.Event()
        return run

    resumes_here = False
    replays = False

    def requeue_on_recovery(self, record: TaskRecord) -> bool:
        return True


async def wait_run_started(executor: FakeExecutor, task_id: str) -> FakeRun:
    with anyio.fail_after(BOUND_S):
        while task_id not in executor.runs:
            await executor.changed.wait()
    return executor.runs[task_id]
