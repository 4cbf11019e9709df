"""Nested subagents under one tree budget, end to end: real daemon, real subagent processes.

Every node plays the same scripted endpoint; `roles` pick each node's script by its instruction.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from protocol.result import TerminalStatus as S
from tests.support.daemon import Daemon, running_daemon, scripted
from tests.support.rogue_daemon import rogue_daemon

pytestmark = pytest.mark.processes


def spawn_call(instruction: str, **args: Any) -> dict[str, Any]:
    return {"name": "subagent_spawn", "arguments": {"instruction": instruction, **args}}


def body(tmp_path: Path, turns: list[Any], roles: list[Any], defaults: str = "") -> str:
    return scripted("tree", turns, tmp_path, roles=roles) + f'[defaults]\nmodel = "tree"\n{defaults}'


def nodes(daemon: Daemon, task_id: str) -> dict[str, dict[str, Any]]:
    tree = daemon.call("task.tree", {"task_id": task_id})
    assert isinstance(tree, list)
    return {n["handle"]: n for n in tree}


def refusals(daemon: Daemon) -> list[str]:
    return [
        str(line["refused"])
        for line in daemon.log()
        if line.get("event") == "limit.exceeded" and "refused" in line
    ]


def test_a_three_level_delegation_completes_with_usage_rolled_up_exactly(tmp_path: Path) -> None:
    u = {"usage": {"tokens_in": 100, "tokens_out": 10}}
    roles = [
        {
            "match": "^L1:",
            "turns": [
                {"tool_calls": [spawn_call("L2: leaf work")], **u},
                {"text": "L1 got {last_tool_result}", **u},
            ],
        },
        {"match": "^L2:", "turns": [{"text": "leaf done", **u}]},
    ]
    turns = [
        {"tool_calls": [spawn_call("L1: middle work")], **u},
        {"text": "root got {last_tool_result}", **u},
    ]
    with running_daemon(tmp_path, body(tmp_path, turns, roles)) as daemon:
        task_id = daemon.submit("delegate twice")
        view = daemon.wait(task_id)
        assert view.status is S.COMPLETED
        assert isinstance(view.result, str)
        assert '"status": "completed"' in view.result
        assert "leaf done" in view.result
        tree = nodes(daemon, task_id)
        assert sorted(tree) == ["0", "0.1", "0.1.1"]
        assert [tree[h]["depth"] for h in ("0", "0.1", "0.1.1")] == [0, 1, 2]
        assert {n["status"] for n in tree.values()} == {"completed"}
        # The root's end is committed with the task's: its own two calls, not the tree's five.
        assert tree["0"]["usage"]["tokens_in"] == 2 * 100
        assert view.usage.tokens_in == 5 * 100
        assert view.usage.tokens_out == 5 * 10
        assert view.usage.steps == 5
        assert sum(n["usage"]["tokens_in"] for n in tree.values()) == view.usage.tokens_in
        assert tree["0.1"]["parent"] == "0"
        assert tree["0.1.1"]["parent"] == "0.1"
        shown = daemon.cli("tree", task_id)
        assert shown.returncode == 0
        assert "    0.1.1  completed" in shown.stdout


def test_the_ninth_live_child_and_depth_five_are_refused_by_name(tmp_path: Path) -> None:
    small = {"max_steps": 1, "max_tokens": 1000, "wait": False}
    nine = [spawn_call(f"sleeper {i}", **small) for i in range(9)]
    roles = [
        {"match": "^sleeper", "turns": [{"text": "zzz", "delay_s": 60}]},
        {"match": "^deep", "turns": [{"tool_calls": [spawn_call("deep")]}, {"text": "{last_tool_result}"}]},
    ]
    turns = [{"tool_calls": nine}, {"text": "ninth: {last_tool_result}"}]
    with running_daemon(tmp_path, body(tmp_path, turns, roles)) as daemon:
        view = daemon.wait(daemon.submit("fan out"))
        assert view.status is S.COMPLETED
        assert "live-children cap 8 reached (node 0 has 8 running)" in str(view.result)
        deep = daemon.wait(daemon.submit("deep"), timeout_s=120)
        assert deep.status is S.COMPLETED
        assert "depth cap 4 reached (node 0.1.1.1.1 is at depth 4)" in str(deep.result)
        assert any("depth cap 4" in r for r in refusals(daemon))


def test_a_burst_of_spawns_is_refused_by_the_rate_limit(tmp_path: Path) -> None:
    # The rogue stand-in boots in milliseconds, so it can out-spawn the bucket (burst 8, 2/s);
    # each child it asks for reports at once, so the live-children cap never binds.
    with running_daemon(tmp_path, rogue_daemon(tmp_path)) as daemon:
        task_id = daemon.submit("spawn-burst")
        view = daemon.wait(task_id, timeout_s=60)
        assert view.status is S.COMPLETED
        outcome = json.loads(str(view.result))
        assert outcome["refused"], outcome
        assert all(r.startswith("spawn rate limit: burst 8, refill 2/s") for r in outcome["refused"])
        assert outcome["spawned"] >= 8
        tree = nodes(daemon, task_id)
        assert len(tree) == 1 + outcome["spawned"]
        assert {n["status"] for h, n in tree.items() if h != "0"} == {"completed"}


def test_four_parallel_children_each_overspending_are_cut_at_their_grants_and_never_sink_the_parent(
    tmp_path: Path,
) -> None:
    # The parent has 40,000 tokens and spends 1,000, leaving 39,000. Each of four children asks for
    # 9,000 (and 5 of its 39 steps left) — all four are granted and run at once, holding 36,000
    # and leaving the parent 3,000 —
    # then makes one model call worth 9,700: more than its grant and more than the 3,000 the
    # parent has left. Each is stopped at its grant after that one call; together they overshoot
    # by 2,800, inside what the parent held back, so the parent collects all four and completes.
    grant, spend, parent_tokens, wait_cost = 9_000, 9_700, 40_000, 10
    roles = [
        {
            "match": "^greedy",
            "turns": [
                {
                    "text": "spent",
                    # Long enough that all four are alive at once even when forks are slow.
                    "delay_s": 2,
                    "usage": {"tokens_in": spend, "tokens_out": 0},
                    "tool_calls": [{"name": "note_read", "arguments": {}}],
                },
                {"text": "too late", "delay_s": 60},
            ],
        }
    ]
    turns = [
        {
            "tool_calls": [
                spawn_call(f"greedy {i}", max_tokens=grant, max_steps=5, wait=False) for i in range(4)
            ],
            "usage": {"tokens_in": 1000, "tokens_out": 0},
        },
        *[
            {
                "tool_calls": [{"name": "subagent_wait", "arguments": {"handle": f"0.{i}"}}],
                "usage": {"tokens_in": wait_cost, "tokens_out": 0},
            }
            for i in range(1, 5)
        ],
        {"text": "all back: {last_tool_result}", "usage": {"tokens_in": wait_cost, "tokens_out": 0}},
    ]
    with running_daemon(tmp_path, body(tmp_path, turns, roles)) as daemon:
        daemon.wait_log("proc.ready", process="zygote", timeout_s=60)  # forks, not 1 s exec's
        task_id = daemon.submit("fan out greedily", limits={"max_tokens": parent_tokens})
        view = daemon.wait(task_id, timeout_s=120)
        assert view.status is S.COMPLETED, view.error
        tree = nodes(daemon, task_id)
        children = [tree[f"0.{i}"] for i in range(1, 5)]
        assert [c["grant_tokens"] for c in children] == [grant] * 4  # nobody was refused
        assert not refusals(daemon)
        assert [c["status"] for c in children] == ["exhausted_tokens"] * 4
        assert [c["usage"]["tokens_in"] for c in children] == [spend] * 4  # one call each, no more
        assert view.usage.tokens_in == 1000 + 4 * spend + 5 * wait_cost == 39_850
        assert view.usage.tokens_in <= parent_tokens
        assert [c["grant_steps"] for c in children] == [5] * 4
        assert view.usage.steps == 6 + 4  # the root's six turns, one per child
        # Really in parallel: every child was ready before the first of them exited.
        order = [
            (line["event"], line.get("handle"))
            for line in daemon.log()
            if line.get("task_id") == task_id and line.get("event") in ("subagent.ready", "subagent.exit")
        ]
        first_exit = next(i for i, (event, handle) in enumerate(order) if event == "subagent.exit")
        ready_before = {handle for event, handle in order[:first_exit] if event == "subagent.ready"}
        assert ready_before == {"0", "0.1", "0.2", "0.3", "0.4"}, order
        over = {line["handle"] for line in daemon.log() if line.get("event") == "limit.exceeded"}
        assert over == {"0.1", "0.2", "0.3", "0.4"}


def test_a_node_over_its_grant_is_cancelled_while_its_sibling_finishes(tmp_path: Path) -> None:
    roles = [
        # Under-reports nothing, but its one call costs more than its whole grant.
        {
            "match": "^spender",
            "turns": [
                {
                    "text": "oops",
                    "usage": {"tokens_in": 50_000, "tokens_out": 0},
                    "tool_calls": [{"name": "note_read", "arguments": {}}],
                },
                {"text": "too late", "delay_s": 60},
            ],
        },
        {"match": "^saver", "turns": [{"text": "saved", "delay_s": 1}]},
    ]
    turns = [
        {
            "tool_calls": [
                spawn_call("spender", max_tokens=5000, wait=False),
                spawn_call("saver", max_tokens=5000, wait=False),
            ]
        },
        {"tool_calls": [{"name": "subagent_wait", "arguments": {"handle": "0.1"}}]},
        {"tool_calls": [{"name": "subagent_wait", "arguments": {"handle": "0.2"}}]},
        {"text": "done"},
    ]
    with running_daemon(tmp_path, body(tmp_path, turns, roles)) as daemon:
        task_id = daemon.submit("two children", limits={"max_tokens": 200_000})
        view = daemon.wait(task_id, timeout_s=120)
        assert view.status is S.COMPLETED
        tree = nodes(daemon, task_id)
        assert tree["0.1"]["status"] == "exhausted_tokens"
        assert tree["0.2"]["status"] == "completed"
        over = [
            line
            for line in daemon.log()
            if line.get("event") == "limit.exceeded" and line.get("handle") == "0.1"
        ]
        assert over


def test_the_tree_over_the_task_ceiling_ends_the_task_exhausted_tokens(tmp_path: Path) -> None:
    roles = [
        {
            "match": "^worker",
            "turns": [
                {
                    "text": "working",
                    "usage": {"tokens_in": 11_000, "tokens_out": 0},
                    "tool_calls": [{"name": "note_read", "arguments": {}}],
                },
                {"text": "more", "delay_s": 60},
            ],
        }
    ]
    turns = [
        {
            "tool_calls": [spawn_call("worker", max_tokens=12_000, wait=False)],
            "usage": {"tokens_in": 5000, "tokens_out": 0},
        },
        {
            "text": "busy",
            "delay_s": 3,
            "usage": {"tokens_in": 6000, "tokens_out": 0},
            "tool_calls": [{"name": "note_read", "arguments": {}}],
        },
        {"text": "still going", "delay_s": 60},
    ]
    with running_daemon(tmp_path, body(tmp_path, turns, roles)) as daemon:
        task_id = daemon.submit("spend it all", limits={"max_tokens": 20_000})
        view = daemon.wait(task_id, timeout_s=120)
        assert view.status is S.EXHAUSTED_TOKENS
        assert view.exit_code in (3, 7)


def test_kill_9_of_a_middle_node_reaches_its_waiting_parent_as_crashed(tmp_path: Path) -> None:
    roles = [
        {"match": "^middle", "turns": [{"tool_calls": [spawn_call("leaf")]}, {"text": "unreachable"}]},
        {"match": "^leaf", "turns": [{"text": "zzz", "delay_s": 60}]},
    ]
    turns = [{"tool_calls": [spawn_call("middle")]}, {"text": "middle said {last_tool_result}"}]
    with running_daemon(tmp_path, body(tmp_path, turns, roles)) as daemon:
        task_id = daemon.submit("nest")
        deadline = time.monotonic() + 60
        while "0.1.1" not in nodes(daemon, task_id) or nodes(daemon, task_id)["0.1.1"]["pid"] is None:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        tree = nodes(daemon, task_id)
        leaf_pid = tree["0.1.1"]["pid"]
        os.kill(tree["0.1"]["pid"], signal.SIGKILL)
        view = daemon.wait(task_id, timeout_s=60)
        assert view.status is S.COMPLETED
        assert '"status": "crashed"' in str(view.result)
        final = nodes(daemon, task_id)
        assert final["0.1"]["status"] == "crashed"
        assert final["0.1.1"]["status"] == "cancelled"
        assert not psutil.pid_exists(leaf_pid) or psutil.Process(leaf_pid).status() == psutil.STATUS_ZOMBIE


def test_cancelling_the_root_tears_down_every_grandchild_within_the_ladder_bound(tmp_path: Path) -> None:
    roles = [
        {"match": "^middle", "turns": [{"tool_calls": [spawn_call("leaf")]}, {"text": "x"}]},
        {"match": "^leaf", "turns": [{"text": "zzz", "delay_s": 60}]},
    ]
    turns = [{"tool_calls": [spawn_call("middle")]}, {"text": "x"}]
    with running_daemon(tmp_path, body(tmp_path, turns, roles)) as daemon:
        task_id = daemon.submit("nest then cancel")
        deadline = time.monotonic() + 60
        while "0.1.1" not in nodes(daemon, task_id) or nodes(daemon, task_id)["0.1.1"]["pid"] is None:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        pids = [n["pid"] for n in nodes(daemon, task_id).values()]
        started = time.monotonic()
        daemon.call("task.cancel", {"task_id": task_id})
        view = daemon.wait(task_id, timeout_s=30)
        assert view.status is S.CANCELLED
        assert time.monotonic() - started < 0.5 + 0.5 + 2 + 1
        for pid in pids:
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        assert {n["status"] for n in nodes(daemon, task_id).values()} == {"cancelled"}


def test_a_forged_handle_or_depth_in_a_request_is_ignored(tmp_path: Path) -> None:
    forged = spawn_call("child", handle="0.7.7", depth=0, task_id="t_someone_else")
    roles = [{"match": "^child", "turns": [{"text": "hi"}]}]
    with running_daemon(
        tmp_path, body(tmp_path, [{"tool_calls": [forged]}, {"text": "{last_tool_result}"}], roles)
    ) as daemon:
        task_id = daemon.submit("forge")
        view = daemon.wait(task_id)
        result = json.loads(str(view.result))
        assert result["handle"] == "0.1"
        tree = nodes(daemon, task_id)
        assert sorted(tree) == ["0", "0.1"]
        assert tree["0.1"]["depth"] == 1
