"""Directories only the daemon may change, and files in them opened without following symlinks.

A directory another user can write lets that user swap a file the daemon is about to open for a
symlink or a socket of their own (docs/design.md §14). So the state and socket directories are checked
once, through an fd (no path race): a real directory, owned by an allowed uid, writable by nobody
else. Inside such a directory no one else can plant anything, and files are still opened with
`O_NOFOLLOW` relative to the directory's fd.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Collection
from pathlib import Path

from agentd.errors import UnsafeDirectory


def open_private_dir(path: Path, *, owners: Collection[int], create_mode: int = 0o700) -> int:
    """Create `path` if missing, then return an `O_DIRECTORY` fd to it once it passes the checks.

    Raises:
        UnsafeDirectory: `path` is a symlink, not a directory, owned by a uid not in `owners`, or
            writable by its group or by others.
    """
    try:
        os.mkdir(path, create_mode)
    except FileExistsError:
        pass
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path, create_mode)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if os.path.islink(path):
            raise UnsafeDirectory(f"{path} is a symlink; use the real directory") from None
        raise UnsafeDirectory(f"{path} is not a usable directory: {exc.strerror}") from None
    try:
        problem = directory_problem(os.fstat(fd), owners)
        if problem is not None:
            raise UnsafeDirectory(f"{path} {problem}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def directory_problem(st: os.stat_result, owners: Collection[int]) -> str | None:
    """Why a directory with this `stat` is unsafe for the daemon, or None if it is safe."""
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid not in owners:
        allowed = " or ".join(str(uid) for uid in sorted(owners))
        return (
            f"is owned by uid {st.st_uid}, not by uid {allowed}: another user could replace the files "
            "in it; use a directory the daemon's user owns"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"is writable by {'others' if st.st_mode & stat.S_IWOTH else 'its group'} "
            f"(mode {stat.S_IMODE(st.st_mode):04o}): another user could replace the files in it; "
            "chmod go-w it"
        )
    return None


def open_private_file(dir_fd: int, name: str, flags: int, mode: int = 0o600) -> int:
    """Open `name` in the directory `dir_fd` without following a symlink; it must be a regular
    file owned by this process's uid.

    Raises:
        UnsafeDirectory: `name` is a symlink or not a regular file we own (a planted trap).
    """
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a symlink
            raise UnsafeDirectory(f"{name} is a symlink; refusing to follow it") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise UnsafeDirectory(f"{name} is not a regular file owned by uid {os.geteuid()}; remove it")
    return fd


def check_regular_or_absent(dir_fd: int, name: str) -> None:
    """Refuse `name` in `dir_fd` if it exists as anything but a regular file (e.g. SQLite's -wal)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeDirectory(f"{name} is not a regular file (a symlink?); remove it")
