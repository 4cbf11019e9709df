"""Framing: bad frames come back as typed `FrameError` values, and `LineSplitter` bounds memory."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, JsonValue, TypeAdapter

from protocol import framing
from protocol.control import DOWN_ADAPTER, UP_ADAPTER, Ready
from protocol.framing import FrameError, LineSplitter, Oversize
from protocol.spawn import REVEAL_SECRETS
from tests.protocol import strategies as s

ADAPTERS = [pytest.param(DOWN_ADAPTER, id="down"), pytest.param(UP_ADAPTER, id="up")]
TOKEN = "sk-live-SECRET0123456789abcdef"


def _frame(document: object) -> bytes:
    return json.dumps(document).encode()


def _error(line: bytes | Oversize, adapter: TypeAdapter[Any], **kwargs: Any) -> FrameError:
    decoded = framing.decode(line, adapter, **kwargs)
    assert isinstance(decoded, FrameError), f"expected a FrameError, got {decoded!r}"
    return decoded


# ---- oversize, encoding, json ------------------------------------------------------------------


def test_a_line_over_the_cap_is_an_oversize_error_with_its_size() -> None:
    error = _error(b"x" * 101, UP_ADAPTER, max_line=100)
    assert (error.kind, error.size) == ("oversize", 101)


def test_a_line_exactly_at_the_cap_is_not_oversize() -> None:
    line = b'{"jsonrpc":"2.0","method":"ev/ready","params":{"pid":1}}'
    decoded = framing.decode(line, UP_ADAPTER, max_line=len(line))
    assert isinstance(decoded, Ready)
    assert _error(line, UP_ADAPTER, max_line=len(line) - 1).kind == "oversize"


def test_the_oversize_marker_decodes_to_an_oversize_error_carrying_the_dropped_size() -> None:
    error = _error(Oversize(framing.MAX_FRAME + 5), DOWN_ADAPTER)
    assert (error.kind, error.size) == ("oversize", framing.MAX_FRAME + 5)


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(b'{"jsonrpc":"2.0","method":"ev/ready","params":{"pid":1},"x":"\xff"}', id="lone-0xff"),
        pytest.param(b"\xc3\x28", id="bad-continuation"),
        pytest.param(b"\xed\xa0\x80", id="utf8-encoded-surrogate"),
        pytest.param(b'"\xe2\x82"', id="truncated-sequence"),
    ],
)
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_non_utf8_bytes_are_an_encoding_error(line: bytes, adapter: TypeAdapter[Any]) -> None:
    error = _error(line, adapter)
    assert (error.kind, error.size) == ("encoding", len(line))


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"   ", id="blank"),
        pytest.param(b"{", id="unclosed-object"),
        pytest.param(b"hello", id="bare-word"),
        pytest.param(b"{'jsonrpc': '2.0'}", id="single-quotes"),
        pytest.param(b'{"jsonrpc":"2.0",}', id="trailing-comma"),
        pytest.param(b'{"a":1} {"b":2}', id="two-documents"),
        pytest.param(b"[" * 10_000, id="deep-nesting"),
    ],
)
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_non_json_is_a_json_error(line: bytes, adapter: TypeAdapter[Any]) -> None:
    error = _error(line, adapter)
    assert (error.kind, error.size) == ("json", len(line))


# ---- shape -------------------------------------------------------------------------------------

PING: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "ctrl/ping", "params": {"seq": 1}}
READY: dict[str, Any] = {"jsonrpc": "2.0", "method": "ev/ready", "params": {"pid": 42}}


@pytest.mark.parametrize(
    ("document", "adapter"),
    [
        pytest.param([PING], DOWN_ADAPTER, id="array"),
        pytest.param([], UP_ADAPTER, id="empty-array"),
        pytest.param(3, UP_ADAPTER, id="number"),
        pytest.param("ctrl/ping", DOWN_ADAPTER, id="string"),
        pytest.param(None, DOWN_ADAPTER, id="null"),
        pytest.param(True, UP_ADAPTER, id="bool"),
        pytest.param({}, UP_ADAPTER, id="empty-object"),
        pytest.param({**READY, "method": "ev/nope"}, UP_ADAPTER, id="unknown-method"),
        pytest.param({**READY, "method": 7}, UP_ADAPTER, id="method-not-a-string"),
        pytest.param({**PING, "method": "initialize"}, DOWN_ADAPTER, id="mcp-initialize"),
        pytest.param({k: v for k, v in READY.items() if k != "params"}, UP_ADAPTER, id="missing-params"),
        pytest.param({k: v for k, v in PING.items() if k != "id"}, DOWN_ADAPTER, id="request-without-id"),
        pytest.param({**READY, "params": {}}, UP_ADAPTER, id="missing-param-field"),
        pytest.param({**READY, "extra": 1}, UP_ADAPTER, id="extra-top-level-field"),
        pytest.param({**READY, "params": {"pid": 1, "extra": 1}}, UP_ADAPTER, id="extra-param-field"),
        pytest.param({**READY, "jsonrpc": "1.0"}, UP_ADAPTER, id="wrong-jsonrpc-version"),
        pytest.param({**READY, "params": {"pid": "forty-two"}}, UP_ADAPTER, id="pid-as-word"),
        pytest.param({**READY, "params": {"pid": [42]}}, UP_ADAPTER, id="pid-as-array"),
        pytest.param({**READY, "params": {"pid": 4.2}}, UP_ADAPTER, id="pid-as-fraction"),
        pytest.param({**READY, "params": "pid"}, UP_ADAPTER, id="params-as-string"),
        pytest.param({**READY, "params": {"pid": 0}}, UP_ADAPTER, id="pid-zero"),
        pytest.param({**PING, "id": True}, DOWN_ADAPTER, id="bool-id"),
        pytest.param({**PING, "id": -1}, DOWN_ADAPTER, id="negative-id"),
        pytest.param({**PING, "id": 1.5}, DOWN_ADAPTER, id="float-id"),
        pytest.param({**PING, "id": "x" * 65}, DOWN_ADAPTER, id="id-too-long"),
        pytest.param({**PING, "params": {"seq": -1}}, DOWN_ADAPTER, id="negative-seq"),
        pytest.param({**PING, "params": [1]}, DOWN_ADAPTER, id="positional-params"),
        pytest.param(
            {"jsonrpc": "2.0", "method": "ev/event", "params": {"event": "made.up"}},
            UP_ADAPTER,
            id="bad-event",
        ),
        pytest.param({"jsonrpc": "2.0", "id": 1}, UP_ADAPTER, id="response-without-result"),
        pytest.param(
            {"jsonrpc": "2.0", "id": 1, "result": 1, "error": {"code": 1, "message": "m"}},
            DOWN_ADAPTER,
            id="both-result-and-error",
        ),
        pytest.param(
            {"jsonrpc": "2.0", "id": 1, "error": {"code": 1}}, DOWN_ADAPTER, id="error-without-message"
        ),
        pytest.param(
            {"jsonrpc": "2.0", "method": "ev/result", "params": {"status": "succeeded"}},
            UP_ADAPTER,
            id="unknown-terminal-status",
        ),
    ],
)
def test_json_of_the_wrong_shape_is_a_shape_error(document: object, adapter: TypeAdapter[Any]) -> None:
    line = _frame(document)
    error = _error(line, adapter)
    assert (error.kind, error.size) == ("shape", len(line))
    assert "validation error" in error.detail


def test_a_shape_error_names_the_failing_location() -> None:
    error = _error(_frame({**READY, "params": {"pid": "x"}}), UP_ADAPTER)
    assert "ev/ready.params.pid" in error.detail


def test_a_shape_error_masks_a_location_segment_taken_from_the_frame() -> None:
    error = _error(_frame({**READY, "params": {"pid": 1, "surprise": 1}}), UP_ADAPTER)
    assert "extra_forbidden at ev/ready.params.*" in error.detail


# ---- never raises, never echoes ----------------------------------------------------------------


@pytest.mark.parametrize("adapter", ADAPTERS)
@settings(max_examples=150, deadline=None)
@given(line=st.binary(max_size=200))
def test_decoding_arbitrary_bytes_returns_a_message_or_a_frame_error(
    adapter: TypeAdapter[Any], line: bytes
) -> None:
    decoded = framing.decode(line, adapter, max_line=150)
    assert isinstance(decoded, FrameError | BaseModel)
    if isinstance(decoded, FrameError):
        assert decoded.size == len(line)


@pytest.mark.parametrize("adapter", ADAPTERS)
@settings(max_examples=60, deadline=None)
@given(
    document=st.one_of(
        s.json_values,
        st.fixed_dictionaries(
            {"method": st.sampled_from(["ctrl/spawn", "ctrl/ping", "ev/ready", "sup/wait", "x"])},
            optional={"jsonrpc": st.just("2.0"), "id": s.json_values, "params": s.json_values},
        ),
        st.fixed_dictionaries(
            {"jsonrpc": st.just("2.0"), "id": s.json_values},
            optional={"result": s.json_values, "error": s.json_values},
        ),
    )
)
def test_decoding_arbitrary_json_returns_a_message_or_a_frame_error(
    adapter: TypeAdapter[Any], document: JsonValue
) -> None:
    decoded = framing.decode(_frame(document), adapter)
    assert isinstance(decoded, FrameError | BaseModel)
    if isinstance(decoded, FrameError):
        assert decoded.kind == "shape"


@pytest.mark.parametrize(
    ("line", "adapter"),
    [
        pytest.param(TOKEN.encode(), UP_ADAPTER, id="bare-token"),
        pytest.param(f'{{"key": "{TOKEN}"'.encode(), UP_ADAPTER, id="unterminated-json"),
        pytest.param(f'{{"key": "{TOKEN}\xff"}}'.encode("latin-1"), UP_ADAPTER, id="bad-utf8"),
        pytest.param(_frame(TOKEN), UP_ADAPTER, id="json-string"),
        pytest.param(_frame({**READY, "method": TOKEN}), UP_ADAPTER, id="as-method"),
        pytest.param(_frame({**READY, TOKEN: 1}), UP_ADAPTER, id="as-extra-top-level-key"),
        pytest.param(_frame({**READY, "params": {"pid": 1, TOKEN: 1}}), UP_ADAPTER, id="as-extra-param-key"),
        pytest.param(_frame({**READY, "params": {"pid": TOKEN}}), UP_ADAPTER, id="as-bad-value"),
        pytest.param(_frame({**PING, "id": TOKEN * 3}), DOWN_ADAPTER, id="as-overlong-id"),
        pytest.param(
            _frame({"jsonrpc": "2.0", "id": 1, "result": 1, TOKEN: 2}), UP_ADAPTER, id="in-response"
        ),
        pytest.param(
            _frame(
                {
                    "jsonrpc": "2.0",
                    "method": "ctrl/spawn",
                    "params": {
                        "task_id": "t",
                        "run_id": "r",
                        "instruction": "i",
                        "intelligence": [{"kind": "openai", "base_url": "http://x", "headers": {TOKEN: 5}}],
                    },
                }
            ),
            DOWN_ADAPTER,
            id="as-header-name",
        ),
        pytest.param(
            _frame(
                {
                    "jsonrpc": "2.0",
                    "method": "ctrl/spawn",
                    "params": {
                        "task_id": "t",
                        "run_id": "r",
                        "instruction": "i",
                        "intelligence": [{"kind": "openai", "base_url": "http://x"}],
                        "mcp_servers": [
                            {"name": "a", "transport": "stdio", "command": ["c"], "env": {TOKEN: 5}}
                        ],
                    },
                }
            ),
            DOWN_ADAPTER,
            id="as-env-name",
        ),
    ],
)
def test_a_frame_error_never_echoes_the_frame_content(line: bytes, adapter: TypeAdapter[Any]) -> None:
    error = _error(line, adapter)
    assert TOKEN not in error.detail
    assert "sk-live" not in error.detail


def _dict_paths(node: JsonValue, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Paths (from the root) of every JSON object inside `node`, the root included."""
    found: list[tuple[str | int, ...]] = []
    if isinstance(node, dict):
        found.append(path)
        for key, value in node.items():
            found += _dict_paths(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _dict_paths(value, (*path, index))
    return found


def _at(node: Any, path: tuple[str | int, ...]) -> Any:
    for step in path:
        node = node[step]
    return node


@settings(max_examples=50, deadline=None)
@given(
    message=st.one_of(s.spawns, s.pings, s.readies, s.events, s.results, s.sup_spawns, s.sup_waits),
    data=st.data(),
)
def test_a_secret_planted_anywhere_in_a_message_is_never_echoed_in_a_frame_error(
    message: BaseModel, data: st.DataObject
) -> None:
    document = json.loads(framing.encode(message, context=REVEAL_SECRETS))
    adapter: TypeAdapter[Any] = DOWN_ADAPTER if document["method"].startswith("ctrl/") else UP_ADAPTER
    target = _at(document, data.draw(st.sampled_from(_dict_paths(document)), label="object"))
    keys = sorted(target)
    how = data.draw(st.sampled_from(["extra-key", "replace-value"] if keys else ["extra-key"]), label="how")
    if how == "extra-key":
        target[TOKEN] = TOKEN
    else:
        target[data.draw(st.sampled_from(keys), label="key")] = {TOKEN: [TOKEN]}
    decoded = framing.decode(_frame(document), adapter)
    if isinstance(decoded, FrameError):
        assert TOKEN not in decoded.detail


# ---- LineSplitter ------------------------------------------------------------------------------

streams = st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\xff", b"{}", b"\n\n"]), max_size=40).map(b"".join)


def _expected(data: bytes, max_line: int) -> list[bytes | Oversize]:
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the stream ended on a newline (or was empty): no trailing partial line
    return [line if len(line) <= max_line else Oversize(len(line)) for line in lines]


@st.composite
def chunkings(draw: st.DrawFn, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def _split(chunks: list[bytes], splitter: LineSplitter, max_line: int) -> list[bytes | Oversize]:
    out: list[bytes | Oversize] = []
    for chunk in chunks:
        out += splitter.feed(chunk)
        assert splitter.buffered <= max_line
        assert not (splitter.discarding and splitter.buffered), "a discarding splitter holds no bytes"
    return out + splitter.close()


@settings(max_examples=150, deadline=None)
@given(data=st.data(), stream=streams)
def test_any_chunking_of_a_stream_yields_the_lines_of_bytes_split(data: st.DataObject, stream: bytes) -> None:
    chunks = data.draw(chunkings(stream))
    splitter = LineSplitter()
    assert _split(chunks, splitter, framing.MAX_FRAME) == _expected(stream, framing.MAX_FRAME)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), stream=streams, max_line=st.integers(0, 8))
