"""sd_notify(3) without libsystemd: tell the service manager READY, STATUS, RELOADING, STOPPING, WATCHDOG.

`notify_settings` is the pure reading of the environment (`NOTIFY_SOCKET` as a path or an abstract
`@name`, `WATCHDOG_USEC` and `WATCHDOG_PID`); `Notifier` sends `KEY=VALUE` lines as one datagram
on a non-blocking socket. Contract: outside systemd every method is a no-op, and no method ever
raises into the daemon — a failed send is dropped and reported once through `report`.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass

# What systemd hands the main process; read once, then removed from os.environ (children are
# scrubbed by the spawner as well).
NOTIFY_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
STATUS_MAX_CHARS = 500

Address = str | bytes


@dataclass(frozen=True, slots=True)
class NotifySettings:
    """Where to notify and how often to ping; `address` None means: not under systemd."""

    address: Address | None = None
    # Half the watchdog period, as sd_watchdog_enabled(3) advises; None: no watchdog for us.
    watchdog_interval_s: float | None = None
    # Why a NOTIFY_SOCKET or WATCHDOG_* value was ignored, for one log line at start.
    problem: str | None = None


def notify_address(value: str) -> Address | None:
    """The socket address of a `NOTIFY_SOCKET` value: a path, or `@name` for an abstract socket."""
    if value.startswith("/"):
        return value
    if value.startswith("@") and len(value) > 1:
        return b"\0" + os.fsencode(value[1:])
    return None


def watchdog_interval_s(usec: str | None, watchdog_pid: str | None, pid: int) -> float | None:
    """The ping interval for `WATCHDOG_USEC`/`WATCHDOG_PID`, or None when the watchdog is not ours.

    A `WATCHDOG_PID` that names another process (we were forked or exec'd by the real main
    process) means the watchdog is not ours to feed, like sd_watchdog_enabled(3).
    """
    if not usec:
        return None
    try:
        period_us = int(usec)
        owner = int(watchdog_pid) if watchdog_pid else pid
    except ValueError:
        return None
    if period_us <= 0 or owner != pid:
        return None
    return period_us / 2 / 1_000_000


def notify_settings(environ: Mapping[str, str], pid: int) -> NotifySettings:
    """Read the notify contract from `environ` as seen by process `pid`."""
    raw = environ.get("NOTIFY_SOCKET", "")
    if not raw:
        return NotifySettings()
    address = notify_address(raw)
    if address is None:
        return NotifySettings(problem=f"unsupported NOTIFY_SOCKET {raw[:60]!r}; notifications disabled")
    usec, owner = environ.get("WATCHDOG_USEC"), environ.get("WATCHDOG_PID")
    interval = watchdog_interval_s(usec, owner, pid)
    problem = None
    if usec and interval is None:
        problem = f"watchdog ignored: WATCHDOG_USEC={usec!r} WATCHDOG_PID={owner!r} (our pid is {pid})"
    return NotifySettings(address=address, watchdog_interval_s=interval, problem=problem)


def status_value(text: str) -> str:
    """`text` as one STATUS= value: a single line, bounded."""
    line = " ".join(text.split())
    return line if len(line) <= STATUS_MAX_CHARS else line[: STATUS_MAX_CHARS - 1] + "…"


def message(*fields: tuple[str, str]) -> bytes:
    """The datagram for `fields`, one `KEY=VALUE` per line."""
    return "".join(f"{key}={value}\n" for key, value in fields).encode()


class Notifier:
    """Sends notifications to systemd; a no-op when `settings.address` is None."""

    def __init__(self, settings: NotifySettings, report: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self._report = report
        self._sock: socket.socket | None = None
        # Invariant: set after the first failed send was reported; later failures stay silent.
        self._reported = False

    @classmethod
    def from_environ(
        cls,
        environ: MutableMapping[str, str] | None = None,
        report: Callable[[str], None] | None = None,
    ) -> Notifier:
        """A notifier for this process; removes the notify variables from `environ` (os.environ)."""
        env = os.environ if environ is None else environ
        settings = notify_settings(env, os.getpid())
        for name in NOTIFY_ENV:
            env.pop(name, None)
        notifier = cls(settings, report)
        if settings.problem is not None and report is not None:
            report(settings.problem)
        return notifier

    @property
    def enabled(self) -> bool:
        return self.settings.address is not None

    @property
    def watchdog_interval_s(self) -> float | None:
        return self.settings.watchdog_interval_s

    def ready(self, status: str | None = None) -> None:
        """Startup (or a reload) is complete; optionally with the current STATUS= line."""
        self._send(("READY", "1"), *self._status(status))

    def status(self, text: str) -> None:
        self._send(*self._status(text))

    def reloading(self, monotonic_usec: int | None = None) -> None:
        """A reload begins; `ready()` ends it. MONOTONIC_USEC lets systemd ≥ 253 match the two."""
        if monotonic_usec is None:
            monotonic_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self._send(("RELOADING", "1"), ("MONOTONIC_USEC", str(monotonic_usec)))

    def stopping(self, status: str | None = None) -> None:
        """Shutdown (the drain) has begun."""
        self._send(("STOPPING", "1"), *self._status(status))

    def watchdog(self) -> None:
        """Feed the watchdog; only when systemd asked this process for it."""
        if self.settings.watchdog_interval_s is not None:
            self._send(("WATCHDOG", "1"))

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    @staticmethod
    def _status(text: str | None) -> tuple[tuple[str, str], ...]:
        return () if text is None else (("STATUS", status_value(text)),)

    def _send(self, *fields: tuple[str, str]) -> None:
        address = self.settings.address
        if address is None or not fields:
            return
        try:
            if self._sock is None:
                self._sock = socket.socket(
                    socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
                )
            self._sock.sendto(message(*fields), address)
        except OSError as exc:
            # A full queue (EAGAIN) or a vanished manager: drop this one; the next send may work.
            if not self._reported and self._report is not None:
                self._report(f"sd_notify failed (reported once): {exc.strerror or exc}")
            self._reported = True
