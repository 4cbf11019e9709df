"""The watcher started the way the daemon starts it: `ExecSpawner`, limits, its own session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from agentd.spawning.spawner import ExecSpawner, SpawnRequest
from processes.linux import reap_nowait
from protocol.control import Cancel, CancelParams
from protocol.framing import FrameError, LineSplitter, decode, encode
from protocol.spawn import REVEAL_SECRETS
from protocol.watch import WATCH_UP_ADAPTER, ResourceChanged, Watch, WatchState, WatchTarget, WatchUp
from tests.support.watcher import REPO, fixture_argv, watch_payload

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


async def _frames_until(fd: int, splitter: LineSplitter, frames: list[WatchUp], count: int) -> None:
    while len([f for f in frames if isinstance(f, ResourceChanged)]) < count:
        await anyio.wait_readable(fd)
        chunk = os.read(fd, 1 << 16)
        assert chunk, f"the watcher closed its channel; frames: {frames}"
        for line in splitter.feed(chunk):
            frame = decode(line, WATCH_UP_ADAPTER)
            assert not isinstance(frame, FrameError), frame
            frames.append(frame)


async def test_a_watcher_spawned_by_the_exec_spawner_arms_and_ends_on_cancel(tmp_path: Path) -> None:
    request = SpawnRequest(
        task_id="w-files",
        run_id="r-watch",
        handle="0",
        extra_env={"PYTHONPATH": str(REPO)},
        argv=[sys.executable, "-m", "subagent.watch"],
    )
    child = ExecSpawner().spawn(request)
    reaped = False
    try:
        payload = watch_payload(
            fixture_argv("2026", "--state", str(tmp_path)), [WatchTarget(trigger="t", uri="watch://item/0")]
        )
        os.write(child.stdin_fd, encode(Watch(params=payload), context=REVEAL_SECRETS))
        frames: list[WatchUp] = []
        with anyio.fail_after(90):
            await _frames_until(child.stdout_fd, LineSplitter(), frames, 1)
        states = [f.params for f in frames if isinstance(f, WatchState)]
        assert states[-1].state == "armed" and states[-1].subscribed == ["watch://item/0"]
        os.write(child.stdin_fd, encode(Cancel(params=CancelParams(reason="reload"))))
        with anyio.fail_after(30):
            await anyio.wait_readable(child.pidfd)
        status = reap_nowait(child.pidfd)
        reaped = status is not None
        assert status is not None and status.si_status == 0
    finally:
        if not reaped and reap_nowait(child.pidfd) is None:
            os.kill(child.pid, 9)
            with anyio.fail_after(10):
                await anyio.wait_readable(child.pidfd)
            reap_nowait(child.pidfd)
        child.close_fds()
