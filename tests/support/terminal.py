"""A client command on a pseudo-terminal of a given size, as a person runs it: the pty is its
controlling terminal (so Ctrl-C written to it interrupts the command), and its screen is read
with escape sequences removed."""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1b[=>]")


@dataclass
class Terminal:
    proc: subprocess.Popen[bytes]
    master: int
    data: bytearray = field(default_factory=bytearray)

    @property
    def screen(self) -> str:
        return ANSI.sub(b"", bytes(self.data)).decode(errors="replace")

    def wait_for(self, wanted: Sequence[str], timeout_s: float = 30.0) -> str:
        """Read until every `wanted` text is on the screen (bounded); the screen."""
        deadline = time.monotonic() + timeout_s
        while not all(w in self.screen for w in wanted):
            left = deadline - time.monotonic()
            assert left > 0, f"the screen never showed {wanted}:\n{self.screen[-3000:]}"
            if not self._read(left):
                raise AssertionError(f"the command exited early:\n{self.screen[-3000:]}")
        return self.screen

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def wait_exit(self, timeout_s: float = 10.0) -> int:
        """Keep reading (so the command never blocks on a full pty) until it exits; its code."""
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None:
            assert time.monotonic() < deadline, f"the command did not exit:\n{self.screen[-3000:]}"
            self._read(0.1)
        while self._read(0.05):  # what it wrote last
            pass
        return self.proc.wait()

    def _read(self, timeout_s: float) -> bool:
        """Read what is there within `timeout_s`; False once the other side is closed."""
        ready, _, _ = select.select([self.master], [], [], timeout_s)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: the other side closed
            return False
        self.data += chunk
        return bool(chunk)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


def open_terminal(argv: Sequence[str], *, columns: int = 160, rows: int = 40) -> Terminal:
    """`python -m agentd ARGV...` on a new pseudo-terminal of `columns` × `rows`."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))

    def controlling_tty() -> None:  # runs after setsid: the pty becomes its terminal (for ^C)
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        # As an interactive shell starts a command: SIGINT at its default even when the tests
        # themselves run with it ignored (a background job of a shell without job control).
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": str(rows)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentd", *argv],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=controlling_tty,
        env=env,
    )
    os.close(slave)
    return Terminal(proc, master)
