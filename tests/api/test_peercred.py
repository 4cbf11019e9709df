"""The caller's identity comes from the kernel (`SO_PEERCRED`/`SO_PEERGROUPS`), admin from one rule."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from agentd.api import peercred
from agentd.api.backend import check_owner
from agentd.api.peercred import Caller, caller_from_socket, decide_admin, peer_groups
from agentd.errors import ApiError
from protocol.api import NOT_FOUND

DAEMON = 1000
ADMINS = 4242


@pytest.mark.parametrize(
    ("uid", "gid", "groups", "admin_gid", "expected"),
    [
        pytest.param(0, 0, frozenset(), None, True, id="root"),
        pytest.param(DAEMON, 100, frozenset(), None, True, id="daemon-uid"),
        pytest.param(2000, 100, frozenset({5, 6}), None, False, id="other-no-admin-group"),
        pytest.param(2000, 100, frozenset({5, 6}), ADMINS, False, id="other-not-member"),
        pytest.param(2000, 100, frozenset({5, ADMINS}), ADMINS, True, id="supplementary-member"),
        pytest.param(2000, ADMINS, frozenset(), ADMINS, True, id="primary-member"),
    ],
)
def test_admin_is_root_the_daemon_uid_or_an_admin_group_member(
    uid: int, gid: int, groups: frozenset[int], admin_gid: int | None, expected: bool
) -> None:
    assert decide_admin(uid, gid, groups, daemon_uid=DAEMON, admin_gid=admin_gid) is expected


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        yield left, right


def test_the_caller_is_read_from_the_kernel(pair: tuple[socket.socket, socket.socket]) -> None:
    caller = caller_from_socket(pair[0], daemon_uid=DAEMON, admin_gid=None)
    assert (caller.pid, caller.uid, caller.gid) == (os.getpid(), os.geteuid(), os.getegid())
    assert caller.groups == frozenset(os.getgroups())


def test_groups_fall_back_to_proc_when_the_socket_cannot_tell(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(peercred, "_SO_PEERGROUPS", 0x7FFF)  # an option no kernel knows
    assert peer_groups(pair[0], os.getpid(), os.geteuid()) == frozenset(os.getgroups())
    # /proc must show the connecting uid, else the pid may have been reused by someone else.
    assert peer_groups(pair[0], os.getpid(), os.geteuid() + 1) is None


def test_without_groups_only_the_primary_gid_counts(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(peercred, "peer_groups", lambda *_: None)
    caller = caller_from_socket(pair[0], daemon_uid=DAEMON, admin_gid=None)
    assert caller.groups == frozenset({os.getegid()})


OWNER = Caller(uid=2000, gid=100, pid=1, groups=frozenset(), is_admin=False)
ADMIN = Caller(uid=3000, gid=100, pid=1, groups=frozenset({ADMINS}), is_admin=True)


def test_check_owner_lets_the_owner_and_admins_through() -> None:
    check_owner(OWNER, 2000)
    check_owner(ADMIN, 2000)


def test_check_owner_answers_not_found_for_another_users_task_exactly_like_a_missing_one() -> None:
    with pytest.raises(ApiError) as refused:
        check_owner(OWNER, 9999, task_id="t1")
    assert refused.value.code == NOT_FOUND
    assert refused.value.message == "no task 't1'"
    assert not refused.value.retryable
