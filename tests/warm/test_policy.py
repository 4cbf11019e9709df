"""The warm session's decisions, purely (agentd/supervision/warm_policy.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.supervision import warm_policy as wp
from agentd.supervision.warm_policy import Delivery, Pending
from protocol.result import RunError, RunResult
from protocol.result import TerminalStatus as S


def change(uri: str, etag: str | None = None) -> Delivery:
    return Delivery(trigger="t", server="s", uri=uri, etag=etag)


def test_a_newer_delivery_replaces_the_waiting_one_for_its_uri_in_place() -> None:
    queue, a = wp.offer((), change("u://a", "1"), 1)
    queue, b = wp.offer(queue, change("u://b"), 2)
    queue, a2 = wp.offer(queue, change("u://a", "2"), 3)
    assert a2.slot == a.slot == 1 and a2.merged == 1
    assert [(p.delivery.uri, p.delivery.etag) for p in queue] == [("u://a", "2"), ("u://b", None)]
    assert b.slot == 2


@given(st.lists(st.sampled_from(["u://a", "u://b", "u://c"]), max_size=50))
def test_a_queue_holds_at_most_one_delivery_per_uri_and_the_newest_wins(uris: list[str]) -> None:
    queue: tuple[Pending, ...] = ()
    for n, uri in enumerate(uris):
        queue, _ = wp.offer(queue, change(uri, str(n)), n)
    assert sorted(p.delivery.uri for p in queue) == sorted(set(uris))
    for pending in queue:
        newest = max(n for n, uri in enumerate(uris) if uri == pending.delivery.uri)
        assert pending.delivery.etag == str(newest)
    assert sum(p.merged + 1 for p in queue) == len(uris)


def test_a_crashed_turns_delivery_is_re_injected_first_and_only_once() -> None:
    queue, _ = wp.offer((), change("u://b"), 2)
    first = Pending(1, change("u://a"), injections=1)
    again, kept = wp.redeliver(queue, first)
    assert kept and again[0] is first and len(again) == 2
    second = Pending(1, change("u://a"), injections=2)
    assert wp.redeliver(queue, second) == (queue, False)


def test_a_newer_waiting_delivery_for_the_uri_answers_for_the_crashed_one() -> None:
    queue, _ = wp.offer((), change("u://a", "new"), 2)
    assert wp.redeliver(queue, Pending(1, change("u://a", "old"), injections=1)) == (queue, False)


@pytest.mark.parametrize(
    ("status", "stopping", "wedged", "expected"),
    [
        pytest.param(S.CRASHED, False, False, "restart", id="crashed"),
        pytest.param(S.CANCELLED, False, True, "restart", id="wedged"),
        pytest.param(S.CRASHED, True, False, "end", id="stopped-wins"),
        pytest.param(S.CANCELLED, False, False, "end", id="cancelled-from-outside"),
        pytest.param(S.COMPLETED, False, False, "dormant", id="idle"),
        pytest.param(S.EXHAUSTED_TOKENS, False, False, "dormant", id="token-cap"),
        pytest.param(S.DEADLINE, False, False, "dormant", id="lifetime"),
    ],
)
def test_what_follows_an_incarnations_exit(status: S, stopping: bool, wedged: bool, expected: str) -> None:
    result = RunResult(status=status, error=RunError(kind="x", message="y") if status is S.CRASHED else None)
    assert wp.after_exit(result, stopping=stopping, wedged=wedged) == expected


def test_a_delivery_names_its_uri_and_never_carries_a_body() -> None:
    text = wp.render_delivery(Delivery("feed", "status", "status://incidents", etag="e7"))
    assert "status://incidents" in text and "e7" in text and "`status`" in text
    assert "may or may not have changed" not in text
    synthetic = wp.render_delivery(Delivery("feed", "status", "status://incidents", synthetic=True))
    assert "may or may not have changed" in synthetic
