"""The watcher's pure parts: target selection, state details, and the bounded outbox."""

from __future__ import annotations

import os
import threading

import mcp_types

from protocol.framing import LineSplitter, decode
from protocol.watch import WATCH_UP_ADAPTER, ResourceChanged, WatchState, WatchStateParams, WatchTarget
from subagent.channel import ControlChannel
from subagent.watch.outbox import MAX_PENDING_EVENTS, MAX_PENDING_URIS, Outbox, Sender
from subagent.watch.targets import (
    Interest,
    Selection,
    diff,
    era_of,
    fit_frame,
    state_detail,
    unsupported_reason,
)


def test_interest_keeps_each_uri_and_glob_once_in_declaration_order() -> None:
    interest = Interest.of(
        [
            WatchTarget(trigger="a", uri="x://1"),
            WatchTarget(trigger="b", glob="x://*"),
            WatchTarget(trigger="c", uri="x://1"),
        ]
    )
    assert interest == Interest(("x://1",), ("x://*",))
    assert interest.matches("x://2") and not interest.matches("y://2")


def test_a_selection_puts_exact_uris_first_and_caps_the_glob_matches() -> None:
    interest = Interest(("x://exact",), ("x://item/*",))
    selection = Selection(interest, cap=3)
    selection.add_listed(["x://item/1", "y://item/2", "x://exact", "x://item/3"])
    assert selection.result() == ("x://exact", "x://item/1", "x://item/3")
    assert not selection.full
    selection.add_listed(["x://item/4", "x://item/5"])
    assert selection.result() == ("x://exact", "x://item/1", "x://item/3")
    assert selection.left_out == 2 and selection.full


def test_diff_keeps_each_side_in_order() -> None:
    assert diff(["a", "b", "c"], ["c", "d", "a", "e"]) == (("d", "e"), ("b",))


def test_era_and_support_follow_the_capabilities() -> None:
    assert era_of("2026-07-28") == "2026-07-28"
    assert era_of("2025-06-18") == "2025-11-25"
    with_sub = mcp_types.ServerCapabilities(resources=mcp_types.ResourcesCapability(subscribe=True))
    without = mcp_types.ServerCapabilities(resources=mcp_types.ResourcesCapability(subscribe=False))
    assert unsupported_reason("2025-11-25", "2025-11-25", with_sub) is None
    assert "resources/subscribe" in (unsupported_reason("2025-11-25", "2025-11-25", without) or "")
    assert "change stream" in (unsupported_reason("2026-07-28", "2026-07-28", without) or "")
    assert "no resources" in (
        unsupported_reason("2025-11-25", "2025-11-25", mcp_types.ServerCapabilities()) or ""
    )


def test_the_detail_says_every_way_the_list_falls_short_and_stays_bounded() -> None:
    refused = [(f"x://{i}", "no such resource " * 50) for i in range(10)]
    detail = state_detail(subscribed=5, left_out=7, refused=refused, cut_from_frame=2, version="2025-11-25")
    assert detail.startswith("protocol 2025-11-25: 5 URI(s) subscribed")
    assert "7 more matching" in detail and "10 refused" in detail and len(detail) <= 2000
    # The frame still validates with a detail at the cap.
    WatchStateParams(state="armed", detail=detail)


def test_fit_frame_cuts_a_list_too_big_for_one_frame() -> None:
    kept, cut = fit_frame(["a" * 100] * 10, budget=450)
    assert (len(kept), cut) == (4, 6)


def test_the_outbox_coalesces_per_uri_newest_last_and_keeps_one_state() -> None:
    outbox = Outbox()
    outbox.put_state(WatchState(params=WatchStateParams(state="connecting")))
    outbox.put_resource("a", synthetic=True)
    outbox.put_resource("b", synthetic=True)
    outbox.put_resource("a", synthetic=False)
    outbox.put_state(WatchState(params=WatchStateParams(state="armed")))
    outbox.close()
    taken = []
    while (frame := outbox.take(timeout_s=1)) is not None:
        taken.append(frame)
    described = [
        f.params.uri if isinstance(f, ResourceChanged) else f.params.state if isinstance(f, WatchState) else f
        for f in taken
    ]
    assert described == ["b", "a", "armed"]
    a = taken[1]
    assert isinstance(a, ResourceChanged) and not a.params.synthetic


def test_the_outbox_stays_bounded_when_nobody_takes() -> None:
    from protocol import control

    outbox = Outbox()
    for i in range(MAX_PENDING_URIS + 50):
        outbox.put_resource(f"x://{i}", synthetic=False)
    for _ in range(MAX_PENDING_EVENTS + 10):
        outbox.put_event(control.Event(params=control.EventParams(event="mcp.log")))
    assert outbox.pending == MAX_PENDING_URIS + MAX_PENDING_EVENTS
    assert (outbox.dropped_resources, outbox.dropped_events) == (50, 10)
    outbox.put_resource("x://0", synthetic=True)  # a pending URI still takes its newest change
    assert outbox.dropped_resources == 50


def test_a_stalled_reader_blocks_the_sender_not_the_producer_and_loses_no_uri() -> None:
    """A real pipe nobody reads: producing stays instant and bounded; once read, each URI arrives, newest."""
    read_fd, write_fd = os.pipe()
    dummy_in = os.open(os.devnull, os.O_RDONLY)
    channel = ControlChannel(dummy_in, write_fd)
    outbox = Outbox()
    sender = Sender(channel, outbox)
    sender.start()
    uris = [f"x://item/{i}" for i in range(100)]
    for round_ in range(300):  # 30,000 changes: far more than a pipe holds
        for uri in uris:
            outbox.put_resource(uri, synthetic=round_ == 0)
    assert outbox.pending <= len(uris)
    outbox.close()
    got: dict[str, bool] = {}
    frames = [0]
    splitter = LineSplitter()

    def drain() -> None:
        while chunk := os.read(read_fd, 1 << 16):
            for line in splitter.feed(chunk):
                frame = decode(line, WATCH_UP_ADAPTER)
                assert isinstance(frame, ResourceChanged)
                got[frame.params.uri] = frame.params.synthetic
                frames[0] += 1

    reader = threading.Thread(target=drain)
    reader.start()
    assert sender.join(10)
    channel.close()
    os.close(write_fd)
    reader.join(10)
    os.close(read_fd)
    os.close(dummy_in)
    assert set(got) == set(uris)
    assert not any(got.values())  # the newest change of each URI won
    # The pipe (64 KiB) filled and the rest coalesced: far fewer frames than changes.
    assert frames[0] < 5000, frames[0]
