"""The journal's approval requests (the gate on tool calls that wait for a person): a repository
over the journal's one writer.

Each is one write or read through the journal's single writer or its read pool, over the SQL of
`agentd.journal.approval_queries`; a write returns only once its COMMIT did.
"""

from __future__ import annotations

import functools
import time
from typing import Literal

from pydantic import JsonValue

from agentd.journal import approval_queries as aq
from agentd.journal.records import ApprovalRecord, new_call_id
from agentd.journal.repository import Repository
from protocol.approval import call_digest, canonical_arguments


class Approvals(Repository):
    """Open a gated call's request, decide it, consume its decision, and read requests."""

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
    ) -> tuple[ApprovalRecord, aq.Opened]:
        """Journal a gated call's request, or find the decision or request a restart left for the
        same call (see `approval_queries.open_request`)."""
        op = functools.partial(
            aq.open_request,
            call_id=new_call_id(),
            task_id=task_id,
            run_id=run_id,
            handle=handle,
            owner_uid=owner_uid,
            tool_call_id=tool_call_id,
            server=server,
            tool=tool,
            arguments_json=canonical_arguments(arguments),
            digest=call_digest(server, tool, arguments),
            instruction=instruction,
            now=time.time(),
            timeout_s=timeout_s,
            busy=busy,
        )
        return await self._write(op)

    async def decide(
        self,
        call_id: str,
        state: Literal["approved", "denied", "expired", "withdrawn"],
        *,
        reason: str | None = None,
        decided_by: int | None = None,
    ) -> tuple[ApprovalRecord | None, bool]:
        """Decide a pending request (the first decision wins); returns the row and whether this
        call decided it."""
        op = functools.partial(
            aq.decide, call_id=call_id, state=state, reason=reason, decided_by=decided_by, now=time.time()
        )
        return await self._write(op)

    async def consume(self, call_id: str) -> None:
        """Record that a decision reached its run (it is never honoured again)."""
        await self._write(functools.partial(aq.consume, call_id=call_id))

    async def get(self, call_id: str) -> ApprovalRecord | None:
        return await self._read(functools.partial(aq.get_approval, call_id=call_id))

    async def pending(
        self, *, owner_uid: int | None = None, task_id: str | None = None, limit: int = 100
    ) -> tuple[ApprovalRecord, ...]:
        """Pending requests of unfinished tasks, oldest first."""
        return await self._read(
            functools.partial(aq.pending, owner_uid=owner_uid, task_id=task_id, limit=limit)
        )
