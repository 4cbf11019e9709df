"""The daemon's one-line status for systemd's `STATUS=` (shown by `systemctl status agentd`).

Pure: `status_text` renders a `ServiceState` snapshot; sampling it and sending it live in
`agentd/service/reporting.py`. The line always leads with the counts, then names every degraded
state (draining, a failing journal with its last error, a rejected config reload).
"""

from __future__ import annotations

from dataclasses import dataclass

ERROR_MAX_CHARS = 160


@dataclass(frozen=True, slots=True)
class ServiceState:
    queued: int
    running: int
    draining: bool = False
    # None while the journal commits; else its last write error.
    journal_error: str | None = None
    # None unless the last SIGHUP reload was rejected (the previous configuration stays live).
    config_error: str | None = None
    # Reactive triggers the restart governor gave up on (until a reload or `agentd triggers restart`).
    failed_triggers: tuple[str, ...] = ()


def _short(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= ERROR_MAX_CHARS else line[: ERROR_MAX_CHARS - 1] + "…"


def status_text(state: ServiceState) -> str:
    """E.g. `3 queued, 2 running` or `draining: 0 queued, 1 running; degraded: journal failing: …`."""
    text = f"{state.queued} queued, {state.running} running"
    if state.draining:
        text = f"draining: {text}"
    problems = []
    if state.journal_error is not None:
        problems.append(f"journal failing: {_short(state.journal_error)}")
    if state.config_error is not None:
        problems.append(f"config reload rejected: {_short(state.config_error)}")
    if state.failed_triggers:
        names = ", ".join(state.failed_triggers[:5]) + (" …" if len(state.failed_triggers) > 5 else "")
        problems.append(f"{len(state.failed_triggers)} trigger(s) failed: {_short(names)}")
    if problems:
        text += "; degraded: " + "; ".join(problems)
    return text
