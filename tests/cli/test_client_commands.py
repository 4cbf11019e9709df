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
    assert capsys.readouterr().err == (
        "agentd list: invalid arguments: limit: Input should be greater than or equal to 1\n"
    )
