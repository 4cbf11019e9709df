"""The pidfd primitives (`processes.linux`) against a real child: signal, reap, and nothing more."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

import pytest

from processes.linux import open_pidfd, reap_nowait, signal_pidfd

pytestmark = pytest.mark.processes


def test_a_pidfd_signals_and_reaps_exactly_its_child_and_a_late_signal_is_harmless() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pidfd = open_pidfd(child.pid)
    try:
        assert reap_nowait(pidfd) is None  # still running
        signal_pidfd(pidfd, signal.SIGKILL)
        readable, _, _ = select.select([pidfd], [], [], 10)
        assert readable == [pidfd]  # readable pidfd: the child exited
        info = reap_nowait(pidfd)
        assert info is not None
        assert (info.si_pid, info.si_code, info.si_status) == (child.pid, os.CLD_KILLED, signal.SIGKILL)
        signal_pidfd(pidfd, signal.SIGKILL)  # reaped: ESRCH, swallowed
    finally:
        os.close(pidfd)
        child.returncode = -signal.SIGKILL  # reaped through the pidfd; Popen must not wait again
