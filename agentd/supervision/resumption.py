"""One task run's side of resume (docs/durability.md): journaling its nodes' steps as they come
(`sup/record`), and, in a resumed task, what its earlier runs left: the nested subagents to resume
under their old handles, the handles never to give a new child, and what the ended ones spent.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import JsonValue

from agentd import logs
from agentd.errors import JournalError
from agentd.journal.records import TaskRecord
from agentd.supervision.ports import RunJournal, StepJournal
from agentd.supervision.pricing import to_micros
from agentd.supervision.tree import Budget, Tree
from protocol import control
from protocol.result import RunResult, RunUsage, TerminalStatus
from protocol.spawn import SpawnPayload
from protocol.transcript import SpawnedItem, replayable, steps_of, usage_of

# The crashes after which a run goes on from its transcript in a new attempt (while the task's
# `retry.max_attempts` allows): a death from outside, a fault, an exit with no result, a failed
# spawn. Not a limit the operator set (out of memory, CPU time), nor what the supervisor's own
# detectors ended (a wedged child, protocol faults): another attempt would likely meet them again.
RESUMABLE_CRASHES = frozenset({"killed", "segfault", "signal", "exit", "spawn"})


def resumes_after(result: RunResult) -> bool:
    """Whether a run that ended with `result` may go on from its transcript in a new attempt."""
    return (
        result.status is TerminalStatus.CRASHED
        and result.abort is None
        and result.error is not None
        and result.error.kind in RESUMABLE_CRASHES
    )


class Resumption:
    """Owned by a `TaskRun`; `steps` None: nothing is journaled (a run nothing will resume)."""

    def __init__(
        self, record: TaskRecord, tree: Tree, journal: RunJournal, steps: StepJournal | None
    ) -> None:
        self.record = record
        self.tree = tree
        self.journal = journal
        self.steps = steps
        self.log = logs.get(task_id=record.task_id, run_id=record.run_id)
        # The nested nodes of earlier runs with a transcript, each with the parent's call that
        # spawned it; read at the first spawn request of a resumed run (None: not yet).
        self._journaled: dict[str, str | None] | None = None
        # What those of them that ended spent (handle → usage), carried into the task's usage.
        self._earlier: dict[str, RunUsage] = {}
        # What each node that ended in an earlier run cost, the root included (handle → USD): a
        # resumed node replays its steps unpriced, so what it cost before is carried in its usage.
        self._earlier_cost_usd: dict[str, float] = {}

    async def record_steps(self, handle: str, params: control.RecordParams) -> JsonValue:
        """Journal a node's new transcript items; answered once committed."""
        if self.steps is None:
            return {"seq": 0}
        try:
            seq = await self.steps.append(self.record.task_id, handle, params.items)
        except JournalError as exc:
            return {"refused": f"the journal did not commit it ({exc})"[:1000]}
        return {"seq": seq}

    async def carry_earlier_usage(self) -> None:
        """What the earlier runs' ended nested nodes spent counts toward the tree's ceiling
        (taken back for one that is resumed: it replays its own)."""
        if not self.record.resumes:
            return
        try:
            nodes = await self.journal.tasks.nodes(self.record.task_id)
        except JournalError:
            return
        ended = [n for n in nodes if n.state == "terminal"]
        self._earlier = {n.handle: n.usage for n in ended if n.handle != "0"}
        self._earlier_cost_usd = {n.handle: n.usage.cost_usd for n in ended}
        if self.steps is not None:
            # Nodes with a transcript but no journaled node ran under another host's supervisor
            # (a Temporal worker's earlier attempt): what they spent is what their replies say.
            known = {n.handle for n in nodes}
            try:
                for handle in await self.steps.children(self.record.task_id):
                    if handle not in known:
                        items = [s.item for s in await self.steps.items(self.record.task_id, handle)]
                        self._earlier[handle] = usage_of(items)
            except JournalError:
                pass
        spent = sum(self._earlier.values(), RunUsage())
        cost = to_micros(sum(self._earlier_cost_usd.values()))
        self.tree.record_usage("0", Budget(spent.steps, spent.tokens, cost))

    def earlier_cost_usd(self, handle: str) -> float:
        """What node `handle` cost in the earlier runs (0 for a node new in this run)."""
        return self._earlier_cost_usd.get(handle, 0.0)

    def earlier_usage(self, live: Mapping[str, object]) -> RunUsage:
        """What the earlier runs' ended nested nodes that this run did not resume spent."""
        return sum((usage for handle, usage in self._earlier.items() if handle not in live), RunUsage())

    async def earlier_child(self, parent: str, call_id: str | None) -> str | None:
        """The handle of the child an earlier run started for the parent's call `call_id` (to
        resume it); and no journaled handle is ever given to a new child."""
        if not self.record.resumes or self.steps is None:
            return None
        if self._journaled is None:
            try:
                self._journaled = await self.steps.children(self.record.task_id)
            except JournalError:
                self._journaled = {}
        siblings = {h: c for h, c in self._journaled.items() if h.rsplit(".", 1)[0] == parent}
        if siblings:
            self.tree.skip_indexes(parent, max(int(h.rsplit(".", 1)[1]) for h in siblings))
        if call_id is None:
            return None
        return next((h for h, c in siblings.items() if c == call_id and h not in self.tree.nodes), None)

    async def child_payload(
        self, payload: SpawnPayload, call_id: str | None, *, resumed: bool
    ) -> SpawnPayload:
        """A new child's transcript starts with the call that asked for it; a resumed one's is
        given back to it to replay."""
        if self.steps is None or call_id is None:
            return payload
        task_id, handle = self.record.task_id, payload.handle
        try:
            if not resumed:
                await self.steps.append(task_id, handle, [SpawnedItem(call_id=call_id)])
                return payload
            items = [step.item for step in await self.steps.items(task_id, handle)]
        except JournalError as exc:
            self.log.warning("subagent.spawn", handle=handle, err=f"transcript not journaled: {exc}")
            return payload
        if (spent := self._earlier.get(handle)) is not None:
            self.tree.uncount("0", Budget(spent.steps, spent.tokens))
        from_step = steps_of(replayable(items))
        self.log.info("task.resumed", handle=handle, from_step=from_step, items=len(items))
        self.journal.append_event(
            task_id, "task.resumed", {"handle": handle, "from_step": from_step, "items": len(items)}
        )
        return payload.model_copy(update={"replay": items})
