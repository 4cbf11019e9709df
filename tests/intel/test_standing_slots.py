"""The subagent's side of standing slots: a request takes one without asking and reports its
start; a call-back returns one not used yet, even one whose hand-out it overtook."""

from __future__ import annotations

import pytest
from pydantic import JsonValue

from protocol import control
from protocol.spawn import EndpointSpec
from subagent.intel.slots import Slots

pytestmark = pytest.mark.anyio

SPEC = EndpointSpec(name="p", kind="openai", model="m", base_url="http://127.0.0.1:9/v1", limited=True)


class RecordingLink:
    """A supervisor that grants every asked slot as ticket 99 and records what it is told."""

    def __init__(self) -> None:
        self.asked = 0
        self.told: list[control.SlotDone | control.SlotStart] = []

    async def request(self, method: str, params: dict[str, JsonValue]) -> JsonValue:
        self.asked += 1
        return control.SlotResult(ticket=99).model_dump(mode="json")

    def notify(self, message: control.SlotDone | control.SlotStart) -> None:
        self.told.append(message)


def lease(ticket: int, tokens: int | None = None) -> control.Lease:
    return control.Lease(params=control.LeaseParams(endpoint="p", ticket=ticket, tokens=tokens))


def unlease(ticket: int) -> control.Unlease:
    return control.Unlease(params=control.UnleaseParams(endpoint="p", ticket=ticket))


async def test_a_request_takes_its_standing_slot_without_asking_and_reports_start_and_end() -> None:
    link = RecordingLink()
    slots = Slots(link)
    slots.on_lease(lease(7))
    async with slots.held(SPEC, 400) as outcome:
        outcome.status = 200
    assert link.asked == 0 and outcome.standing
    assert [(type(m).__name__, m.params.ticket) for m in link.told] == [("SlotStart", 7), ("SlotDone", 7)]
    async with slots.held(SPEC, 400) as outcome:
        pass
    assert link.asked == 1 and not outcome.standing  # the standing slot was used: it asks


@pytest.mark.parametrize(
    "frames",
    [
        pytest.param([lease(7), unlease(7)], id="called-back-after-it-came"),
        pytest.param([unlease(7), lease(7)], id="call-back-overtook-the-hand-out"),
    ],
)
async def test_a_called_back_standing_slot_goes_back_unused(
    frames: list[control.Lease | control.Unlease],
) -> None:
    link = RecordingLink()
    slots = Slots(link)
    for frame in frames:
        slots.on_lease(frame)
    assert [(type(m).__name__, m.params.ticket) for m in link.told] == [("SlotDone", 7)]
    async with slots.held(SPEC, 400):
        pass
    assert link.asked == 1


async def test_a_request_larger_than_its_standing_slot_allows_asks() -> None:
    link = RecordingLink()
    slots = Slots(link)
    slots.on_lease(lease(7, tokens=10))
    async with slots.held(SPEC, 4000) as outcome:
        pass
    assert link.asked == 1 and not outcome.standing
