"""Fork requests to the zygote are pipelined: many in flight, replies matched by id.

The zygote here is played by the test on the other end of a real SOCK_SEQPACKET pair, speaking
`protocol.zygote`: it can hold every request before answering any (which a spawner doing one round
trip at a time could never get past), stop answering, or answer out of turn. The "forked" pids are
real `sleep` processes of the test, so the spawner's `adopt` (pidfd, prlimit, start time) runs as
in the daemon. A spawner that cannot fork falls back to exec — here `sleep` as well.
"""

from __future__ import annotations

import array
import contextlib
import os
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest

from agentd.spawning import zygote_spawner
from agentd.spawning.spawner import ExecSpawner, SpawnedProcess, SpawnRequest
from agentd.spawning.zygote_spawner import ZygoteSpawner
from protocol.framing import decode
from protocol.zygote import TO_ZYGOTE_ADAPTER, Fork, Forked, ForkFailed, encode

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

SLEEP = [shutil.which("sleep") or "/bin/sleep", "30"]


class FakeZygote:
    """The test's end of the socket: reads fork requests, answers with pids of real processes."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.procs: list[subprocess.Popen[bytes]] = []

    def receive(self) -> Fork:
        fds = array.array("i")
        data, ancillary, _, _ = self.sock.recvmsg(65536, socket.CMSG_SPACE(3 * fds.itemsize))
        for _level, _kind, payload in ancillary:
            fds.frombytes(payload)
        for fd in fds:  # the child's pipe ends; a real zygote hands them to the child
            os.close(fd)
        assert len(fds) == 3
        request = decode(data, TO_ZYGOTE_ADAPTER, max_line=65536)
        assert isinstance(request, Fork)
        return request

    def fork(self, request: Fork) -> None:
        proc = subprocess.Popen(SLEEP)
        self.procs.append(proc)
        self.sock.send(encode(Forked(id=request.id, pid=proc.pid)))

    def close(self) -> None:
        self.sock.close()
        for proc in self.procs:
            proc.kill()
            proc.wait()


@contextlib.asynccontextmanager
async def warm_spawner(reply_timeout_s: float = 2.0) -> AsyncIterator[tuple[ZygoteSpawner, FakeZygote]]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setblocking(False)
    spawner = ZygoteSpawner(fallback=ExecSpawner(argv=SLEEP))
    fake = FakeZygote(theirs)
    # What `serve` does once the zygote reported ready, minus starting a real one.
    spawner._sock, spawner._ready = ours, True
    spawner._set_state("warm")
    try:
        async with anyio.create_task_group() as tg:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(zygote_spawner, "REPLY_TIMEOUT_S", reply_timeout_s)
                tg.start_soon(spawner._read_replies, ours)
                yield spawner, fake
            tg.cancel_scope.cancel()
    finally:
        spawner._sock = None
        ours.close()
        fake.close()


@contextlib.contextmanager
def owned(spawned: list[SpawnedProcess]) -> Iterator[None]:
    """Kill, reap and close what the spawner handed out, whatever the test asserted."""
    try:
        yield
    finally:
        for proc in spawned:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, 9)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(proc.pid, 0)
            proc.close_fds()


def request(n: int) -> SpawnRequest:
    return SpawnRequest(task_id=f"t{n}", run_id=f"r{n}", handle="0")


async def test_requests_are_pipelined_and_replies_matched_by_id() -> None:
    spawned: list[SpawnedProcess] = []
    async with warm_spawner() as (spawner, fake):
        with owned(spawned):

            async def one(n: int) -> None:
                spawned.append(await spawner.spawn_child(request(n)))

            async with anyio.create_task_group() as tg:
                for n in range(8):
                    tg.start_soon(one, n)
                # All eight requests arrive before the zygote answers the first.
                requests = [await anyio.to_thread.run_sync(fake.receive) for _ in range(8)]
                assert spawner.spawning  # forks in flight: the orphan sweep must wait
                for forked in requests:
                    fake.fork(forked)
            assert not spawner.spawning
            assert sorted(p.pid for p in spawned) == sorted(p.pid for p in fake.procs)
            assert {p.via for p in spawned} == {"zygote"}
            assert spawner.state == "warm"


async def test_a_zygote_that_stops_answering_breaks_and_every_waiting_spawn_execs() -> None:
    spawned: list[SpawnedProcess] = []
    async with warm_spawner(reply_timeout_s=0.3) as (spawner, _silent):

        async def one(n: int) -> None:
            spawned.append(await spawner.spawn_child(request(n)))

        with owned(spawned), anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for n in range(4):
                    tg.start_soon(one, n)
        assert [p.via for p in spawned] == ["exec"] * 4
        assert spawner.state == "failed"
        assert not spawner.spawning


async def test_a_refused_or_out_of_turn_reply_falls_back_to_exec() -> None:
    spawned: list[SpawnedProcess] = []
    async with warm_spawner() as (spawner, fake):
        with owned(spawned):

            async def zygote() -> None:
                first = await anyio.to_thread.run_sync(fake.receive)
                fake.sock.send(encode(ForkFailed(id=first.id, error="OSError: no memory")))

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(zygote)
                    spawned.append(await spawner.spawn_child(request(0)))
            assert spawned[0].via == "exec"
            assert spawner.state == "failed"  # a refusal is a broken zygote: the daemon restarts it
    spawned.clear()
    async with warm_spawner() as (spawner, fake):
        with owned(spawned):

            async def confused() -> None:
                first = await anyio.to_thread.run_sync(fake.receive)
                fake.sock.send(encode(Forked(id=first.id + 7, pid=os.getpid())))

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(confused)
                    spawned.append(await spawner.spawn_child(request(0)))
            assert spawned[0].via == "exec"
            assert spawner.state == "failed"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
