"""The README's tour runs as written: `agentd demo`, the `agentd run` example, and every line of
"The daemon" against a real daemon on the embedded defaults (no config file), in order. A line
that needs what the tour never sets up (an approval waiting for an answer, an OAuth server to log
in to) must fail with one readable line naming what is missing, not a traceback."""

from __future__ import annotations

import re

import pytest

from tests.docs.shell import REPO, Line, blocks, doc_shell, section, shell_lines

pytestmark = pytest.mark.processes
README = REPO / "README.md"
# Tour lines whose subject the tour does not create: (command words, what the one line must say).
NEEDS_SETUP = {
    ("approve",): "approval",
    ("mcp", "login"): "no MCP server named 'NAME'",
}
TASK_ID = re.compile(r"\bt_[0-9A-Z]{26}\b")


def _lines(heading: str) -> list[Line]:
    block = blocks(section(README, heading), "sh")[0]
    return shell_lines(block)


def _first_block_command(program: str) -> list[str]:
    # The README opens with `python3 -m venv .venv && .venv/bin/pip install … && .venv/bin/agentd demo`:
    # the install is what runs these tests; the last command is the tour's first step.
    block = blocks(README.read_text(), "sh")[0]
    for line in block.splitlines():
        if program in line:
            return line.split("&&")[-1].split()
    raise AssertionError(f"the README's first block has no {program}")


def test_the_demo_works_as_written() -> None:
    with doc_shell(REPO) as shell:
        demo = shell.run(_first_block_command(".venv/bin/agentd demo"))
        assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
        assert "completed" in demo.stdout


def test_the_run_example_works_as_written() -> None:
    (run,) = _lines("### One task without a daemon: `agentd run`")
    with doc_shell(REPO) as shell:
        done = shell.run(run.argv)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "ladder" in done.stdout


def test_the_daemon_tour_runs_line_by_line_against_the_embedded_defaults() -> None:
    lines = _lines("### The daemon")
    assert lines[0].background and lines[0].argv[1:] == ["serve"], lines[0]
    task: str | None = None
    with doc_shell(REPO) as shell:
        daemon = shell.start(lines[0].argv)
        shell.wait_ready(daemon)
        for line in lines[1:]:
            words = [task if w == "TASK" and task else w for w in line.argv]
            done = shell.run(words)
            what = f"{line.text}\n{done.stdout[-1500:]}{done.stderr[-1500:]}"
            assert "Traceback" not in done.stderr, what
            expected = next(
                (msg for cmd, msg in NEEDS_SETUP.items() if tuple(words[1:3])[: len(cmd)] == cmd), None
            )
            if expected is not None:
                assert done.returncode != 0 and expected in done.stderr, what
                assert len(done.stderr.strip().splitlines()) == 1, what
                continue
            assert done.returncode == 0, what
            if task is None and (found := TASK_ID.search(done.stdout)):
                task = found[0]  # the first submit's: what `TASK` stands for below
        assert task is not None
        assert shell.stop(daemon) == 0, shell.log_of(daemon)
