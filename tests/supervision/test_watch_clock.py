"""The one liveness clock: each child checked once per tick in its own phase, at its own time; a
child added while the clock is stopped is refused (it watches itself); children left when it stops
watch themselves."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import pytest
from anyio.abc import TaskGroup

from agentd.supervision.liveness import first_ping_at, next_check_time, next_ping_at, ping_due
from agentd.supervision.watch_clock import COALESCE_S, WatchClock

pytestmark = pytest.mark.anyio


@contextlib.asynccontextmanager
async def serving(clock: WatchClock) -> AsyncIterator[TaskGroup]:
    """`clock` serving in a task group the caller cancels to stop it."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(clock.serve)
        with anyio.fail_after(5):
            while not clock.serving:
                await anyio.lowlevel.checkpoint()
        yield tg


class FakeChild:
    def __init__(self, tick_s: float) -> None:
        self.tick_s = tick_s
        self.next_check_at = 0.0
        self.checks: list[float] = []
        self.alone = False
        self.checked = anyio.Event()
        self.checked_thrice = anyio.Event()

    def check_liveness(self, now: float) -> None:
        self.checks.append(now)
        self.next_check_at = now + self.tick_s
        self.checked.set()
        if len(self.checks) == 3:
            self.checked_thrice.set()

    def watch_alone(self) -> None:
        self.alone = True


class Exited(FakeChild):
    """A child that has exited but is not yet discarded: its check does not move its time."""

    def check_liveness(self, now: float) -> None:
        self.checks.append(now)


async def test_each_child_is_checked_once_per_tick_and_left_children_watch_themselves() -> None:
    clock = WatchClock()
    early, late = FakeChild(0.05), FakeChild(0.05)
    assert not clock.add(early)  # not serving yet: the child must watch itself
    async with serving(clock) as tg:
        assert clock.add(early)
        late.next_check_at = anyio.current_time() + 0.025  # half a tick later: its own phase
        assert clock.add(late)
        with anyio.fail_after(5):
            await early.checked_thrice.wait()
            await late.checked_thrice.wait()
        clock.discard(early)
        tg.cancel_scope.cancel()
    for child in (early, late):
        gaps = [b - a for a, b in zip(child.checks, child.checks[1:], strict=False)]
        # Never more than once a tick: a child due within COALESCE_S of a wake-up is checked in it,
        # so a wake-up another child's check delayed (a loaded machine) may take it that much early.
        assert all(gap >= child.tick_s - COALESCE_S - 1e-9 for gap in gaps), gaps
    assert late.alone and not early.alone  # discarded before the stop: not told
    assert not clock.serving and len(clock) == 0


@pytest.mark.alone
async def test_children_are_checked_at_their_own_time_not_in_batches() -> None:
    # Ten children 15 ms apart in phase, with a 1 s tick: a clock that woke in tenths of the tick
    # checked (and so pinged) up to seven of them together; each must be checked on its own.
    # On the real clock: a loop another test delays by 15 ms wakes late and rightly checks the
    # overdue children together, so this test runs alone.
    clock = WatchClock()
    children = [FakeChild(1.0) for _ in range(10)]
    async with serving(clock) as tg:
        start = anyio.current_time() + 0.05
        for i, child in enumerate(children):
            child.next_check_at = start + i * 0.015
            assert clock.add(child)
        with anyio.fail_after(5):
            for child in children:
                await child.checked.wait()
        tg.cancel_scope.cancel()
    firsts = [child.checks[0] for child in children]
    assert all(b > a for a, b in itertools.pairwise(firsts)), firsts
    assert all(first >= child.next_check_at - 1.0 for first, child in zip(firsts, children, strict=True))


