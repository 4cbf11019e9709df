"""Provider limits: the pure gate (which asks start, what holds the rest, when a window frees
room) and the desk that wakes waiters on releases, windows and cancels."""

from __future__ import annotations

import anyio
import pytest

from agentd.supervision.provider_desk import ProviderDesk
from agentd.supervision.provider_limits import WINDOW_S, Ask, EndpointLimits, Gate

pytestmark = pytest.mark.anyio


def ask(ticket: int, owner: int = 1000, task: str = "t1", tokens: int = 100) -> Ask:
    return Ask(ticket, owner, task, tokens)


def test_concurrency_limit_starts_that_many_and_a_release_starts_the_next() -> None:
    gate = Gate(EndpointLimits(max_concurrent=2))
    for ticket in (1, 2, 3):
        gate.ask(ask(ticket))
    first = gate.admit(now=0.0)
    assert [a.ticket for a in first.granted] == [1, 2]
    assert (first.blocked_by, first.wake_at) == ("max_concurrent_requests", None)
    gate.done(1, tokens_used=10)
    assert [a.ticket for a in gate.admit(now=1.0).granted] == [3]


def test_requests_per_minute_wakes_when_the_oldest_start_leaves_the_window() -> None:
    gate = Gate(EndpointLimits(requests_per_minute=2))
    for ticket in (1, 2, 3):
        gate.ask(ask(ticket))
    held = gate.admit(now=5.0)
    assert len(held.granted) == 2
    assert (held.blocked_by, held.wake_at) == ("requests_per_minute", 5.0 + WINDOW_S)
    assert gate.admit(now=5.0 + WINDOW_S - 0.001).granted == ()
    assert [a.ticket for a in gate.admit(now=5.0 + WINDOW_S).granted] == [3]


@pytest.mark.parametrize(
    ("used", "next_ask", "starts"),
    [
        pytest.param(400, 500, True, id="estimate-corrected-down-by-usage-fits"),
        pytest.param(None, 500, False, id="estimate-kept-without-usage-does-not-fit"),
        pytest.param(400, 700, False, id="over-the-budget-waits"),
    ],
)
def test_tokens_per_minute_counts_the_reply_usage_in_place_of_the_estimate(
    used: int | None, next_ask: int, starts: bool
) -> None:
    gate = Gate(EndpointLimits(tokens_per_minute=1000))
    gate.ask(ask(1, tokens=800))
    assert len(gate.admit(now=0.0).granted) == 1
    gate.done(1, tokens_used=used)
    gate.ask(ask(2, tokens=next_ask))
    assert bool(gate.admit(now=1.0).granted) is starts


def test_an_ask_larger_than_the_token_budget_starts_once_the_window_is_empty() -> None:
    gate = Gate(EndpointLimits(tokens_per_minute=100))
    gate.ask(ask(1, tokens=5000))
    assert len(gate.admit(now=0.0).granted) == 1


def test_slots_go_round_robin_across_owners_then_across_tasks() -> None:
    gate = Gate(EndpointLimits(max_concurrent=1))
    # Owner 1 has a busy task (a, three asks) and a quiet one (b); owner 2 has one ask.
    for ticket, owner, task in [(1, 1, "a"), (2, 1, "a"), (3, 1, "a"), (4, 1, "b"), (5, 2, "c")]:
        gate.ask(ask(ticket, owner, task))
    order = []
    for step in range(5):
        (granted,) = gate.admit(now=float(step)).granted
        order.append(granted.ticket)
        gate.done(granted.ticket, tokens_used=None)
    assert order == [1, 5, 4, 2, 3]


def test_a_hold_stops_every_start_until_it_passes_and_is_never_shortened() -> None:
    gate = Gate(EndpointLimits(max_concurrent=10))
    gate.hold(30.0)
    gate.hold(20.0)
    gate.ask(ask(1))
    held = gate.admit(now=10.0)
    assert (held.granted, held.blocked_by, held.wake_at) == ((), "backoff", 30.0)
    assert len(gate.admit(now=30.0).granted) == 1


def test_a_withdrawn_ask_never_starts() -> None:
    gate = Gate(EndpointLimits(max_concurrent=1))
    gate.ask(ask(1))
    gate.ask(ask(2))
    gate.admit(now=0.0)
    assert gate.withdraw(2) and not gate.withdraw(2)
    gate.done(1, tokens_used=None)
    assert gate.admit(now=1.0).granted == ()


async def test_desk_hands_a_released_slot_to_the_waiter_and_says_what_held_it() -> None:
    desk = ProviderDesk({"m": EndpointLimits(max_concurrent=1)})
    first = await desk.acquire("m", owner=1, task_id="a", tokens=1)
    assert first.blocked_by is None
    got = []

    async def second() -> None:
        got.append(await desk.acquire("m", owner=1, task_id="b", tokens=1))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(second)
            await anyio.wait_all_tasks_blocked()
            waiting = desk.throttled("b")
            assert waiting is not None and waiting.blocked_by == "max_concurrent_requests"
            desk.release("m", first.ticket, tokens_used=5)
    assert got[0].blocked_by == "max_concurrent_requests"
    assert desk.throttled("b") is None


async def test_desk_wakes_a_waiter_when_a_hold_set_meanwhile_passes() -> None:
    desk = ProviderDesk({"m": EndpointLimits(max_concurrent=1)})
    first = await desk.acquire("m", owner=1, task_id="a", tokens=1)

    async def second() -> None:
        await desk.acquire("m", owner=1, task_id="b", tokens=1)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(second)
            await anyio.wait_all_tasks_blocked()
            desk.hold("m", anyio.current_time() + 0.05)
            desk.release("m", first.ticket, tokens_used=None)  # the hold, not the count, holds it now
    assert desk.gate("m").in_flight  # the second got its slot once the hold passed


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    desk = ProviderDesk({"m": EndpointLimits(max_concurrent=1)})
    first = await desk.acquire("m", owner=1, task_id="a", tokens=1)
    with anyio.move_on_after(0.01):
        await desk.acquire("m", owner=1, task_id="b", tokens=1)
    assert desk.gate("m").waiting == 0
    desk.release("m", first.ticket, tokens_used=None)
    assert not desk.gate("m").in_flight


async def test_a_free_slot_is_given_at_once_but_never_past_a_waiter_or_a_limit() -> None:
    desk = ProviderDesk({"m": EndpointLimits(max_concurrent=1)})
    first = desk.acquire_nowait("m", owner=1, task_id="a", tokens=1)
    assert first is not None and first.waited_s == 0.0 and first.blocked_by is None
    assert desk.acquire_nowait("m", owner=2, task_id="b", tokens=1) is None  # the limit holds it
    assert desk.gate("m").waiting == 0  # and it left no ask behind
    got = []

    async def waiter() -> None:
        got.append(await desk.acquire("m", owner=2, task_id="b", tokens=1))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            desk.gate("m").limits = EndpointLimits(max_concurrent=2)
            # Room now, but a request waits: it goes first, and the one asking now waits its turn.
            assert desk.acquire_nowait("m", owner=3, task_id="c", tokens=1) is None
            desk.release("m", first.ticket, tokens_used=None)
    assert got and got[0].ticket in desk.gate("m").in_flight
    assert desk.acquire_nowait("nowhere", owner=1, task_id="a", tokens=1) is None
