"""The API's listening socket: bound safely at a filesystem path, or adopted from socket activation.

`open_listener` keeps docs/design.md §9's and §14's contract: a directory owned by the daemon's uid (or
root) that nobody else can write — so nobody else can swap the socket or plant a link beside it —
a socket bound under a restrictive umask and only then opened up to its mode (no window in which
it is world-accessible), never an abstract socket, never displacing a live daemon or a file that
is not a socket. An flock on a sibling `.lock` file (opened without following a symlink) makes
"is another daemon starting here?" race-free.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import grp
import os
import pwd
import socket
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from agentd.errors import DaemonRunning, ListenerError, UnsafeDirectory
from agentd.private_dirs import open_private_dir, open_private_file

MAX_UNIX_PATH = 107  # sun_path is 108 bytes including the terminating NUL
PROBE_TIMEOUT_S = 1.0  # connect() to a live local socket is instant; a full backlog is "live" too
DEFAULT_BACKLOG = 1024  # room for a burst of clients while the accept loop drains it (capped by somaxconn)


@contextlib.contextmanager
def open_listener(
    path: str | os.PathLike[str],
    *,
    mode: int = 0o660,
    dir_mode: int = 0o750,
    group: int | str | None = None,
    backlog: int = DEFAULT_BACKLOG,
) -> Iterator[socket.socket]:
    """Bind and listen on the unix socket at `path`; on exit close it and remove the path.

    The parent directory is created with `dir_mode` if missing (grandparents must exist), and must
    be owned by this uid or root and writable by nobody else. An
    existing stale socket (nothing listening) is replaced; a live one raises `DaemonRunning`.
    `group` (a gid or a group name) becomes the group of the socket, and of the directory when
    this call creates it, so that group's members can connect.

    Raises:
        ListenerError: the path is abstract, too long, not a socket, or its directory is another
            user's, writable by others or a symlink.
        DaemonRunning: another daemon holds the path.
    """
    raw = os.fspath(path)
    if not raw or raw[0] in ("\0", "@"):
        raise ListenerError(f"refusing abstract socket address {raw[:1]!r}…: use a filesystem path")
    target = Path(os.path.abspath(raw))
    if len(os.fsencode(target)) > MAX_UNIX_PATH:
        raise ListenerError(f"socket path {target} is longer than {MAX_UNIX_PATH} bytes")
    gid = resolve_group(group)
    dir_fd = _private_directory(target.parent, dir_mode, gid)
    try:
        lock_fd = _lock(dir_fd, target)
    finally:
        os.close(dir_fd)
    try:
        _clear_stale(target)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            identity = _bind_restricted(sock, target, mode, gid)
            sock.listen(backlog)
        except BaseException:
            sock.close()
            raise
        try:
            yield sock
        finally:
            sock.close()
            _unlink_if_ours(target, identity)
    finally:
        os.close(lock_fd)


def listener_from_fd(fd: int) -> socket.socket:
    """Adopt an already bound, listening AF_UNIX stream socket (systemd socket activation).

    The fd becomes close-on-exec, so subagents never inherit the API socket.

    Raises:
        ListenerError: the fd is not a listening unix stream socket.
    """
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise ListenerError(f"fd {fd} is not a socket: {exc.strerror}") from exc
    try:
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
            raise ListenerError(f"fd {fd} is not a unix stream socket")
        if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            raise ListenerError(f"fd {fd} is not listening")
        name = sock.getsockname()
        if isinstance(name, bytes) or not name or name[0] == "\0":
            raise ListenerError(f"fd {fd} is an abstract or unnamed socket; refusing it")
    except BaseException:
        sock.detach()  # the fd still belongs to whoever passed it
        raise
    os.set_inheritable(fd, False)
    return sock


def membership_problem(gid: int, *, euid: int, egid: int, groups: Iterable[int]) -> str | None:
    """Why a daemon running as `euid` cannot give its socket to group `gid`, or None: chown(2) lets
    a user other than root change a file's group only to a group it is a member of."""
    if euid == 0 or gid == egid or gid in groups:
        return None
    try:
        user = pwd.getpwuid(euid).pw_name
    except KeyError:
        user = str(euid)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    return (
        f"the daemon runs as {user} (uid {euid}), which is not a member of group {group}, so it cannot "
        f"give the socket to that group: add it (`usermod -aG {group} {user}`) and start the daemon again "
        "(a new login of its user), or let systemd create the socket (`SocketGroup=` in agentd.socket)"
    )


def resolve_group(group: int | str | None) -> int | None:
    if group is None or isinstance(group, int):
        return group
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise ListenerError(f"no group named {group!r}") from None


def _private_directory(directory: Path, dir_mode: int, gid: int | None) -> int:
    """An fd of `directory`, created with `dir_mode` (and `gid`) if missing; refused unless it is
    owned by this uid or root and writable by nobody else (anyone who can write here could swap
    our socket for theirs and read every client's spec)."""
    try:
        os.mkdir(directory, dir_mode)
        created = True
    except FileExistsError:
        created = False
    except FileNotFoundError:
        raise ListenerError(f"cannot create {directory}: its parent does not exist") from None
    try:
        dir_fd = open_private_dir(directory, owners={os.geteuid(), 0})
    except UnsafeDirectory as exc:
        raise ListenerError(f"refusing to put the API socket in {exc}") from None
    if created:
        if gid is not None:
            os.fchown(dir_fd, -1, gid)
        os.fchmod(dir_fd, dir_mode)  # mkdir's mode was filtered by the umask
    return dir_fd


def _lock(dir_fd: int, target: Path) -> int:
    try:
        fd = open_private_file(dir_fd, f"{target.name}.lock", os.O_RDWR | os.O_CREAT)
    except UnsafeDirectory as exc:
        raise ListenerError(f"{target.parent}: {exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DaemonRunning(f"another agentd holds {target}.lock") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _clear_stale(target: Path) -> None:
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise ListenerError(f"{target} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_TIMEOUT_S)
    try:
        probe.connect(str(target))
    except ConnectionRefusedError:
        pass  # stale: nobody listens
    except FileNotFoundError:
        return  # removed meanwhile
    except OSError as exc:
        # EAGAIN / timeout: a full backlog means someone is listening.
        raise DaemonRunning(f"{target} is in use ({exc.strerror or 'no answer'})") from exc
    else:
        raise DaemonRunning(f"a daemon is already listening on {target}")
    finally:
        probe.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(target)


def _bind_restricted(sock: socket.socket, target: Path, mode: int, gid: int | None) -> tuple[int, int]:
    # The umask is process-wide: other threads creating files in this instant get it too, which
    # only makes their files more private.
    previous = os.umask(0o177)
    try:
        sock.bind(str(target))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise DaemonRunning(f"{target} appeared while binding") from exc
        raise
    finally:
        os.umask(previous)
    # Group first, then mode: the socket is never open to the wrong group. The directory is ours
    # alone (checked above), so nobody can have swapped the path for a link since the bind; the
    # checks after each step say so rather than assume it.
    bound = os.lstat(target)
    if gid is not None:
        os.chown(target, -1, gid, follow_symlinks=False)
    os.chmod(target, mode)
    st = os.lstat(target)
    if not stat.S_ISSOCK(st.st_mode) or (st.st_dev, st.st_ino) != (bound.st_dev, bound.st_ino):
        raise ListenerError(f"{target} changed while it was being bound; refusing it")
    return st.st_dev, st.st_ino


def _unlink_if_ours(target: Path, identity: tuple[int, int]) -> None:
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    # A successor that replaced our (by then stale) socket keeps its own.
    if (st.st_dev, st.st_ino) == identity:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
