"""A byte stream split into lines, with a hard cap on each (docs/design.md §3).

`LineSplitter` never buffers more than `max_line` bytes of one line, however the peer behaves; a
longer line comes out as an `Oversize` marker. Standard library only: a client that reads plain
JSON (`agentd status`) splits its frames here without importing pydantic (`protocol.framing`
decodes them into models).
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_FRAME = 16 * 1024 * 1024
"""The control channel's line cap in bytes, newline excluded."""
MAX_API_FRAME = 1024 * 1024
"""The socket API's cap on a request line in bytes, newline excluded."""


@dataclass(frozen=True, slots=True)
class Oversize:
    """Marker yielded by `LineSplitter` for a line that exceeded the cap (its bytes were dropped)."""

    size: int


class LineSplitter:
    """Splits a byte stream into lines, bounding memory to `max_line` bytes per line.

    A line longer than the cap is discarded as it streams in and reported once as `Oversize`
    when its newline arrives (or at `close()`), so a peer that floods without
    newlines costs at most `max_line` bytes of buffer.
    """

    def __init__(self, max_line: int = MAX_FRAME) -> None:
        self._max = max_line
        self._buf = bytearray()
        # Invariant: while discarding, _buf is empty and _dropped counts the skipped bytes.
        self._discarding = False
        self._dropped = 0

    @property
    def buffered(self) -> int:
        """Bytes held for the current partial line."""
        return len(self._buf)

    @property
    def discarding(self) -> bool:
        """True while the current line has exceeded the cap and is being dropped."""
        return self._discarding

    def feed(self, data: bytes) -> list[bytes | Oversize]:
        """Consume `data`; return every line it completed, in order."""
        out: list[bytes | Oversize] = []
        start = 0
        n = len(data)
        while start < n:
            nl = data.find(b"\n", start)
            end = n if nl < 0 else nl
            chunk_len = end - start
            if self._discarding:
                self._dropped += chunk_len
            elif len(self._buf) + chunk_len > self._max:
                self._dropped = len(self._buf) + chunk_len
                self._buf.clear()
                self._discarding = True
            else:
                self._buf += data[start:end]
            if nl < 0:
                break
            if self._discarding:
                out.append(Oversize(self._dropped))
                self._discarding = False
                self._dropped = 0
            else:
                out.append(bytes(self._buf))
                self._buf.clear()
            start = nl + 1
        return out

    def close(self) -> list[bytes | Oversize]:
        """End of stream: a trailing unterminated line is returned as-is (or as `Oversize`)."""
        if self._discarding:
            self._discarding = False
            size, self._dropped = self._dropped, 0
            return [Oversize(size)]
        if self._buf:
            line = bytes(self._buf)
            self._buf.clear()
            return [line]
        return []
