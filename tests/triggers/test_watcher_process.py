"""A real resource watcher (`python -m subagent.watch` over a fixture server) supervised by
`WatcherProcess` on a served `WatchClock`: the clock checks it with every subagent, so a watcher
that stops answering pings is found by the clock's task, not by a loop of the watcher's own."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from agentd.spawning.spawner import ExecSpawner, SpawnRequest
from agentd.supervision.liveness import ExitInfo, LivenessPolicy
from agentd.supervision.watch_clock import WatchClock
from agentd.triggers.watcher import WatcherProcess
from processes.ladder import LadderPolicy
from protocol import control
from protocol.watch import CatalogueReport, ResourceChanged, WatchState, WatchTarget
from tests.support.watcher import REPO, fixture_argv, watch_payload

pytestmark = [pytest.mark.anyio, pytest.mark.processes]
ARMS_S = 90.0  # the watcher imports `mcp` before it arms: seconds on a loaded machine
WAIT_S = 30.0


class Recorder:
    """What the watcher reports, and which task reported a verdict."""

    def __init__(self) -> None:
        self.armed = anyio.Event()
        self.stuck = anyio.Event()
        self.verdicts: list[tuple[str, str | None]] = []

    def on_state(self, watcher: WatcherProcess, frame: WatchState) -> None:
        if frame.params.state == "armed":
            self.armed.set()

    def on_resource(self, watcher: WatcherProcess, frame: ResourceChanged) -> None:
        pass

    def on_catalogue(self, watcher: WatcherProcess, frame: CatalogueReport) -> None:
        pass

    def on_event(self, watcher: WatcherProcess, params: control.EventParams) -> None:
        pass

    def on_stderr(self, watcher: WatcherProcess, line: str) -> None:
        pass

    def on_stuck(self, watcher: WatcherProcess, verdict: str) -> None:
        self.verdicts.append((verdict, anyio.get_current_task().name))
        self.stuck.set()


async def test_a_watcher_that_stops_answering_pings_is_found_by_the_shared_watch_clock(
    tmp_path: Path,
) -> None:
    request = SpawnRequest(
        task_id="w-files",
        run_id="r-watch",
        handle="0",
        extra_env={"PYTHONPATH": str(REPO)},
        argv=[sys.executable, "-m", "subagent.watch"],
    )
    clock = WatchClock()
    recorder = Recorder()
    watcher = WatcherProcess(
        ExecSpawner().spawn(request),
        "files",
        recorder,
        liveness=LivenessPolicy(ping_interval_s=0.2, missed_pongs=3, ready_timeout_s=ARMS_S),
        ladder=LadderPolicy(cancel_grace_s=0.5, term_grace_s=0.5, kill_reap_s=5.0),
        clock=clock,
    )
    payload = watch_payload(
        fixture_argv("2026", "--state", str(tmp_path)), [WatchTarget(trigger="t", uri="watch://item/0")]
    )
    ended: list[ExitInfo] = []
    reaped = anyio.Event()

    async def supervise() -> None:
        ended.append(await watcher.run(payload))
        reaped.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(clock.serve)
        await anyio.wait_all_tasks_blocked()
        assert clock.serving
        tg.start_soon(supervise)
        with anyio.fail_after(ARMS_S):
            await recorder.armed.wait()
        assert len(clock) == 1  # the clock watches it; it has no liveness task of its own
        # Stopped, it can answer no ping; its session (and the server under it) stay open.
        os.kill(watcher.pid, signal.SIGSTOP)
        with anyio.fail_after(WAIT_S):
            await recorder.stuck.wait()
        with anyio.fail_after(WAIT_S):
            await reaped.wait()
        assert len(clock) == 0
        tg.cancel_scope.cancel()
    assert [verdict for verdict, _ in recorder.verdicts] == ["unresponsive"]
    assert (recorder.verdicts[0][1] or "").endswith("WatchClock.serve")
    assert ended[0].signal == signal.SIGKILL  # a stopped process leaves SIGTERM pending
    assert watcher.stuck_verdict == "unresponsive" and not watcher.stopped_by_us
