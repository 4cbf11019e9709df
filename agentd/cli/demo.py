"""`agentd demo`: the first five minutes, with no API key and no extra services.

Starts a real daemon on a private socket and a temporary state directory, submits an example
task that runs on the built-in scripted model against the bundled example MCP server
(`agentd/examples/mcp_demo_server.py`, package data), follows it live, prints the result and the
task tree, and shuts the daemon down cleanly (SIGTERM → drain → exit 0).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from agentd.api.client import ApiClient
from agentd.cli.plain_commands import print_result
from agentd.cli.progress import follow
from agentd.cli.task_text import describe
from agentd.config.bundled import DEMO_SCRIPT, DEMO_SERVER
from agentd.errors import ApiClientError
from protocol.api import (
    StatusRequest,
    SubmitParams,
    SubmitRequest,
    TaskRef,
    TaskSpec,
    TreeRequest,
    WaitParams,
    WaitRequest,
)
from protocol.exit_codes import ExitCode

INSTRUCTION = "Which field note explains how agentd stops a child process, and how long is it?"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0

CONFIG = """\
# Written by `agentd demo`: a private daemon for one example task.
[daemon]
socket = "{socket}"
state_dir = "{state}"
log_level = "warning"

[defaults]
model = "demo"
mcp = ["demo"]

[intelligence.demo]
kind = "scripted"
script = "{script}"

[mcp.demo]
command = ["{python}", "{server}"]
trust = []
"""


def _write_config(workdir: Path) -> Path:
    config = workdir / "agentd.toml"
    config.write_text(
        CONFIG.format(
            socket=workdir / "agentd.sock",
            state=workdir / "state",
            script=DEMO_SCRIPT,
            python=sys.executable,
            server=DEMO_SERVER,
        )
    )
    return config


@contextlib.contextmanager
def _daemon(config: Path, log: TextIO) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentd", "serve", "--config", str(config)],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _wait_ready(socket: Path, proc: subprocess.Popen[bytes]) -> ApiClient:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the daemon exited during start-up (code {proc.returncode})")
        if socket.exists():
            client = ApiClient(socket, timeout_s=10)
            try:
                client.call(StatusRequest())
                return client
            except ApiClientError:
                client.close()
        if time.monotonic() > deadline:
            raise RuntimeError(f"the daemon did not answer on {socket} within {START_TIMEOUT_S:.0f}s")
        time.sleep(0.05)


def _print_tree(client: ApiClient, task_id: str, out: TextIO) -> None:
    nodes = client.call(TreeRequest(params=TaskRef(task_id=task_id)))
    out.write("\ntask tree:\n")
    for node in nodes:
        status = node.status.value if node.status else node.state
        out.write(
            f"  {'  ' * node.depth}{node.handle}  {status}  pid {node.pid or '-'}  "
            f"steps {node.usage.steps}  tokens {node.usage.tokens}\n"
        )


def cmd_demo(*, keep: bool = False, out: TextIO = sys.stdout) -> int:
    for needed in (DEMO_SERVER, DEMO_SCRIPT):
        if not needed.is_file():
            out.write(f"agentd demo: {needed} is missing from this installation of agentd; reinstall it\n")
            return ExitCode.FAILURE
    workdir = Path(tempfile.mkdtemp(prefix="agentd-demo-"))
    log_path = workdir / "daemon.log"
    code = 1
    try:
        config = _write_config(workdir)
        out.write(f"agentd demo — private daemon in {workdir}\n")
        with open(log_path, "w") as log, _daemon(config, log) as proc:
            with _wait_ready(workdir / "agentd.sock", proc) as client:
                out.write(f"daemon ready (pid {proc.pid}); submitting:\n  {INSTRUCTION}\n\n")
                spec = TaskSpec(instruction=INSTRUCTION)
                task_id = client.call(SubmitRequest(params=SubmitParams(spec=spec))).task_id
                follow(client, task_id, out)
                view = client.call(WaitRequest(params=WaitParams(task_id=task_id)))
                out.write(f"\n{describe(view)}\nresult:\n")
                print_result(view, out)
                _print_tree(client, task_id, out)
                code = view.exit_code if view.exit_code is not None else 1
            proc.send_signal(signal.SIGTERM)
            daemon_code = proc.wait(timeout=STOP_TIMEOUT_S)
            out.write(f"\ndaemon drained and stopped (exit {daemon_code})\n")
            if daemon_code != 0:
                code = 1
    except (RuntimeError, ApiClientError, subprocess.TimeoutExpired) as exc:
        out.write(f"agentd demo: {exc}\n--- daemon log ---\n")
        if log_path.exists():
            out.write(log_path.read_text()[-4000:])
        return ExitCode.FAILURE
    finally:
        if keep:
            out.write(f"kept {workdir}\n")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return code
