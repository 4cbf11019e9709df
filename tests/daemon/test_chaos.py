"""Chaos against the real daemon (docs/design.md §17): children that crash, hog, hang, flood or escape.

Each test asserts the outcome docs/design.md §6 promises — one terminal status with the reason recorded,
the ladder rung that ended it, no survivor — and the leak check proves nothing is left behind.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from protocol.api import TranscriptParams, TranscriptRequest
from protocol.result import TerminalStatus as S
from tests.support.daemon import running_daemon, scripted
from tests.support.rogue_daemon import rogue_daemon, signals_used

pytestmark = pytest.mark.processes


def test_a_segfaulting_child_is_crashed_with_the_signal_and_stack_recorded(tmp_path: Path) -> None:
    with running_daemon(tmp_path, rogue_daemon(tmp_path)) as daemon:
        view = daemon.wait(daemon.submit("segfault"))
        assert view.status is S.CRASHED
        assert view.error is not None
        assert view.error.kind == "segfault"
        assert "Fatal Python error: Segmentation fault" in view.error.message  # faulthandler's stack
        assert view.exit_code == 1


def test_a_memory_bomb_is_stopped_by_the_address_space_limit(tmp_path: Path) -> None:
    extra = '[limits]\naddress_space = "1G"\n'
    # Allocating a gigabyte on a loaded machine can keep the child from its pongs for a second:
    # the limit, not the liveness check, is what this test is about.
    with running_daemon(tmp_path, rogue_daemon(tmp_path, extra, missed_pongs=50)) as daemon:
        view = daemon.wait(daemon.submit("memory"))
        assert view.status is S.CRASHED
        assert view.error is not None
        assert "MemoryError" in view.error.message
        for proc in psutil.Process(daemon.pid).children(recursive=True):
            assert proc.memory_info().rss < 1100 * 1024 * 1024


def test_a_cpu_spinning_child_is_stopped_by_the_cpu_time_limit(tmp_path: Path) -> None:
    with running_daemon(tmp_path, rogue_daemon(tmp_path, "[limits]\ncpu_seconds = 1\n")) as daemon:
        view = daemon.wait(daemon.submit("cpu-spin"), timeout_s=30)
        assert view.status is S.CRASHED
        assert view.error is not None
        assert view.error.kind == "cpu_limit"


def test_a_child_ignoring_cancel_and_sigterm_is_killed_at_the_sigkill_rung(tmp_path: Path) -> None:
    with running_daemon(tmp_path, rogue_daemon(tmp_path)) as daemon:
        task_id = daemon.submit("ignore-cancel")
        daemon.wait_ready([task_id])
        started = time.monotonic()
        daemon.call("task.cancel", {"task_id": task_id})
        view = daemon.wait(task_id)
        assert view.status is S.CANCELLED
        assert signals_used(daemon, task_id) == ["cancel", "sigterm", "sigkill"]
        assert time.monotonic() - started < 0.5 + 0.5 + 2 + 2  # within the ladder's bound


def test_a_child_that_closes_its_channel_but_keeps_running_is_laddered(tmp_path: Path) -> None:
    with running_daemon(tmp_path, rogue_daemon(tmp_path)) as daemon:
        task_id = daemon.submit("close-stdout")
        view = daemon.wait(task_id)
        assert view.status is S.CRASHED
        assert view.error is not None
        assert view.error.kind == "stuck"
        assert signals_used(daemon, task_id)[0] == "sigterm"  # it cannot read a cancel


def test_a_child_flooding_without_newlines_is_killed_at_the_cap_with_bounded_memory(tmp_path: Path) -> None:
    with running_daemon(tmp_path, rogue_daemon(tmp_path)) as daemon:
        rss_before = psutil.Process(daemon.pid).memory_info().rss
        view = daemon.wait(daemon.submit("flood"))
        assert view.status is S.CRASHED
        assert view.error is not None
        assert view.error.kind == "protocol"
        growth = psutil.Process(daemon.pid).memory_info().rss - rss_before
        assert growth < 48 * 1024 * 1024, f"daemon grew {growth / 2**20:.0f} MiB"


def test_a_wedged_child_that_stops_answering_pings_is_stuck_and_killed(tmp_path: Path) -> None:
    with running_daemon(tmp_path, rogue_daemon(tmp_path)) as daemon:
        task_id = daemon.submit("silent")
        view = daemon.wait(task_id)
        assert view.status is S.CRASHED
        assert view.error is not None
        assert view.error.kind == "stuck"
        stuck = [line for line in daemon.log() if line.get("event") == "subagent.stuck"]
        assert stuck[0]["verdict"] == "unresponsive"


def test_an_orphaned_grandchild_is_swept_by_the_subreaper(tmp_path: Path) -> None:
    with running_daemon(tmp_path, rogue_daemon(tmp_path)) as daemon:
        view = daemon.wait(daemon.submit("spawn-orphan"))
        assert view.status is S.CRASHED
        deadline = time.monotonic() + 10
        while any(p.name() == "sleep" for p in psutil.Process(daemon.pid).children(recursive=True)):
            assert time.monotonic() < deadline, "the orphan was not swept"
            time.sleep(0.05)
        orphan_kills = [line for line in daemon.log() if line.get("reason") == "orphan"]
        assert orphan_kills


def test_a_sigstopped_real_subagent_is_detected_as_stuck_and_killed(tmp_path: Path) -> None:
    body = scripted("slow", [{"text": "zzz", "delay_s": 60}], tmp_path) + '[defaults]\nmodel = "slow"\n'
    with running_daemon(tmp_path, body) as daemon:
        task_id = daemon.submit("think slowly")
        pid = daemon.wait_ready([task_id])[task_id]
        os.kill(pid, signal.SIGSTOP)
        view = daemon.wait(task_id)
        assert view.status is S.CRASHED
        assert view.error is not None
        assert view.error.kind == "stuck"
        assert signals_used(daemon, task_id)[-1] == "sigkill"  # a stopped process only dies by SIGKILL
        # Stopped is not starved: no thread of it can run, so it gets no grace.
        (stuck,) = [line for line in daemon.log() if line.get("event") == "subagent.stuck"]
        assert (stuck["verdict"], stuck["cpu"]) == ("unresponsive", "halted")
        assert not [line for line in daemon.log() if line.get("event") == "subagent.starved"]


def test_a_child_that_never_reads_its_channel_is_killed_when_a_write_times_out(tmp_path: Path) -> None:
    never_read = rogue_daemon(tmp_path).replace('rogue_child.py"]', 'rogue_child.py", "--never-read"]')
    with running_daemon(tmp_path, never_read) as daemon:
        # Bigger than a pipe buffer: the spawn frame cannot be written until the child reads.
        task_id = daemon.submit("x" * 300_000)
        view = daemon.wait(task_id, timeout_s=30)
        assert view.status is S.CRASHED
        assert view.error is not None
        assert view.error.kind == "protocol"
        assert signals_used(daemon, task_id)[0] == "sigterm"


def test_bad_event_batches_are_faults_that_lose_nothing_already_journaled(tmp_path: Path) -> None:
    with running_daemon(tmp_path, rogue_daemon(tmp_path)) as daemon:
        task_id = daemon.submit("bad-batch")
        view = daemon.wait(task_id)
        # Two faults stay under the detector's threshold: the child goes on and completes.
        assert view.status is S.COMPLETED, view.error
        assert view.result == '{"seq": 1}'  # the step was answered once it was journaled
        with daemon.client() as client:
            page = client.call(TranscriptRequest(params=TranscriptParams(task_id=task_id)))
        assert [s.item.kind for s in page.steps] == ["reply"]
        steps = [e["fields"] for e in daemon.events(task_id) if e["event"] == "loop.step"]
        assert steps == [
            {"handle": "0", "step": 1, "before": True},
            {"handle": "0", "step": 2, "after": True},
        ]
        faults = [
            str(line.get("line"))
            for line in daemon.log()
            if line.get("event") == "log.stderr" and "bad control frame" in str(line.get("line"))
        ]
        assert faults == [
            "[agentd] bad control frame: shape: 1 validation error(s); first: too_long at ev/batch.params.events",
            "[agentd] bad control frame: shape: 1 validation error(s); first: dict_type at ev/batch.params.events.0.fields",
        ]
