"""`submit --follow`'s human view of MCP progress and server log events (pure)."""

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
    ],
)
def test_progress_and_serious_server_logs_are_shown(event: EventView, expected: str | None) -> None:
    assert render_event(event) == expected
