"""Socket activation: the daemon adopts a listening socket it did not bind, and clients that
connect while no daemon runs (before the first start, across a restart) are served once one is up."""

from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path

import pytest

from protocol.result import TerminalStatus
from tests.support.daemon import Daemon, scripted, socket_activation_launcher, start_daemon, write_config

pytestmark = pytest.mark.processes

SOCKET_ACTIVATE = shutil.which("systemd-socket-activate")


def _config(tmp_path: Path, sock: Path) -> Path:
    body = scripted("m", [{"text": "done"}], tmp_path) + '[defaults]\nmodel = "m"\n'
    return write_config(tmp_path, body, socket=sock)


def _wait_for_path(path: Path, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout_s} s"
        time.sleep(0.02)


def _stop(daemon: Daemon) -> int:
    try:
        return daemon.stop(timeout_s=40)
    finally:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()


@pytest.mark.skipif(
    SOCKET_ACTIVATE is None,
    reason="systemd-socket-activate is not installed (Debian package `systemd`; scripts/check installs it as root)",
)
def test_submit_wait_works_through_a_socket_from_systemd_socket_activate(tmp_path: Path) -> None:
    assert SOCKET_ACTIVATE is not None
    sock = tmp_path / "activated.sock"
    launcher = (SOCKET_ACTIVATE, "-l", str(sock))
    daemon = start_daemon(tmp_path, _config(tmp_path, sock), socket=sock, launcher=launcher, wait=False)
    try:
        _wait_for_path(sock)
        # systemd-socket-activate execs the daemon only when a client connects: this client's
        # connection waits in the backlog while the daemon starts and recovers.
        assert not any(line.get("event") == "proc.start" for line in daemon.log())
        done = daemon.cli("submit", "through the activated socket", "--wait", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["status"] == "completed"
        assert daemon.wait_log("proc.ready", timeout_s=0)["pid"] == daemon.pid
        assert not Path(f"{sock}.lock").exists(), "the daemon bound its own socket instead of adopting one"
    finally:
        assert _stop(daemon) == 0


def test_a_client_queued_while_the_daemon_restarts_is_served_by_the_next_daemon(tmp_path: Path) -> None:
    sock_path = tmp_path / "held.sock"
    config = _config(tmp_path, sock_path)
    # The test plays systemd: it owns the listening socket across both daemons.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(sock_path))
        listener.listen(16)
        fd = listener.fileno()
        launcher = socket_activation_launcher(fd)
        first = start_daemon(tmp_path, config, socket=sock_path, launcher=launcher, pass_fds=(fd,))
        assert first.wait(first.submit("before the restart")).status is TerminalStatus.COMPLETED
        assert _stop(first) == 0

        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(30)
            client.connect(str(sock_path))  # no daemon runs: the kernel queues the connection
            request = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "task.submit",
                "params": {"spec": {"instruction": "queued"}},
            }
            client.sendall(json.dumps(request).encode() + b"\n")
            second = start_daemon(tmp_path, config, socket=sock_path, launcher=launcher, pass_fds=(fd,))
            try:
                reply = json.loads(client.makefile("rb").readline())
                assert reply["id"] == 1, reply
                task_id = reply["result"]["task_id"]
                assert second.wait(task_id).status is TerminalStatus.COMPLETED
                assert not Path(f"{sock_path}.lock").exists(), "a daemon bound its own socket"
            finally:
                assert _stop(second) == 0
