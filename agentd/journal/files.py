"""The journal's state directory: its exclusive lock and its private database files.

One agentd per state dir: `lock_state_dir` takes `flock(LOCK_EX | LOCK_NB)` on `agentd.lock`
(released when its fd closes, also by the kernel when the process dies) and records the holder's
pid so a refused second daemon can name it.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from pathlib import Path

from agentd.errors import JournalError, JournalLocked, JournalUnavailable
from agentd.journal.schema import connect_reader, connect_writer, unavailable_reason
from agentd.private_dirs import check_regular_or_absent, open_private_dir, open_private_file

DB_NAME = "agentd.db"
LOCK_NAME = "agentd.lock"
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def open_state_dir(
    state_dir: Path, read_connections: int
) -> tuple[int, sqlite3.Connection, list[sqlite3.Connection]]:
    """Create (0700), check and lock `state_dir`, then open its database: `(lock_fd, writer, readers)`.

    The directory must be the daemon's own and writable by nobody else, and no file in it is
    followed through a symlink (docs/design.md §14). Blocking; run it in a worker thread. On any failure
    nothing stays open or locked.

    Raises:
        UnsafeDirectory: the directory, or a file planted in it, is not safe to use.
        JournalLocked: another agentd holds the directory.
    """
    dir_fd = open_private_dir(state_dir, owners={os.geteuid()})
    try:
        lock_fd = lock_state_dir(state_dir, dir_fd)
        try:
            writer_conn, readers = _open_database(state_dir, dir_fd, read_connections)
        except BaseException:
            os.close(lock_fd)
            raise
    finally:
        os.close(dir_fd)
    return lock_fd, writer_conn, readers


def _open_database(
    state_dir: Path, dir_fd: int, read_connections: int
) -> tuple[sqlite3.Connection, list[sqlite3.Connection]]:
    db_path = state_dir / DB_NAME
    # Created here, without following a planted symlink, so it is 0600 from the start; SQLite
    # gives -wal/-shm the same mode. SQLite opens them by path: the directory check above is what
    # keeps anyone else from swapping them after this.
    fd = open_private_file(dir_fd, DB_NAME, os.O_RDWR | os.O_CREAT)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    for suffix in SQLITE_SIDE_FILES:
        check_regular_or_absent(dir_fd, DB_NAME + suffix)
    try:
        writer_conn = connect_writer(db_path)
        try:
            readers = [connect_reader(db_path) for _ in range(read_connections)]
        except BaseException:
            writer_conn.close()
            raise
    except sqlite3.Error as exc:
        reason = unavailable_reason(exc)
        if reason is not None:
            raise JournalUnavailable(f"cannot open journal {db_path}: {reason}") from exc
        raise JournalError(f"cannot open journal {db_path}: {exc}") from exc
    return writer_conn, readers


def lock_state_dir(state_dir: Path, dir_fd: int) -> int:
    """Take the state dir's exclusive lock (held for the journal's lifetime); write our pid in it."""
    fd = open_private_file(dir_fd, LOCK_NAME, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        who = f"another agentd (pid {holder})" if holder.isdigit() else "another agentd"
        raise JournalLocked(f"{who} is using {state_dir}") from None
    except BaseException:
        os.close(fd)
        raise
    return fd
