"""A child's three stdio pipes: creating them for a spawn, and reading our non-blocking ends.

`open_stdio_pipes` is the one place the supervisor makes a child's fds 0–2 (the exec and zygote
spawners both use it); `read_chunk` is the one wait-readable/read loop over a non-blocking pipe,
used for the subagent's channel and stderr and for a stdio MCP server's stdout and stderr.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import anyio

READ_CHUNK_BYTES = 64 * 1024


@dataclass(slots=True)
class StdioPipes:
    """Three close-on-exec pipes: the ends that become the child's fds 0–2, and ours."""

    child_stdin: int  # read end: the child's fd 0
    child_stdout: int  # write end: the child's fd 1
    child_stderr: int  # write end: the child's fd 2
    stdin: int  # our write end of the child's fd 0
    stdout: int  # our read end of the child's fd 1
    stderr: int  # our read end of the child's fd 2
    # Invariant: each end is closed here at most once (a closed fd number may already be reused).
    _child_ends_open: bool = True
    _our_ends_open: bool = True

    @property
    def child_ends(self) -> tuple[int, int, int]:
        """The child's ends in fd order (0, 1, 2)."""
        return self.child_stdin, self.child_stdout, self.child_stderr

    def close_child_ends(self) -> None:
        """Close our copies of the child's ends once it holds its own (or never will): while we
        hold the write ends of its stdout and stderr, we would never read EOF on them."""
        if self._child_ends_open:
            self._child_ends_open = False
            _close_all(self.child_ends)

    def close(self) -> None:
        """Close every end still open here: the spawn failed before we could hand ours on."""
        self.close_child_ends()
        if self._our_ends_open:
            self._our_ends_open = False
            _close_all((self.stdin, self.stdout, self.stderr))


def open_stdio_pipes() -> StdioPipes:
    """Create the three pipes, all ends close-on-exec (the spawn dups the child's onto 0–2).

    Raises:
        OSError: out of fds; nothing is left open.
    """
    fds: list[int] = []
    try:
        for _ in range(3):
            fds.extend(os.pipe2(os.O_CLOEXEC))
    except OSError:
        _close_all(fds)
        raise
    in_r, in_w, out_r, out_w, err_r, err_w = fds
    return StdioPipes(
        child_stdin=in_r, child_stdout=out_w, child_stderr=err_w, stdin=in_w, stdout=out_r, stderr=err_r
    )


def _close_all(fds: tuple[int, ...] | list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


async def read_chunk(fd: int, max_bytes: int = READ_CHUNK_BYTES) -> bytes:
    """The next chunk from the non-blocking `fd`.

    Returns `b""` at EOF, on a read error (the writer is as good as gone), or once another task
    announced the fd's closing with `anyio.notify_closing`.
    """
    while True:
        try:
            await anyio.wait_readable(fd)
            return os.read(fd, max_bytes)
        except BlockingIOError:
            continue  # readiness was spurious (the data went elsewhere first): wait again
        except (anyio.ClosedResourceError, OSError):
            return b""
