"""Thin wrappers over the Linux process primitives agentd relies on (prctl, rlimits).

Shared by the supervisor and the child. Importing this module loads only `ctypes` and `os`.
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
