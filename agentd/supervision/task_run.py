"""One task's run: the root subagent, the nested subagents it asks for, and their teardown.

Every subagent is spawned by this run, by the supervisor — the single spawn chokepoint (docs/design.md
§2, §7); each node's fork, write-ahead records and supervision are its `NodeLaunch` (node_launch).
A `sup/spawn` request becomes a refusal naming the cap (returned to the model as a tool error)
or a grant minted by `agentd.supervision.tree`; usage is counted as each `ev/usage` arrives; a node over its
grant has its subtree cancelled, and the root over its grant ends the task `exhausted_*`.
Teardown goes deepest-first. A parent receives only a child's distillate. What a run needs from
outside — journal writes, the spawner, its options, the drain state — comes in as `RunPorts`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Literal

import anyio
import anyio.abc
from pydantic import JsonValue

from agentd import logs
from agentd.errors import JournalError, SpawnError
from agentd.journal.records import NodeEnd, TaskRecord
from agentd.supervision.approvals import Asker, result_json
from agentd.supervision.liveness import KillCause, SilentVerdict, Verdict
from agentd.supervision.node_launch import NodeLaunch, NodeRun, TaskGone
from agentd.supervision.node_slots import NodeSlots
from agentd.supervision.payloads import child_payload, scope_of
from agentd.supervision.ports import RunPorts
from agentd.supervision.pricing import UNBOUNDED_MICROS, Price, call_cost, to_micros, to_usd, usd_text
from agentd.supervision.resumption import Resumption
from agentd.supervision.spawn_window import HOLD_AFTER_READY_S
from agentd.supervision.starvation import Silence, silence_fields
from agentd.supervision.supervised_child import SupervisedChild, SupRequest
from agentd.supervision.tree import Budget, ChildRequest, Defaults, Refusal, Tree
from processes.ladder import RungAction, bound_s, plan
from protocol import control
from protocol.api import NodeView
from protocol.contract import reference_problem
from protocol.events import EventName
from protocol.result import RunError, RunResult, RunUsage, TerminalStatus
from protocol.spawn import SpawnPayload

FIELD_CAP = 2000
INFO_EVENTS = frozenset({"loop.start", "loop.final", "loop.error", "mcp.connect"})
# With content capture on (`--log-content`), the model's replies are what the person asked to see:
# they are logged at info too, not only at debug.
CONTENT_EVENTS = frozenset({"intel.result"})
# How long the end of a run waits for its nodes beyond the kill ladder's own bound.
TEARDOWN_SLACK_S = 5.0
# Why a stopping tree refuses new work, by what stops it.
_CLOSED_BY: dict[KillCause, str] = {
    "drain": "the daemon is draining",
    "park": "the task is being parked while a call waits for an approval",
}


def _comp(event: str) -> str:
    if event.startswith("intel."):
        return "intel"
    if event.startswith(("tool.", "mcp.")):
        return "mcp"
    return "agent"


def cost_grant_micros(root: SpawnPayload) -> int:
    """The tree's cost grant: its cost budget, or more than it could ever spend."""
    budget = root.limits.max_cost_usd
    return UNBOUNDED_MICROS if budget is None else to_micros(budget)


def dearest_token(root: SpawnPayload, prices: Mapping[str, Price]) -> float:
    """The dearest token of the task's endpoints, when it has a cost budget (else 0: unchecked)."""
    if root.limits.max_cost_usd is None:
        return 0.0
    return max((prices[e.name].highest for e in root.intelligence if e.name in prices), default=0.0)


def call_usage(params: control.UsageParams) -> RunUsage:
    """One model call's usage, from its `ev/usage` frame."""
    return RunUsage(
        tokens_in=params.tokens_in, tokens_out=params.tokens_out, steps=params.steps, model_calls=1
    )


