"""`task.events` streams `task.event` notifications, then answers; a departed client stops it."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from agentd.api.limits import ApiLimits
from tests.api.harness import RawConnection, Server, request_line, serving

pytestmark = pytest.mark.anyio

SUBMIT = {"spec": {"instruction": "watch this"}}


async def _submit(conn: RawConnection) -> str:
    answer = await conn.request("task.submit", SUBMIT, request_id=0)
    task_id = answer["result"]["task_id"]
    assert isinstance(task_id, str)
    return task_id


async def test_events_without_follow_streams_what_exists_then_answers_with_the_task(server: Server) -> None:
    async with await RawConnection.open(server.path) as conn:
        task_id = await _submit(conn)
        server.backend.add_event(task_id, "task.started")
        await conn.send(request_line("task.events", {"task_id": task_id}))
        first, second, answer = [await conn.receive() for _ in range(3)]
    assert first == {
        "jsonrpc": "2.0",
        "method": "task.event",
        "params": {"seq": 1, "ts": 0.0, "event": "task.submitted", "fields": {}},
    }
    assert second["params"]["event"] == "task.started"
    assert answer["id"] == 1
    assert answer["result"]["task_id"] == task_id


async def test_events_after_seq_skips_what_the_client_has_seen(server: Server) -> None:
    async with await RawConnection.open(server.path) as conn:
        task_id = await _submit(conn)
        server.backend.add_event(task_id, "task.started")
        await conn.send(request_line("task.events", {"task_id": task_id, "after_seq": 1}))
        event, answer = await conn.receive(), await conn.receive()
    assert event["params"]["seq"] == 2
    assert "result" in answer


async def test_follow_streams_each_event_as_it_happens_and_answers_when_the_task_is_terminal(
    server: Server,
) -> None:
    async with await RawConnection.open(server.path) as conn:
        task_id = await _submit(conn)
        await conn.send(request_line("task.events", {"task_id": task_id, "follow": True}))
        assert (await conn.receive())["params"]["event"] == "task.submitted"
        server.backend.add_event(task_id, "task.started")
        assert (await conn.receive())["params"]["event"] == "task.started"
        server.backend.finish(task_id)
        terminal, answer = await conn.receive(), await conn.receive()
        # The connection is still usable afterwards.
        status = await conn.request("daemon.status", request_id=2)
    assert terminal["params"] == {
        "seq": 3,
        "ts": 0.0,
        "event": "task.terminal",
        "fields": {"status": "completed"},
    }
    assert answer["result"]["state"] == "terminal"
    assert "result" in status
    assert server.backend.iterators_closed == 1


async def test_a_follower_that_hangs_up_closes_the_backend_iterator_promptly(server: Server) -> None:
    async with await RawConnection.open(server.path) as owner:
        task_id = await _submit(owner)
        follower = await RawConnection.open(server.path)
        await follower.send(request_line("task.events", {"task_id": task_id, "follow": True}))
        assert (await follower.receive())["params"]["seq"] == 1
        await follower.aclose()
        with anyio.fail_after(5):
            await server.backend.iterator_closed.wait()
        # The task itself is untouched and the server serves on.
        answer = await owner.request("task.get", {"task_id": task_id}, request_id=2)
    assert answer["result"]["state"] == "queued"
    assert (server.backend.iterators_opened, server.backend.iterators_closed) == (1, 1)


async def test_a_waiter_that_hangs_up_stops_waiting(server: Server) -> None:
    async with await RawConnection.open(server.path) as owner:
        task_id = await _submit(owner)
        waiter = await RawConnection.open(server.path)
        await waiter.send(request_line("task.wait", {"task_id": task_id}))
        with anyio.fail_after(5):
            await server.backend.waiting.wait()
        await waiter.aclose()
        with anyio.fail_after(5):
            await server.backend.wait_ended.wait()


async def test_a_client_that_never_reads_is_dropped_after_the_write_deadline(socket_path: Path) -> None:
    async with (
        serving(socket_path, limits=ApiLimits(write_deadline_s=0.3)) as server,
        await RawConnection.open(server.path) as owner,
    ):
        task_id = await _submit(owner)
        # Far more than any socket buffer holds: the writer must block on the silent reader.
        for _ in range(200):
            server.backend.add_event(task_id, "log.stderr", line="x" * 64 * 1024)
        silent = await RawConnection.open(server.path)
        await silent.send(request_line("task.events", {"task_id": task_id, "follow": True}))
        with anyio.fail_after(10):
            await server.backend.iterator_closed.wait()
        assert "result" in await owner.request("daemon.status", request_id=2)
        await silent.aclose()


async def test_watch_sends_the_named_tasks_first_then_each_change_of_state(server: Server) -> None:
    async with await RawConnection.open(server.path) as owner:
        task_id = await _submit(owner)
        watcher = await RawConnection.open(server.path)
        await watcher.send(request_line("task.watch", {"task_ids": [task_id, "t_missing"]}))
        first = await watcher.receive()
        server.backend.finish(task_id)
        ended = await watcher.receive()
        await watcher.aclose()
    assert (first["method"], first["params"]["task_id"], first["params"]["state"]) == (
        "task.changed",
        task_id,
        "queued",
    )
    assert (ended["method"], ended["params"]["state"], ended["params"]["status"]) == (
        "task.changed",
        "terminal",
        "completed",
    )
