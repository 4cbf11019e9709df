"""Client commands refuse a flag value the method's params refuse before reaching any daemon."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from agentd.cli.client_commands import dispatch
from protocol.exit_codes import ExitCode


def test_a_flag_the_params_refuse_is_a_usage_error_without_connecting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # No daemon listens at this socket: an attempt to connect would be exit 1, not 2.
    args = argparse.Namespace(
        socket=str(tmp_path / "agentd.sock"), state=None, limit=0, before=None, json=False
    )
    assert dispatch("list", args) == ExitCode.USAGE
    assert capsys.readouterr().err == ("agentd list: --limit: must be at least 1\n")


@pytest.mark.parametrize(
    ("action", "name", "message"),
    [
        pytest.param("pause", None, "pause needs a trigger NAME (see `agentd triggers`)", id="no-name"),
        pytest.param(
            None, "inbox", "give an action (pause, resume, restart) before the trigger NAME", id="no-action"
        ),
    ],
)
def test_triggers_usage_errors_exit_2_without_connecting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: str | None, name: str | None, message: str
) -> None:
    args = argparse.Namespace(socket=str(tmp_path / "agentd.sock"), action=action, name=name, json=False)
    assert dispatch("triggers", args) == ExitCode.USAGE
    assert capsys.readouterr().err == f"agentd triggers: {message}\n"


def test_the_triggers_table_lines_up_and_says_what_a_glob_subscribed() -> None:
    from agentd.cli.listing_commands import TRIGGER_COLUMNS, format_table, trigger_row
    from protocol.api import TriggerView

    views = [
        TriggerView(
            name="inbox",
            server="files",
            glob="file:///srv/*",
            state="armed",
            subscribed=3,
            deliveries=7,
            tasks_started=5,
            inflight=2,
            last_fired_at=0.0,
        ),
        TriggerView(
            name="feed",
            server="status",
            uri="status://incidents",
            state="failed",
            last_error="watcher exited with code 3\nand more",
        ),
    ]
    lines = format_table(TRIGGER_COLUMNS, [trigger_row(v) for v in views]).splitlines()
    assert lines[0].startswith("NAME   SERVER")
    assert lines[1].split() == [
        "inbox",
        "files",
        "file:///srv/*",
        "(3",
        "URIs)",
        "spawn",
        "armed",
        "7",
        "5",
        "(2",
        "unfinished)",
        "1970-01-01",
        "00:00:00Z",
        "-",
    ]
    assert lines[2].split()[:5] == ["feed", "status", "status://incidents", "spawn", "failed"]
    assert lines[2].endswith("watcher exited with code 3 and more")
    assert len({line.index("spawn") for line in lines[1:]}) == 1  # columns line up
