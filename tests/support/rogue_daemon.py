"""A daemon whose tasks run the rogue child (`tests/fixtures/rogue_child.py`), and the kill-ladder
rungs its log shows."""

from __future__ import annotations

from pathlib import Path

from tests.support.daemon import Daemon, rogue_command, scripted


def rogue_daemon(tmp_path: Path, extra: str = "", *, missed_pongs: int = 3, supervision: str = "") -> str:
    """`supervision`: more `[supervision]` lines."""
    # The rogue reads its behaviour from the instruction; the model section is never used.
    return (
        scripted("m", [{"text": "unused"}], tmp_path)
        + '[defaults]\nmodel = "m"\n'
        + extra
        + f"[supervision]\nping_interval_s = 0.2\nmissed_pongs = {missed_pongs}\ncancel_grace_s = 0.5\n"
        "term_grace_s = 0.5\nkill_reap_s = 2\neof_grace_s = 0.5\norphan_sweep_interval_s = 0.3\n"
        + supervision
        + rogue_command()
    )


def signals_used(daemon: Daemon, task_id: str) -> list[str]:
    return [
        str(line.get("rung"))
        for line in daemon.log()
        if line.get("event") == "subagent.signal" and line.get("task_id") == task_id
    ]
