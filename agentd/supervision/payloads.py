"""The spawn payloads of a task's tree: a nested child's, narrowed from its parent's by its grant,
and the time left to its node's deadline that every payload carries when it is sent.

Pure: `now` is an argument. A node's deadline is one absolute monotonic instant, fixed when the
task or the node is admitted; `limits.deadline_s` on the wire is always derived from it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from agentd.supervision.tree import Grant, Scope
from protocol import control
from protocol.mcp_catalogue import MAX_PAYLOAD_CATALOGUES, McpCatalogue
from protocol.spawn import Limits, McpServerSpec, SpawnPayload

TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")

# `Limits.deadline_s` must be positive: a node at or past its deadline still gets a sliver, and
# stops itself at once.
MIN_DEADLINE_S = 0.1


def scope_of(payload: SpawnPayload) -> Scope:
    """The tools a payload grants, as the tree counts them (None: every tool of that server)."""
    return {s.name: (None if s.tools is None else frozenset(s.tools)) for s in payload.mcp_servers}


def with_deadline(payload: SpawnPayload, deadline: float, *, now: float) -> SpawnPayload:
    """`payload` as sent at `now`: its `limits.deadline_s` is the time left until `deadline`."""
    limits = payload.limits.model_copy(update={"deadline_s": max(MIN_DEADLINE_S, deadline - now)})
    return payload.model_copy(update={"limits": limits})


def with_catalogues(
    payload: SpawnPayload, known: Callable[[McpServerSpec], McpCatalogue | None]
) -> SpawnPayload:
    """`payload` carrying the catalogue `known` holds for each granted server (the first
    `MAX_PAYLOAD_CATALOGUES` in grant order that have one): its first model request offers them
    while the task connects those servers in the background (docs/decisions.md)."""
    catalogues: dict[str, McpCatalogue] = {}
    for spec in payload.mcp_servers:
        if len(catalogues) >= MAX_PAYLOAD_CATALOGUES:
            break
        catalogue = known(spec)
        if catalogue is not None:
            catalogues[spec.name] = catalogue
    return payload.model_copy(update={"mcp_catalogues": catalogues}) if catalogues else payload


def child_payload(
    parent: SpawnPayload,
    grant: Grant,
    params: control.SpawnRequestParams,
    *,
    root_notes: str | None,
    now: float,
) -> SpawnPayload:
    """A nested child's payload: its parent's, narrowed to the grant's scope, budget and deadline.

    Args:
        parent: the payload of the node that asked for the child.
        grant: what the tree granted (handle, depth, budget, deadline, scope).
        params: the `sup/spawn` request: the child's instruction, contract and seed.
        root_notes: the root's notes path; each nested node writes a sibling file of its own.
        now: the current monotonic time.
    """
    servers = []
    for spec in parent.mcp_servers:
        if spec.name in grant.scope:
            tools = grant.scope[spec.name]
            servers.append(spec if tools is None else spec.model_copy(update={"tools": sorted(tools)}))
    notes = root_notes.removesuffix(".md") + f"-{grant.handle}.md" if root_notes else None
    # The child joins its parent's trace under the delegating call; a malformed claim is ignored.
    traceparent = params.traceparent
    telemetry = parent.telemetry
    if traceparent is not None and TRACEPARENT.match(traceparent):
        telemetry = telemetry.model_copy(update={"traceparent": traceparent})
    payload = parent.model_copy(
        update={
            "handle": grant.handle,
            "depth": grant.depth,
            "instruction": params.instruction,
            "output_contract": params.output_contract,
            "context_seed": params.context_seed,
            "mcp_servers": servers,
            # The parent's hints for the servers the child keeps (the payload must name only those).
            "mcp_catalogues": {k: v for k, v in parent.mcp_catalogues.items() if k in grant.scope},
            "limits": Limits(
                max_steps=grant.budget.steps,
                max_tokens=grant.budget.tokens,
                remaining_depth=max(0, parent.limits.remaining_depth - 1),
            ),
            "notes_path": notes,
            "warm": False,
            # A child has a transcript of its own (none yet), never its parent's.
            "replay": [],
            # Only the root pauses at its budget; a child out of its grant ends as usual.
            "wrap_up": True,
            # Only the root run speaks for a schedule's fire.
            "idle_signal": False,
            "telemetry": telemetry,
        }
    )
    return with_deadline(payload, grant.deadline, now=now)
