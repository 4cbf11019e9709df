"""Chaos at the socket (docs/design.md §17): thousands of malformed frames get error answers that echo
nothing, and the server stays healthy enough to accept a normal `task.submit` afterwards."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.api.limits import ApiLimits
from protocol.api import METHODS, NOT_FOUND
from protocol.jsonrpc import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR
from tests.api.harness import RawConnection, serving

pytestmark = pytest.mark.anyio

MAX_FRAME = 2048  # small, so oversize frames are cheap to send
CANARY = "CANARY"
PROTOCOL_CODES = {PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS}
LIMITS = ApiLimits(max_frame=MAX_FRAME, max_consecutive_faults=1_000_000)

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def _line(data: bytes) -> bytes:
    return data.replace(b"\n", b" ")


def _json(value: object) -> bytes:
    return json.dumps(value).encode()


_random_bytes = st.binary(min_size=1, max_size=300).map(_line)
_broken_json = _json_values.map(lambda v: _json({CANARY: v})[:-1])
_wrong_shapes = _json_values.map(lambda v: _json([CANARY, v]) if isinstance(v, dict) else _json(v))
_request_like = st.fixed_dictionaries(
    {
        "jsonrpc": st.sampled_from(["2.0", "2.0", "1.0", 2]),
        "method": st.sampled_from(sorted(METHODS)) | st.text(max_size=20),
        "params": st.dictionaries(st.text(max_size=10), _json_values, max_size=3).map(
            lambda d: {**d, CANARY: CANARY}
        )
        | _json_values,
    },
    optional={"id": st.integers(0, 10**9) | st.none() | st.text(max_size=70), CANARY: _json_values},
).map(lambda d: _line(_json(d)))

malformed = (_random_bytes | _broken_json | _wrong_shapes | _request_like).filter(lambda b: b.strip() != b"")
oversized = st.integers(MAX_FRAME + 1, 3 * MAX_FRAME).map(lambda n: b'{"jsonrpc":"2.0","x":"' + b"y" * n)


class _Conn:
    """A blocking client for the hypothesis thread; reconnects after the server closes it."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._sock: socket.socket | None = None
        self._buffer = b""

    def sock(self) -> socket.socket:
        if self._sock is None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock.settimeout(5.0)
            self._sock.connect(str(self._path))
            self._buffer = b""
        return self._sock

    def receive(self) -> dict[str, Any] | None:
        sock = self.sock()
        while b"\n" not in self._buffer:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                return None
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        message = json.loads(line)
        assert isinstance(message, dict)
        return message

    def reset(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None


def _check_answer(answer: dict[str, Any] | None) -> None:
    assert answer is not None, "the server closed a connection that had only bounded faults"
    assert answer["jsonrpc"] == "2.0"
    assert ("result" in answer) != ("error" in answer)
    if "error" in answer:
        error = answer["error"]
        assert error["code"] in PROTOCOL_CODES | {NOT_FOUND}
        assert error["data"] == {"retryable": False}
        assert CANARY not in error["message"]


def _hammer(path: Path) -> int:
    conn = _Conn(path)
    sent = 0

    @settings(max_examples=250, deadline=None, database=None)
    @given(batch=st.lists(malformed, min_size=1, max_size=15), tail=st.none() | oversized)
    def each_batch(batch: list[bytes], tail: bytes | None) -> None:
        nonlocal sent
        frames = [*batch, tail] if tail is not None else batch
        conn.sock().sendall(b"".join(f + b"\n" for f in frames))
        sent += len(frames)
        for _ in batch:
            _check_answer(conn.receive())
        if tail is not None:
            farewell = conn.receive()
            assert farewell is not None
            assert farewell["error"]["code"] == INVALID_REQUEST
            assert conn.receive() is None  # oversize ends the connection
            conn.reset()

    # Hypothesis draws the batch sizes: 250 examples usually send ~2,000 frames, but a draw of
    # small batches can send fewer than the thousand this test promises; run again until it has.
    while sent < 1000:
        each_batch()
    conn.reset()
    return sent


async def test_thousands_of_random_malformed_frames_get_errors_and_the_server_stays_healthy(
    socket_path: Path,
) -> None:
    async with serving(socket_path, limits=LIMITS) as server:
        with anyio.fail_after(60):
            sent = await anyio.to_thread.run_sync(_hammer, server.path)
        assert sent >= 1000
        async with await RawConnection.open(server.path) as conn:
            answer = await conn.request("task.submit", {"spec": {"instruction": "still here"}})
    assert answer["result"]["created"] is True


GARBAGE = [
    b"\xff\xfe\xfd",
    b"{",
    b'{"jsonrpc":"2.0"}',
    b"[1,2,3]",
    b'{"jsonrpc":"2.0","id":1,"method":"nope"}',
    b'{"jsonrpc":"2.0","id":1,"method":"task.get","params":{"task_id":""}}',
    b"null",
    b'"' + CANARY.encode() + b'"',
]


async def test_ten_thousand_pipelined_malformed_frames_are_each_answered(socket_path: Path) -> None:
    count = 10_000
    async with (
        serving(socket_path, limits=LIMITS) as server,
        await RawConnection.open(server.path) as conn,
    ):
        answers: list[dict[str, Any]] = []

        async def read_all() -> None:
            while len(answers) < count:
                answers.append(await conn.receive())

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read_all)
                for i in range(0, count, 100):
                    await conn.send(b"".join(GARBAGE[j % len(GARBAGE)] + b"\n" for j in range(i, i + 100)))
        healthy = await conn.request("daemon.status", request_id="after")
    assert all(a["error"]["code"] in PROTOCOL_CODES for a in answers)
    assert CANARY not in json.dumps(answers)
    assert healthy["id"] == "after"
    assert "result" in healthy