class NodeListener:
    """The `ChildListener` of one node: logs, journaled events, accounting, `sup/*` requests."""

    def __init__(self, run: TaskRun, node: NodeRun) -> None:
        self.run = run
        self.node = node
        self.log = logs.get(task_id=run.record.task_id, run_id=run.record.run_id, handle=node.handle)
        node.slots = NodeSlots(
            run.ports.providers,
            owner=run.record.owner_uid,
            task_id=run.record.task_id,
            # Past the node's own deadline by the backstop: the child's deadline ends its wait first.
            deadline=run.tree.nodes[node.handle].deadline + run.ports.options.liveness.deadline_backstop_s,
            journal=self._slot_event,
        )

    def _journal(self, event: EventName, fields: dict[str, JsonValue]) -> None:
        self.run.ports.journal.append_event(
            self.run.record.task_id, event, {"handle": self.node.handle, **fields}
        )

    def _slot_event(self, event: EventName, fields: dict[str, JsonValue]) -> None:
        """A provider-limit event: a shared backoff is logged at info, a throttled wait at debug."""
        if event == "intel.throttled":
            wait_ms = fields.get("wait_ms")
            seconds = wait_ms / 1000 if isinstance(wait_ms, int) else 0.0
            self.run.ports.metrics.throttle_wait(str(fields.get("endpoint")), seconds)
        if event == "intel.backoff":
            self.log.info(event, comp="intel", **fields)
        elif logs.enabled("debug"):
            self.log.debug(event, comp="intel", **fields)
        self._journal(event, fields)

    def on_ready(self, child: SupervisedChild) -> None:
        if self.node.handle == "0":
            self.run.root_ready.set()
        if not self.node.place.released:
            self.run.release_place_later(self.node)
        ready_ms = int((anyio.current_time() - child.spawned_at) * 1000)
        self.run.ports.metrics.subagent_ready(anyio.current_time() - child.spawned_at)
        self.log.info("subagent.ready", pid=child.pid, dur_ms=ready_ms)
        self._journal("subagent.ready", {"pid": child.pid, "dur_ms": ready_ms})
        # Its first model request may start without a round trip.
        primary = self.node.payload.intelligence[:1]
        if primary and primary[0].limited:
            self.node.slots.offer(primary[0].name, child.tell)

    def on_event(self, child: SupervisedChild, params: control.EventParams) -> None:
        if params.event == "intel.call":
            self.node.place.release()  # booted: it is calling its model
        fields = {k: (v[:FIELD_CAP] if isinstance(v, str) else v) for k, v in params.fields.items()}
        fields.pop("handle", None)
        self.run.ports.metrics.child_event(params.event, fields)
        shown = params.event in INFO_EVENTS or (
            params.event in CONTENT_EVENTS and self.node.payload.telemetry.capture_content
        )
        if shown:
            self.log.info(params.event, pid=child.pid, comp=_comp(params.event), **fields)
        elif logs.enabled("debug"):
            self.log.debug(params.event, pid=child.pid, comp=_comp(params.event), **fields)
        self._journal(params.event, fields)

    def on_usage(self, child: SupervisedChild, params: control.UsageParams) -> None:
        call, micros = self._priced(params)
        self.node.counted += call
        over = self.run.tree.record_usage(self.node.handle, Budget(call.steps, call.tokens, micros))
        if over is not None:
            self.run.over_grant(over)

    def _priced(self, params: control.UsageParams) -> tuple[RunUsage, int]:
        """The call's usage with its cost; an unmetered reply's counted at its maximum, said so."""
        call = call_usage(params)
        price = self.run.ports.options.prices.get(params.endpoint or "")
        if price is None:
            return call, 0
        cost = call_cost(
            price,
            tokens_in=params.tokens_in,
            tokens_out=params.tokens_out,
            cached_in=params.cached_in,
            reported=params.reported,
        )
        if cost.at_maximum:
            fields: dict[str, JsonValue] = {
                "endpoint": params.endpoint,
                "cost_usd": to_usd(cost.micros),
                "max_reply_tokens": price.max_reply_tokens,
            }
            self.log.warning("intel.unmetered", comp="intel", **fields)
            self._journal("intel.unmetered", fields)
        self.run.ports.metrics.cost(params.endpoint or "", self.run.record.owner_uid, to_usd(cost.micros))
        return call.model_copy(update={"cost_usd": to_usd(cost.micros)}), cost.micros

    def on_slot_done(self, child: SupervisedChild, params: control.SlotDoneParams) -> None:
        self.node.slots.done(params)
        # Its next request (the next turn) may start without a round trip.
        self.node.slots.offer(params.endpoint, child.tell)

    def on_slot_start(self, child: SupervisedChild, params: control.SlotStartParams) -> None:
        self.node.slots.started(params)

    def slot_nowait(self, child: SupervisedChild, params: control.SlotParams) -> JsonValue | None:
        return self.node.slots.take_nowait(params)

    def on_result(self, child: SupervisedChild, result: RunResult) -> None:
        self.node.place.release()
        self.log.info("subagent.exit", pid=child.pid, status=result.status.value, phase="result")

    def on_turn(self, child: SupervisedChild, params: control.TurnParams) -> None:
        # Only a warm root reports turns (nested children are never warm); its owner matches them.
        if self.node.handle == "0" and self.run.on_root_turn is not None:
            self.run.on_root_turn(params)
        else:
            child.faults += 1

    def on_stderr(self, child: SupervisedChild, line: str) -> None:
        self.log.info("log.stderr", pid=child.pid, line=line)

    def on_verdict(self, child: SupervisedChild, verdict: Verdict) -> None:
        # The last pong's loop age: what detector B judged (and what tells a wedged loop from a slow call).
        age_ms = child.last_loop_age_ms
        self.run.ports.metrics.liveness(verdict)
        fields: dict[str, JsonValue] = {"verdict": verdict, "loop_age_ms": age_ms}
        fields.update(silence_fields(child.silence))
        self.log.warning("subagent.stuck", pid=child.pid, **fields)
        self._journal("subagent.stuck", fields)

    def on_starved(self, child: SupervisedChild, silence: Silence, late: SilentVerdict) -> None:
        fields: dict[str, JsonValue] = {"late": late, **silence_fields(silence)}
        self.log.warning("subagent.starved", pid=child.pid, **fields)
        self._journal("subagent.starved", fields)

    def on_rung(self, child: SupervisedChild, rung: RungAction, cause: KillCause) -> None:
        self.run.ports.metrics.rung(rung, cause)
        self.log.warning("subagent.signal", pid=child.pid, rung=rung, cause=cause)
        self._journal("subagent.signal", {"rung": rung, "cause": cause})

    async def on_request(self, child: SupervisedChild, request: SupRequest) -> JsonValue:
        if isinstance(request, control.SupSpawn):
            return await self.run.spawn(self.node.handle, request.params)
        if isinstance(request, control.SupApprove):
            return await self.run.approve(self.node, request.params)
        if isinstance(request, control.SupRecord):
            return await self.run.resumption.record_steps(self.node.handle, request.params)
        if isinstance(request, control.SupSlot):
            return await self.node.slots.take(request.params)
        target = request.params.handle
        if not self.run.is_descendant(target, of=self.node.handle):
            return {"refused": f"no subagent {target} under node {self.node.handle}"}
        if isinstance(request, control.SupWait):
            return await self.run.wait(target, request.params.timeout_s)
        if isinstance(request, control.SupStatus):
            return self.run.status(target)
        self.run.teardown(target, "cancel", f"cancelled by node {self.node.handle}")
        return {"handle": target, "state": "cancelling" if self.run.tree.nodes[target].live else "terminal"}


