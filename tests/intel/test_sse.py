"""The SSE parser: spec line handling, bounds, and chunking-independence (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from subagent.intel.sse import SseError, SseEvent, SseParser


def parse_all(*chunks: bytes) -> list[SseEvent]:
    parser = SseParser()
    return [event for chunk in chunks for event in parser.feed(chunk)]


@pytest.mark.parametrize(
    ("stream", "events"),
    [
        pytest.param(b"data: a\n\n", [SseEvent("a")], id="one-event"),
        pytest.param(b"data: a\ndata: b\n\n", [SseEvent("a\nb")], id="multi-line-data-joins-with-newline"),
        pytest.param(b": keepalive\n\ndata: x\n\n", [SseEvent("x")], id="comments-ignored"),
        pytest.param(b"data: a\r\n\r\ndata: b\r\r", [SseEvent("a"), SseEvent("b")], id="crlf-and-cr"),
        pytest.param(b"data:a\n\n", [SseEvent("a")], id="no-space-after-colon"),
        pytest.param(b"data:  a\n\n", [SseEvent(" a")], id="only-one-space-stripped"),
        pytest.param(b"event: ping\ndata: 1\nid: 7\n\n", [SseEvent("1", "ping", "7")], id="event-and-id"),
        pytest.param(b"data\n\n", [SseEvent("")], id="field-without-colon"),
        pytest.param(b"event: x\n\n", [], id="no-data-no-event"),
        pytest.param(b"data: [DONE]\n\n", [SseEvent("[DONE]")], id="done-is-plain-data"),
        pytest.param(b"data: a\n", [], id="unterminated-event-is-not-dispatched"),
        pytest.param(b"retry: 10\nfoo: bar\ndata: z\n\n", [SseEvent("z")], id="unknown-fields-ignored"),
        pytest.param("data: é\n\n".encode(), [SseEvent("é")], id="utf8"),
    ],
)
def test_parser_reads_event_stream_lines_per_spec(stream: bytes, events: list[SseEvent]) -> None:
    assert parse_all(stream) == events


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    assert parse_all(b"data: a\r", b"\n\r", b"\n") == [SseEvent("a")]


def test_empty_chunk_changes_nothing() -> None:
    assert parse_all(b"data: a\r", b"", b"\ndata: b\n\n") == [SseEvent("a\nb")]


def test_overlong_line_is_an_error_not_unbounded_memory() -> None:
    parser = SseParser(max_line_bytes=16)
    parser.feed(b"data: " + b"x" * 8)
    with pytest.raises(SseError, match="line exceeds 16"):
        parser.feed(b"x" * 8)


def test_overlong_event_is_an_error() -> None:
    parser = SseParser(max_event_bytes=10)
    with pytest.raises(SseError, match="event exceeds 10"):
        parser.feed(b"data: 123456\ndata: 123456\n")


_text = st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"]), max_size=20)


@st.composite
def event_streams(draw: st.DrawFn) -> tuple[bytes, list[SseEvent]]:
    """A valid stream with comments and a random line-ending style, plus the events it encodes."""
    events = draw(
        st.lists(st.tuples(st.lists(_text, min_size=1, max_size=3), st.sampled_from(["", "update"])))
    )
    # One line ending per stream: a `\r` line end followed by a `\n` one would read as `\r\n`.
    ending = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    out = bytearray()
    expected: list[SseEvent] = []
    for lines, kind in events:
        if draw(st.booleans()):
            out += b": comment" + ending
        if kind:
            out += b"event: " + kind.encode() + ending
        for line in lines:
            out += b"data: " + line.encode() + ending
        out += ending
        expected.append(SseEvent("\n".join(lines), kind or "message"))
    return bytes(out), expected


@given(stream=event_streams(), data=st.data())
def test_any_chunking_of_a_valid_stream_yields_the_same_events(
    stream: tuple[bytes, list[SseEvent]], data: st.DataObject
) -> None:
    raw, expected = stream
    cuts = sorted(data.draw(st.lists(st.integers(min_value=0, max_value=len(raw)), max_size=12)))
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    assert parse_all(raw) == expected
    assert parse_all(*pieces) == expected
