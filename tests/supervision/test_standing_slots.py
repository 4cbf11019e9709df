"""Standing slots: the gate hands them out only far from the limits and counts them as it counts
slots asked for; the desk calls them back when a request waits, a provider holds the endpoint or
the limits change."""

from __future__ import annotations

import functools

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.supervision import provider_limits
from agentd.supervision.provider_desk import ProviderDesk
from agentd.supervision.provider_limits import WINDOW_S, Ask, EndpointLimits, Gate

pytestmark = pytest.mark.anyio


def ask(ticket: int, tokens: int = 100) -> Ask:
    return Ask(ticket, 1000, "t1", tokens)


@pytest.mark.parametrize(
    ("limits", "given_before", "leases"),
    [
        pytest.param(EndpointLimits(max_concurrent=10), 0, True, id="far-from-the-concurrency-limit"),
        pytest.param(EndpointLimits(max_concurrent=10), 5, False, id="at-half-the-concurrency-limit"),
        pytest.param(EndpointLimits(max_concurrent=1), 0, False, id="a-single-slot-is-never-stood"),
        pytest.param(EndpointLimits(requests_per_minute=10), 4, True, id="within-half-the-rate"),
        pytest.param(EndpointLimits(requests_per_minute=10), 5, False, id="at-half-the-rate"),
        pytest.param(EndpointLimits(tokens_per_minute=8000), 0, True, id="within-half-the-tokens"),
        pytest.param(EndpointLimits(tokens_per_minute=8000), 4, False, id="past-half-the-tokens"),
    ],
)
def test_a_standing_slot_is_handed_out_only_within_half_of_each_limit(
    limits: EndpointLimits, given_before: int, leases: bool
) -> None:
    gate = Gate(limits)
    for ticket in range(1, given_before + 1):
        gate.ask(ask(ticket, tokens=800))
    assert len(gate.admit(now=0.0).granted) == given_before
    assert (gate.lease(100, now=1.0) is not None) is leases


def test_no_standing_slot_while_a_request_waits_or_a_hold_runs() -> None:
    gate = Gate(EndpointLimits(max_concurrent=4))
    gate.hold(5.0)
    assert gate.lease(1, now=1.0) is None
    gate.ask(ask(2))
    assert gate.admit(now=2.0).blocked_by == "backoff"
    assert gate.lease(3, now=6.0) is None  # the ask waits, and is served first
    assert [a.ticket for a in gate.admit(now=6.0).granted] == [2]
    assert gate.lease(4, now=6.0) is not None


def test_a_standing_slot_counts_in_flight_and_as_a_start_from_when_it_is_used() -> None:
    gate = Gate(EndpointLimits(max_concurrent=2, requests_per_minute=4))
    lease = gate.lease(1, now=0.0)
    assert lease is not None and lease.tokens is None
    gate.ask(ask(2))
    gate.ask(ask(3))
    held = gate.admit(now=0.0)
    assert [a.ticket for a in held.granted] == [2]
    assert held.blocked_by == "max_concurrent_requests"
    # Used at 30 s: its start leaves the window a window later, not from when it was handed out.
    assert gate.start_leased(1, tokens=50, now=30.0)
    gate.done(1, tokens_used=50)
    gate.done(2, tokens_used=50)
    gate.ask(ask(4))
    gate.ask(ask(5))
    assert [a.ticket for a in gate.admit(now=31.0).granted] == [3, 4]
    gate.done(3, tokens_used=50)
    blocked = gate.admit(now=32.0)
    assert (blocked.blocked_by, blocked.wake_at) == ("requests_per_minute", 0.0 + WINDOW_S)
    assert [a.ticket for a in gate.admit(now=WINDOW_S).granted] == [5]


def test_a_standing_slot_given_back_unused_counts_as_no_start() -> None:
    gate = Gate(EndpointLimits(requests_per_minute=2))
    assert gate.lease(1, now=0.0) is not None
    gate.ask(ask(2))
    gate.ask(ask(3))
    held = gate.admit(now=0.0)
    # The unused standing slot holds a start of the window until it comes back.
    assert ([a.ticket for a in held.granted], held.blocked_by) == ([2], "requests_per_minute")
    gate.done(1, tokens_used=0)
    assert [a.ticket for a in gate.admit(now=1.0).granted] == [3]
    assert not gate.start_leased(1, tokens=10, now=2.0)  # given back: it starts nothing


