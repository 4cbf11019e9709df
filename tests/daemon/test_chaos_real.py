"""Chaos with the real subagent: the faults of test_chaos.py committed by `python -m subagent` itself.

Each daemon is started with `AGENTD_TEST_FAULT` in its environment (`subagent/faults.py`): its
subagents — forked from the zygote, or exec'd before it is warm — connect their real stdio MCP
server, then commit the fault. Each test asserts the recorded outcome and that the subagent and
its MCP server are gone; the leak check proves nothing else survived.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import psutil
import pytest

from protocol.environment import TEST_FAULT_ENV
from protocol.result import TerminalStatus as S
from tests.support.daemon import FAST_SUPERVISION, Daemon, lean_mcp, running_daemon, scripted
from tests.support.rogue_daemon import signals_used
from tests.support.spinners import busy_cpus

pytestmark = pytest.mark.processes

# The fault fires once the MCP server is connected, before the first model call; a task whose
# fault returns (`flood-stdout`) then plays this script.
TURNS: list[dict[str, object]] = [
    {"tool_calls": [{"name": "demo__add", "arguments": {"a": 2, "b": 3}}]},
    {"text": "sum {last_tool_result}"},
]


@contextmanager
def faulty_daemon(tmp_path: Path, fault: str, extra: str = "", supervision: str = "") -> Iterator[Daemon]:
    body = (
        scripted("m", TURNS, tmp_path)
        + lean_mcp()
        + '[defaults]\nmodel = "m"\nmcp = ["demo"]\n'
        + extra
        + (supervision or FAST_SUPERVISION)
    )
    with running_daemon(tmp_path, body, env={TEST_FAULT_ENV: fault}) as daemon:
        # Forked from the warm zygote, as in production: an exec'd child spends its first second
        # importing with no loop running, which a 1 s `loop_stall_s` would already call wedged.
        daemon.wait_log("proc.ready", process="zygote", timeout_s=60)
        yield daemon


def real_subagent(daemon: Daemon, task_id: str) -> tuple[psutil.Process, list[psutil.Process]]:
    """The task's running subagent — proven to be the real one — and its MCP server processes."""
    pid = daemon.wait_ready([task_id])[task_id]
    proc = psutil.Process(pid)
    assert proc.name() == "agentd-subagent"
    argv = proc.cmdline()
    assert argv[-2:] == ["-m", "subagent.zygote"], argv  # forked from the zygote
    deadline = time.monotonic() + 30
    while not (servers := [p for p in proc.children() if "mcp_lean.py" in " ".join(p.cmdline())]):
        assert time.monotonic() < deadline, "the subagent never started its MCP server"
        time.sleep(0.02)
    return proc, servers


def assert_gone(procs: list[psutil.Process], timeout_s: float = 10.0) -> None:
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"survivors: {[(p.pid, p.name()) for p in alive]}"


def test_a_real_subagent_that_segfaults_is_crashed_with_its_stack(tmp_path: Path) -> None:
    with faulty_daemon(tmp_path, "segfault") as daemon:
        task_id = daemon.submit("crash")
        view = daemon.wait(task_id)
        assert view.status is S.CRASHED
        assert view.error is not None
        assert view.error.kind == "segfault"
        assert "Fatal Python error: Segmentation fault" in view.error.message
        assert "subagent/faults.py" in view.error.message  # the real subagent's own frames
        assert "subagent/run.py" in view.error.message
        assert view.exit_code == 1


def test_a_real_subagent_memory_bomb_is_stopped_by_the_address_space_limit(tmp_path: Path) -> None:
    with faulty_daemon(tmp_path, "memory", '[limits]\naddress_space = "1G"\n') as daemon:
        task_id = daemon.submit("allocate")
        proc, servers = real_subagent(daemon, task_id)
        view = daemon.wait(task_id)
        assert view.status is S.CRASHED
        assert view.error is not None
        assert view.error.kind == "internal"  # the subagent's top-level handler reported it
        assert view.error.message.startswith("MemoryError in the subagent")
        assert_gone([proc, *servers])
        for child in psutil.Process(daemon.pid).children(recursive=True):
            assert child.memory_info().rss < 1100 * 1024 * 1024


def test_a_real_subagent_flooding_its_channel_is_killed_at_the_cap_with_bounded_memory(
    tmp_path: Path,
) -> None:
    # Its pongs drown in the flood too: with pings 5 s apart the 16 MiB cap, not three missed
    # pongs, is what ends it, however slowly a loaded machine reads those 16 MiB.
    slow_pings = FAST_SUPERVISION.replace("ping_interval_s = 0.2", "ping_interval_s = 5")
    with faulty_daemon(tmp_path, "flood-channel", supervision=slow_pings) as daemon:
        rss_before = psutil.Process(daemon.pid).memory_info().rss
        task_id = daemon.submit("flood")
        proc, servers = real_subagent(daemon, task_id)
        view = daemon.wait(task_id)
        assert view.status is S.CRASHED
        assert view.error is not None
        assert view.error.kind == "protocol"
        assert_gone([proc, *servers])
        growth = psutil.Process(daemon.pid).memory_info().rss - rss_before
        print(f"daemon RSS growth: {growth / 2**20:.1f} MiB")  # a figure for docs/testing.md (-s)
        assert growth < 48 * 1024 * 1024, f"daemon grew {growth / 2**20:.0f} MiB"


