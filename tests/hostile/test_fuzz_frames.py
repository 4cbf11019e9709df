"""10,000 malformed frames against the real daemon: each gets exactly one answer, and
after each the connection — or, where the daemon rightly closed it, a new one — still serves a
valid request.

The frames come from a seeded generator (the seed is printed, so a failure can be replayed):
random bytes, cut-off JSON, JSON that is not a request, request-like objects with a wrong version,
id or method or an extra params key, byte-flipped valid requests, and a few frames over the 1 MiB
cap. Each is followed on the same connection by `daemon.status`; the answers must come back in
order, the first with the frame's id (or null) and never echoing the frame, the second a result.
"""

from __future__ import annotations

import json
import os
import random
import socket
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from protocol.api import MAX_API_FRAME, METHODS
from tests.support.daemon import running_daemon, scripted

pytestmark = pytest.mark.processes

FRAMES = 10_000
OVERSIZE_EVERY = 1_000  # ten frames over the cap: each costs 1 MiB and a reconnect
CANARY = "CANARY-f7"
REPLY_TIMEOUT_S = 10.0
SEED = int(os.environ.get("AGENTD_FUZZ_SEED", "1207"))

JsonMaker = Callable[[random.Random], object]


def _scalar(rng: random.Random) -> object:
    return rng.choice(
        [
            None,
            True,
            False,
            rng.randint(-(2**70), 2**70),
            rng.random() * 1e300,
            CANARY * rng.randint(0, 3),
            "",
        ]
    )


def _value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.random()
    if depth > 3 or kind < 0.5:
        return _scalar(rng)
    if kind < 0.75:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {f"{CANARY}{i}": _value(rng, depth + 1) for i in range(rng.randint(0, 4))}


def _random_bytes(rng: random.Random) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))


def _cut_json(rng: random.Random) -> bytes:
    whole = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "daemon.status", CANARY: _value(rng)}).encode()
    return whole[: rng.randint(1, len(whole) - 1)]


def _not_a_request(rng: random.Random) -> bytes:
    return json.dumps(rng.choice([_scalar(rng), [_value(rng)], {CANARY: _value(rng)}])).encode()


# A valid `task.watch` needs no params and streams the caller's tasks until the connection closes:
# it never answers with one reply, by design (tests/api/test_watch.py covers it).
STREAMS_WITHOUT_PARAMS = frozenset({"task.watch"})


def _request_like(rng: random.Random) -> bytes:
    frame: dict[str, Any] = {
        "jsonrpc": rng.choice(["2.0", "2.0", "2.0", "1.0", 2, None]),
        "method": rng.choice([*sorted(METHODS - STREAMS_WITHOUT_PARAMS), f"{CANARY}.method", "", "x" * 100]),
    }
    if rng.random() < 0.9:
        frame["id"] = rng.choice([rng.randint(0, 10**9), f"{CANARY}-id", None, True, 1.5, [1], {"a": 1}])
    if rng.random() < 0.9:
        params = _value(rng)
        if isinstance(params, dict) or rng.random() < 0.7:
            # An unknown key makes every method's params invalid (extra="forbid"): nothing runs.
            params = {**(params if isinstance(params, dict) else {}), CANARY: _value(rng)}
        frame["params"] = params
    if rng.random() < 0.1:
        frame[CANARY] = _value(rng)
    return json.dumps(frame).encode()


def _flipped(rng: random.Random) -> bytes:
    # A harmless request: even if the flips leave it valid, it only reads.
    base = bytearray(
        json.dumps(
            {"jsonrpc": "2.0", "id": 7, "method": "task.get", "params": {"task_id": "t_none"}}
        ).encode()
    )
    for _ in range(rng.randint(1, 4)):
        base[rng.randrange(len(base))] = rng.randrange(256)
    return bytes(base)


GENERATORS: dict[str, Callable[[random.Random], bytes]] = {
    "bytes": _random_bytes,
    "cut": _cut_json,
    "shape": _not_a_request,
    "request": _request_like,
    "flipped": _flipped,
}


def frames(rng: random.Random) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for i in range(FRAMES):
        if i % OVERSIZE_EVERY == OVERSIZE_EVERY - 1:
            out.append(("oversize", b'{"jsonrpc":"2.0","id":1,"x":"' + b"y" * MAX_API_FRAME + b'"}'))
            continue
        kind = rng.choice(sorted(GENERATORS))
        frame = GENERATORS[kind](rng).replace(b"\n", b" ")
        if not frame.strip():
            frame = b"{" + frame  # a blank line is keep-alive noise and gets no answer by design
        out.append((kind, frame))
    return out


class Client:
    """One blocking connection that reads whole lines; `None` from `reply` means the daemon closed it."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(REPLY_TIMEOUT_S)
        self.sock.connect(str(path))
        self.buffer = b""

    def send(self, data: bytes) -> bool:
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    def reply(self) -> dict[str, Any] | None:
        while b"\n" not in self.buffer:
            try:
                chunk = self.sock.recv(1 << 20)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        message = json.loads(line)
        assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", line[:300]
        # The id is the client's to choose and comes back; nothing else of the frame may.
        assert CANARY not in json.dumps(message.get("error")), f"the answer echoes the frame: {line[:300]!r}"
        return message

    def close(self) -> None:
        self.sock.close()


def _frame_id(frame: bytes) -> object:
    try:
        value = json.loads(frame)
    except ValueError:
        return None
    return value.get("id") if isinstance(value, dict) else None


def test_ten_thousand_malformed_frames_each_get_one_answer_and_the_daemon_keeps_serving(
    tmp_path: Path,
) -> None:
    rng = random.Random(SEED)
    body = scripted("m", [{"text": "unused"}], tmp_path) + '[defaults]\nmodel = "m"\n'
    kinds: Counter[str] = Counter()
    answers: Counter[str] = Counter()
    reconnects = 0
    started = time.monotonic()
    with running_daemon(tmp_path, body) as daemon:
        client = Client(daemon.socket)
        try:
            for n, (kind, frame) in enumerate(frames(rng)):
                probe_id = f"probe-{n}"
                probe = json.dumps({"jsonrpc": "2.0", "id": probe_id, "method": "daemon.status"}).encode()
                kinds[kind] += 1
                sent = client.send(frame + b"\n" + probe + b"\n")
                first = client.reply() if sent else None
                assert first is not None, f"frame {n} ({kind}, seed {SEED}) got no answer: {frame[:200]!r}"
                assert first.get("id") in (None, _frame_id(frame)), (n, kind, first)
                assert first.get("id") != probe_id, (n, kind, "the frame was answered by the probe's reply")
                answers["error" if "error" in first else "result"] += 1
                second = client.reply()
                if second is None:
                    # The daemon closed this connection after answering (an oversize frame): a
                    # new connection must be served.
                    client.close()
                    client = Client(daemon.socket)
                    reconnects += 1
                    assert client.send(probe + b"\n")
                    second = client.reply()
                assert second is not None and second.get("id") == probe_id, (n, kind, second)
                assert "result" in second, (n, kind, second)
        finally:
            client.close()
        status = daemon.call("daemon.status")
        assert isinstance(status, dict)
    elapsed = time.monotonic() - started
    assert sum(kinds.values()) == FRAMES
    assert reconnects == kinds["oversize"]
    print(
        f"fuzz: {FRAMES} frames (seed {SEED}) {dict(sorted(kinds.items()))}; answers {dict(answers)}; "
        f"{reconnects} reconnects; {elapsed:.1f}s"
    )