def test_lines_over_the_cap_come_out_as_oversize_and_the_buffer_never_exceeds_the_cap(
    data: st.DataObject, stream: bytes, max_line: int
) -> None:
    chunks = data.draw(chunkings(stream))
    splitter = LineSplitter(max_line)
    assert _split(chunks, splitter, max_line) == _expected(stream, max_line)
    assert splitter.buffered == 0
    assert not splitter.discarding


def test_close_returns_the_trailing_partial_line() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b"one\ntw") == [b"one"]
    assert splitter.buffered == 2
    assert splitter.close() == [b"tw"]
    assert splitter.buffered == 0


def test_close_on_a_clean_line_boundary_returns_nothing() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b"one\n") == [b"one"]
    assert splitter.close() == []


def test_close_while_discarding_returns_oversize_with_the_dropped_size() -> None:
    splitter = LineSplitter(max_line=4)
    assert splitter.feed(b"abcdefg") == []
    assert splitter.discarding
    assert splitter.close() == [Oversize(7)]
    assert not splitter.discarding


def test_an_empty_line_is_a_line() -> None:
    assert LineSplitter().feed(b"\n\n") == [b"", b""]


def test_a_flood_without_newlines_keeps_the_buffer_within_the_cap() -> None:
    max_line = 1024
    splitter = LineSplitter(max_line)
    chunk = b"x" * 100_000
    for _ in range(50):
        assert splitter.feed(chunk) == []
        assert splitter.buffered <= max_line
    assert splitter.discarding
    assert splitter.feed(b"\nnext\n") == [Oversize(50 * len(chunk)), b"next"]
    assert splitter.buffered == 0


def test_the_splitter_recovers_after_an_oversize_line() -> None:
    splitter = LineSplitter(max_line=3)
    assert splitter.feed(b"ab") == []
    assert splitter.feed(b"cd") == []
    assert splitter.feed(b"e\nok\nabc\n") == [Oversize(5), b"ok", b"abc"]
