"""The API server answers well-formed requests in order and survives everything else."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from agentd.api.limits import ApiLimits
from agentd.api.server import ConnectionTable
from protocol.api import TOO_MANY_CONNECTIONS, UNAVAILABLE
from protocol.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR
from tests.api.harness import RawConnection, Server, request_line, serving

pytestmark = pytest.mark.anyio

SUBMIT = {"spec": {"instruction": "summarise the logs"}}
CANARY = "CANARY-7f3a"


async def test_submit_then_get_returns_the_task_owned_by_the_caller(server: Server) -> None:
    async with await RawConnection.open(server.path) as conn:
        submitted = await conn.request("task.submit", SUBMIT, request_id=7)
        assert submitted["id"] == 7
        task_id = submitted["result"]["task_id"]
        got = await conn.request("task.get", {"task_id": task_id}, request_id="req-2")
    assert got["id"] == "req-2"
    assert got["result"]["owner_uid"] == os.geteuid()
    assert got["result"]["instruction"] == "summarise the logs"


async def test_the_backend_sees_the_callers_uid_gid_and_pid(server: Server) -> None:
    async with await RawConnection.open(server.path) as conn:
        await conn.request("daemon.status")
    (caller,) = server.backend.callers
    assert (caller.uid, caller.gid, caller.pid) == (os.geteuid(), os.getegid(), os.getpid())
    assert caller.is_admin  # the daemon's own uid


async def test_pipelined_requests_are_answered_in_order(server: Server) -> None:
    async with await RawConnection.open(server.path) as conn:
        await conn.send(b"".join(request_line("task.submit", SUBMIT, request_id=i) for i in range(20)))
        answers = [await conn.receive() for _ in range(20)]
    assert [a["id"] for a in answers] == list(range(20))
    assert [a["result"]["task_id"] for a in answers] == [f"t{i}" for i in range(1, 21)]


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        pytest.param(b"\xff\xfe" + CANARY.encode() + b"\x80", PARSE_ERROR, id="not-utf8"),
        pytest.param(f'{{"{CANARY}": '.encode(), PARSE_ERROR, id="not-json"),
        pytest.param(f'["{CANARY}"]'.encode(), INVALID_REQUEST, id="batch"),
        pytest.param(b'{"jsonrpc":"2.0","method":"daemon.status"}', INVALID_REQUEST, id="no-id"),
        pytest.param(
            f'{{"jsonrpc":"1.0","id":1,"method":"{CANARY}"}}'.encode(), INVALID_REQUEST, id="version"
        ),
        pytest.param(
            f'{{"jsonrpc":"2.0","id":1,"method":"x","{CANARY}":1}}'.encode(), INVALID_REQUEST, id="extra"
        ),
        pytest.param(
            f'{{"jsonrpc":"2.0","id":1,"method":"{CANARY}"}}'.encode(), METHOD_NOT_FOUND, id="method"
        ),
        pytest.param(
            f'{{"jsonrpc":"2.0","id":1,"method":"task.get","params":{{"{CANARY}":1}}}}'.encode(),
            INVALID_PARAMS,
            id="extra-param",
        ),
        pytest.param(
            f'{{"jsonrpc":"2.0","id":1,"method":"task.submit","params":{{"spec":{{"instruction":"x","labels":{{"{CANARY}":7}}}}}}}}'.encode(),
            INVALID_PARAMS,
            id="nested-param",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"method":"daemon.status","params":{"x":1}}',
            INVALID_PARAMS,
            id="no-params",
        ),
    ],
)
async def test_a_bad_frame_gets_its_error_code_without_its_content_and_the_connection_goes_on(
    server: Server, frame: bytes, code: int
) -> None:
    async with await RawConnection.open(server.path) as conn:
        await conn.send(frame + b"\n")
        error = await conn.receive()
        assert error["error"]["code"] == code
        assert error["error"]["data"] == {"retryable": False}
        assert error["id"] in (None, 1)
        assert CANARY not in conn.raw_received.decode()
        ok = await conn.request("daemon.status", request_id=2)
        assert ok["result"]["journal_ok"] is True


async def test_an_invalid_params_message_names_the_field_and_fault(server: Server) -> None:
    async with await RawConnection.open(server.path) as conn:
        error = await conn.request("task.list", {"limit": 0})
    assert error["error"]["message"] == "invalid params: 1 error(s); first: greater_than_equal at limit"


async def test_an_api_error_carries_its_code_and_retryable_flag(server: Server) -> None:
    async with await RawConnection.open(server.path) as conn:
        error = await conn.request("task.submit", {"spec": {"instruction": "unavailable now"}})
        missing = await conn.request("task.get", {"task_id": "nope"}, request_id=2)
    assert error["error"] == {
        "code": UNAVAILABLE,
        "message": "the journal could not commit",
        "data": {"retryable": True},
    }
    assert missing["error"]["message"] == "no task 'nope'"


async def test_a_backend_crash_is_an_internal_error_that_reveals_nothing_and_serving_goes_on(
    server: Server,
) -> None:
    async with await RawConnection.open(server.path) as conn:
        error = await conn.request("task.submit", {"spec": {"instruction": f"explode {CANARY}"}})
        assert error["error"]["code"] == INTERNAL_ERROR
        assert CANARY not in json.dumps(error)
        assert "result" in await conn.request("task.submit", SUBMIT, request_id=2)


async def test_blank_lines_are_ignored(server: Server) -> None:
    async with await RawConnection.open(server.path) as conn:
        await conn.send(b"\n\r\n  \n")
        answer = await conn.request("daemon.status", request_id=3)
    assert answer["id"] == 3


async def test_an_oversize_frame_gets_an_error_and_the_connection_is_closed(socket_path: Path) -> None:
    async with (
        serving(socket_path, limits=ApiLimits(max_frame=1024)) as server,
        await RawConnection.open(server.path) as conn,
    ):
        # A valid frame first: it is answered before the oversize one ends the connection.
        await conn.send(request_line("daemon.status") + b'{"jsonrpc":"2.0","id":2,"x":"' + b"a" * 5000)
        messages = await conn.receive_until_closed()
    assert "result" in messages[0]
    assert messages[1]["error"]["code"] == INVALID_REQUEST
    assert "exceeds 1024 bytes" in messages[1]["error"]["message"]


async def test_too_many_invalid_frames_in_a_row_close_the_connection(socket_path: Path) -> None:
    async with (
        serving(socket_path, limits=ApiLimits(max_consecutive_faults=5)) as server,
        await RawConnection.open(server.path) as conn,
    ):
        await conn.send(b"nonsense\n" * 4 + request_line("daemon.status") + b"nonsense\n" * 10)
        messages = await conn.receive_until_closed()
    # Four faults, a good request resets the count, then five more faults and the farewell.
    assert [m.get("error", {}).get("code") for m in messages] == [PARSE_ERROR] * 4 + [None] + [
        PARSE_ERROR
    ] * 5 + [INVALID_REQUEST]
    assert "in a row" in messages[-1]["error"]["message"]


async def test_a_half_closed_client_still_gets_its_answers(server: Server) -> None:
    async with await RawConnection.open(server.path) as conn:
        await conn.send(request_line("task.submit", SUBMIT) + request_line("daemon.status", request_id=2))
        await conn.send_eof()
        messages = await conn.receive_until_closed()
    assert [m["id"] for m in messages] == [1, 2]


async def test_an_unterminated_last_frame_is_answered_at_end_of_stream(server: Server) -> None:
    async with await RawConnection.open(server.path) as conn:
        await conn.send(request_line("daemon.status").rstrip(b"\n"))
        await conn.send_eof()
        messages = await conn.receive_until_closed()
    assert [m["id"] for m in messages] == [1]


async def test_connections_over_the_per_uid_cap_are_refused_with_too_many_connections(
    socket_path: Path,
) -> None:
    async with serving(socket_path, limits=ApiLimits(max_connections_per_uid=2)) as server:
        first = await RawConnection.open(server.path)
        second = await RawConnection.open(server.path)
        for conn in (first, second):
            assert "result" in await conn.request("daemon.status")
        async with await RawConnection.open(server.path) as third:
            (refusal,) = await third.receive_until_closed()
        assert refusal["id"] is None
        assert refusal["error"]["code"] == TOO_MANY_CONNECTIONS
        assert refusal["error"]["data"] == {"retryable": True}
        await first.aclose()
        # The slot is released once the server sees the close; retry until it has (bounded).
        with anyio.fail_after(5):
            while True:
                async with await RawConnection.open(server.path) as retry:
                    answer = await retry.request("daemon.status")
                if "result" in answer:
                    break
        await second.aclose()


def test_connections_over_the_global_cap_are_refused_except_an_admins() -> None:
    table = ConnectionTable(per_uid=2, total=3)
    assert [table.admit(1000), table.admit(1001), table.admit(1002)] == [None, None, None]
    assert table.admit(1003) == "too many connections (limit 3)"
    # The operator is held to the per-uid cap only, so other users cannot lock them out.
    assert [table.admit(0, admin=True), table.admit(0, admin=True)] == [None, None]
    assert table.admit(0, admin=True) == "too many connections for uid 0 (limit 2)"
    for uid in (1000, 0, 0):
        table.release(uid)
    assert table.admit(1003) is None


async def test_the_daemons_own_uid_is_served_past_the_global_cap(socket_path: Path) -> None:
    # The tests run as the daemon's uid: an admin, held to its per-uid cap only.
    async with (
        serving(socket_path, limits=ApiLimits(max_connections=1)) as server,
        await RawConnection.open(server.path) as first,
        await RawConnection.open(server.path) as second,
    ):
        assert "result" in await first.request("daemon.status")
        assert "result" in await second.request("daemon.status")


async def test_a_slowloris_connection_is_closed_at_the_frame_deadline_while_others_are_served(
    socket_path: Path,
) -> None:
    async with (
        serving(socket_path, limits=ApiLimits(frame_deadline_s=0.5)) as server,
        await RawConnection.open(server.path) as slow,
    ):
        await slow.send(b'{"jsonrpc":"2.0","id":1,"met')
        async with await RawConnection.open(server.path) as normal:
            for i in range(5):
                answer = await normal.request("task.submit", SUBMIT, request_id=i)
                assert "result" in answer
        messages = await slow.receive_until_closed()
    assert [m["error"]["code"] for m in messages] == [INVALID_REQUEST]
    assert "not completed within 0.5s" in messages[0]["error"]["message"]


async def test_a_frame_trickled_in_pieces_is_still_bound_by_one_deadline(socket_path: Path) -> None:
    async with (
        serving(socket_path, limits=ApiLimits(frame_deadline_s=0.5)) as server,
        await RawConnection.open(server.path) as slow,
    ):
        # Byte by byte, each well inside the deadline: progress does not extend it.
        with anyio.fail_after(5):
            for byte in b'{"jsonrpc":"2.0","id":1,"method":"daemon.status"':
                try:
                    await slow.send(bytes([byte]))
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    break
                await anyio.sleep(0.05)  # the trickle rate is the point of this test
        messages = await slow.receive_until_closed()
    assert messages
    assert messages[-1]["error"]["code"] == INVALID_REQUEST


async def test_an_idle_connection_is_closed_after_the_idle_timeout(socket_path: Path) -> None:
    async with (
        serving(socket_path, limits=ApiLimits(idle_timeout_s=0.3)) as server,
        await RawConnection.open(server.path) as conn,
    ):
        assert "result" in await conn.request("daemon.status")
        assert await conn.receive_until_closed() == []


async def test_a_long_request_is_not_cut_by_the_idle_timeout(socket_path: Path) -> None:
    async with (
        serving(socket_path, limits=ApiLimits(idle_timeout_s=0.2, frame_deadline_s=0.2)) as server,
        await RawConnection.open(server.path) as conn,
    ):
        submitted = await conn.request("task.submit", SUBMIT)
        task_id = submitted["result"]["task_id"]
        await conn.send(request_line("task.wait", {"task_id": task_id}, request_id=2))
        # Elapsed time is what is under test: several idle timeouts pass while the wait is in flight.
        await anyio.sleep(0.7)
        server.backend.finish(task_id)
        answer = await conn.receive()
    assert answer["id"] == 2
    assert answer["result"]["state"] == "terminal"


async def test_a_result_over_the_response_cap_is_refused_with_advice(socket_path: Path) -> None:
    async with (
        serving(socket_path, limits=ApiLimits(max_response_bytes=1000)) as server,
        await RawConnection.open(server.path) as conn,
    ):
        for i in range(10):
            await conn.request("task.submit", SUBMIT, request_id=i)
        error = await conn.request("task.list", {}, request_id="list")
        small = await conn.request("task.list", {"limit": 1}, request_id="small")
    assert error["error"]["code"] == INVALID_PARAMS
    assert "over the 1000-byte cap" in error["error"]["message"]
    assert len(small["result"]) == 1


async def test_serving_many_connections_leaves_no_descriptor_behind(
    socket_path: Path, no_leaks: None
) -> None:
    async with serving(socket_path, limits=ApiLimits(max_connections_per_uid=8)) as server:
        conns = [await RawConnection.open(server.path) for _ in range(12)]
        answers = [await conn.receive_or_eof() if i >= 8 else None for i, conn in enumerate(conns)]
        for conn in conns[:8]:
            assert "result" in await conn.request("daemon.status")
        for conn in conns:
            await conn.aclose()
    assert all(a is not None and a["error"]["code"] == TOO_MANY_CONNECTIONS for a in answers[8:])


async def test_after_stop_accepting_new_clients_wait_in_the_backlog_while_open_ones_are_served(
    socket_path: Path,
) -> None:
    stop = anyio.Event()
    async with (
        serving(socket_path, stop_accepting=stop) as server,
        await RawConnection.open(server.path) as old,
    ):
        assert "result" in await old.request("task.submit", SUBMIT)
        stop.set()
        with anyio.fail_after(5):
            await server.stopped_accepting.wait()
        async with await RawConnection.open(server.path) as new:  # connect() lands in the backlog
            await new.send(request_line("daemon.status"))
            with anyio.move_on_after(0.5) as waited:
                await new.receive(timeout_s=5)
            assert waited.cancelled_caught, "a draining server must not accept new clients"
        reply = await old.request("task.list", {}, request_id=2)
        assert "result" in reply
