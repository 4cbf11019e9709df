"""The throughput and scale benches run end to end in their smoke mode, so they cannot rot.

Each is run as an operator would (`python bench/X.py --smoke`), against real daemons, subagents
and MCP servers; smoke mode uses a small N and asserts no timing target. What is checked is that
the bench completes, writes its JSON with the figures the README quotes, and leaves no process.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.browser import needs_browser
from tests.support.leaks import wait_no_descendants

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 600


def run_bench(script: str, out: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), "--smoke", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, (
        f"{script} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    assert not wait_no_descendants(timeout_s=10)
    results = json.loads(out.read_text())
    assert isinstance(results, dict)
    assert results["mode"] == "smoke"
    return results


def test_loop_cpu_bench_measures_the_subagent_and_the_bare_loop(tmp_path: Path) -> None:
    results = run_bench("loop_cpu.py", tmp_path / "loop_cpu.json")
    for key in ("subagent_ms_per_turn", "bare_ms_per_turn"):
        runs = results[key]
        assert isinstance(runs, list) and len(runs) == 1
        assert runs[0]["loop_ms"] > 0 and runs[0]["server_ms"] > 0  # both loops called the MCP server
    assert isinstance(results["ratio_of_medians"], float)


def test_throughput_bench_completes_every_task(tmp_path: Path) -> None:
    results = run_bench("throughput.py", tmp_path / "throughput.json")
    rows = results["rows"]
    assert isinstance(rows, list) and len(rows) == 1
    assert rows[0]["tasks"] == 20 and rows[0]["per_s"] > 0  # the bench raises unless all completed
    # The daemon's loop thread is part of the daemon; the submitting clients are not.
    assert 0 < rows[0]["daemon_loop_cpu_ms_per_task"] <= rows[0]["daemon_cpu_ms_per_task"]
    assert rows[0]["client_cpu_ms_per_task"] > 0
    assert rows[0]["left_after_drain"] == 0
    assert results["left"] == 0
    floor = results["fork_floor"]
    assert isinstance(floor, dict) and set(floor["forks"]) == {"exit", "anyio"}


def test_fork_floor_bench_forks_the_zygote_image_and_times_page_faults(tmp_path: Path) -> None:
    results = run_bench("fork_floor.py", tmp_path / "fork_floor.json")
    faults = results["fault_us_per_page"]
    assert isinstance(faults, dict) and faults["first_touch"] > 0 and faults["again_at_once"] > 0
    forks = results["forks"]
    assert isinstance(forks, dict)
    for kind in ("exit", "anyio"):
        row = forks[kind]
        assert row["per_s"] > 0 and row["child_cpu_ms"] > 0 and row["child_minor_faults"] > 0
    # An empty event loop is more than nothing: the child that runs one does more work.
    assert forks["anyio"]["child_minor_faults"] > forks["exit"]["child_minor_faults"]


def test_ping_bench_measures_the_supervisor_and_the_bare_loop(tmp_path: Path) -> None:
    results = run_bench("ping.py", tmp_path / "ping.json")
    bare, supervised = results["bare"], results["supervisor"]
    assert isinstance(bare, list) and isinstance(supervised, list)
    assert bare[0]["count"] > 0 and supervised[0]["rtt"]["count"] > 0
    assert results["left"] == 0


@pytest.mark.alone  # five live subagents at once: their memory figures need no company
def test_child_memory_bench_reads_every_live_subagent(tmp_path: Path) -> None:
    results = run_bench("child_memory.py", tmp_path / "child_memory.json")
    assert results["children"] == 5
    uss = results["uss_mib"]
    assert isinstance(uss, dict) and 0 < uss["median"] < 64
    assert results["left"] == 0


def test_web_bench_draws_the_big_task_and_times_live_events_and_the_api(tmp_path: Path) -> None:
    needs_browser()
    results = run_bench("web.py", tmp_path / "web.json")
    first_render = results["first_render"]
    assert isinstance(first_render, dict) and first_render["count"] == 2 and first_render["p50_ms"] > 0
    for key in ("event_delay", "api_alone", "api_with_pages"):
        summary = results[key]
        assert isinstance(summary, dict) and summary["count"] > 0, key
    assert results["pages"] == 2 and results["left"] == 0


def test_cli_latency_bench_times_status_list_and_submit(tmp_path: Path) -> None:
    results = run_bench("cli_latency.py", tmp_path / "cli_latency.json")
    rows = results["rows"]
    assert isinstance(rows, list)
    commands = [row["command"] for row in rows]
    timed = ["python -c pass", "agentd status TASK", "agentd list", "agentd submit … --json"]
    assert [command for command in commands if command in timed] == timed
    assert set(commands) <= {*timed, "status, console script"}
    assert all(row["runs"] == 3 and row["wall_median_s"] > 0 and row["cpu_median_s"] > 0 for row in rows)


def test_startup_cpu_bench_reads_the_daemon_its_zygote_and_a_client_command(tmp_path: Path) -> None:
    results = run_bench("startup_cpu.py", tmp_path / "startup_cpu.json")
    rows = results["rows"]
    assert isinstance(rows, list)
    assert [row["process"] for row in rows] == ["daemon_s", "zygote_s", "list_s"]
    # Each is a whole interpreter's start: well above nothing, well below a minute of CPU.
    assert all(row["runs"] == 1 and 0.01 < row["cpu_median_s"] < 60 for row in rows), rows
    assert results["strays"] == 0


def test_first_request_hops_bench_times_every_hop_of_every_task(tmp_path: Path) -> None:
    results = run_bench("first_request_hops.py", tmp_path / "first_request_hops.json")
    hops = results["hops_ms"]
    assert isinstance(hops, dict)
    assert list(hops) == [
        "ack",
        "task.submitted",
        "subagent.spawn",
        "task.started",
        "subagent.ready",
        "loop.start",
        "first model request",
    ]
    assert all(row["n"] == 3 for row in hops.values())
    # The daemon's lines in the order a spawn passes them: each hop's median no earlier than the
    # one before it (log lines carry whole milliseconds, hence the 1 ms of slack). The model's
    # request races the daemon's reading of `loop.start`, so it is left out.
    medians = [row["p50"] for row in list(hops.values())[1:-1]]
    assert all(later >= earlier - 1 for earlier, later in itertools.pairwise(medians))
    assert results["left"] == 0


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("perf") is None, reason="reads page frames and runs perf: root only"
)
def test_cow_pages_bench_attributes_a_parked_childs_pages_and_faults() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "cow_pages.py"), "--smoke", "--faults"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "copy, identical now" in done.stdout
    assert "what each wrote to" in done.stdout
    assert not wait_no_descendants(timeout_s=10)
