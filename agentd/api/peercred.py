"""Who is on the other end of an API connection: `SO_PEERCRED` and the caller's groups (docs/design.md §9).

The kernel records the peer's pid/uid/gid at `connect()`; `Caller` freezes them with the
supplementary groups and the one decision made from them, `is_admin`. `decide_admin` is the pure
rule; the rest reads the socket and, as a fallback, `/proc`.
"""

from __future__ import annotations

import errno
import socket
import struct
from dataclasses import dataclass

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
# Linux >= 4.13; Python does not export the constant. Groups as the kernel saw them at connect().
_SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)
_GID = struct.Struct("I")
_GROUPS_FIRST_TRY = 64  # most callers have a handful of groups; the retry covers NGROUPS_MAX
_NGROUPS_MAX = 65536


@dataclass(frozen=True, slots=True)
class Caller:
    """The credentials of one API connection, fixed for its lifetime."""

    uid: int
    gid: int  # primary (effective) gid at connect()
    pid: int
    # Supplementary groups; when they could not be read this is just {gid}.
    groups: frozenset[int]
    # Invariant: decided once, by `decide_admin`, from the fields above.
    is_admin: bool


def decide_admin(
    uid: int, gid: int, groups: frozenset[int], *, daemon_uid: int, admin_gid: int | None
) -> bool:
    """The ownership exemption of docs/design.md §9: the daemon's own uid, root, or the admin group."""
    if uid in (0, daemon_uid):
        return True
    return admin_gid is not None and (gid == admin_gid or admin_gid in groups)


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """`(pid, uid, gid)` of the process that connected `sock` (a connected AF_UNIX socket)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return pid, uid, gid


def peer_groups(sock: socket.socket, pid: int, uid: int) -> frozenset[int] | None:
    """The peer's supplementary groups, or None when neither source is usable.

    `SO_PEERGROUPS` is exact (captured at connect()). `/proc/<pid>/status` is the fallback for
    older kernels and is weaker: the peer may have exited and its pid been reused, or changed its
    groups since connecting. The `Uid:` line must still show the connecting uid, which rules out
    most reuse; what remains can only grant admin to a process of the same uid that is in the
    admin group now, a risk the caller accepts by putting that uid in the group.
    """
    groups = _groups_from_socket(sock)
    if groups is not None:
        return groups
    return _groups_from_proc(pid, uid)


def caller_from_socket(sock: socket.socket, *, daemon_uid: int, admin_gid: int | None) -> Caller:
    """Build the `Caller` of a freshly accepted connection. Raises `OSError` if the socket is unusable."""
    pid, uid, gid = peer_credentials(sock)
    groups = peer_groups(sock, pid, uid)
    if groups is None:
        # Least privilege: without the supplementary groups only the primary gid can make an admin.
        groups = frozenset({gid})
    admin = decide_admin(uid, gid, groups, daemon_uid=daemon_uid, admin_gid=admin_gid)
    return Caller(uid=uid, gid=gid, pid=pid, groups=groups, is_admin=admin)


def _groups_from_socket(sock: socket.socket) -> frozenset[int] | None:
    for count in (_GROUPS_FIRST_TRY, _NGROUPS_MAX):
        try:
            raw = sock.getsockopt(socket.SOL_SOCKET, _SO_PEERGROUPS, count * _GID.size)
        except OSError as exc:
            if exc.errno == errno.ERANGE:
                continue  # more groups than the buffer holds: retry with room for NGROUPS_MAX
            return None  # ENOPROTOOPT on kernels without it
        usable = len(raw) - len(raw) % _GID.size
        return frozenset(gid for (gid,) in _GID.iter_unpack(raw[:usable]))
    return None


def _groups_from_proc(pid: int, uid: int) -> frozenset[int] | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            text = status.read(64 * 1024)
    except OSError:
        return None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key] = value
    try:
        # `Uid:` is real, effective, saved, fs; SO_PEERCRED reports the effective uid.
        if int(fields["Uid"].split()[1]) != uid:
            return None
        return frozenset(int(g) for g in fields["Groups"].split())
    except (KeyError, IndexError, ValueError):
        return None
