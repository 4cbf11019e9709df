"""A warm session's decisions (docs/warm-sessions.md): what one delivery says to the model, how
deliveries queued behind a running turn coalesce, whether a crashed turn's delivery is re-injected,
and what follows an incarnation's exit.

Pure: frozen data in, frozen data out; `agentd.supervision.warm_session` does the waiting.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from pydantic import JsonValue

from protocol.result import RunResult, RunUsage, TerminalStatus
from protocol.watch import QUOTED_NOTE, quoted_data

# A delivery is injected at most this often: once, and once more after its session crashed on it.
MAX_INJECTIONS = 2
# How long past a turn's own deadline the supervisor waits for its `ev/turn`: the child ends the
# turn at the deadline itself (a wrap-up, tool teardown), so only a wedged session is later.
TURN_REPORT_SLACK_S = 15.0


@dataclass(frozen=True, slots=True)
class Delivery:
    """One resource change routed to a warm session: notify, then read (never the body)."""

    trigger: str
    server: str
    uri: str
    etag: str | None = None
    # Sent after a (re)subscribe: "possibly changed" — nobody knows what changed meanwhile.
    synthetic: bool = False


@dataclass(frozen=True, slots=True)
class Pending:
    """A delivery waiting for its turn. Invariant: at most one `Pending` per URI in a queue."""

    slot: int
    delivery: Delivery
    # Injections already made (1 after a crash mid-turn; see `redeliver`).
    injections: int = 0
    # Older deliveries for the same URI it replaced (newest wins).
    merged: int = 0


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """What became of one delivery: the turn that answered it, or why none did.

    `status` None: never answered (the session ended or gave up on it; `error` says why) — the
    owner may hand it to a new session. `coalesced`: a newer delivery for the same URI replaced
    this one before its turn, and this is that turn's outcome (`delivery` is the newer one).
    """

    delivery: Delivery
    status: TerminalStatus | None
    result: JsonValue = None
    partial: bool = False
    usage: RunUsage = field(default_factory=RunUsage)
    task_id: str | None = None
    seq: int = 0
    injections: int = 0
    coalesced: bool = False
    error: str | None = None

    @property
    def answered(self) -> bool:
        return self.status is not None


def offer(queue: tuple[Pending, ...], delivery: Delivery, slot: int) -> tuple[tuple[Pending, ...], Pending]:
    """Queue `delivery` behind the running turn: it replaces a waiting delivery for its URI (which
    keeps its place and slot), or joins the end under the new `slot`. Returns the queue and the
    `Pending` that now carries it."""
    for i, waiting in enumerate(queue):
        if waiting.delivery.uri == delivery.uri:
            newer = replace(waiting, delivery=delivery, merged=waiting.merged + 1)
            return (*queue[:i], newer, *queue[i + 1 :]), newer
    added = Pending(slot, delivery)
    return (*queue, added), added


def redeliver(queue: tuple[Pending, ...], in_flight: Pending) -> tuple[tuple[Pending, ...], bool]:
    """After the session died mid-turn: put its delivery first again, once. A newer delivery for
    the same URI already waiting wins instead (it is read later, so it sees the newer state).
    Returns the queue and whether `in_flight` is still to be answered."""
    if in_flight.injections >= MAX_INJECTIONS:
        return queue, False
    if any(p.delivery.uri == in_flight.delivery.uri for p in queue):
        return queue, False
    return (in_flight, *queue), True


ExitDecision = Literal["restart", "dormant", "end"]


def after_exit(result: RunResult, *, stopping: bool, wedged: bool) -> ExitDecision:
    """What follows an incarnation's exit.

    `end`: stopped by its owner (or the daemon), or cancelled from outside — nothing more runs.
    `restart`: it crashed, or wedged (no `ev/turn` within a turn's bound) — a fresh session, now,
    through the owner's restart policy. `dormant`: it ended cleanly (idle timeout, its lifetime,
    its token or step budget) — a fresh session starts only when the next delivery arrives.
    """
    if stopping:
        return "end"
    if wedged or result.status is TerminalStatus.CRASHED:
        return "restart"
    if result.status is TerminalStatus.CANCELLED:
        return "end"
    return "dormant"


def render_delivery(delivery: Delivery) -> str:
    """The user turn one delivery appends: the URI, never the resource's body."""
    lines = [f"A watched resource changed: {quoted_data(delivery.uri)}"]
    detail = f"(server `{delivery.server}`, trigger `{delivery.trigger}`"
    if delivery.etag is not None:
        detail += f", etag {quoted_data(delivery.etag)}"
    lines.append(detail + ")")
    lines.append(QUOTED_NOTE)
    if delivery.synthetic:
        lines.append(
            "It may or may not have changed: the subscription was (re)established and changes made "
            "meanwhile cannot be known."
        )
    lines.append(
        "Read its current state with your resource tools, then act on it as your standing "
        "instruction says. Answer when this change is handled."
    )
    return "\n".join(lines)


def turn_wait_s(turn_deadline_s: float) -> float:
    """How long an injection waits for its `ev/turn` before the session is judged wedged."""
    return turn_deadline_s + TURN_REPORT_SLACK_S
