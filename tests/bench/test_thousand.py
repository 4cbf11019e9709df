"""`bench/thousand.py --smoke` and `bench/journal_steps.py --smoke` run end to end, so neither
bench can rot.

Six tasks against a fake model answering after 2 s, submitted the moment the daemon answers:
every acknowledged task completes, none is lost, nothing is left running, and the JSON carries
every row the README quotes. No timing is judged: the counts are too small and CI too noisy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import journal_steps, thousand

pytestmark = pytest.mark.processes


def test_the_smoke_run_completes_every_task_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "thousand.json"
    # No `--dir tmp_path`: under pytest-xdist that path leaves the daemon's socket path longer than
    # the 107 bytes a unix socket may have; the bench's own temporary directory is under /tmp.
    assert thousand.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["mode"] == "smoke"
    assert result["accepted"] == result["tasks"] == 6
    assert result["completed"] == 6 and result["lost"] == 0, result["outcomes"]
    assert result["alive"] == 6
    assert result["strays"] == 0 and result["left_after_drain"] == 0
    assert result["drain_exit_code"] == 0
    assert 0 <= result["memory"]["subagents"] <= 6  # some may have ended on a slow machine
    assert result["memory"]["daemon_rss_mb"] > 0
    assert result["api_while_spawning"]["count"] + result["api_while_running"]["count"] > 0
    assert [row["what"] for row in result["verdicts"]][:2] == [
        "6 tasks all alive at once, after the first submit",
        "completed / lost",
    ]
    assert set(result["fork_floor"]["forks"]) == {"exit", "anyio"}  # the machine's speed that day


def test_the_journaling_smoke_run_journals_every_step_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "journal_steps.json"
    assert journal_steps.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["outcomes"] == {"exhausted_steps": 6} and result["lost"] == 0
    # Each of the 6 tasks journaled its 3 steps: a reply, the call's start and its result each,
    # but for the last step's call (the budget ended there, so it never ran).
    assert result["journal"]["steps"] == 18 and result["journal"]["items"] == 6 * 7
    assert 100 < result["bytes_per_step"] < 2000
    assert result["strays"] == 0
    assert result["daemon_rss_mb"]["peak"] > 0