def test_a_real_subagent_flooding_stdout_still_completes_and_the_daemon_stays_small(tmp_path: Path) -> None:
    with faulty_daemon(tmp_path, "flood-stdout") as daemon:
        rss_before = psutil.Process(daemon.pid).memory_info().rss
        view = daemon.wait(daemon.submit("print a lot"), timeout_s=90)
        # fd 1 is stderr since boot: 32 MiB without a newline never reach the control channel.
        assert view.status is S.COMPLETED, view.error
        assert view.result == "sum 5"
        growth = psutil.Process(daemon.pid).memory_info().rss - rss_before
        print(f"daemon RSS growth: {growth / 2**20:.1f} MiB")  # a figure for docs/testing.md (-s)
        assert growth < 48 * 1024 * 1024, f"daemon grew {growth / 2**20:.0f} MiB"
        relayed = [str(line["line"]) for line in daemon.log() if line.get("event") == "log.stderr"]
        assert any("dropped]" in line for line in relayed)  # the over-long line was capped, not kept
        assert all(len(line) <= 8192 for line in relayed)


def test_a_real_subagent_ignoring_cancel_and_sigterm_dies_at_the_sigkill_rung(tmp_path: Path) -> None:
    with faulty_daemon(tmp_path, "ignore-sigterm") as daemon:
        task_id = daemon.submit("hold on")
        proc, servers = real_subagent(daemon, task_id)
        deadline = time.monotonic() + 30
        while "ignore-sigterm" not in _signal_dispositions(proc):
            assert time.monotonic() < deadline, "the fault was never armed"
            time.sleep(0.02)
        started = time.monotonic()
        daemon.call("task.cancel", {"task_id": task_id})
        view = daemon.wait(task_id)
        assert view.status is S.CANCELLED
        assert signals_used(daemon, task_id) == ["cancel", "sigterm", "sigkill"]
        assert time.monotonic() - started < 0.5 + 0.5 + 2 + 2  # within the ladder's bound
        assert_gone([proc, *servers])  # its MCP server too (PDEATHSIG: it is in its own session)


@pytest.mark.parametrize(
    "cpus",
    [
        "idle",
        # Each ping wakes the child's control thread, which at nice 19 then waits for a taken CPU:
        # the scheduler is read before a check's ping goes out, so that wait is not taken for
        # starvation (with the default 60 s grace this test would time out).
        pytest.param("taken", marks=pytest.mark.alone),  # takes every CPU for seconds
    ],
)
def test_a_real_subagent_with_a_wedged_loop_is_found_by_loop_age_and_laddered(
    tmp_path: Path, cpus: str
) -> None:
    # Detector B: the control thread answers every ping, but the loop_age_ms it reports grows.
    supervision = FAST_SUPERVISION + "loop_stall_s = 1\n"
    with (
        faulty_daemon(tmp_path, "wedge-loop", supervision=supervision) as daemon,
        busy_cpus() if cpus == "taken" else nullcontext(),
    ):
        task_id = daemon.submit("wedge")
        proc, servers = real_subagent(daemon, task_id)
        view = daemon.wait(task_id, timeout_s=30)
        assert view.status is S.CRASHED
        assert view.error is not None
        assert view.error.kind == "stuck"
        (stuck,) = [line for line in daemon.log() if line.get("event") == "subagent.stuck"]
        assert stuck["verdict"] == "wedged"  # not "unresponsive": the pongs kept coming
        assert stuck["cpu"] == "blocked"  # its loop sleeps: neither running nor kept from a CPU
        assert not [line for line in daemon.log() if line.get("event") == "subagent.starved"]
        assert isinstance(stuck["loop_age_ms"], int)
        assert stuck["loop_age_ms"] > 1000
        # A stuck child could not act on a cancel: the ladder starts at SIGTERM, which ends it.
        assert signals_used(daemon, task_id) == ["sigterm"]
        assert_gone([proc, *servers])


def _signal_dispositions(proc: psutil.Process) -> str:
    """'ignore-sigterm' once the process ignores SIGTERM (SigIgn in /proc/<pid>/status)."""
    with open(f"/proc/{proc.pid}/status") as status:
        for line in status:
            if line.startswith("SigIgn:"):
                ignored = int(line.split()[1], 16)
                return "ignore-sigterm" if ignored & (1 << (15 - 1)) else ""
    return ""
