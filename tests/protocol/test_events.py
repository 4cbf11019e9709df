"""The closed event vocabulary covers docs/design.md §13 and every name is declared once."""

from __future__ import annotations

from collections import Counter
from typing import get_args

import pytest
from pydantic import ValidationError

from protocol.control import EventParams
from protocol.events import EVENT_NAMES, EventName

# Copied from docs/design.md §13; a name leaving the design must leave this list deliberately too.
CORE_EVENTS = [
    "proc.start",
    "proc.ready",
    "proc.drain",
    "proc.exit",
    "config.loaded",
    "config.invalid",
    "task.submitted",
    "task.started",
    "task.terminal",
    "subagent.spawn",
    "subagent.ready",
    "subagent.exit",
    "subagent.stuck",
    "subagent.signal",
    "subagent.restart",
    "limit.exceeded",
    "trigger.armed",
    "trigger.fired",
    "resource.updated",
    "loop.start",
    "loop.step",
    "loop.final",
    "loop.error",
    "intel.call",
    "intel.result",
    "tool.call",
    "tool.result",
]


def test_the_vocabulary_contains_every_event_named_in_the_design() -> None:
    assert len(CORE_EVENTS) == 27
    assert set(CORE_EVENTS) - EVENT_NAMES == set()


def test_every_event_name_is_declared_exactly_once() -> None:
    declared = get_args(EventName)
    duplicates = [name for name, count in Counter(declared).items() if count > 1]
    assert duplicates == []
    assert frozenset(declared) == EVENT_NAMES


def test_every_event_name_is_a_dotted_lowercase_pair() -> None:
    for name in EVENT_NAMES:
        component, _, action = name.partition(".")
        assert component.isidentifier() and component.islower(), name
        assert action.isidentifier() and action.islower(), name


@pytest.mark.parametrize("name", ["", "proc", "proc.started", "PROC.START", "loop.step "])
def test_an_event_outside_the_vocabulary_is_rejected(name: str) -> None:
    with pytest.raises(ValidationError):
        EventParams.model_validate({"event": name})
