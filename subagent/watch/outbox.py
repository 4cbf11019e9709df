"""What waits for the supervisor to read it: bounded, coalescing, and written by one thread.

The event loop never writes to the channel itself: it puts frames here and returns at once, and
the sender thread writes them (blocking, in order). If the supervisor stops reading, the pipe
fills and the sender blocks — and what piles up here stays bounded:

- `ev/resource`: one pending frame per URI; a newer change of a URI replaces the pending one
  and moves to the back (newest wins: a delivery only says "read it again", so the later one
  carries everything the earlier did). At most `MAX_PENDING_URIS` URIs wait; beyond that a change
  of a new URI is dropped and counted.
- `ev/watch_state`: one pending frame; a newer state replaces it and moves to the back.
- `ev/catalogue`: one pending frame, the same way (a newer listing makes the older one moot).
- `ev/event`: at most `MAX_PENDING_EVENTS` wait; the rest are dropped and counted.

Dropped counts are reported on stderr when the sender next writes, so they reach the daemon's log.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

from pydantic import BaseModel

from protocol.watch import (
    MAX_WATCHED_URIS,
    CatalogueReport,
    ResourceChanged,
    ResourceChangedParams,
    WatchState,
)
from subagent.channel import ControlChannel

MAX_PENDING_URIS = MAX_WATCHED_URIS
MAX_PENDING_EVENTS = 256
STATE_KEY = ("state", "")
CATALOGUE_KEY = ("catalogue", "")


class Outbox:
    """A bounded, coalescing queue of up-frames; `put_*` from the loop, `take` from the sender thread."""

    def __init__(self) -> None:
        self._pending: OrderedDict[tuple[str, str], BaseModel] = OrderedDict()
        self._uris = 0
        self._events = 0
        self._seq = 0
        self._closed = False
        self.dropped_resources = 0
        self.dropped_events = 0
        self._ready = threading.Condition()

    def put_resource(self, uri: str, *, synthetic: bool, etag: str | None = None) -> None:
        frame = ResourceChanged(params=ResourceChangedParams(uri=uri, etag=etag, synthetic=synthetic))
        with self._ready:
            key = ("resource", uri)
            if key in self._pending:
                self._pending[key] = frame
                self._pending.move_to_end(key)
            elif self._uris >= MAX_PENDING_URIS:
                self.dropped_resources += 1
                return
            else:
                self._pending[key] = frame
                self._uris += 1
            self._ready.notify()

    def put_state(self, frame: WatchState) -> None:
        with self._ready:
            self._pending[STATE_KEY] = frame
            self._pending.move_to_end(STATE_KEY)
            self._ready.notify()

    def put_catalogue(self, frame: CatalogueReport) -> None:
        with self._ready:
            self._pending[CATALOGUE_KEY] = frame
            self._pending.move_to_end(CATALOGUE_KEY)
            self._ready.notify()

    def put_event(self, frame: BaseModel) -> None:
        with self._ready:
            if self._events >= MAX_PENDING_EVENTS:
                self.dropped_events += 1
                return
            self._seq += 1
            self._pending[("event", str(self._seq))] = frame
            self._events += 1
            self._ready.notify()

    @property
    def pending(self) -> int:
        with self._ready:
            return len(self._pending)

    def take(self, timeout_s: float | None = None) -> BaseModel | None:
        """The oldest pending frame; None once closed and drained (or after `timeout_s` idle)."""
        with self._ready:
            if not self._ready.wait_for(lambda: self._pending or self._closed, timeout=timeout_s):
                return None
            if not self._pending:
                return None
            key, frame = self._pending.popitem(last=False)
            if key[0] == "resource":
                self._uris -= 1
            elif key[0] == "event":
                self._events -= 1
            return frame

    def close(self) -> None:
        """No more frames: the sender drains what is pending, then stops."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()


class Sender:
    """The thread that writes the outbox to the channel, in order, blocking as the pipe requires."""

    def __init__(self, channel: ControlChannel, outbox: Outbox) -> None:
        self._channel = channel
        self._outbox = outbox
        self._thread = threading.Thread(target=self._run, name="agentd-watch-sender", daemon=True)
        self._reported = (0, 0)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while (frame := self._outbox.take()) is not None:
            self._report_drops()
            if not self._channel.send(frame):
                return  # the supervisor's end is gone: nobody can read the rest

    def _report_drops(self) -> None:
        counts = (self._outbox.dropped_resources, self._outbox.dropped_events)
        if counts != self._reported:
            self._reported = counts
            message = (
                f"watcher: the supervisor is not reading; dropped {counts[0]} resource change(s) of URIs"
                f" beyond the {MAX_PENDING_URIS} pending and {counts[1]} event(s) so far\n"
            )
            try:
                os.write(2, message.encode())
            except OSError:
                pass

    def join(self, timeout_s: float) -> bool:
        """Wait (bounded) for the pending frames to be written; False if they were not all."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()
