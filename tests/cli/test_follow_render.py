"""`submit --follow`'s human view of MCP progress, server log events and what spending waits for (pure)."""

from __future__ import annotations

import pytest
from pydantic import JsonValue

from agentd.cli.progress import render_event
from protocol.api import EventView


def view(event: str, **fields: JsonValue) -> EventView:
    return EventView(seq=1, ts=0.0, event=event, fields=fields)


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        pytest.param(
            view("mcp.progress", server="ev", tool="build", progress=2, total=5, message="linking"),
            "  … ev/build 2/5 linking",
            id="progress",
        ),
        pytest.param(
            view("mcp.progress", server="ev", tool="build", progress=7, total=None), "  … ev/build 7"
        ),
        pytest.param(
            view("mcp.log", server="ev", level="error", message="disk full"),
            "  MCP ev error: disk full",
            id="error",
        ),
        pytest.param(view("mcp.log", server="ev", level="info", message="chatter"), None, id="info-hidden"),
        pytest.param(
            view("task.parked", resumes=1, call="a_1", until=1.0),
            "⏸ parked while a call waits for approval: no slot held; it resumes once the call is decided",
            id="parked-on-approval",
        ),
        pytest.param(
            view("task.parked", resumes=1),
            "⏸ parked: the daemon is stopping; the task resumes from its last step at the next start",
            id="parked-at-stop",
        ),
    ],
)
def test_progress_and_serious_server_logs_are_shown(event: EventView, expected: str | None) -> None:
    assert render_event(event) == expected


@pytest.mark.parametrize(
    ("late", "says"),
    [
        pytest.param("not_ready", "is not ready yet", id="booting"),
        pytest.param("unresponsive", "misses its pings", id="silent"),
        pytest.param("wedged", "reports an event loop that stopped turning", id="loop-stopped"),
        pytest.param(None, "misses its pings", id="journaled-before-late-was-said"),
    ],
)
def test_a_starved_subagent_is_said_to_be_late_with_what_it_is_late_with(late: JsonValue, says: str) -> None:
    fields: dict[str, JsonValue] = {"handle": "0.1", "pid": 42, "cpu": "starved"}
    if late is not None:
        fields["late"] = late
    assert render_event(view("subagent.starved", **fields)) == (
        f"  … subagent 0.1 (pid 42) {says} while starved of CPU (a loaded machine): given more time"
    )


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        pytest.param(
            view("intel.throttled", endpoint="p", wait_ms=2100, blocked_by="max_concurrent_requests"),
            "  ⧗ model p: waited 2100 ms for a slot (max_concurrent_requests)",
            id="throttled",
        ),
        pytest.param(
            view("intel.backoff", endpoint="p", status=429, hold_ms=1100, source="retry_after"),
            "  ⧗ model p: the provider asked every task to wait 1100 ms",
            id="backoff",
        ),
        pytest.param(
            view("intel.unmetered", endpoint="p", cost_usd=0.1001, max_reply_tokens=100),
            "  $ model p reported no usage: counted at its maximum, $0.1001",
            id="unmetered",
        ),
    ],
)
def test_throttled_waits_shared_backoff_and_unmetered_replies_are_shown(
    event: EventView, expected: str
) -> None:
    assert render_event(event) == expected
