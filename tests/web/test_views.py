"""What the dashboard draws (pure): the task tree nested from the daemon's nodes, and the
timeline paired from a task's events."""

from __future__ import annotations

from pydantic import JsonValue

from dashboard.views import Span, timeline, tree
from protocol.api import EventView, NodeView
from protocol.result import RunUsage


def _event(seq: int, ts: float, name: str, **fields: JsonValue) -> EventView:
    return EventView(seq=seq, ts=ts, event=name, fields=fields)


def test_calls_and_waits_are_paired_per_node_and_open_ones_stay_open() -> None:
    events = [
        _event(1, 10.0, "intel.call", handle="0", endpoint="play", purpose="turn"),
        _event(2, 10.5, "intel.result", handle="0", outcome="ok"),
        _event(3, 11.0, "tool.call", handle="0", tool="subagent_spawn", call_id="c1"),
        _event(4, 11.2, "intel.call", handle="0.1", endpoint="play", purpose="compact"),
        _event(5, 11.4, "intel.result", handle="0.1", outcome="retry"),
        _event(6, 12.0, "approval.requested", handle="0.1", call="a1", tool="record"),
        _event(7, 15.0, "approval.decided", handle="0.1", call="a1", outcome="approved"),
        _event(8, 15.5, "intel.throttled", handle="0.1", wait_ms=500, blocked_by="requests_per_minute"),
        _event(9, 16.0, "tool.call", handle="0.1", tool="demo__record", call_id="c2"),
        _event(10, 16.5, "tool.result", handle="0.1", call_id="c2", err="denied"),
    ]
    assert timeline(events) == [
        Span("0", "model", "play", 10.0, 10.5, "ok"),
        Span("0", "tool", "subagent_spawn", 11.0, None, None),
        Span("0.1", "model", "play (compact)", 11.2, 11.4, "retry"),
        Span("0.1", "approval", "approval: record", 12.0, 15.0, "approved"),
        Span("0.1", "throttle", "throttled: requests_per_minute", 15.0, 15.5, "waited"),
        Span("0.1", "tool", "demo__record", 16.0, 16.5, "denied"),
    ]


def test_a_budget_pause_lasts_until_the_extend() -> None:
    events = [
        _event(1, 1.0, "task.paused", status="exhausted_steps"),
        _event(2, 4.0, "task.extended", max_steps=10),
        _event(3, 5.0, "task.paused", status="exhausted_tokens"),
    ]
    assert timeline(events) == [
        Span("0", "budget", "budget: exhausted_steps", 1.0, 4.0, "extended"),
        Span("0", "budget", "budget: exhausted_tokens", 5.0, None, None),
    ]


def test_a_result_without_its_call_and_unrelated_events_draw_nothing() -> None:
    events = [
        _event(1, 1.0, "tool.result", handle="0", call_id="zz"),
        _event(2, 2.0, "loop.step", handle="0"),
    ]
    assert timeline(events) == []


def test_the_tree_nests_children_under_parents_in_handle_order() -> None:
    usage = RunUsage(tokens_in=5, tokens_out=2, steps=3, cost_usd=0.5)
    nodes = [
        NodeView(handle="0.10", parent="0", depth=1),
        NodeView(handle="0", parent=None, depth=0, usage=usage, state="running"),
        NodeView(handle="0.2", parent="0", depth=1, status="completed", state="terminal"),
        NodeView(handle="0.2.1", parent="0.2", depth=2),
    ]
    (root,) = tree(nodes)
    assert (root["handle"], root["steps"], root["tokens"], root["cost_usd"]) == ("0", 3, 7, 0.5)
    children = root["children"]
    assert isinstance(children, list)
    assert [child["handle"] for child in children if isinstance(child, dict)] == ["0.2", "0.10"]
    first = children[0]
    assert isinstance(first, dict) and first["status"] == "completed"
    assert [c["handle"] for c in first["children"] if isinstance(c, dict)] == ["0.2.1"]  # type: ignore[union-attr]
