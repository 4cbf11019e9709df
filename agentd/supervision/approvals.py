"""The approval desk: where gated tool calls wait for a person.

A subagent holding a gated call sends `sup/approve`; its node's `TaskRun` hands it here. The desk
journals the request (so it survives a restart), waits — bounded by the request's expiry and the
node's deadline — until a person decides through the API, the expiry passes, or the task is
cancelled, and answers with the decision, consumed once. A decision journaled while no run waited
(the daemon restarted) is honoured when the requeued run makes the same call.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

import anyio
from pydantic import JsonValue

from agentd import logs
from agentd.errors import JournalError
from agentd.journal.approval_queries import Opened
from agentd.journal.records import ApprovalRecord
from protocol.api import ApprovalState
from protocol.approval import canonical_arguments
from protocol.control import ApproveParams, ApproveResult

ARGS_SHOWN = 2000
SETTLE_WRITE_S = 5.0
DECIDERS = "the task's owner, the daemon's user, root and the admin group"


class DeskApprovals(Protocol):
    """The approval operations the desk uses (the real journal's `approvals`)."""

    async def open(
        self,
        *,
        task_id: str,
        run_id: str,
        handle: str,
        owner_uid: int,
        tool_call_id: str,
        server: str,
        tool: str,
        arguments: JsonValue,
        instruction: str,
        timeout_s: float,
        busy: frozenset[str],
    ) -> tuple[ApprovalRecord, Opened]: ...

    async def decide(
        self,
        call_id: str,
        state: Literal["approved", "denied", "expired", "withdrawn"],
        *,
        reason: str | None = None,
        decided_by: int | None = None,
    ) -> tuple[ApprovalRecord | None, bool]: ...

    async def consume(self, call_id: str) -> None: ...

    async def get(self, call_id: str) -> ApprovalRecord | None: ...


class DeskJournal(Protocol):
    """The journal the desk uses: its approvals and the events it appends (the real `Journal`)."""

    @property
    def approvals(self) -> DeskApprovals: ...

    def append_event(
        self, task_id: str, event: str, fields: Mapping[str, JsonValue] | None = None
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class Asker:
    """Who holds the call: the task and the node, as the supervisor knows them (never the child)."""

    task_id: str
    run_id: str
    owner_uid: int
    handle: str
    instruction: str


@dataclass
class _Waiter:
    asker: Asker
    woken: anyio.Event = field(default_factory=anyio.Event)
    # Set when the task is cancelled: the wait ends without a person's decision.
    withdrawn: str | None = None
    # Its task is being parked (stopped to resume once the request is decided): the request stays
    # pending when this wait ends, and nothing is answered to the child.
    held: bool = False


def outcome_of(state: ApprovalState) -> Literal["approved", "denied", "timeout"]:
    """The child's answer for a decided request."""
    if state == "approved":
        return "approved"
    return "timeout" if state == "expired" else "denied"


def answer(record: ApprovalRecord) -> ApproveResult:
    return ApproveResult(
        outcome=outcome_of(record.state),
        reason=(record.reason or "")[:1000] or None,
        decider_uid=record.decided_by,
        call=record.call_id,
    )


def shown_arguments(arguments: JsonValue) -> str:
    """The arguments as an event shows them (compact JSON, capped)."""
    text = canonical_arguments(arguments)
    return text if len(text) <= ARGS_SHOWN else text[:ARGS_SHOWN] + "…"


class ApprovalDesk:
    """Every gated call this daemon holds, by request id; decisions arrive through `decide`."""

    def __init__(self, journal: DeskJournal) -> None:
        self._journal = journal
        self._waiting: dict[str, _Waiter] = {}
        self.log = logs.get()
        # Set by a supervisor that parks waiting tasks: after `park_after_s` of waiting (0: never)
        # it is asked to park the asker's task, with the wall-clock time the request waits until;
        # True when it does. Told of each decision no run waits for, so that the task may start.
        self.park_after_s = 0.0
        self.on_long_wait: Callable[[Asker, ApprovalRecord, float], bool] | None = None
        self.on_decided_unwaited: Callable[[ApprovalRecord], None] | None = None

    def awaiting(self, task_id: str) -> set[str]:
        """The handles of `task_id`'s nodes that hold a call for a person right now."""
        return {w.asker.handle for w in self._waiting.values() if w.asker.task_id == task_id}

    def release(self, task_id: str, reason: str) -> None:
        """End every wait of `task_id` at once (its cancel): each is withdrawn, answered `denied`."""
        for waiter in self._waiting.values():
            if waiter.asker.task_id == task_id and not waiter.woken.is_set():
                waiter.withdrawn = reason
                waiter.woken.set()

    async def request(self, asker: Asker, params: ApproveParams, *, deadline: float) -> ApproveResult:
        """Hold one gated call until it is decided, expires or is withdrawn; its answer, consumed.

        Args:
            asker: the task and node holding the call.
            params: the child's `sup/approve`.
            deadline: the node's deadline (monotonic); the wait never outlasts it.

        Raises:
            JournalError: the request could not be journaled (the caller refuses the call).
        """
        record, opened = await self._journal.approvals.open(
            task_id=asker.task_id,
            run_id=asker.run_id,
            handle=asker.handle,
            owner_uid=asker.owner_uid,
            tool_call_id=params.call_id,
            server=params.server,
            tool=params.tool,
            arguments=params.arguments,
            instruction=asker.instruction,
            timeout_s=params.timeout_s,
            busy=frozenset(self._waiting),
        )
        log = self.log.bind(task_id=asker.task_id, run_id=asker.run_id, handle=asker.handle)
        if opened == "decided":
            # Decided while no run waited (a restart): honoured now, once.
            log.info("approval.decided", call=record.call_id, outcome=outcome_of(record.state), honoured=True)
            return answer(record)
        call_id = record.call_id
        waiter = _Waiter(asker)
        self._waiting[call_id] = waiter
        try:
            if opened == "new":
                self._requested(asker, record)
            else:
                log.info("approval.requested", call=call_id, tool=record.tool, resumed=True)
            until = anyio.current_time() + max(0.0, record.expires_at - time.time())
            await self._wait(waiter, record, min(until, deadline))
            if waiter.withdrawn is not None:
                return await self._settle(call_id, "withdrawn", waiter.withdrawn)
            if not waiter.woken.is_set():
                window = record.expires_at - record.requested_at
                why = (
                    f"nobody approved it within {window:.0f} s"
                    if until <= deadline
                    else "the task's deadline came first"
                )
                return await self._settle(call_id, "expired", why)
            decided = await self._journal.approvals.get(call_id)
            assert decided is not None  # rows are never deleted
            await self._journal.approvals.consume(call_id)
            return answer(decided)
        except BaseException:
            # Cancelled with its node (or our own error): nobody can use a decision now, unless
            # the task is parked to resume and ask again.
            reason = _unanswered(waiter)
            if reason is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(SETTLE_WRITE_S):
                    try:
                        await self._journal.approvals.decide(call_id, "withdrawn", reason=reason)
                    except JournalError as exc:
                        log.warning("approval.decided", call=call_id, err=f"journal: {exc}")
            raise
        finally:
            self._waiting.pop(call_id, None)

    async def _wait(self, waiter: _Waiter, record: ApprovalRecord, until: float) -> None:
        """Wait for a decision until `until` (monotonic). After `park_after_s` the supervisor may
        park the task: then no answer comes, and the task's stop ends this wait."""
        parks = self.park_after_s > 0 and self.on_long_wait is not None
        park_at = anyio.current_time() + self.park_after_s if parks else math.inf
        with anyio.move_on_at(min(until, park_at)):
            await waiter.woken.wait()
        if waiter.woken.is_set() or park_at >= until or self.on_long_wait is None:
            return
        wall_until = time.time() + (until - anyio.current_time())
        if self.on_long_wait(waiter.asker, record, wall_until):
            waiter.held = True
            with anyio.move_on_at(until):
                await anyio.sleep_forever()
            waiter.held = False  # the stop never came: the request is settled as usual
            return
        with anyio.move_on_at(until):
            await waiter.woken.wait()

    async def _settle(
        self, call_id: str, state: Literal["expired", "withdrawn"], reason: str
    ) -> ApproveResult:
        """End a wait without a person (unless one decided just now: then theirs stands)."""
        record, won = await self._journal.approvals.decide(call_id, state, reason=reason)
        assert record is not None
        if won:
            self._decided(record)
        await self._journal.approvals.consume(call_id)
        return answer(record)

    async def decide(
        self, call_id: str, *, approve: bool, reason: str | None, decider_uid: int
    ) -> tuple[ApprovalRecord | None, bool]:
        """A person's decision; returns the row and whether it was this decision that counted
        (False: the request was decided, expired or withdrawn already)."""
        state: Literal["approved", "denied"] = "approved" if approve else "denied"
        waiter = self._waiting.get(call_id)
        if waiter is not None and waiter.withdrawn is not None:
            # The task was cancelled and its wait is ending: the call will not run, whatever a
            # person says now. The withdrawal is journaled first, so the answer says so instead
            # of "approved" for a call that never ran.
            await self._journal.approvals.decide(call_id, "withdrawn", reason=waiter.withdrawn)
        record, won = await self._journal.approvals.decide(
            call_id, state, reason=reason, decided_by=decider_uid
        )
        if record is not None and won:
            self._decided(record)
            waiter = self._waiting.get(call_id)
            if waiter is not None:
                waiter.woken.set()
            if (waiter is None or waiter.held) and self.on_decided_unwaited is not None:
                self.on_decided_unwaited(record)
        return record, won

    async def withdraw(self, call_id: str, reason: str) -> tuple[ApprovalRecord | None, bool]:
        """End a request no run can act on any more (its task ended); the row and whether this
        withdrew it (False: it was decided already)."""
        return await self._journal.approvals.decide(call_id, "withdrawn", reason=reason)

    def _requested(self, asker: Asker, record: ApprovalRecord) -> None:
        fields: dict[str, JsonValue] = {
            "handle": asker.handle,
            "call": record.call_id,
            "server": record.server,
            "tool": record.tool,
            "arguments": shown_arguments(record.arguments),
            "expires_in_s": round(record.expires_at - record.requested_at, 3),
            "deciders": DECIDERS,
        }
        self.log.info("approval.requested", task_id=asker.task_id, run_id=asker.run_id, **fields)
        self._journal.append_event(asker.task_id, "approval.requested", fields)

    def _decided(self, record: ApprovalRecord) -> None:
        decided_at = record.decided_at if record.decided_at is not None else time.time()
        fields: dict[str, JsonValue] = {
            "handle": record.handle,
            "call": record.call_id,
            "server": record.server,
            "tool": record.tool,
            "outcome": outcome_of(record.state),
            "state": record.state,
            "decider_uid": record.decided_by,
            "wait_ms": max(0, round((decided_at - record.requested_at) * 1000)),
            "reason": (record.reason or "")[:1000] or None,
        }
        self.log.info("approval.decided", task_id=record.task_id, run_id=record.run_id, **fields)
        self._journal.append_event(record.task_id, "approval.decided", fields)


def _unanswered(waiter: _Waiter) -> str | None:
    """Why a request whose wait ended without an answer is withdrawn; None: it stays as it is
    (answered already, or left pending for the parked task's next run)."""
    if waiter.held:
        return waiter.withdrawn  # a cancel of the parked task withdraws it after all
    if waiter.withdrawn is None and not waiter.woken.is_set():
        return "the run ended before a decision"
    return None


def result_json(result: ApproveResult) -> JsonValue:
    value: JsonValue = json.loads(result.model_dump_json())
    return value
