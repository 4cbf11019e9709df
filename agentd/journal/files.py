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

DB_NAME = "agentd.db"
LOCK_NAME = "agentd.lock"


def open_state_dir(
    state_dir: Path, read_connections: int
) -> tuple[int, sqlite3.Connection, list[sqlite3.Connection]]:
    """Create (0700) and lock `state_dir`, then open its database: `(lock_fd, writer, readers)`.

    Blocking; run it in a worker thread. On any failure nothing stays open or locked.
    """
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock_fd = lock_state_dir(state_dir)
    db_path = state_dir / DB_NAME
    try:
        # Created here so it is 0600 from the start; SQLite gives -wal/-shm the same mode.
        fd = os.open(db_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
        writer_conn = connect_writer(db_path)
        try:
            readers = [connect_reader(db_path) for _ in range(read_connections)]
        except BaseException:
            writer_conn.close()
            raise
    except sqlite3.Error as exc:
        os.close(lock_fd)
        reason = unavailable_reason(exc)
        if reason is not None:
            raise JournalUnavailable(f"cannot open journal {db_path}: {reason}") from exc
        raise JournalError(f"cannot open journal {db_path}: {exc}") from exc
    except BaseException:
        os.close(lock_fd)
        raise
    return lock_fd, writer_conn, readers


def lock_state_dir(state_dir: Path) -> int:
    """Take the state dir's exclusive lock (held for the journal's lifetime); write our pid in it."""
    path = state_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
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
