"""Thin wrappers over the Linux process primitives agentd relies on: prctl and pidfds.

Every `prctl`, `pidfd_open`, `pidfd_send_signal` and `waitid(P_PIDFD)` in the supervisor, the
subagent and the zygote goes through here. The child imports this module before its first
frame, so it loads only `ctypes`, `os` and `signal`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
# Resolved once at import so a post-fork caller (preexec) touches no loader state.
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int


def _call_prctl(option: int, arg: int) -> None:
    if _prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def set_pdeathsig(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send `sig` to this process when its parent thread exits."""
    _call_prctl(PR_SET_PDEATHSIG, int(sig))


def set_process_name(name: str) -> None:
    """Set this thread's `comm` (what `ps -o comm` and `top` show), at most 15 bytes."""
    buffer = ctypes.create_string_buffer(name.encode()[:15])
    _call_prctl(PR_SET_NAME, ctypes.addressof(buffer))


def set_child_subreaper() -> None:
    """Make this process the reaper of its orphaned descendants."""
    _call_prctl(PR_SET_CHILD_SUBREAPER, 1)


def pdeathsig_preexec(expected_parent: int) -> None:
    """`preexec_fn` body for a child that must die with `expected_parent`.

    Sets PDEATHSIG, then closes the fork→prctl race: if the parent already died the child was
    reparented and must exit now.
    """
    _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != expected_parent:
        os._exit(1)


def open_pidfd(pid: int) -> int:
    """A close-on-exec pidfd for `pid`: readable once it exits, usable to signal and reap it.

    It names the right process only if `pid` is our unreaped child (a reaped pid can be reused),
    so open it straight after the spawn, before anything may reap.
    """
    return os.pidfd_open(pid)


def signal_pidfd(pidfd: int, sig: int) -> None:
    """Send `sig` to the process behind `pidfd`; a process already gone is not an error."""
    try:
        signal.pidfd_send_signal(pidfd, sig)
    except ProcessLookupError:
        pass


def reap_nowait(pidfd: int) -> os.waitid_result | None:
    """Reap the exited process behind `pidfd` without blocking; None while it is still running.

    Reaps exactly that process, never another child (unlike `waitpid(-1)`).
    """
    return os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG)
