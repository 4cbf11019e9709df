"""The events and usage reports a subagent has not sent yet: they leave together, in one frame, at
the next frame the child sends anyway (a `sup/record` carries them) or at the end of the event
loop's turn, whichever comes first (docs/decisions.md, "One frame per step boundary").

Pure: the channel holds the lock and does the writes. A buffer is bounded by count and by an
estimate of its bytes, so one frame stays far below the 16 MiB frame cap.
"""

from __future__ import annotations

from pydantic import JsonValue

from protocol.control import MAX_NOTES_PER_FRAME, EventParams, NotesParams, UsageParams

# A buffer past this many bytes (estimated) is sent at once. With a record's items (at most
# about 2 MB of text) a frame stays below the cap even if JSON escaping grows it several times.
NOTES_BYTES = 512 * 1024
# A usage report's bytes in a frame, about: small and fixed.
USAGE_BYTES = 200
# An event's bytes beyond its fields (its name, the keys' quotes and commas).
EVENT_BYTES = 64


def approx_json_bytes(value: JsonValue) -> int:
    """About how many bytes `value` takes as JSON (escaping aside)."""
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, dict):
        return 2 + sum(len(k) + 4 + approx_json_bytes(v) for k, v in value.items())
    if isinstance(value, list):
        return 2 + sum(1 + approx_json_bytes(v) for v in value)
    return 8


class NoteBuffer:
    """What the child reported since its last frame, in order (events; usage reports)."""

    def __init__(self, max_bytes: int = NOTES_BYTES, max_count: int = MAX_NOTES_PER_FRAME) -> None:
        self.max_bytes = max_bytes
        self.max_count = max_count
        self._events: list[EventParams] = []
        self._usage: list[UsageParams] = []
        self._bytes = 0

    @property
    def empty(self) -> bool:
        return not self._events and not self._usage

    def add(self, note: EventParams | UsageParams) -> bool:
        """Keep `note`; True when the buffer is full and must be sent now."""
        if isinstance(note, EventParams):
            self._events.append(note)
            self._bytes += EVENT_BYTES + approx_json_bytes(note.fields)
        else:
            self._usage.append(note)
            self._bytes += USAGE_BYTES
        return (
            self._bytes >= self.max_bytes
            or len(self._events) >= self.max_count
            or len(self._usage) >= self.max_count
        )

    def take(self) -> NotesParams | None:
        """Everything kept, as one frame's params, and an empty buffer; None when it was empty."""
        if self.empty:
            return None
        notes = NotesParams.model_construct(events=self._events, usage=self._usage)
        self._events, self._usage, self._bytes = [], [], 0
        return notes
