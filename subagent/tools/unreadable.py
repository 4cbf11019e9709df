"""What a stdio server writes to stdout that is not JSON-RPC: counted and summarised (pure).

A server that logs to stdout (or `yes garbage`) would otherwise cost one log record per line —
hundreds of thousands a second. `UnreadableLines` keeps the count and the first example
(bounded), says so at once for the first line and then at most once per `REPORT_INTERVAL_S`,
and decides when a server that has not yet sent one readable message is not speaking MCP at all.
"""

from __future__ import annotations

from dataclasses import dataclass

# More unreadable lines than this before the server's first JSON-RPC message: it is not an MCP
# server on stdout (or it logs there), and waiting for `initialize` would only burn CPU.
MAX_BEFORE_READY = 10
REPORT_INTERVAL_S = 10.0
EXAMPLE_BYTES = 200


def example(line: bytes | int) -> str:
    """A line as a bounded, printable example; an int is the size of a line too long to keep."""
    if isinstance(line, int):
        return f"<a {line}-byte line>"
    text = repr(line[:EXAMPLE_BYTES])[2:-1]
    return text + ("…" if len(line) > EXAMPLE_BYTES else "")


@dataclass(slots=True)
class UnreadableLines:
    """The unreadable lines of one server's stdout."""

    server: str
    total: int = 0
    first: str | None = None
    unreported: int = 0
    readable_seen: bool = False
    _last_report: float | None = None

    def readable(self) -> None:
        self.readable_seen = True

    def note(self, line: bytes | int, now: float) -> str | None:
        """Count one unreadable line; a log message when one is due (the first, then one per interval)."""
        self.total += 1
        self.unreported += 1
        if self.first is None:
            self.first = example(line)
            self._last_report = now
            self.unreported = 0
            what = "wrote a line to stdout that is not JSON-RPC (dropped)"
            return f"MCP server {self.server} {what}: {self.first}"
        if self._last_report is not None and now - self._last_report >= REPORT_INTERVAL_S:
            return self.summary(now)
        return None

    def summary(self, now: float) -> str | None:
        """The pending count as one message (`None` if nothing is pending)."""
        if not self.unreported:
            return None
        count, self.unreported, self._last_report = self.unreported, 0, now
        return (
            f"MCP server {self.server} wrote {count} more unreadable stdout line{'s' if count != 1 else ''} "
            f"({self.total} in all; first: {self.first})"
        )

    @property
    def hopeless(self) -> bool:
        """Too many unreadable lines before any readable one: give up on this server."""
        return not self.readable_seen and self.total > MAX_BEFORE_READY

    def verdict(self) -> str:
        return (
            f"the server wrote {self.total} lines to stdout that are not JSON-RPC before answering "
            f"initialize (first: {self.first}); a stdio MCP server must keep stdout for the protocol "
            "and log to stderr"
        )
