"""Approvals asked of the client's person: while `run_task` waits, each call its task holds for
approval becomes an `elicitation/create` form on the client that started it, when the client
can show one (docs/mcp-server.md, "Approvals through the client").

The form asks one yes/no and an optional reason. Accepting with yes approves the call; accepting
with no, or declining, denies it with the reason (the task's model reads it); dismissing the form
(cancel) decides nothing, so `approve_call`, `deny_call`, another approver or the timeout still can.
"""

from __future__ import annotations

from dataclasses import dataclass

import mcp_types as types
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from pydantic import JsonValue

from agentd.api.async_port import DaemonPort
from agentd.errors import ApiClientError
from protocol.api import ApprovalDecideParams, ApprovalDecideRequest, EventView

DEFAULT_REASON = "declined by the person at the MCP client"

FORM: dict[str, object] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Let this call run?", "default": False},
        "reason": {
            "type": "string",
            "title": "Reason",
            "description": "When you refuse: why (the task's model is told).",
            "maxLength": 1000,
        },
    },
    "required": ["approve"],
}


@dataclass(frozen=True, slots=True)
class Decision:
    approve: bool
    reason: str | None = None


def can_ask(session: ServerSession) -> bool:
    """Whether the client declared form elicitation and this request may ask it something."""
    capabilities = session.client_capabilities
    if capabilities is None or capabilities.elicitation is None:
        return False
    elicitation = capabilities.elicitation
    # A client that declares elicitation with neither mode means form (the 2025-06-18 shape).
    form = elicitation.form is not None or elicitation.url is None
    return form and session.can_send_request


def question(task_id: str, fields: dict[str, JsonValue]) -> str:
    """What the person is asked about one waiting call (the event `approval.requested`)."""
    where = f"subagent {fields.get('handle')} of " if fields.get("handle") not in (None, "0") else ""
    return (
        f"{where}agentd task {task_id} wants to call {fields.get('tool')} on MCP server "
        f"{fields.get('server')} with {fields.get('arguments')}. Let it run?"
    )


def decision(result: types.ElicitResult) -> Decision | None:
    """What the person's answer decides; None when they dismissed the form."""
    content = result.content or {}
    given = content.get("reason")
    reason = given.strip() if isinstance(given, str) and given.strip() else DEFAULT_REASON
    if result.action == "accept" and content.get("approve") is True:
        return Decision(approve=True)
    if result.action in ("accept", "decline"):
        return Decision(approve=False, reason=reason)
    return None


class Asker:
    """Asks the person at one `run_task` request about its task's waiting calls."""

    def __init__(
        self, session: ServerSession, request_id: types.RequestId | None, port: DaemonPort, task_id: str
    ) -> None:
        self._session = session
        self._request_id = request_id
        self._port = port
        self._task_id = task_id

    async def decide(self, event: EventView) -> None:
        """Ask about the waiting call in `event` (`approval.requested`); decide it as answered."""
        try:
            answer = await self._session.elicit_form(
                question(self._task_id, event.fields), FORM, related_request_id=self._request_id
            )
        except MCPError:
            return  # the client could not ask: the call waits for approve_call, deny_call or its timeout
        decided = decision(answer)
        if decided is None:
            return
        call = event.fields.get("call")
        params = ApprovalDecideParams(
            task_id=self._task_id,
            call=call if isinstance(call, str) else None,
            approve=decided.approve,
            reason=decided.reason,
        )
        try:
            await self._port.call(ApprovalDecideRequest(params=params))
        except ApiClientError:
            pass  # decided meanwhile (another approver, the timeout) or the task ended
