"""Kill -9 of the daemon, round after round, with real work running (docs/design.md §8).

Each round submits tasks that run on the real subagent — the built-in scripted model, a real
stdio MCP server per subagent (`mcp_lean.py`), a nested child through `subagent_spawn` — kills the
daemon with SIGKILL at a random point (a seeded choice of event to wait for, plus jitter), checks
the journal the crash left with `PRAGMA integrity_check`, restarts the daemon on the same state
directory and checks: every acknowledged task is there; recovery handled each interrupted task
once, requeued exactly when its retry policy allows; no process of the killed generation — the
zygote, subagents, nested children, MCP servers — survives. At the end every task has ended
exactly once. `AGENTD_CHAOS_SEED` replays a run; the seed is printed first, the totals last.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from agentd.errors import ApiClientError
from protocol.environment import RUN_MARKER_ENV
from protocol.result import TerminalStatus as S
from tests.support.daemon import FIXTURES, Daemon, scripted, start_daemon, write_config
from tests.support.leaks import kill_all

pytestmark = pytest.mark.processes

SPAWNERS = ("zygote", "exec")
TASKS_PER_ROUND = 2
KILL_POINT_TIMEOUT_S = 10.0
ZYGOTE_READY_TIMEOUT_S = 30.0
ORPHAN_GRACE_S = 5.0

ADD = {"name": "lean__add", "arguments": {"a": 2, "b": 3}}
ROOT_TURNS: list[dict[str, object]] = [
    {"tool_calls": [ADD], "delay_s": 0.05},
    {"tool_calls": [{"name": "subagent_spawn", "arguments": {"instruction": "child: add again"}}]},
    {"text": "root done: {last_tool_result}"},
]
ROLES = [{"match": "^child:", "turns": [{"tool_calls": [ADD], "delay_s": 0.1}, {"text": "child done"}]}]

# Where a round's kill lands: right after the n-th of one of these log events of the generation
# (with these fields) — during intake, a root booting or connecting its MCP server, a nested child
# being spawned or running, or a task just completed (recovery's own `crashed` ends do not count).
KILL_POINTS: tuple[tuple[str, dict[str, object]], ...] = (
    ("task.submitted", {}),
    ("subagent.ready", {"handle": "0"}),
    ("mcp.connect", {}),
    ("subagent.spawn", {"handle": "0.1"}),
    ("subagent.ready", {"handle": "0.1"}),
    ("task.terminal", {"status": "completed"}),
)
# One round per kill point under each spawner (12), in a seeded order: every combination is
# covered on every run, where 20 random draws left some out and repeated others.
# `AGENTD_CHAOS_ROUNDS` runs more (the plan again, reshuffled) or fewer.
ROUNDS = int(os.environ.get("AGENTD_CHAOS_ROUNDS", str(len(KILL_POINTS) * len(SPAWNERS))))


def round_plan(rng: random.Random, rounds: int) -> list[tuple[str, tuple[str, dict[str, object]]]]:
    """Each round's (spawner, kill point): every combination once per `len(KILL_POINTS) *
    len(SPAWNERS)` rounds, shuffled."""
    plan: list[tuple[str, tuple[str, dict[str, object]]]] = []
    while len(plan) < rounds:
        cycle = [(spawner, point) for spawner in SPAWNERS for point in KILL_POINTS]
        rng.shuffle(cycle)
        plan += cycle
    return plan[:rounds]


@dataclass
class Totals:
    rounds: int = 0
    acked: int = 0
    lost: int = 0
    doubled: int = 0
    orphans: int = 0
    killed_subagents: int = 0
    killed_mcp_servers: int = 0
    killed_nested: int = 0
    requeued: int = 0
    crashed_by_restart: int = 0
    kill_points_reached: int = 0
    zygote_rounds: int = 0
    never_ended: list[str] = field(default_factory=list)
    strays: list[str] = field(default_factory=list)  # what each orphan was, for the failure message


@dataclass
class Ledger:
    """What the test knows independently of the daemon: each acknowledged task and its policy."""

    max_attempts: dict[str, int] = field(default_factory=dict)
    # Every spec submitted, acknowledged or not: a submit cut by the kill may still have committed.
    attempts_by_instruction: dict[str, int] = field(default_factory=dict)
    restarts: Counter[str] = field(default_factory=Counter)


def config_body(tmp_path: Path, spawner: str) -> str:
    return (
        scripted("work", ROOT_TURNS, tmp_path, roles=ROLES)
        + f'[mcp.lean]\ncommand = ["{sys.executable}", "{FIXTURES / "mcp_lean.py"}"]\ntrust = []\n'
        + '[defaults]\nmodel = "work"\nmcp = ["lean"]\n'
        # Default liveness knobs: a subagent exec'd while the machine is busy must not look stuck.
        + f'[supervision]\nspawner = "{spawner}"\ncancel_grace_s = 0.5\nterm_grace_s = 0.5\nkill_reap_s = 2\n'
    )


def generation_log(daemon: Daemon, offset: int) -> list[dict[str, object]]:
    lines = []
    with open(daemon.log_path, "rb") as f:
        f.seek(offset)
        for raw in f.read().splitlines():
            try:
                lines.append(json.loads(raw))
            except ValueError:
                continue
    return lines


def descendants(pid: int) -> dict[tuple[int, float], str]:
    """Every live descendant of `pid` as (pid, start time) → its kind."""
    found: dict[tuple[int, float], str] = {}
    try:
        procs = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return found
    for proc in procs:
        try:
            name, argv = proc.name(), " ".join(proc.cmdline())
            key = (proc.pid, proc.create_time())
        except psutil.Error:
            continue
        kind = "mcp" if "mcp_lean.py" in argv else name
        if name == "agentd-subagent":
            try:
                marker = proc.environ().get(RUN_MARKER_ENV, "/0")
            except psutil.Error:
                continue
            kind = "subagent" if marker.endswith("/0") else "nested"
        found[key] = kind
    return found


def survivors(old: dict[tuple[int, float], str], new_daemon: Daemon) -> list[psutil.Process]:
    """Processes of the killed generation still alive after a bounded grace: its own descendants
    from the snapshot, and anything now reparented to this test process outside the new daemon."""
    deadline = time.monotonic() + ORPHAN_GRACE_S
    while True:
        alive: list[psutil.Process] = []
        for pid, started in old:
            try:
                proc = psutil.Process(pid)
                if proc.create_time() == started and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.Error:
                continue
        current = {pid for pid, _ in descendants(new_daemon.pid)} | {new_daemon.pid}
        for proc in psutil.Process().children(recursive=True):
            try:
                if proc.pid not in current and proc.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(proc.pid, os.WNOHANG)  # an orphan reparented to us and dead: reap it
                elif proc.pid not in current and proc.pid not in {p.pid for p in alive}:
                    alive.append(proc)
            except (psutil.Error, ChildProcessError):
                continue
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def describe(proc: psutil.Process) -> str:
    try:
        return f"pid {proc.pid} ppid {proc.ppid()} {proc.status()} {' '.join(proc.cmdline())[:200]}"
    except psutil.Error as exc:
        return f"pid {proc.pid} ({type(exc).__name__})"


def integrity(db: Path) -> str:
    with sqlite3.connect(db, timeout=10) as conn:
        (verdict,) = conn.execute("PRAGMA integrity_check").fetchone()
    conn.close()
    return str(verdict)


class Submitter(threading.Thread):
    """Submits this round's tasks one after another until done or the daemon dies mid-submit."""

    def __init__(self, daemon: Daemon, round_no: int, rng: random.Random, ledger: Ledger) -> None:
        super().__init__(daemon=True)
        self.daemon_ = daemon
        self.specs = [(f"r{round_no}-{i}: add", rng.choice((1, 2))) for i in range(TASKS_PER_ROUND)]
        ledger.attempts_by_instruction.update(self.specs)
        self.ledger = ledger
        self.acked: list[str] = []

    def run(self) -> None:
        for instruction, attempts in self.specs:
            try:
                task_id = self.daemon_.submit(instruction, retry={"max_attempts": attempts})
            except (ApiClientError, OSError):
                return  # the kill landed during this submit: it was never acknowledged
            self.ledger.max_attempts[task_id] = attempts
            self.acked.append(task_id)


def wait_event(daemon: Daemon, offset: int, event: str, nth: int, timeout_s: float, **match: object) -> bool:
    """Wait (bounded) until this generation logged `event` (with `match`) `nth` times."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = generation_log(daemon, offset)
        if (
            sum(1 for x in lines if x.get("event") == event and all(x.get(k) == v for k, v in match.items()))
            >= nth
        ):
            return True
        time.sleep(0.01)
    return False


@pytest.mark.timeout(600)
def test_kill_9_rounds_lose_no_acked_task_end_each_once_and_leave_no_survivor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = int(os.environ.get("AGENTD_CHAOS_SEED", random.randrange(2**32)))
    with capsys.disabled():
        print(f"\nkill -9 rounds: AGENTD_CHAOS_SEED={seed}", flush=True)
    rng = random.Random(seed)
    t0 = time.monotonic()
    ledger, totals = Ledger(), Totals()
    db = tmp_path / "state" / "agentd.db"
    offset = 0
    plan = round_plan(rng, ROUNDS)
    spawner = plan[0][0]
    config = write_config(tmp_path, config_body(tmp_path, spawner))
    daemon = start_daemon(tmp_path, config)
    try:
        for round_no in range(ROUNDS):
            # A zygote generation forks its subagents from the warm zygote, as in production (the
            # requeued ones of the last round may already run, exec'd, while it warms up); an exec
            # generation starts each from a fresh interpreter, so kills often land during a boot.
            t_round = time.monotonic()
            if spawner == "zygote":
                wait_event(daemon, offset, "proc.ready", 1, ZYGOTE_READY_TIMEOUT_S, process="zygote")
                totals.zygote_rounds += 1
            t_zygote = time.monotonic()
            submitter = Submitter(daemon, round_no, rng, ledger)
            (event, match), nth = plan[round_no][1], rng.randint(1, TASKS_PER_ROUND)
            jitter_s = rng.uniform(0, 0.2)
            submitter.start()
            totals.kill_points_reached += wait_event(
                daemon, offset, event, nth, KILL_POINT_TIMEOUT_S, **match
            )
            time.sleep(jitter_s)  # the chaos itself, not ordering: where after the event the kill lands
            t_kill = time.monotonic()
            old = descendants(daemon.pid)
            daemon.proc.send_signal(signal.SIGKILL)
            daemon.proc.wait(timeout=10)
            submitter.join(timeout=30)
            assert not submitter.is_alive()
            totals.acked += len(submitter.acked)
            # A subagent forked from the zygote shows the zygote's environment in /proc, without
            # its own run marker: the generation's log says which pids were nested children.
            nested = {
                line.get("pid")
                for line in generation_log(daemon, offset)
                if line.get("event") == "subagent.spawn" and line.get("handle") not in (None, "0")
            }
            kinds = Counter(
                "nested" if kind == "subagent" and pid in nested else kind for (pid, _), kind in old.items()
            )
            totals.killed_subagents += kinds["subagent"] + kinds["nested"]
            totals.killed_nested += kinds["nested"]
            totals.killed_mcp_servers += kinds["mcp"]

            verdict = integrity(db)
            assert verdict == "ok", f"round {round_no}: journal integrity_check: {verdict}"

            offset = daemon.log_path.stat().st_size
            t_restart = time.monotonic()
            spawner = plan[round_no + 1][0] if round_no + 1 < ROUNDS else rng.choice(SPAWNERS)
            config = write_config(tmp_path, config_body(tmp_path, spawner))
            daemon = start_daemon(tmp_path, config)
            t_up = time.monotonic()
            totals.rounds += 1
            if os.environ.get("AGENTD_CHAOS_VERBOSE"):
                with capsys.disabled():
                    print(
                        f"round {round_no}: {event} {match} #{nth} t={time.monotonic() - t0:.1f}s "
                        f"zygote {t_zygote - t_round:.1f}s, kill point {t_kill - t_zygote:.1f}s, "
                        f"checks {t_restart - t_kill:.1f}s, restart {t_up - t_restart:.1f}s; {totals}"
                    )

            strays = survivors(old, daemon)
            totals.orphans += len(strays)
            totals.strays += [
                f"round {round_no} ({plan[round_no][0]}, {event}): {describe(proc)}" for proc in strays
            ]
            kill_all(strays)

            listed = daemon.call("task.list", {"limit": 1000})
            assert isinstance(listed, list)
            present = {str(task["task_id"]) for task in listed if isinstance(task, dict)}
            totals.lost += len(set(ledger.max_attempts) - present)
            recovered = Counter(
                str(line["task_id"])
                for line in generation_log(daemon, offset)
                if line.get("event") == "subagent.restart"
            )
            totals.doubled += sum(1 for n in recovered.values() if n > 1)
            for line in generation_log(daemon, offset):
                if line.get("event") != "subagent.restart":
                    continue
                task_id, attempts = str(line["task_id"]), int(line["attempts"])  # type: ignore[call-overload]
                ledger.restarts[task_id] += 1
                if task_id not in ledger.max_attempts:  # committed, but the kill cut the reply
                    view = daemon.call("task.get", {"task_id": task_id})
                    assert isinstance(view, dict)
                    ledger.max_attempts[task_id] = ledger.attempts_by_instruction[str(view["instruction"])]
                allowed = ledger.max_attempts[task_id]
                expected = "requeued" if attempts + 1 < allowed else "crashed"
                assert line["outcome"] == expected, f"round {round_no}: {line} (max_attempts {allowed})"
                totals.requeued += expected == "requeued"
                totals.crashed_by_restart += expected == "crashed"

        for task_id, allowed in ledger.max_attempts.items():
            view = daemon.wait(task_id, timeout_s=60)
            if view.status is None:  # acknowledged, present, and never run to an end: lost all the same
                totals.lost += 1
                totals.never_ended.append(task_id)
                continue
            if view.status is S.CRASHED:
                assert view.error is not None
                assert view.error.kind == "supervisor_restart", view.error
                assert ledger.restarts[task_id] >= 1
            else:
                assert view.status is S.COMPLETED, (task_id, view.status, view.error)
                assert '"result": "child done"' in str(view.result), view.result  # the nested child's
            assert ledger.restarts[task_id] <= allowed
        terminal_lines = Counter(
            str(line["task_id"]) for line in generation_log(daemon, 0) if line.get("event") == "task.terminal"
        )
        totals.doubled += sum(1 for task_id in ledger.max_attempts if terminal_lines[task_id] > 1)
    finally:
        if daemon.proc.poll() is None:
            assert daemon.stop(timeout_s=40) == 0
        with capsys.disabled():  # the totals are the last line, pass or fail
            print(
                f"kill -9 rounds: seed={seed} rounds={totals.rounds} acked={totals.acked} "
                f"lost={totals.lost} doubled={totals.doubled} orphans={totals.orphans} (killed in flight: "
                f"{totals.killed_subagents} subagents, {totals.killed_nested} nested, "
                f"{totals.killed_mcp_servers} MCP servers; {totals.kill_points_reached} kill points reached; "
                f"recovery requeued {totals.requeued}, crashed {totals.crashed_by_restart}; "
                f"{totals.zygote_rounds} rounds forked from the zygote, the rest exec'd; "
                f"{time.monotonic() - t0:.0f} s)",
                flush=True,
            )
    assert totals.rounds == ROUNDS
    assert totals.killed_subagents > 0 and totals.killed_mcp_servers > 0 and totals.killed_nested > 0, totals
    assert (totals.lost, totals.doubled, totals.orphans) == (0, 0, 0), totals
