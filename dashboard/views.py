"""What the pages draw, from the daemon's views (pure): a task's tree as nested nodes, and the
timeline of each node's model calls, tool calls and waits, paired from the task's events.

The timeline pairs a start event with its end by the node's `handle` and the event's own key
(`call_id` for tool calls, `call` for approvals); a start whose end has not arrived is open
(`end` None: still running). Waits on a provider's limits are reported once they are over, with
their length (`wait_ms`), so they are drawn backwards from that event.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pydantic import JsonValue

from protocol.api import EventView, NodeView

SpanKind = str  # "model", "tool", "approval", "throttle", "budget"


@dataclass(slots=True)
class Span:
    """One bar of the timeline."""

    handle: str
    kind: SpanKind
    label: str
    start: float
    end: float | None = None
    outcome: str | None = None

    def as_json(self) -> dict[str, JsonValue]:
        return {
            "handle": self.handle,
            "kind": self.kind,
            "label": self.label,
            "start": self.start,
            "end": self.end,
            "outcome": self.outcome,
        }


@dataclass(slots=True)
class _Pairing:
    spans: list[Span] = field(default_factory=list)
    open: dict[tuple[str, str, str], Span] = field(default_factory=dict)

    def begin(self, key: tuple[str, str, str], span: Span) -> None:
        self.open[key] = span
        self.spans.append(span)

    def finish(self, key: tuple[str, str, str], ts: float, outcome: str | None) -> None:
        span = self.open.pop(key, None)
        if span is not None:
            span.end = ts
            span.outcome = outcome


def _text(value: JsonValue, default: str = "") -> str:
    return default if value is None else str(value)


def timeline(events: Iterable[EventView]) -> list[Span]:
    """Every model call, tool call and wait of a task's nodes, in start order."""
    pairing = _Pairing()
    for event in events:
        _place(pairing, event)
    return sorted(pairing.spans, key=lambda span: span.start)


def _place(pairing: _Pairing, event: EventView) -> None:
    fields = event.fields
    handle = _text(fields.get("handle"), "0")
    name = event.event
    if name == "intel.call":
        label = _text(fields.get("endpoint"), "model")
        purpose = fields.get("purpose")
        label += f" ({purpose})" if purpose not in (None, "turn") else ""
        pairing.begin((handle, "model", ""), Span(handle, "model", label, event.ts))
    elif name == "intel.result":
        pairing.finish((handle, "model", ""), event.ts, _text(fields.get("outcome"), "ok"))
    elif name == "tool.call":
        key = (handle, "tool", _text(fields.get("call_id")))
        pairing.begin(key, Span(handle, "tool", _text(fields.get("tool"), "tool"), event.ts))
    elif name == "tool.result":
        err = fields.get("err")
        pairing.finish((handle, "tool", _text(fields.get("call_id"))), event.ts, _text(err, "ok"))
    elif name == "approval.requested":
        label = f"approval: {_text(fields.get('tool'))}"
        key = (handle, "approval", _text(fields.get("call")))
        pairing.begin(key, Span(handle, "approval", label, event.ts))
    elif name == "approval.decided":
        key = (handle, "approval", _text(fields.get("call")))
        pairing.finish(key, event.ts, _text(fields.get("outcome")))
    elif name == "intel.throttled":
        waited_s = _number(fields.get("wait_ms")) / 1000
        label = f"throttled: {_text(fields.get('blocked_by'))}"
        pairing.spans.append(Span(handle, "throttle", label, event.ts - waited_s, event.ts, "waited"))
    elif name == "task.paused":
        label = f"budget: {_text(fields.get('status'))}"
        pairing.begin(("0", "budget", ""), Span("0", "budget", label, event.ts))
    elif name in ("task.extended", "task.terminal"):
        pairing.finish(("0", "budget", ""), event.ts, "extended" if name == "task.extended" else "ended")


def _number(value: JsonValue) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def tree(nodes: Sequence[NodeView]) -> list[dict[str, JsonValue]]:
    """The nodes as nested dicts (`children`), roots first, each level in handle order."""
    children: dict[str | None, list[NodeView]] = {}
    for node in nodes:
        children.setdefault(node.parent, []).append(node)
    known = {node.handle for node in nodes}
    roots = [node for node in nodes if node.parent is None or node.parent not in known]

    def nest(node: NodeView) -> dict[str, JsonValue]:
        below = sorted(children.get(node.handle, []), key=lambda n: _handle_key(n.handle))
        return {
            "handle": node.handle,
            "state": node.state,
            "status": node.status,
            "depth": node.depth,
            "steps": node.usage.steps,
            "tokens": node.usage.tokens,
            "cost_usd": node.usage.cost_usd,
            "model_calls": node.usage.model_calls,
            "tool_calls": node.usage.tool_calls,
            "children": [nest(child) for child in below],
        }

    return [nest(root) for root in sorted(roots, key=lambda n: _handle_key(n.handle))]


def _handle_key(handle: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in handle.split("."))
