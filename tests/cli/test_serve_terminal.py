"""`agentd serve` in a terminal: text log lines (JSON with --log-format json), no line per client
connection at info, and client commands that find its socket through `--config FILE`."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes
TIMEOUT_S = 30.0


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="agentd-tty-"))  # short: the socket path must fit
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTD_", "XDG_"))}
    return env | {"HOME": str(home)}


def _read_until(master: int, needle: str, seen: list[str]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while needle not in "".join(seen):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no {needle!r} within {TIMEOUT_S:g}s:\n{''.join(seen)[-3000:]}")
        ready, _, _ = select.select([master], [], [], remaining)
        if ready:
            try:
                seen.append(os.read(master, 65536).decode(errors="replace"))
            except OSError:  # EIO: the daemon closed the terminal
                return


@pytest.mark.parametrize("log_format", [None, "json"])
def test_serve_in_a_terminal_logs_text_unless_told_and_clients_find_it_by_config(
    workdir: Path, log_format: str | None
) -> None:
    config = workdir / "agentd.toml"
    # A relative socket: relative to the file's directory, for the daemon and the client alike.
    config.write_text('[daemon]\nsocket = "agentd.sock"\nstate_dir = "state"\n')
    argv = [sys.executable, "-m", "agentd", "serve", "--config", str(config)]
    if log_format is not None:
        argv += ["--log-format", log_format]
    master, slave = os.openpty()
    daemon = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave, env=_env(workdir)
    )
    os.close(slave)
    seen: list[str] = []
    try:
        _read_until(master, "proc.ready", seen)
        client = subprocess.run(
            [sys.executable, "-m", "agentd", "list", "--config", str(config), "--json"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            cwd=tempfile.gettempdir(),
            env=_env(workdir),
        )
        assert client.returncode == 0, client.stderr
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=TIMEOUT_S) == 0
        _read_until(master, "proc.exit", seen)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        os.close(master)
    lines = [line for line in "".join(seen).splitlines() if line.strip()]
    ready = next(line for line in lines if "proc.ready" in line)
    if log_format == "json":
        assert all(line.startswith("{") for line in lines), lines
    else:
        assert not any(line.startswith("{") for line in lines), lines
        assert " info    proc.ready  comp=supervisor " in ready
        assert f"socket={workdir / 'agentd.sock'}" in ready
    assert not any("api.connect" in line or "api.disconnect" in line for line in lines)
