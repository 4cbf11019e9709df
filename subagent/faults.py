"""Faults a chaos test makes a real subagent commit on purpose (docs/testing.md, "Faults").

Armed only by `AGENTD_TEST_FAULT` (`<fault>[@<handle>]`) in the child's environment. Only whoever
starts the daemon can set it: the spawners pass it on from the daemon's own environment, nothing
in a socket request or a spawn payload reaches a child's environment, and nothing a model or an
MCP server says is read here. Unset — every real deployment — `armed` returns None and nothing
else in this module runs.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Mapping
from typing import Literal, cast, get_args

from protocol.environment import TEST_FAULT_ENV

Fault = Literal["segfault", "memory", "flood-channel", "flood-stdout", "ignore-sigterm", "wedge-loop"]
FAULTS: frozenset[str] = frozenset(get_args(Fault))

FLOOD_STDOUT_BYTES = 32 << 20
_CHUNK = b"x" * (1 << 16)  # no newline anywhere: a line splitter must cap it


def armed(handle: str, environ: Mapping[str, str]) -> Fault | None:
    """The fault armed for the node `handle`, if any (an unknown name arms nothing)."""
    value = environ.get(TEST_FAULT_ENV, "")
    name, _, only = value.partition("@")
    if name not in FAULTS or (only and only != handle):
        return None
    return cast(Fault, name)


def commit(fault: Fault, channel_fd: int) -> None:
    """Misbehave, on the event loop's thread, once connected (MCP servers are up).

    Every fault but `flood-stdout` never returns: the process dies or its loop stays blocked while
    the control thread goes on answering pings, as a wedged real child would.
    """
    if fault == "segfault":
        ctypes.string_at(0)  # SIGSEGV; faulthandler (enabled at boot) prints the stack first
    elif fault == "memory":
        hog: list[bytearray] = []
        while True:  # until the address-space limit raises MemoryError
            hog.append(bytearray(16 << 20))
    elif fault == "flood-channel":
        while True:  # a frame that never ends: the supervisor's reader must cap it
            os.write(channel_fd, _CHUNK)
    elif fault == "flood-stdout":
        # A stray print: fd 1 is stderr since boot, so this must not reach the control channel.
        for _ in range(FLOOD_STDOUT_BYTES // len(_CHUNK)):
            os.write(1, _CHUNK)
        os.write(1, b"\n")
    else:
        if fault == "ignore-sigterm":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:  # the loop never ticks again, so a ctrl/cancel is never acted on
            time.sleep(0.05)