async def test_the_desk_calls_standing_slots_back_on_a_wait_a_hold_and_a_reload() -> None:
    desk = ProviderDesk({"p": EndpointLimits(max_concurrent=4)}, clock=lambda: 0.0)
    called: list[int] = []
    first = desk.lease("p", called.append)
    second = desk.lease("p", called.append)
    assert first is not None and second is not None
    assert desk.lease("p", called.append) is None  # past half of the limit
    desk.start_leased("p", second.ticket, tokens=10)  # used: never called back
    desk.hold("p", until=1.0)
    assert called == [first.ticket]
    desk.release("p", first.ticket, tokens_used=0)
    desk.release("p", second.ticket, tokens_used=10)

    desk = ProviderDesk({"p": EndpointLimits(max_concurrent=2)})
    waited_on = anyio.Event()
    lease = desk.lease("p", lambda ticket: waited_on.set())
    assert lease is not None
    assert desk.acquire_nowait("p", owner=1, task_id="t", tokens=1) is not None
    # The endpoint is full: a request that has to wait calls the idle standing slot back, and
    # gets its room once it comes back unused.
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(desk.acquire, "p", owner=1, task_id="t", tokens=1))
            await waited_on.wait()
            desk.release("p", lease.ticket, tokens_used=0)

    desk = ProviderDesk({"p": EndpointLimits(max_concurrent=8)}, clock=lambda: 0.0)
    reloaded: list[int] = []
    lease = desk.lease("p", reloaded.append)
    assert lease is not None
    desk.configure({"p": EndpointLimits(max_concurrent=2)})
    assert reloaded == [lease.ticket]


Op = tuple[str, int]


@settings(deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["ask", "lease", "use", "done", "tick", "hold"]), st.integers(0, 7)),
        max_size=80,
    )
)
def test_standing_slots_never_let_concurrency_or_the_rate_past_the_limits(ops: list[Op]) -> None:
    limits = EndpointLimits(max_concurrent=4, requests_per_minute=6)
    gate = Gate(limits)
    now = 0.0
    standing: list[int] = []
    started: list[int] = []
    starts_at: list[float] = []
    for ticket, (op, arg) in enumerate(ops, start=1):
        if op == "ask":
            gate.ask(ask(ticket))
        elif op == "lease" and gate.lease(ticket, now) is not None:
            standing.append(ticket)
        elif op == "use" and standing:
            used = standing.pop(arg % len(standing))
            assert gate.start_leased(used, tokens=10, now=now)
            started.append(used)
            starts_at.append(now)
        elif op == "done" and (standing or started):
            pool = standing if arg % 2 and standing else (started or standing)
            gate.done(pool.pop(arg % len(pool)), tokens_used=10)
        elif op == "tick":
            now += arg * 5.0
        elif op == "hold":
            gate.hold(now + arg)
        for granted in gate.admit(now).granted:
            started.append(granted.ticket)
            starts_at.append(now)
        assert len(gate.in_flight) <= 4
        assert len(standing) + len(started) == len(gate.in_flight)
        recent = [at for at in starts_at if at > now - WINDOW_S]
        assert len(recent) + len(standing) <= 6


async def test_the_waiter_keeping_the_window_time_is_granted_and_the_next_keeps_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(provider_limits, "WINDOW_S", 0.3)
    desk = ProviderDesk({"p": EndpointLimits(max_concurrent=2, requests_per_minute=2)})
    first = desk.acquire_nowait("p", owner=1, task_id="a", tokens=1)
    await anyio.sleep(0.1)
    second = desk.acquire_nowait("p", owner=1, task_id="a", tokens=1)
    assert first is not None and second is not None
    granted: list[str] = []

    async def wait_and_end(task_id: str) -> None:
        grant = await desk.acquire("p", owner=1, task_id=task_id, tokens=1)
        granted.append(task_id)
        desk.release("p", grant.ticket, tokens_used=1)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            # Both wait for the concurrency limit first (no window time), then for the window: the
            # one woken to keep its time is granted, and the other must wake for the next.
            tg.start_soon(wait_and_end, "b")
            tg.start_soon(wait_and_end, "c")
            await anyio.sleep(0.05)
            desk.release("p", first.ticket, tokens_used=1)
            desk.release("p", second.ticket, tokens_used=1)
    assert sorted(granted) == ["b", "c"]
