"""A task tree's cost budget (micro-USD): children reserve the most their tokens could cost, so
parallel children can never together spend more than the tree had; a tree without a cost budget
counts cost but never stops on it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.supervision.pricing import UNBOUNDED_MICROS, Price, call_cost
from agentd.supervision.tree import Budget, ChildRequest, Defaults, Grant, Refusal, Tree

SCOPE: dict[str, frozenset[str] | None] = {}
# $3 in / $15 out per million tokens: the dearest token is 15 micro-USD.
PRICE = Price(input=3.0, output=15.0, cached_input=0.3, max_reply_tokens=1000)


def costed(cost_micros: int, per_token: float = PRICE.highest) -> Tree:
    defaults = Defaults(child_tokens=10_000, micros_per_token=per_token)
    return Tree(Budget(100, 1_000_000, cost_micros), deadline=1000.0, scope=SCOPE, now=0.0, defaults=defaults)


def test_a_child_reserves_the_most_its_tokens_could_cost_within_what_the_parent_has() -> None:
    tree = costed(200_000)  # $0.20
    first = tree.decide_spawn("0", ChildRequest(max_tokens=10_000), now=0.0)
    assert isinstance(first, Grant) and first.budget.cost == 150_000  # 10,000 tokens at 15 µ$
    tree.add("0", first)
    second = tree.decide_spawn("0", ChildRequest(max_tokens=10_000), now=0.0)
    assert isinstance(second, Grant) and second.budget.cost == 50_000  # what is left
    tree.add("0", second)
    third = tree.decide_spawn("0", ChildRequest(max_tokens=10_000), now=0.0)
    assert isinstance(third, Refusal) and third.reason.startswith("cost budget: node 0 has no money left")


@settings(max_examples=60, deadline=None)
@given(
    budget=st.integers(min_value=1_000, max_value=2_000_000),
    asks=st.lists(st.integers(min_value=200, max_value=50_000), min_size=1, max_size=8),
)
def test_parallel_children_never_hold_more_than_the_tree_had(budget: int, asks: list[int]) -> None:
    tree = costed(budget)
    granted = 0
    for tokens in asks:
        decision = tree.decide_spawn("0", ChildRequest(max_tokens=tokens), now=0.0)
        if isinstance(decision, Grant):
            tree.add("0", decision)
            granted += decision.budget.cost
            # Each child spends all it may: it stops at its grant, and so does the tree.
            spend = min(decision.budget.cost, decision.budget.tokens * int(PRICE.highest))
            tree.record_usage(decision.handle, Budget(0, 0, spend))
    assert granted <= budget
    assert tree.used("0").cost <= budget


def test_spending_past_the_cost_grant_puts_the_node_over_and_only_with_a_cost_budget() -> None:
    bounded = costed(1_000)
    assert bounded.record_usage("0", Budget(1, 10, 1_001)) == "0"
    unbounded = costed(UNBOUNDED_MICROS, per_token=0.0)
    assert unbounded.record_usage("0", Budget(1, 10, 10**12)) is None


def test_cached_input_is_priced_apart_and_an_unreported_reply_at_its_maximum() -> None:
    assert (
        call_cost(PRICE, tokens_in=1000, tokens_out=100, cached_in=800).micros == 200 * 3 + 800 * 0.3 + 1500
    )
    unmetered = call_cost(PRICE, tokens_in=1000, tokens_out=7, reported=False)
    assert unmetered.at_maximum and unmetered.micros == 1000 * 3 + 1000 * 15
