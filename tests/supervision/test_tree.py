"""The task tree's pure decisions: caps, reservations, scope narrowing, over-grant detection."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.supervision.tree import (
    BUCKET_BURST,
    LIFETIME_CAP,
    Budget,
    ChildRequest,
    Defaults,
    Grant,
    Refusal,
    Tree,
)

ROOT_SCOPE = {"fs": frozenset({"read", "write"}), "web": None}


def tree(steps: int = 100, tokens: int = 1_000_000, **kw: object) -> Tree:
    return Tree(Budget(steps, tokens), deadline=1000.0, scope=ROOT_SCOPE, now=0.0, **kw)  # type: ignore[arg-type]


def spawn(t: Tree, parent: str = "0", now: float = 0.0, **request: object) -> Grant:
    decision = t.decide_spawn(parent, ChildRequest(**request), now=now)  # type: ignore[arg-type]
    assert isinstance(decision, Grant), decision
    t.add(parent, decision)
    return decision


def refusal(t: Tree, parent: str = "0", now: float = 0.0, **request: object) -> str:
    decision = t.decide_spawn(parent, ChildRequest(**request), now=now)  # type: ignore[arg-type]
    assert isinstance(decision, Refusal), decision
    return decision.reason


def test_handles_and_depth_are_minted_by_the_tree() -> None:
    t = tree()
    a = spawn(t)
    b = spawn(t)
    c = spawn(t, a.handle, now=1)
    assert (a.handle, b.handle, c.handle) == ("0.1", "0.2", "0.1.1")
    assert (a.depth, c.depth) == (1, 2)


def test_depth_4_is_the_last_level() -> None:
    t = tree()
    handle = "0"
    for level in range(4):
        handle = spawn(t, handle, now=level).handle
    assert handle == "0.1.1.1.1"
    assert refusal(t, handle, now=9) == "depth cap 4 reached (node 0.1.1.1.1 is at depth 4)"


def test_the_ninth_live_child_is_refused() -> None:
    t = tree()
    for i in range(8):
        spawn(t, now=i, max_steps=1, max_tokens=1000)
    assert refusal(t, now=20) == "live-children cap 8 reached (node 0 has 8 running)"
    t.end("0.1")
    spawn(t, now=21, max_steps=1, max_tokens=1000)  # an ended child frees its slot


def test_a_burst_of_spawns_hits_the_rate_limit_and_refills() -> None:
    t = tree()
    for _ in range(int(BUCKET_BURST)):
        g = spawn(t, max_steps=1, max_tokens=1000)
        t.end(g.handle)
    reason = refusal(t, max_steps=1, max_tokens=1000)
    assert reason.startswith("spawn rate limit: burst 8, refill 2/s")
    spawn(t, now=0.5, max_steps=1, max_tokens=1000)  # 0.5 s refills one token


def test_the_lifetime_cap_counts_ended_children() -> None:
    t = tree(steps=10_000, tokens=10**9)
    for i in range(LIFETIME_CAP):
        t.end(spawn(t, now=i, max_steps=1, max_tokens=1000).handle)
    assert refusal(t, now=1000) == f"lifetime cap {LIFETIME_CAP} subagents per task reached"


def test_a_grant_is_capped_by_what_the_parent_has_not_committed() -> None:
    t = tree(steps=10, tokens=10_000)
    t.record_usage("0", Budget(2, 3000))
    first = spawn(t, max_steps=5, max_tokens=5000)
    assert first.budget == Budget(5, 5000)
    second = spawn(t, now=1, max_steps=5, max_tokens=5000)
    assert second.budget == Budget(3, 2000)  # 10-2-5 steps, 10000-3000-5000 tokens
    assert refusal(t, now=2).startswith("budget: node 0 has 0 steps and 0 tokens left")


def test_an_ended_child_returns_its_unused_reservation() -> None:
    t = tree(steps=10, tokens=10_000)
    child = spawn(t, max_steps=8, max_tokens=8000)
    t.record_usage(child.handle, Budget(1, 1000))
    assert t.available("0") == Budget(2, 2000)
    t.end(child.handle)
    assert t.available("0") == Budget(9, 9000)  # charged what it used, the rest returned


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 20), st.integers(1000, 60_000), st.integers(0, 30), st.integers(0, 90_000)),
        max_size=8,
    )
)
def test_parallel_children_can_never_together_spend_more_than_the_parent(
    asks: list[tuple[int, int, int, int]],
) -> None:
    t = tree(steps=40, tokens=200_000)
    for i, (steps, tokens, used_steps, used_tokens) in enumerate(asks):
        decision = t.decide_spawn("0", ChildRequest(max_steps=steps, max_tokens=tokens), now=float(i))
        if isinstance(decision, Refusal):
            continue
        t.add("0", decision)
        # Each child spends at most its grant (beyond it the supervisor cancels it).
        t.record_usage(
            decision.handle,
            Budget(min(used_steps, decision.budget.steps), min(used_tokens, decision.budget.tokens)),
        )
    total = t.used("0")
    assert total.steps <= 40
    assert total.tokens <= 200_000


def test_usage_over_a_grant_names_the_highest_node_over() -> None:
    t = tree(steps=100, tokens=100_000)
    child = spawn(t, max_steps=10, max_tokens=10_000)
    assert t.record_usage(child.handle, Budget(1, 9_000)) is None
    assert t.record_usage(child.handle, Budget(1, 2_000)) == child.handle
    t2 = tree(steps=100, tokens=20_000)
    c2 = spawn(t2, max_steps=10, max_tokens=15_000)
    t2.record_usage("0", Budget(1, 10_000))
    assert t2.record_usage(c2.handle, Budget(1, 11_000)) == "0"  # the tree itself is over its ceiling


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        pytest.param(None, ROOT_SCOPE, id="inherit-all"),
        pytest.param(("fs",), {"fs": frozenset({"read", "write"})}, id="one-server"),
        pytest.param(("fs/read",), {"fs": frozenset({"read"})}, id="one-tool"),
        pytest.param(
            ("web/search", "web/fetch"), {"web": frozenset({"search", "fetch"})}, id="tools-of-open-server"
        ),
    ],
)
def test_a_scope_can_narrow(
    wanted: tuple[str, ...] | None, expected: dict[str, frozenset[str] | None]
) -> None:
    assert spawn(tree(), tool_scope=wanted).scope == expected


@pytest.mark.parametrize(
    ("wanted", "reason"),
    [
        pytest.param(("db",), "server `db` is not granted to node 0", id="new-server"),
        pytest.param(("fs/delete",), "`fs/delete` is not granted to node 0", id="new-tool"),
    ],
)
def test_a_widening_scope_is_refused_not_clamped(wanted: tuple[str, ...], reason: str) -> None:
    assert reason in refusal(tree(), tool_scope=wanted)


def test_a_grandchild_cannot_regain_what_its_parent_lost() -> None:
    t = tree()
    child = spawn(t, tool_scope=("fs/read",))
    assert "`fs/write` is not granted to node 0.1" in refusal(
        t, child.handle, now=1, tool_scope=("fs/write",)
    )


def test_no_spawns_once_closed_or_while_a_subtree_stops() -> None:
    t = tree()
    child = spawn(t)
    t.mark_stopping(child.handle)
    assert refusal(t, child.handle, now=1) == "no new subagents: node 0.1 is being cancelled"
    t.closed = "the daemon is draining"
    assert refusal(t, now=2) == "no new subagents: the daemon is draining"


def test_subtree_lists_deepest_first() -> None:
    t = tree()
    a = spawn(t)
    b = spawn(t, a.handle, now=1)
    spawn(t, b.handle, now=2)
    assert t.subtree("0") == ["0.1.1.1", "0.1.1", "0.1", "0"]


def test_a_child_deadline_is_capped_by_the_parents_remaining_time() -> None:
    t = tree()
    assert spawn(t, now=990.0, deadline_s=60).deadline == 1000.0
    assert refusal(t, now=999.5).startswith("deadline: node 0 has 0.5s left")


def test_defaults_apply_when_the_parent_asks_for_nothing() -> None:
    t = tree(defaults=Defaults(child_steps=7, child_tokens=7000))
    assert spawn(t).budget == Budget(7, 7000)
