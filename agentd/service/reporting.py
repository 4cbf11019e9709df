"""Keeping systemd informed while the daemon serves: the watchdog, the STATUS= line, the wedge hook.

`run_watchdog` pings from the daemon's own event loop, so a wedged loop starves it and systemd
restarts the daemon (docs/design.md §15). `ServiceStatus` samples the supervisor and the journal and sends
`STATUS=` when the line changes. `AGENTD_TEST_WEDGE_ON_SIGUSR2=<seconds>` is a fault-injection
hook for tests: off unless set, it makes SIGUSR2 block the event loop for that long.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping

import anyio

from agentd import logs
from agentd.errors import JournalError
from agentd.journal.store import Journal
from agentd.service.sdnotify import Notifier
from agentd.service.status import ServiceState, status_text
from agentd.supervision.supervisor import Supervisor

STATUS_POLL_S = 1.0  # in-memory state (running, draining, health) is checked this often
QUEUED_REFRESH_S = 5.0  # the queued count is read from the journal at least this often
QUEUED_READ_TIMEOUT_S = 5.0  # a journal read slower than this keeps the last known count
WEDGE_ENV = "AGENTD_TEST_WEDGE_ON_SIGUSR2"


async def run_watchdog(notifier: Notifier) -> None:
    """Send `WATCHDOG=1` every half watchdog period, forever; returns at once without a watchdog."""
    interval_s = notifier.watchdog_interval_s
    if interval_s is None:
        return
    while True:
        notifier.watchdog()
        await anyio.sleep(interval_s)


class ServiceStatus:
    """Samples the daemon's state for `STATUS=` and sends the line when it changes."""

    def __init__(
        self,
        notifier: Notifier,
        supervisor: Supervisor,
        journal: Journal,
        config_error: Callable[[], str | None],
        failed_triggers: Callable[[], list[str]] = list,
    ) -> None:
        self.failed_triggers = failed_triggers
        self.notifier = notifier
        self.supervisor = supervisor
        self.journal = journal
        self.config_error = config_error
        self._queued = 0
        self._sent: str | None = None

    def state(self) -> ServiceState:
        """The current state, with the queued count as of the last `refresh_queued`."""
        health = self.journal.health
        return ServiceState(
            queued=self._queued,
            running=len(self.supervisor.running),
            draining=self.supervisor.draining,
            journal_error=None if health.healthy else (health.last_error or "write failed"),
            config_error=self.config_error(),
            failed_triggers=tuple(self.failed_triggers()),
        )

    def text(self) -> str:
        """The current line; the caller sends it (e.g. with READY=1), so it counts as sent."""
        self._sent = status_text(self.state())
        return self._sent

    async def refresh_queued(self) -> None:
        with anyio.move_on_after(QUEUED_READ_TIMEOUT_S):
            try:
                counts = await self.journal.tasks.counts()
            except JournalError:
                return  # the journal's health already says why
            self._queued = counts.get("queued", 0)

    def publish(self) -> None:
        """Send `STATUS=` if the line differs from the last one sent."""
        text = status_text(self.state())
        if text != self._sent:
            self.notifier.status(text)
            self._sent = text

    async def run(self) -> None:
        """Keep `STATUS=` current: within a second of an in-memory change, within 5 s for the queue."""
        if not self.notifier.enabled:
            return
        last = self.state()
        refresh_at = anyio.current_time() + QUEUED_REFRESH_S
        while True:
            await anyio.sleep(STATUS_POLL_S)
            now = self.state()
            if now != last or anyio.current_time() >= refresh_at:
                await self.refresh_queued()
                refresh_at = anyio.current_time() + QUEUED_REFRESH_S
            self.publish()
            last = self.state()


def wedge_seconds(environ: Mapping[str, str] = os.environ) -> float | None:
    """How long SIGUSR2 wedges the event loop, or None: the fault-injection hook is off."""
    raw = environ.get(WEDGE_ENV)
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        return None
    return seconds if seconds > 0 else None


def wedge_event_loop(seconds: float) -> None:
    """Fault injection: block the calling event loop (tests of the watchdog; see `WEDGE_ENV`)."""
    log = logs.get()
    log.warning("proc.wedge", wedge_s=seconds, phase="start")
    time.sleep(seconds)  # deliberately blocking: a wedged loop must starve the watchdog
    log.warning("proc.wedge", wedge_s=seconds, phase="end")
