"""`ApiLimits`: the bounds on what one API client can cost the daemon (docs/design.md §9, §17), shared by
the server (connection caps) and each connection (frame size, deadlines, read-ahead)."""

from __future__ import annotations

from dataclasses import dataclass

from protocol.api import MAX_API_FRAME

# Bound on the courtesy error frame sent before the daemon closes a connection it refuses or ends.
FAREWELL_WRITE_S = 1.0


@dataclass(frozen=True, slots=True)
class ApiLimits:
    """Bounds on what one client can cost the daemon."""

    max_frame: int = MAX_API_FRAME
    # Once a frame's first byte has been read, the rest must arrive within this.
    frame_deadline_s: float = 10.0
    # A connection with no partial frame and no request in flight is closed after this; a new
    # connection counts as idle until its first byte (the header timeout).
    idle_timeout_s: float = 60.0
    # Each frame written must be taken by the client within this, or the client is dropped.
    write_deadline_s: float = 10.0
    # Invariant: max_connections_per_uid <= max_connections (config/check.py).
    max_connections_per_uid: int = 32
    max_connections: int = 1024
    # Invalid frames in a row before the connection is closed (a peer speaking another protocol).
    max_consecutive_faults: int = 64
    max_response_bytes: int = 64 * 1024 * 1024
    # Frames read ahead while one is being answered; beyond this the reader stops reading.
    max_pipelined_frames: int = 8
