"""Leaving a process that loaded the Temporal SDK."""

from __future__ import annotations

import os
import sys


def exit_now(code: int) -> None:
    """End the process with `code` once its work is done and its outputs flushed.

    The SDK's native runtime can crash the interpreter at finalisation (seen with temporalio 1.35:
    `PyGILState_Release` aborts after every client and worker was shut down), which would turn a
    clean drain into a core dump and a wrong exit code; nothing is left to finalise by then.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
