"""A reader that stops reading ends any client command quietly: `agentd list | head -1` exits 0
with nothing on stderr, for every listing command of a real daemon — whether the reader leaves
after the first line (with more than a pipe's worth still to write) or before anything was written.

One daemon serves the module: a finished task with a long transcript, one that holds the only
slot waiting for an approval, tasks queued behind it, and schedules that fire next year.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import LEAN_SERVER, Daemon, start_daemon, write_config
from tests.support.leaks import wait_no_descendants

PIPE_BYTES = 4096  # the pipe's capacity, set small so a few pages of output overrun it
BUFFER_BYTES = io.DEFAULT_BUFFER_SIZE  # what the command's stdout holds before it writes
WAIT_S = 30.0
LONG_STEPS = 150
QUEUED = 60
SCHEDULES = 20
INSTRUCTION = "queued behind the approval: " + "a long instruction that fills the column " * 5


def _script(workdir: Path) -> str:
    # Each step writes a note of its own (the same call again and again would be a loop).
    long_turns = [
        {
            "text": f"Writing note {n} of {LONG_STEPS}, then the next one.",
            "tool_calls": [{"name": "note_write", "arguments": {"text": f"note {n}"}}],
        }
        for n in range(LONG_STEPS)
    ]
    roles = [
        {"match": "^long", "turns": [*long_turns, {"text": "wrote them all"}]},
        {
            "match": "^gate",
            "turns": [
                {"tool_calls": [{"name": "demo__record", "arguments": {"text": "gate"}}]},
                {"text": "{last_tool_result}"},
            ],
        },
    ]
    path = workdir / "script.json"
    path.write_text(json.dumps({"turns": [{"text": "done"}], "roles": roles}))
    return f'[intelligence.m]\nkind = "scripted"\nscript = "{path}"\n'


def _body(workdir: Path) -> str:
    calls = workdir / "calls"
    calls.mkdir(exist_ok=True)
    return (
        _script(workdir)
        + f'[mcp.demo]\ncommand = ["{sys.executable}", "{LEAN_SERVER}"]\ntrust = []\n'
        + f'env = {{ AGENTD_TEST_SENTINEL_DIR = "{calls}" }}\napproval = ["record"]\napproval_timeout = "10m"\n'
        + '[defaults]\nmodel = "m"\nmcp = ["demo"]\n'
    )


def _until(what: str, check: object, daemon: Daemon) -> None:
    deadline = time.monotonic() + WAIT_S
    while not callable(check) or not check():
        assert time.monotonic() < deadline, f"{what} within {WAIT_S} s"
        assert daemon.proc.poll() is None, "the daemon exited"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, str]]:
    workdir = tmp_path_factory.mktemp("pipes")
    config = write_config(workdir, _body(workdir), daemon="max_concurrent_tasks = 1\n")
    started = start_daemon(workdir, config)
    gate = None
    try:
        long_task = started.submit(
            "long: write a note a step", limits={"max_steps": LONG_STEPS + 10, "max_tokens": 2_000_000}
        )
        assert started.wait(long_task, timeout_s=120).exit_code == 0
        gate = started.submit("gate: record once")
        _until("the gate's approval request", lambda: started.call("approval.list", {}) != [], started)
        for n in range(QUEUED):
            started.submit(f"{INSTRUCTION} {n}")
        for n in range(SCHEDULES):
            trigger = {"kind": "cron", "cron": "0 0 1 1 *"}
            started.call(
                "schedule.create", {"spec": {"instruction": f"yearly report {n}"}, "trigger": trigger}
            )
        yield started, long_task
    finally:
        if gate is not None:
            started.call("task.cancel", {"task_id": gate})
        code = started.stop(timeout_s=40)
        assert code == 0, started.log_path.read_text()[-3000:]
        strays = wait_no_descendants(timeout_s=10.0)
        assert not strays, f"processes left behind: {strays}"


def _argv(daemon: Daemon, args: list[str]) -> list[str]:
    return [sys.executable, "-m", "agentd", *args, "--socket", str(daemon.socket)]


ENV = {**os.environ, "COLUMNS": "250"}


def _run_into_closed_pipe(daemon: Daemon, args: list[str], *, after_first_line: bool) -> tuple[int, str]:
    """Run the command with stdout a pipe whose reader closes after the first line (or at once);
    its exit code and stderr."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    if not after_first_line:
        os.close(read_end)
    proc = subprocess.Popen(_argv(daemon, args), stdout=write_end, stderr=subprocess.PIPE, env=ENV, text=True)
    os.close(write_end)
    if after_first_line:
        with os.fdopen(read_end, "rb", buffering=0) as reader:
            while reader.read(1) not in (b"\n", b""):
                pass  # one byte at a time: the rest stays unread in the pipe
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


LONG_OUTPUT = [
    pytest.param(["list", "--limit", "200"], id="list"),
    pytest.param(["logs", "LONG"], id="logs"),
    pytest.param(["logs", "-f", "LONG"], id="logs-follow"),
    pytest.param(["transcript", "LONG", "--full"], id="transcript"),
    pytest.param(["list", "--json"], id="list-json"),
]


@pytest.mark.parametrize("args", LONG_OUTPUT)
def test_a_reader_that_leaves_after_the_first_line_ends_the_command_quietly(
    daemon: tuple[Daemon, str], args: list[str]
) -> None:
    running, long_task = daemon
    args = [long_task if a == "LONG" else a for a in args]
    whole = subprocess.run(_argv(running, args), capture_output=True, text=True, env=ENV, timeout=60)
    assert whole.returncode == 0, whole.stderr
    # More than the pipe and the command's buffer hold is left to write when the reader goes: a
    # write must fail.
    first_line = whole.stdout.encode().index(b"\n") + 1
    assert len(whole.stdout.encode()) > first_line + PIPE_BYTES + BUFFER_BYTES, whole.stdout[-2000:]
    assert _run_into_closed_pipe(running, args, after_first_line=True) == (0, "")


SHORT_OUTPUT = [
    *LONG_OUTPUT,
    pytest.param(["schedules"], id="schedules"),
    pytest.param(["status", "LONG"], id="status"),
    pytest.param(["tree", "LONG"], id="tree"),
    pytest.param(["approvals"], id="approvals"),
    pytest.param(["triggers"], id="triggers"),
    pytest.param(["top"], id="top"),
    pytest.param(["list", "--state", "running"], id="list-one"),
    pytest.param(["--help"], id="help"),
]


@pytest.mark.parametrize("args", SHORT_OUTPUT)
def test_a_reader_gone_before_the_first_line_ends_the_command_quietly(
    daemon: tuple[Daemon, str], args: list[str]
) -> None:
    running, long_task = daemon
    args = [long_task if a == "LONG" else a for a in args]
    assert _run_into_closed_pipe(running, args, after_first_line=False) == (0, "")
