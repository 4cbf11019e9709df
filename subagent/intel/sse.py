"""An incremental, pure Server-Sent Events parser: bytes in, events out.

It keeps the WHATWG event-stream rules that model servers rely on — `data:` lines joined with
newlines, `:` comments ignored, `\\r`, `\\n` and `\\r\\n` line ends (split anywhere across
chunks) — and bounds every line and event so a hostile server cannot grow the buffer forever.
"""

from __future__ import annotations

from dataclasses import dataclass

from subagent.errors import AgentError

MAX_LINE_BYTES = 4 * 1024 * 1024
MAX_EVENT_BYTES = 8 * 1024 * 1024


class SseError(AgentError, ValueError):
    """The byte stream broke a bound (line or event too long); the stream cannot be trusted."""


@dataclass(frozen=True, slots=True)
class SseEvent:
    data: str
    event: str = "message"
    id: str | None = None


class SseParser:
    """Feed raw chunks with `feed`; each call returns the events those bytes completed."""

    def __init__(
        self, *, max_line_bytes: int = MAX_LINE_BYTES, max_event_bytes: int = MAX_EVENT_BYTES
    ) -> None:
        self._max_line = max_line_bytes
        self._max_event = max_event_bytes
        self._partial = bytearray()
        # Invariant: True when the last byte consumed was a `\r` line end, so a `\n` that opens
        # the next chunk belongs to that same `\r\n` and must not end an empty line.
        self._after_cr = False
        self._data: list[str] = []
        self._data_bytes = 0
        self._event = ""
        self._id: str | None = None

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Consume `chunk` and return the events it completed, in order."""
        events: list[SseEvent] = []
        if not chunk:
            return events
        start = 0
        if self._after_cr and chunk[:1] == b"\n":
            start = 1
        self._after_cr = False
        end = len(chunk)
        while start < end:
            cr = chunk.find(b"\r", start)
            lf = chunk.find(b"\n", start)
            stops = [i for i in (cr, lf) if i >= 0]
            if not stops:
                self._extend_partial(chunk[start:])
                break
            stop = min(stops)
            self._extend_partial(chunk[start:stop])
            line = bytes(self._partial)
            self._partial.clear()
            if chunk[stop : stop + 1] == b"\r":
                if stop + 1 == end:
                    self._after_cr = True
                    start = end
                else:
                    start = stop + 2 if chunk[stop + 1 : stop + 2] == b"\n" else stop + 1
            else:
                start = stop + 1
            event = self._line(line.decode("utf-8", errors="replace"))
            if event is not None:
                events.append(event)
        return events

    def _extend_partial(self, piece: bytes) -> None:
        if len(self._partial) + len(piece) > self._max_line:
            raise SseError(f"an event-stream line exceeds {self._max_line} bytes")
        self._partial += piece

    def _line(self, line: str) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data_bytes += len(value) + 1
            if self._data_bytes > self._max_event:
                raise SseError(f"an event exceeds {self._max_event} bytes")
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        # `retry` and unknown fields are ignored: a model stream has no use for reconnection.
        return None

    def _dispatch(self) -> SseEvent | None:
        data, event, event_id = self._data, self._event, self._id
        self._data, self._data_bytes, self._event = [], 0, ""
        if not data:
            return None
        return SseEvent(data="\n".join(data), event=event or "message", id=event_id)