class JustAhead(FakeChild):
    """An exited child whose time sits just ahead of the check, inside the clock's coalescing
    window: rescheduled there, it was popped again in the same wake-up, forever (the loop never
    yielded). Raises instead of looping."""

    def check_liveness(self, now: float) -> None:
        if self.checks.count(now) >= 3:
            raise AssertionError("checked again and again at the same instant: a busy loop")
        self.checks.append(now)
        self.next_check_at = now + 0.0005


@pytest.mark.parametrize("kind", [Exited, JustAhead], ids=["time past", "time inside the window"])
async def test_an_exited_child_still_registered_does_not_spin_the_clock(kind: type[FakeChild]) -> None:
    clock = WatchClock()
    child = kind(0.05)
    async with serving(clock) as tg:
        assert clock.add(child)
        await anyio.sleep(0.3)
        tg.cancel_scope.cancel()
    assert 1 <= len(child.checks) <= 6, len(child.checks)  # every MAX_SLEEP_S at most


class PingingChild:
    """Schedules its checks and pings as `SupervisedProcess.check_liveness` does (the same pure
    functions), and records when it pinged and which ping time each ping was for."""

    def __init__(self, first_ping: float, interval: float) -> None:
        self.interval = self.tick_s = interval
        self.next_ping = self.next_check_at = first_ping
        self.pinged: list[tuple[float, float]] = []  # (sent, due)
        self.checks = 0

    def check_liveness(self, now: float) -> None:
        self.checks += 1
        if ping_due(now, self.next_ping):
            self.pinged.append((now, self.next_ping))
            self.next_ping = next_ping_at(self.next_ping, now, self.interval)
        self.next_check_at = next_check_time(now, self.tick_s, self.next_ping)

    def watch_alone(self) -> None:
        pass


def drive(clock: WatchClock, until: float) -> None:
    """Run `clock` by hand as `serve` runs it, each wake-up at the next time due, up to `until`."""
    now = 0.0
    while (now := max(now, clock._due[0][0])) < until:
        clock._check_due(now)


def test_children_due_within_the_coalescing_window_keep_their_own_ping_phases() -> None:
    # Ten children 0.3 ms apart, checked together by the clock's coalescing. Each ping was
    # scheduled from its check's time and a child checked early waited a tick for it: they
    # skipped pings and took each other's phase, so the pings bunched up over a run.
    interval, rounds = 0.2, 50
    clock = WatchClock()
    clock.serving = True  # driven by hand
    children = [PingingChild(1.0 + i * 0.0003, interval) for i in range(10)]
    for child in children:
        assert clock.add(child)
    drive(clock, until=1.0 + (rounds - 0.5) * interval)
    for i, child in enumerate(children):
        phase = 1.0 + i * 0.0003
        assert len(child.pinged) == rounds, (i, len(child.pinged))  # none skipped
        for k, (sent, due) in enumerate(child.pinged):
            assert due == pytest.approx(phase + k * interval)  # its own phase, every time
            assert due - 0.002 <= sent <= due + 0.001


def test_children_started_together_are_pinged_apart_and_checked_once_a_tick() -> None:
    # Sixteen children forked in one batch: each first ping is drawn within a quarter interval,
    # so they do not share a wake-up for as long as they live (their phases are kept). With a 1 s
    # tick and a 5 s interval each is checked once a tick, its pings' checks among them.
    interval, rounds = 5.0, 10
    clock = WatchClock()
    clock.serving = True  # driven by hand
    children = []
    for i in range(16):
        child = PingingChild(first_ping_at(0.0, interval, draw=i / 16), interval)
        child.tick_s = 1.0
        child.next_check_at = 0.0
        children.append(child)
        assert clock.add(child)
    until = interval * (rounds + 0.5)  # each child's tenth ping is before it, its eleventh after
    drive(clock, until)
    sent = [at for child in children for at, _ in child.pinged]
    assert len(sent) == 16 * rounds and len(set(sent)) == len(sent)  # no two in one wake-up
    for child in children:
        assert abs(child.checks - until) <= 2, child.checks  # once a tick, pings included
