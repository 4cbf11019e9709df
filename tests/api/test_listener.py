"""`open_listener` binds privately and safely; `listener_from_fd` adopts only a listening unix socket."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from agentd.api.listener import listener_from_fd, membership_problem, open_listener
from agentd.errors import DaemonRunning, ListenerError
from tests.support.privilege import needs_root

NOGROUP = 65534


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_socket_is_0660_in_a_0750_directory_created_for_it(socket_path: Path) -> None:
    previous = os.umask(0)  # the modes must not depend on the daemon's umask
    try:
        with open_listener(socket_path) as sock:
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            assert stat.S_ISSOCK(os.lstat(socket_path).st_mode)
            assert _mode(socket_path) == 0o660
            assert _mode(socket_path.parent) == 0o750
    finally:
        os.umask(previous)


@needs_root("chgrps the socket and its directory to `nogroup`")
def test_the_group_option_sets_the_group_of_socket_and_new_directory(socket_path: Path) -> None:
    with open_listener(socket_path, group=NOGROUP):
        assert os.lstat(socket_path).st_gid == NOGROUP
        assert os.stat(socket_path.parent).st_gid == NOGROUP


def test_an_unknown_group_name_is_refused(socket_path: Path) -> None:
    with (
        pytest.raises(ListenerError, match="no group named"),
        open_listener(socket_path, group="no-such-group-x"),
    ):
        pass


def test_closing_removes_the_socket(socket_path: Path) -> None:
    with open_listener(socket_path):
        pass
    assert not socket_path.exists()


def test_a_stale_socket_is_replaced(socket_path: Path) -> None:
    socket_path.parent.mkdir(mode=0o750)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(socket_path))
    stale.close()  # bound, never listening: connecting is refused
    with open_listener(socket_path), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.connect(str(socket_path))  # the path now leads to a live listener
        assert _mode(socket_path) == 0o660


def test_a_live_daemon_is_not_displaced(socket_path: Path) -> None:
    with open_listener(socket_path), pytest.raises(DaemonRunning), open_listener(socket_path):
        pass
    # The first daemon's socket survived the attempt until its own close.
    assert not socket_path.exists()


def test_a_live_listener_without_the_lock_is_not_displaced(socket_path: Path) -> None:
    socket_path.parent.mkdir(mode=0o750)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other:
        other.bind(str(socket_path))
        other.listen(1)
        with pytest.raises(DaemonRunning, match="already listening"), open_listener(socket_path):
            pass
        assert stat.S_ISSOCK(os.lstat(socket_path).st_mode)


def test_a_path_that_is_not_a_socket_is_refused(socket_path: Path) -> None:
    socket_path.parent.mkdir(mode=0o750)
    socket_path.write_text("precious")
    with pytest.raises(ListenerError, match="not a socket"), open_listener(socket_path):
        pass
    assert socket_path.read_text() == "precious"


@pytest.mark.parametrize("path", [pytest.param("\0agentd", id="nul"), pytest.param("@agentd", id="at")])
def test_an_abstract_socket_address_is_refused(path: str) -> None:
    with pytest.raises(ListenerError, match="abstract"), open_listener(path):
        pass


def test_a_world_writable_directory_without_the_sticky_bit_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ListenerError, match="writable by others"), open_listener(shared / "agentd.sock"):
        pass


def test_a_path_longer_than_sun_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ListenerError, match="longer than"), open_listener(tmp_path / ("x" * 120)):
        pass


def test_listener_from_fd_adopts_a_listening_unix_socket_without_letting_children_inherit_it(
    socket_path: Path,
) -> None:
    socket_path.parent.mkdir(mode=0o750)
    original = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    original.bind(str(socket_path))
    original.listen(1)
    fd = original.detach()
    os.set_inheritable(fd, True)  # as systemd passes it
    with listener_from_fd(fd) as sock:
        assert sock.fileno() == fd
        assert not os.get_inheritable(fd)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM), id="inet"),
        pytest.param(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM), id="datagram"),
        pytest.param(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), id="not-listening"),
    ],
)
def test_listener_from_fd_refuses_anything_but_a_listening_unix_stream_socket(
    make: Callable[[], socket.socket],
) -> None:
    with make() as sock:
        with pytest.raises(ListenerError):
            listener_from_fd(sock.fileno())
        assert sock.fileno() >= 0  # the fd was left to its owner


def test_listener_from_fd_refuses_a_non_socket_fd(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        with pytest.raises(ListenerError, match="not a socket"):
            listener_from_fd(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("euid", "egid", "groups", "refused"),
    [
        pytest.param(0, 0, [], False, id="root-may-give-any-group"),
        pytest.param(1000, 4242, [], False, id="its-primary-group"),
        pytest.param(1000, 1000, [4242], False, id="a-supplementary-group"),
        pytest.param(1000, 1000, [5], True, id="not-a-member"),
    ],
)
def test_a_daemon_user_outside_the_socket_group_is_told_how_to_join_it(
    euid: int, egid: int, groups: list[int], refused: bool
) -> None:
    problem = membership_problem(4242, euid=euid, egid=egid, groups=groups)
    if not refused:
        assert problem is None
    else:
        assert problem is not None
        assert "is not a member of group 4242" in problem and "usermod -aG 4242" in problem
        assert "SocketGroup=" in problem
