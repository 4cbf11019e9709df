"""`daemon.gc_freeze`: the collector policy's decisions (pure), and its effect on this process's
collector — frozen cyclic garbage is still collected, once idle or past the bound."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from agentd.service.collector import COUNT_EVERY_S, Collector
from agentd.service.collector_policy import CollectorPolicy, Heap, Step, next_step

POLICY = CollectorPolicy(idle_slack=100, idle_after_s=5.0, busy_floor=1_000)


@pytest.mark.parametrize(
    ("heap", "step"),
    [
        pytest.param(Heap(5_000, 5_000, 3, 0.0, 2), "freeze", id="promoted-while-busy-freeze-survivors"),
        pytest.param(Heap(5_000, 5_000, 3, 0.0, 0), "none", id="nothing-promoted-nothing-to-freeze"),
        pytest.param(
            Heap(5_099, 5_000, 0, 60.0, 4), "none", id="idle-with-little-frozen-since-needs-nothing"
        ),
        pytest.param(
            Heap(5_100, 5_000, 0, 5.0, 0), "full", id="idle-a-while-with-frozen-growth-collects-all"
        ),
        pytest.param(Heap(9_000, 5_000, 0, 4.9, 0), "none", id="just-idle-waits-for-idle-after-s"),
        pytest.param(Heap(11_000, 5_000, 900, 0.0, 0), "none", id="busy-within-twice-plus-floor"),
        pytest.param(Heap(11_001, 5_000, 900, 0.0, 7), "full", id="busy-past-twice-plus-floor-collects"),
    ],
)
def test_next_step(heap: Heap, step: Step) -> None:
    assert next_step(heap, POLICY) == step


class Cycle:
    """An object that refers to itself: only a collection frees it once unreachable."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def collector_state() -> Iterator[None]:
    """No automatic collection during the test: only the ones it runs (`promote`) and the policy's."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()
    gc.unfreeze()  # this test process's collector as it was
    gc.collect()


def promote() -> None:
    """A young collection: its survivors go to the old generation, which the policy then freezes."""
    gc.collect(1)


class Counts:
    def __init__(self) -> None:
        self.live = 1

    def collector(self, policy: CollectorPolicy) -> Collector:
        return Collector(lambda: self.live, policy)


def frozen(obj: object) -> bool:
    return gc.is_tracked(obj) and not any(o is obj for o in gc.get_objects())


@pytest.mark.usefixtures("collector_state")
def test_frozen_cyclic_garbage_survives_collections_while_busy_and_is_collected_once_idle() -> None:
    counts = Counts()
    collector = counts.collector(CollectorPolicy(idle_slack=1, idle_after_s=5.0, busy_floor=10**9))
    garbage = Cycle()
    ref = weakref.ref(garbage)
    promote()
    assert collector.step(now=0.0) == "freeze"
    assert frozen(garbage)
    del garbage
    gc.collect()
    assert ref() is not None  # the cost of freezing: a frozen cycle waits for a full collection
    assert collector.step(now=1.0) == "freeze"  # busy: that collection's survivors; not a full one
    assert ref() is not None
    counts.live = 0
    assert collector.step(now=2.0) == "none"  # idle, but only just
    assert ref() is not None
    assert collector.step(now=7.0) == "full"  # idle for 5 s
    assert ref() is None
    assert collector.full_collections == 1


@pytest.mark.usefixtures("collector_state")
def test_frozen_cyclic_garbage_is_collected_while_busy_once_the_frozen_heap_passes_its_bound() -> None:
    counts = Counts()
    collector = counts.collector(CollectorPolicy(idle_slack=10**9, busy_floor=1))
    garbage = [Cycle() for _ in range(100)]
    refs = [weakref.ref(g) for g in garbage]
    promote()
    # Everything this process holds is frozen at once: past twice what was frozen before, plus one.
    assert collector.step(now=0.0) == "freeze"
    del garbage
    gc.collect()  # the frozen cycles are out of its sight
    assert all(r() is not None for r in refs)
    # Busy: the frozen heap is counted only every COUNT_EVERY_S, so the bound waits for that.
    assert collector.step(now=1.0) == "freeze"
    assert all(r() is not None for r in refs)
    assert collector.step(now=COUNT_EVERY_S) == "full"  # still busy: the bound, not idleness
    assert all(r() is None for r in refs)
    assert collector.step(now=2 * COUNT_EVERY_S) == "none"  # what it left frozen is the new base


@pytest.mark.usefixtures("collector_state")
def test_a_frozen_acyclic_object_is_freed_by_its_reference_count_without_any_collection() -> None:
    counts = Counts()
    collector = counts.collector(CollectorPolicy(idle_slack=10**9, busy_floor=10**9))
    held = {"state": [1, 2, 3]}  # what a live task holds, cycle-free
    ref_target = Cycle.__new__(Cycle)  # a plain object, no cycle
    ref = weakref.ref(ref_target)
    held["obj"] = ref_target  # type: ignore[assignment]
    del ref_target
    promote()
    assert collector.step(now=0.0) == "freeze"
    before = gc.get_freeze_count()
    del held
    assert ref() is None  # gone at once, frozen or not, with automatic collections off
    assert gc.get_freeze_count() < before
