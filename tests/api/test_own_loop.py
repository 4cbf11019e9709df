"""The API on a loop of its own: reads answered there while the daemon's loop is busy, every other
method handed to the daemon's loop in order, the supervisor's figures never older than a write the
reader heard of, and a bounded stop that leaves no thread behind."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from agentd.api.client import ApiClient
from agentd.api.live_figures import LiveFigures
from agentd.api.loop_bridge import THREAD_NAME, LoopBridge, serve_on_own_loop
from agentd.api.read_side import LIVE_MAX_AGE_S, LiveMirror
from protocol.api import (
    CancelParams,
    CancelRequest,
    GetRequest,
    SubmitParams,
    SubmitRequest,
    TaskRef,
    TaskSpec,
)
from tests.api.harness import RawConnection, request_line, serving

pytestmark = pytest.mark.anyio

WAIT_S = 10.0
SPEC = TaskSpec(instruction="summarise the logs")


@pytest.fixture(autouse=True)
def api_loop() -> bool:
    """Each test here names the loop it serves on: once each."""
    return True


def _api_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


async def test_a_read_is_answered_while_the_daemons_loop_is_blocked_and_a_write_waits_for_it(
    socket_path: Path,
) -> None:
    async with serving(socket_path, own_loop=True) as server:
        with ApiClient(server.path, timeout_s=WAIT_S) as api:
            submitted = await anyio.to_thread.run_sync(
                api.call, SubmitRequest(params=SubmitParams(spec=SPEC))
            )
        read = threading.Event()
        writing = threading.Event()
        written = threading.Event()
        views = []

        def client() -> None:
            with ApiClient(server.path, timeout_s=WAIT_S) as api:
                views.append(api.call(GetRequest(params=TaskRef(task_id=submitted.task_id))))
                read.set()
                writing.set()
                views.append(api.call(CancelRequest(params=CancelParams(task_id=submitted.task_id))))
                written.set()

        thread = threading.Thread(target=client)
        thread.start()
        try:
            # This is the daemon's loop, and it is blocked: nothing scheduled on it runs until
            # these waits return, so only the API's own loop can answer.
            assert read.wait(WAIT_S), "task.get was not answered while the daemon's loop was busy"
            assert writing.wait(WAIT_S)
            assert not written.wait(0.2), "task.cancel was answered without the daemon's loop"
        finally:
            await anyio.to_thread.run_sync(thread.join, WAIT_S)
        assert written.is_set()
        assert [v.state for v in views] == ["queued", "terminal"]


async def test_a_write_and_the_read_pipelined_after_it_are_answered_in_order(socket_path: Path) -> None:
    async with (
        serving(socket_path, own_loop=True) as server,
        await RawConnection.open(server.path) as conn,
    ):
        task_id = (await conn.request("task.submit", {"spec": {"instruction": "x"}}))["result"]["task_id"]
        await conn.send(
            request_line("task.cancel", {"task_id": task_id}, request_id=2)
            + request_line("task.get", {"task_id": task_id}, request_id=3)
        )
        cancelled, got = await conn.receive(), await conn.receive()
    assert (cancelled["id"], got["id"]) == (2, 3)
    assert got["result"]["state"] == "terminal" and got["result"]["status"] == "cancelled"


async def test_a_stream_handed_to_the_daemons_loop_writes_its_frames_from_the_apis(socket_path: Path) -> None:
    async with (
        serving(socket_path, own_loop=True) as server,
        await RawConnection.open(server.path) as conn,
    ):
        task_id = (await conn.request("task.submit", {"spec": {"instruction": "x"}}))["result"]["task_id"]
        server.backend.add_event(task_id, "turn.started", n=1)
        server.backend.finish(task_id)
        await conn.send(request_line("task.events", {"task_id": task_id, "follow": True}, request_id=2))
        frames = [await conn.receive()]
        while "id" not in frames[-1]:
            frames.append(await conn.receive())
    assert any(f.get("params", {}).get("event") == "turn.started" for f in frames[:-1])
    assert frames[-1]["id"] == 2 and frames[-1]["result"]["state"] == "terminal"


async def test_stopping_the_api_loop_joins_its_thread() -> None:
    started = anyio.Event()

    async def serve(bridge: LoopBridge) -> None:
        await bridge.on_main(_set, started)
        await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        tg.start_soon(serve_on_own_loop, serve)
        with anyio.fail_after(WAIT_S):
            await started.wait()
        assert len(_api_threads()) == 1
        tg.cancel_scope.cancel()
    assert _api_threads() == []


async def test_an_error_on_the_api_loop_is_raised_on_the_daemons() -> None:
    async def serve(bridge: LoopBridge) -> None:
        del bridge
        raise OSError("the listener broke")

    with anyio.fail_after(WAIT_S), pytest.raises(OSError, match="the listener broke"):
        await serve_on_own_loop(serve)
    assert _api_threads() == []


async def _set(event: anyio.Event) -> None:
    event.set()


class _Supervisor:
    """Figures as the daemon's loop takes them: each taking counts one more running task."""

    def __init__(self) -> None:
        self.taken = 0

    def take(self) -> LiveFigures:
        self.taken += 1
        return LiveFigures(taken_at=anyio.current_time(), running=self.taken)


async def test_a_read_after_a_handed_off_request_waits_for_figures_taken_after_it() -> None:
    supervisor = _Supervisor()
    seen: list[int] = []

    async def serve(bridge: LoopBridge) -> None:
        mirror = LiveMirror(bridge, supervisor.take, LiveFigures(taken_at=anyio.current_time()))
        seen.append((await mirror.figures()).running)  # fresh: answered without the daemon's loop
        mirror.handed_off()
        seen.append((await mirror.figures()).running)

    with anyio.fail_after(WAIT_S):
        await serve_on_own_loop(serve)
    assert seen == [0, 1]
    assert supervisor.taken == 1


async def test_old_figures_are_answered_at_once_and_renewed_on_the_daemons_loop() -> None:
    supervisor = _Supervisor()
    seen: list[int] = []

    async def serve(bridge: LoopBridge) -> None:
        old = LiveFigures(taken_at=anyio.current_time() - 2 * LIVE_MAX_AGE_S)
        mirror = LiveMirror(bridge, supervisor.take, old)
        async with anyio.create_task_group() as tg:
            tg.start_soon(mirror.serve)
            seen.append((await mirror.figures()).running)  # old, but not waited for
            while (figures := await mirror.figures()).running == 0:
                await anyio.lowlevel.checkpoint()
            seen.append(figures.running)
            tg.cancel_scope.cancel()

    with anyio.fail_after(WAIT_S):
        await serve_on_own_loop(serve)
    assert seen == [0, 1]
