"""The daemon evaluates nothing a model wrote: a child's output schema with a
catastrophically backtracking `pattern` never runs on the supervisor's event loop.

Both tests run a real daemon and measure, while the bomb goes off, what a normal client sees:
`daemon.status` and a parallel `task.submit` answer within 50 ms (the median: on the shared
2-core machines these tests run on, under a load of 8 or more, a tenth of the calls can lose the
CPU to other processes for longer; the printed p99 is the figure to watch) and no call takes a
second. A daemon stuck in the regex engine fails both by far: a stalled call counts as its 5 s
bound.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from protocol.result import TerminalStatus as S
from tests.support.daemon import FIXTURES, Daemon, running_daemon, scripted
from tests.support.latency import LatencyProbe, percentile

pytestmark = [pytest.mark.processes, pytest.mark.alone]  # 50 ms bounds

BOUND_S = 0.050
STALL_S = 1.0
# The same bomb the stand-in carries: 2^40 ways to split the a's before the `!` fails the match.
BOMB_SCHEMA = {
    "type": "object",
    "properties": {"s": {"type": "string", "pattern": "^(a|a)+$"}},
    "required": ["s"],
}
BOMB_VALUE = {"s": "a" * 40 + "!"}
FAST = (
    "[supervision]\nping_interval_s = 0.2\nmissed_pongs = 3\ncancel_grace_s = 0.5\nterm_grace_s = 0.5\n"
    "kill_reap_s = 2\neof_grace_s = 0.5\norphan_sweep_interval_s = 0.5\n"
)


def assert_responsive(probe: LatencyProbe, quantile: float = 0.5) -> None:
    print(probe.summary())
    assert not probe.failures, probe.failures
    assert len(probe.pings) >= 10 and probe.submits, probe.summary()
    assert percentile(probe.pings, quantile) < BOUND_S, probe.summary()
    assert percentile(probe.submits, quantile) < BOUND_S, probe.summary()
    assert max(probe.pings + probe.submits) < STALL_S, probe.summary()


def stand_in_daemon(tmp_path: Path) -> str:
    command = f'child_command = ["{sys.executable}", "{FIXTURES / "schema_bomb_child.py"}"]\n'
    return scripted("m", [{"text": "unused"}], tmp_path) + '[defaults]\nmodel = "m"\n' + FAST + command


def test_a_childs_result_against_a_backtracking_schema_does_not_stall_the_daemon(tmp_path: Path) -> None:
    # The stand-in child reports the bomb without checking it, so only the supervisor could run it.
    with running_daemon(
        tmp_path, stand_in_daemon(tmp_path), daemon_lines='max_queued_per_uid = "infinity"\n'
    ) as daemon:
        with LatencyProbe(daemon.socket, instruction="done") as probe:
            task_id = daemon.submit("parent")
            view = daemon.wait(task_id, timeout_s=30)
        assert_responsive(probe)
        assert view.status is S.COMPLETED
        assert isinstance(view.result, dict)
        assert view.result["status"] == "completed"
        assert view.result["result"] == BOMB_VALUE
        # The supervisor passed the distillate on unjudged: checking it is the parent's work.
        assert "schema_valid" not in view.result
        assert all(daemon.wait(t, timeout_s=30).status is S.COMPLETED for t in probe.task_ids)


def test_a_real_child_wedged_by_its_own_schema_is_killed_and_the_task_still_ends(tmp_path: Path) -> None:
    # Real subagents: the child's VERIFY gate runs the bomb against its own answer and wedges its
    # whole process (the regex engine holds the GIL, so its control thread stops answering too).
    # The supervisor notices the missed pongs, kills it, and the parent finishes with what it got.
    roles = [
        {"match": "^child:", "turns": [{"text": json.dumps(BOMB_VALUE)}]},
        {"match": "^probe", "turns": [{"text": "ok"}]},
    ]
    spawn: dict[str, object] = {
        "name": "subagent_spawn",
        "arguments": {"instruction": "child: fill s", "output_schema": BOMB_SCHEMA},
    }
    turns: list[dict[str, object]] = [{"tool_calls": [spawn]}, {"text": "the child said: {last_tool_result}"}]
    body = scripted("tree", turns, tmp_path, roles=roles) + '[defaults]\nmodel = "tree"\n' + FAST
    with running_daemon(tmp_path, body, daemon_lines='max_queued_per_uid = "infinity"\n') as daemon:
        # Forked from the warm zygote, the probe's own tasks cost milliseconds, not a cold start each.
        daemon.wait_log("proc.ready", timeout_s=60, process="zygote")
        with LatencyProbe(daemon.socket, instruction="probe", submit_every=10) as probe:
            task_id = daemon.submit("parent: delegate")
            view = daemon.wait(task_id, timeout_s=60)
        # The wedged child burns one of the machine's two cores until it is killed: the tail
        # measures the machine more than the daemon (still: no call stalls).
        assert_responsive(probe)
        assert view.status is S.COMPLETED, view
        tree = tree_of(daemon, task_id)
        assert tree["0.1"]["status"] == "crashed"
        assert '"status": "crashed"' in str(view.result)
        assert all(daemon.wait(t, timeout_s=60).status is S.COMPLETED for t in probe.task_ids)


def tree_of(daemon: Daemon, task_id: str) -> dict[str, dict[str, object]]:
    tree = daemon.call("task.tree", {"task_id": task_id})
    assert isinstance(tree, list)
    return {str(n["handle"]): n for n in tree}
