"""A subagent's events and usage reports leave in one frame per step boundary: riding on the next
`sup/record`, or as one `ev/batch` at the end of the event loop's turn; bounded, in order."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import anyio
import pytest
from pydantic import JsonValue

from protocol import control
from protocol.framing import FrameError, LineSplitter, decode
from protocol.transcript import StartItem
from subagent.channel import ControlChannel
from subagent.notes import NOTES_BYTES, NoteBuffer, approx_json_bytes

USAGE = control.UsageParams(tokens_in=10, tokens_out=2, steps=1, model="m")


def event(step: int, text: str = "") -> control.EventParams:
    return control.EventParams(event="loop.step", fields={"step": step, "text": text})


@pytest.mark.parametrize(
    ("value", "at_least"),
    [
        pytest.param("abc", 5, id="string"),
        pytest.param({"k": "v" * 100}, 100, id="object"),
        pytest.param([1, [2, "x" * 50]], 50, id="nested-list"),
        pytest.param(None, 1, id="null"),
    ],
)
def test_a_values_estimate_covers_its_text(value: JsonValue, at_least: int) -> None:
    assert approx_json_bytes(value) >= at_least


def test_a_buffer_gives_back_its_notes_in_order_and_is_empty_after() -> None:
    buffer = NoteBuffer()
    assert buffer.take() is None
    for note in (event(1), USAGE, event(2)):
        assert not buffer.add(note)
    notes = buffer.take()
    assert notes is not None
    assert [e.fields["step"] for e in notes.events] == [1, 2]
    assert notes.usage == [USAGE]
    assert buffer.empty and buffer.take() is None


def test_a_buffer_is_full_at_its_count_and_at_its_bytes() -> None:
    by_count = NoteBuffer(max_count=3)
    assert [by_count.add(event(i)) for i in range(3)] == [False, False, True]
    by_bytes = NoteBuffer()
    assert not by_bytes.add(event(1, "x" * (NOTES_BYTES // 2)))
    assert by_bytes.add(event(2, "x" * (NOTES_BYTES // 2)))


@contextlib.contextmanager
def channel_to_pipe() -> Iterator[tuple[ControlChannel, int]]:
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK)
    dummy_in = os.open(os.devnull, os.O_RDONLY)
    channel = ControlChannel(dummy_in, write_fd)
    try:
        yield channel, read_fd
    finally:
        channel.close()
        for fd in (read_fd, write_fd, dummy_in):
            os.close(fd)


def frames_in(read_fd: int) -> list[control.UpMessage]:
    splitter = LineSplitter()
    frames: list[control.UpMessage] = []
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(read_fd, 1 << 20):
            for line in splitter.feed(chunk):
                message = decode(line, control.UP_ADAPTER)
                assert not isinstance(message, FrameError), message
                frames.append(message)
    return frames


def test_notes_ride_on_the_next_record_in_one_frame() -> None:
    with channel_to_pipe() as (channel, read_fd):
        channel.emit("loop.step", {"step": 1})
        channel.report_usage(USAGE)
        channel.emit("tool.call", {"tool": "t"})
        assert frames_in(read_fd) == []  # held until a frame goes or the loop's turn ends
        record = control.SupRecord(
            id=1, params=control.RecordParams(items=[StartItem(call_id="c", name="t")])
        )
        assert channel.send(record)
        (frame,) = frames_in(read_fd)
        assert isinstance(frame, control.SupRecord)
        assert [e.event for e in frame.params.events] == ["loop.step", "tool.call"]
        assert frame.params.usage == [USAGE]
        assert [i.kind for i in frame.params.items] == ["start"]


def test_notes_go_before_any_other_frame_in_the_same_write() -> None:
    with channel_to_pipe() as (channel, read_fd):
        channel.emit("loop.step", {"step": 1})
        channel.send(control.Ready(params=control.ReadyParams(pid=1)))
        frames = frames_in(read_fd)
        assert [type(f) for f in frames] == [control.Batch, control.Ready]


def test_the_loops_turn_ends_by_sending_its_notes_as_one_batch() -> None:
    async def main() -> list[control.UpMessage]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(channel.serve, lambda: None, lambda _: None)
            channel.emit("loop.step", {"step": 1})
            channel.emit("loop.step", {"step": 2})
            with anyio.fail_after(5):
                await anyio.wait_readable(read_fd)  # the serve task's write, at the end of this turn
            frames = frames_in(read_fd)
            tg.cancel_scope.cancel()
        return frames

    with channel_to_pipe() as (channel, read_fd):
        (frame,) = anyio.run(main)
        assert isinstance(frame, control.Batch)
        assert [e.fields["step"] for e in frame.params.events] == [1, 2]


def test_a_burst_of_notes_is_cut_into_frames_within_the_cap() -> None:
    with channel_to_pipe() as (channel, read_fd):
        for step in range(control.MAX_NOTES_PER_FRAME * 2 + 5):
            channel.emit("loop.step", {"step": step})
        full = frames_in(read_fd)
        channel.flush_notes()
        rest = frames_in(read_fd)
        assert [len(f.params.events) for f in full + rest if isinstance(f, control.Batch)] == [
            control.MAX_NOTES_PER_FRAME,
            control.MAX_NOTES_PER_FRAME,
            5,
        ]
        steps = [
            e.fields["step"] for f in full + rest if isinstance(f, control.Batch) for e in f.params.events
        ]
        assert steps == list(range(control.MAX_NOTES_PER_FRAME * 2 + 5))
