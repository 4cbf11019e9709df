"""Server-pushed notices (log messages, progress) as bounded event fields (pure).

A server may push log messages and progress as fast as it likes; each becomes at most one event,
within a token bucket per connection (`EventBudget`), and its text is cut to one bounded line.
What the bucket drops is counted and reported on the next event that gets through.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import JsonValue

MAX_TEXT_CHARS = 500
# Per connection: a burst of 50 notices, then 10 a second.
BURST = 50
PER_SECOND = 10.0


def one_line(value: object, limit: int = MAX_TEXT_CHARS) -> str:
    """A server-supplied value (any JSON) as one line of at most `limit` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    line = " ".join(text.split())
    return line if len(line) <= limit else f"{line[: limit - 1]}…"


@dataclass(slots=True)
class EventBudget:
    """A token bucket; `take(now)` says whether one more event may go out."""

    burst: int = BURST
    per_second: float = PER_SECOND
    tokens: float = float(BURST)
    dropped: int = 0
    _last: float | None = None

    def take(self, now: float) -> bool:
        if self._last is not None:
            self.tokens = min(float(self.burst), self.tokens + (now - self._last) * self.per_second)
        self._last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        self.dropped += 1
        return False

    def drain_dropped(self) -> int:
        """How many were dropped since the last event that went out (and reset the count)."""
        count, self.dropped = self.dropped, 0
        return count


def log_fields(
    server: str, level: str, logger: str | None, data: object, dropped: int
) -> dict[str, JsonValue]:
    """The `mcp.log` fields for one `notifications/message`."""
    return {
        "server": server,
        "level": level,
        "logger": one_line(logger, 100) if logger else None,
        "message": one_line(data),
        "dropped": dropped,
    }


def progress_fields(
    server: str,
    tool: str,
    call_id: str,
    progress: float,
    total: float | None,
    message: str | None,
    dropped: int,
) -> dict[str, JsonValue]:
    """The `mcp.progress` fields for one progress notification of a `tools/call`."""
    return {
        "server": server,
        "tool": tool,
        "call_id": call_id,
        "progress": progress,
        "total": total,
        "message": one_line(message, 200) if message else None,
        "dropped": dropped,
    }