class TaskRun:
    """Runs one task's tree of subagent processes to its one terminal result."""

    def __init__(
        self,
        ports: RunPorts,
        record: TaskRecord,
        root: SpawnPayload,
        *,
        claimed: bool = False,
        defer_root_end: bool = False,
    ) -> None:
        self.ports = ports
        self.record = record
        # The record was journaled already `starting` by its owner (a warm session's task).
        self.claimed = claimed
        # The owner commits the root node's end with the task's terminal status (`root_end`), so
        # the run does not write it on its own: one journal transaction less per task.
        self.defer_root_end = defer_root_end
        self.root_end: NodeEnd | None = None
        # Set once the root child has read its spawn frame (`ev/ready`): it may now be sent more.
        self.root_ready = anyio.Event()
        # A warm root's `ev/turn` frames go here (agentd/supervision/warm_session.py).
        self.on_root_turn: Callable[[control.TurnParams], None] | None = None
        now = anyio.current_time()
        # The task is admitted now: its one deadline is fixed here, and every node's derives from it.
        self.tree = Tree(
            Budget(root.limits.max_steps, root.limits.max_tokens, cost_grant_micros(root)),
            now + root.limits.deadline_s,
            scope_of(root),
            now=now,
            defaults=Defaults(
                child_steps=ports.options.child_steps,
                child_tokens=ports.options.child_tokens,
                max_depth=root.limits.remaining_depth,
                micros_per_token=dearest_token(root, ports.options.prices),
            ),
        )
        self.nodes: dict[str, NodeRun] = {"0": NodeRun("0", root)}
        self.cancel_reason: str | None = None
        # Journals the nodes' steps; in a resumed task, what its earlier runs left.
        self.resumption = Resumption(record, self.tree, ports.journal, ports.steps)
        self.log = logs.get(task_id=record.task_id, run_id=record.run_id)
        self._tg: anyio.abc.TaskGroup | None = None

    @property
    def root_child(self) -> SupervisedChild | None:
        return self.nodes["0"].child

    def node_views(self) -> list[NodeView]:
        """The live tree: each node's state, pid, usage so far and grant."""
        views = []
        waiting = self.awaiting_approval()
        for handle in sorted(self.nodes, key=lambda h: [int(p) for p in h.split(".")]):
            node, tree_node = self.nodes[handle], self.tree.nodes[handle]
            child = node.child
            state: Literal["starting", "running", "awaiting_approval", "terminal"] = (
                "terminal" if node.result is not None else ("running" if child is not None else "starting")
            )
            if state == "running" and handle in waiting:
                state = "awaiting_approval"
            views.append(
                NodeView(
                    handle=handle,
                    parent=tree_node.parent,
                    depth=tree_node.depth,
                    status=node.result.status if node.result else None,
                    state=state,
                    pid=child.pid if child is not None else None,
                    usage=self._node_usage(node),
                    grant_steps=tree_node.grant.steps,
                    grant_tokens=tree_node.grant.tokens,
                )
            )
        return views

    def awaiting_approval(self) -> set[str]:
        """The handles of the nodes holding a tool call for a person right now."""
        desk = self.ports.approvals
        return desk.awaiting(self.record.task_id) if desk is not None else set()

    def pids(self) -> set[int]:
        return {n.child.pid for n in self.nodes.values() if n.child is not None and not n.child.exited}

    # ---- the run ---------------------------------------------------------------------------

    async def run(self) -> RunResult | None:
        """Spawn the root, serve its tree, tear down what is left, and return the task's result.

        Returns None, having done nothing, when the task is no longer queued: it was cancelled
        (and its terminal status recorded) before this run could claim it.
        """
        await self.resumption.carry_earlier_usage()
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                result = await self._run_node(self.nodes["0"])
            except TaskGone:
                # The task itself ended (a cancel while queued) before this run could claim it; a
                # child forked meanwhile was killed before it was given the task.
                tg.cancel_scope.cancel()
                return None
            # Whatever the root left running is cancelled before the task's outcome is recorded.
            self.teardown("0", "cancel", "the root subagent ended")
            with anyio.move_on_after(bound_s(plan(self.ports.options.ladder)) + TEARDOWN_SLACK_S):
                for node in list(self.nodes.values()):
                    await node.done.wait()
            tg.cancel_scope.cancel()
        return result.model_copy(update={"usage": self.total_usage()})

    def total_usage(self) -> RunUsage:
        """The whole tree's usage: each node's own, summed (the rolled-up task usage), with that of
        nested nodes an earlier run of a resumed task ended and this run did not resume."""
        own = sum((self._node_usage(node) for node in self.nodes.values()), RunUsage())
        return own + self.resumption.earlier_usage(self.nodes)

    def release_place_later(self, node: NodeRun) -> None:
        """A ready child that shows no sign of work within `HOLD_AFTER_READY_S` gives its place up."""

        async def release() -> None:
            # Ends with the node too: a task cancelled at the run's end leaves its traceback, a
            # cycle through the whole run, for a full collection to free.
            with anyio.move_on_after(HOLD_AFTER_READY_S):
                await node.done.wait()
            node.place.release()

        assert self._tg is not None
        self._tg.start_soon(release)

    async def _run_node(self, node: NodeRun) -> RunResult:
        try:
            assert self._tg is not None
            result = await NodeLaunch(self, node, NodeListener(self, node), self._tg).run()
        except SpawnError as exc:
            result = RunResult(status=TerminalStatus.CRASHED, error=RunError(kind="spawn", message=str(exc)))
        finally:
            node.place.release()
            node.slots.close()
        if node.limit_status is not None and result.status is TerminalStatus.CANCELLED:
            update: dict[str, object] = {"status": node.limit_status}
            if node.limit_error is not None:
                update["error"] = node.limit_error
            result = result.model_copy(update=update)
        node.result = result
        self.tree.end(node.handle)
        if node.handle == "0" and self.defer_root_end:
            self.root_end = NodeEnd(result.status, self._node_usage(node))
        else:
            with contextlib.suppress(JournalError):
                await self.ports.journal.tasks.end_node(
                    self.record.task_id, node.handle, result.status, self._node_usage(node)
                )
        node.done.set()
        if any(self.tree.nodes[c].live for c in self.tree.nodes[node.handle].children):
            self.teardown(node.handle, "cancel", f"its parent {node.handle} ended")
        return result

    def _node_usage(self, node: NodeRun) -> RunUsage:
        # What a resumed node cost before (its replayed steps are not priced again), and this run.
        cost_usd = self.resumption.earlier_cost_usd(node.handle) + node.counted.cost_usd
        if node.result is not None and node.result.error is None:
            # The child counts its own tokens; only the supervisor prices them.
            return node.result.usage.model_copy(update={"cost_usd": cost_usd})
        return node.counted.model_copy(update={"cost_usd": cost_usd})

    # ---- stopping --------------------------------------------------------------------------

    def teardown(self, handle: str, cause: KillCause, reason: str, *, force: bool = False) -> None:
        """Stop `handle`'s subtree: no more spawns in it, then the ladder, deepest node first."""
        if handle not in self.tree.nodes:
            return
        self.tree.mark_stopping(handle)
        for h in self.tree.subtree(handle):
            node = self.nodes.get(h)
            if node is not None and node.child is not None and self.tree.nodes[h].live:
                node.child.stop(cause, start="sigkill" if force else "cancel", reason=reason)
            elif node is not None and node.waiting is not None:
                node.waiting.cancel()  # it waits for a place in the spawn window: it never starts

    def cancel(self, reason: str, *, cause: KillCause = "cancel", force: bool = False) -> None:
        self.cancel_reason = self.cancel_reason or reason
        if self.ports.approvals is not None and cause != "park":
            # Every wait of the tree ends now, not when each child gets round to its cancel. A
            # park leaves the request pending: the resumed run finds it decided.
            self.ports.approvals.release(self.record.task_id, reason)
        self.tree.closed = self.tree.closed or _CLOSED_BY.get(cause, "the task is being cancelled")
        self.teardown("0", cause, reason, force=force)

    def over_grant(self, handle: str) -> None:
        """`handle`'s subtree went over its grant: stop it (the root: the whole task)."""
        tree_node = self.tree.nodes[handle]
        used = self.tree.used(handle)
        over_cost = self.tree.defaults.cost_bounded and used.cost > tree_node.grant.cost
        status = (
            TerminalStatus.EXHAUSTED_TOKENS
            if used.tokens > tree_node.grant.tokens or over_cost
            else TerminalStatus.EXHAUSTED_STEPS
        )
        node = self.nodes.get(handle)
        if node is None or node.limit_status is not None:
            return
        node.limit_status = status
        if over_cost:
            node.limit_error = RunError(
                kind="cost_budget",
                message=f"the cost budget ran out: {usd_text(used.cost)} spent of "
                f"{'max_cost' if handle == '0' else 'its cost grant'} {usd_text(tree_node.grant.cost)}",
            )
        self.log.warning(
            "limit.exceeded",
            handle=handle,
            limit=status.value,
            used_tokens=used.tokens,
            grant_tokens=tree_node.grant.tokens,
            used_steps=used.steps,
            grant_steps=tree_node.grant.steps,
        )
        self.ports.journal.append_event(
            self.record.task_id,
            "limit.exceeded",
            {
                "handle": handle,
                "limit": status.value,
                "used_tokens": used.tokens,
                "grant_tokens": tree_node.grant.tokens,
            },
        )
        if handle == "0":
            self.tree.closed = f"the task is over its {status.value.removeprefix('exhausted_')} ceiling"
        self.teardown(handle, "cancel", f"over its grant ({status.value})")

    # ---- sup/* requests --------------------------------------------------------------------

    def is_descendant(self, handle: str, *, of: str) -> bool:
        return handle in self.tree.nodes and handle != of and of in self.tree.ancestry(handle)

    async def spawn(self, parent: str, params: control.SpawnRequestParams) -> JsonValue:
        if self.ports.drain.draining and self.tree.closed is None:
            self.tree.closed = "the daemon is draining"
        # A model wrote this schema, so the supervisor evaluates none of it (docs/design.md §1): only the
        # linear walk for references outside it. The requesting subagent checked that it is a
        # valid schema; a child given an invalid one reports that when it verifies its answer.
        problem = reference_problem(params.output_contract)
        if problem is not None:
            self.log.info("subagent.spawn", handle=parent, refused=problem)
            return {"refused": problem}
        request = ChildRequest(
            max_steps=params.limits.max_steps,
            max_tokens=params.limits.max_tokens,
            deadline_s=params.limits.deadline_s,
            tool_scope=tuple(params.tool_scope) if params.tool_scope is not None else None,
        )
        resumed = await self.resumption.earlier_child(parent, params.call_id)
        decision = self.tree.decide_spawn(parent, request, now=anyio.current_time(), handle=resumed)
        if isinstance(decision, Refusal):
            self.log.info("limit.exceeded", handle=parent, refused=decision.reason)
            return {"refused": decision.reason}
        self.tree.add(parent, decision)
        payload = child_payload(
            self.nodes[parent].payload,
            decision,
            params,
            root_notes=self.nodes["0"].payload.notes_path,
            now=anyio.current_time(),
        )
        payload = await self.resumption.child_payload(payload, params.call_id, resumed=resumed is not None)
        node = NodeRun(decision.handle, payload)
        self.nodes[decision.handle] = node
        assert self._tg is not None
        self._tg.start_soon(self._run_node, node)
        if not params.wait:
            return {
                "handle": decision.handle,
                "state": "running",
                "grant": {"max_steps": decision.budget.steps, "max_tokens": decision.budget.tokens},
            }
        await node.done.wait()
        return self.distillate(decision.handle)

    async def approve(self, node: NodeRun, params: control.ApproveParams) -> JsonValue:
        """A gated tool call of `node`, held until a person decides; fails closed."""
        desk = self.ports.approvals
        if desk is None:
            reason = "no one can approve tool calls here (no API socket: `agentd run`, or a Temporal worker)"
            return result_json(control.ApproveResult(outcome="denied", reason=reason))
        if self.tree.closed is not None and self.cancel_reason is not None:
            return result_json(control.ApproveResult(outcome="denied", reason=self.cancel_reason[:1000]))
        asker = Asker(
            task_id=self.record.task_id,
            run_id=self.record.run_id,
            owner_uid=self.record.owner_uid,
            handle=node.handle,
            instruction=node.payload.instruction[:1000],
        )
        try:
            result = await desk.request(asker, params, deadline=self.tree.nodes[node.handle].deadline)
        except JournalError as exc:
            # Never run a gated call unrecorded: the model hears it was not approved.
            result = control.ApproveResult(
                outcome="denied", reason=f"the request could not be journaled ({exc})"
            )
        return result_json(result)

    async def wait(self, handle: str, timeout_s: float | None) -> JsonValue:
        node = self.nodes[handle]
        with anyio.move_on_after(timeout_s if timeout_s is not None else float("inf")):
            await node.done.wait()
        if not node.done.is_set():
            return {"handle": handle, "state": "running"}
        return self.distillate(handle)

    def status(self, handle: str) -> JsonValue:
        node, tree_node = self.nodes[handle], self.tree.nodes[handle]
        return {
            "handle": handle,
            "state": "running" if tree_node.live else "terminal",
            "status": node.result.status.value if node.result else None,
            "usage": self._node_usage(node).model_dump(),
            "grant": {"max_steps": tree_node.grant.steps, "max_tokens": tree_node.grant.tokens},
        }

    def distillate(self, handle: str) -> JsonValue:
        """What a parent may learn of a finished child: never its transcript (docs/design.md §4)."""
        node = self.nodes[handle]
        result = node.result
        assert result is not None
        out: dict[str, JsonValue] = {
            "handle": handle,
            "status": result.status.value,
            "result": result.result,
            "partial": result.partial,
            "usage": self._node_usage(node).model_dump(),
        }
        if result.abort is not None:
            out["abort"] = result.abort
        if result.error is not None:
            out["error"] = {"kind": result.error.kind, "message": result.error.message[:500]}
        # No schema check here: the requesting subagent checks the result against the schema its
        # model wrote (subagent/tools/delegate.py), off the supervisor's event loop.
        return out
