"""The kill ladder: the pure plan (`processes.ladder`) and its anyio driver (`processes.climb`)."""

from __future__ import annotations

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from processes.climb import climb
from processes.ladder import LadderPolicy, RungAction, bound_s, plan
from tests.support.ladder_target import ProcessExitingAt

# Graces that never expire in a test: the fake exits on the rung long before.
FAST = LadderPolicy(cancel_grace_s=5.0, term_grace_s=5.0, kill_reap_s=5.0)
# Graces for the rungs a test must see expire.
EXPIRING = LadderPolicy(cancel_grace_s=0.01, term_grace_s=0.01, kill_reap_s=0.01)


def test_the_ladder_plan_and_its_bound() -> None:
    policy = LadderPolicy(cancel_grace_s=5, term_grace_s=2, kill_reap_s=2)
    assert [(r.action, r.wait_s) for r in plan(policy)] == [("cancel", 5), ("sigterm", 2), ("sigkill", 2)]
    assert [r.action for r in plan(policy, start="sigterm")] == ["sigterm", "sigkill"]
    assert bound_s(plan(policy)) == 9


graces = st.floats(min_value=0, max_value=3600, allow_nan=False)


@given(cancel_s=graces, term_s=graces, kill_s=graces, start=st.sampled_from(["cancel", "sigterm", "sigkill"]))
def test_a_plan_is_the_ladders_tail_from_its_start_and_never_longer_than_the_whole(
    cancel_s: float, term_s: float, kill_s: float, start: RungAction
) -> None:
    policy = LadderPolicy(cancel_grace_s=cancel_s, term_grace_s=term_s, kill_reap_s=kill_s)
    whole, tail = plan(policy), plan(policy, start=start)
    assert tail == whole[len(whole) - len(tail) :]
    assert tail[0].action == start
    assert tail[-1].action == "sigkill"
    assert bound_s(tail) <= bound_s(whole)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("exits_at", "policy", "start", "received", "last"),
    [
        pytest.param("cancel", FAST, "cancel", ["request: stop"], "cancel", id="polite-request-suffices"),
        pytest.param(
            "sigterm", EXPIRING, "cancel", ["request: stop", "SIGTERM"], "sigterm", id="sigterm-suffices"
        ),
        pytest.param(
            "sigkill",
            EXPIRING,
            "cancel",
            ["request: stop", "SIGTERM", "SIGKILL", "cgroup.kill"],
            "sigkill",
            id="only-sigkill-works",
        ),
        pytest.param(
            None,
            EXPIRING,
            "cancel",
            ["request: stop", "SIGTERM", "SIGKILL", "cgroup.kill"],
            "sigkill",
            id="outlives-sigkill",
        ),
        pytest.param("sigterm", FAST, "sigterm", ["SIGTERM"], "sigterm", id="start-at-sigterm-skips-request"),
        pytest.param(
            "sigkill", FAST, "sigkill", ["SIGKILL", "cgroup.kill"], "sigkill", id="start-at-sigkill"
        ),
    ],
)
async def test_climb_stops_at_the_first_rung_the_process_exits_on(
    exits_at: RungAction | None,
    policy: LadderPolicy,
    start: RungAction,
    received: list[str],
    last: RungAction,
) -> None:
    process = ProcessExitingAt(exits_at)
    rungs_seen: list[RungAction] = []
    with anyio.fail_after(5):
        top = await climb(process.target(), plan(policy, start=start), "stop", rungs_seen.append)
    assert process.received == received
    assert top == last
    assert rungs_seen[-1] == last


@pytest.mark.anyio
async def test_a_polite_request_that_hangs_is_abandoned_and_the_ladder_goes_on() -> None:
    process = ProcessExitingAt("sigterm", request_hangs=True)
    with anyio.fail_after(5):
        top = await climb(process.target(), plan(EXPIRING), "stop")
    assert process.received == ["request: stop", "SIGTERM"]
    assert top == "sigterm"


@pytest.mark.anyio
async def test_a_cancelled_caller_does_not_cut_the_ladder_short() -> None:
    process = ProcessExitingAt("sigkill")
    with anyio.fail_after(5):
        with anyio.CancelScope() as scope:
            scope.cancel()
            await climb(process.target(), plan(EXPIRING), "stop")
    assert process.received == ["request: stop", "SIGTERM", "SIGKILL", "cgroup.kill"]
