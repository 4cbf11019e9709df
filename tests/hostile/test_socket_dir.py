"""The API socket cannot be squatted: its directory must be the daemon's (or
root's) and writable by nobody else, its lock is never followed through a symlink, and a client
sends nothing to a socket served by a uid it does not trust."""

from __future__ import annotations

import os
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.api.client import UNTRUSTED_DAEMON, ApiClient
from agentd.api.listener import open_listener
from agentd.errors import ApiClientError, ListenerError
from protocol.api import StatusRequest
from tests.support.daemon import refused_start, write_config

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")


def test_a_world_writable_sticky_directory_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp: sticky, but anyone may still add a name of their own
    with pytest.raises(ListenerError, match="writable by others"), open_listener(shared / "agentd.sock"):
        pass
    assert list(shared.iterdir()) == []


@needs_root
def test_a_directory_another_user_squatted_is_refused(tmp_path: Path) -> None:
    squatted = tmp_path / "agentd-0"
    squatted.mkdir(mode=0o700)
    os.chown(squatted, NOBODY, NOBODY)
    with (
        pytest.raises(ListenerError, match=f"owned by uid {NOBODY}"),
        open_listener(squatted / "agentd.sock"),
    ):
        pass


def test_a_planted_lock_symlink_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    directory = tmp_path / "run"
    directory.mkdir(mode=0o700)
    (directory / "agentd.sock.lock").symlink_to(victim)
    with pytest.raises(ListenerError, match="symlink"), open_listener(directory / "agentd.sock"):
        pass
    assert victim.read_text() == "precious\n"
    assert not (directory / "agentd.sock").exists()


def test_without_a_group_the_socket_directory_is_the_daemons_alone(tmp_path: Path) -> None:
    path = tmp_path / "agentd" / "agentd.sock"
    with open_listener(path, dir_mode=0o700):
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


@pytest.mark.processes
@needs_root
def test_the_daemon_refuses_a_squatted_socket_directory_with_one_line_saying_why(tmp_path: Path) -> None:
    squatted = tmp_path / "run"
    squatted.mkdir()
    os.chown(squatted, NOBODY, NOBODY)
    squatted.chmod(0o1777)
    config = write_config(tmp_path, "", socket=squatted / "agentd.sock")
    why = refused_start(config)
    assert f"owned by uid {NOBODY}" in why
    assert list(squatted.iterdir()) == []


def _serve_as_nobody(path: Path, ready: int, report: int) -> None:
    """In a forked child: drop to nobody, listen at `path`, and report every byte received."""
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    os.write(ready, b"1")
    conn, _ = server.accept()
    conn.settimeout(5)
    received = b""
    try:
        while chunk := conn.recv(65536):
            received += chunk
    except OSError:
        pass
    os.write(report, str(len(received)).encode())


@pytest.fixture
def impostor() -> Iterator[tuple[Path, int]]:
    """A listener run by `nobody`: (its socket path, a pipe that yields how many bytes it got)."""
    directory = Path(tempfile.mkdtemp(prefix="agentd-impostor-"))
    directory.chmod(0o777)
    path = directory / "agentd.sock"
    ready_r, ready_w = os.pipe()
    report_r, report_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a fork, not an exec: nobody cannot enter the tree the interpreter lives in
        code = 1
        try:
            os.close(ready_r)
            os.close(report_r)
            _serve_as_nobody(path, ready_w, report_w)
            code = 0
        finally:
            os._exit(code)
    os.close(ready_w)
    os.close(report_w)
    try:
        assert os.read(ready_r, 1) == b"1"
        yield path, report_r
    finally:
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        os.close(ready_r)
        os.close(report_r)
        path.unlink()
        directory.rmdir()


@pytest.mark.processes
@needs_root
def test_a_client_sends_nothing_to_a_socket_another_user_serves(impostor: tuple[Path, int]) -> None:
    path, report = impostor
    with pytest.raises(ApiClientError) as caught, ApiClient(path, timeout_s=5) as client:
        client.call(StatusRequest())
    assert caught.value.code == UNTRUSTED_DAEMON
    assert f"served by uid {NOBODY}" in caught.value.message
    assert os.read(report, 32) == b"0"


def test_a_symlinked_socket_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "run"
    link.symlink_to(real)
    with pytest.raises(ListenerError, match="is a symlink"), open_listener(link / "agentd.sock"):
        pass
    assert list(real.iterdir()) == []
