"""No user takes more than its share: per-uid caps on queued tasks and on the
bytes their specs hold (clear, retryable errors naming the cap), round robin across owners instead
of first in first out, and `task.list` pages whose memory is bounded by the page."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.errors import ApiClientError
from agentd.journal.quota import Quota, quota_problem
from agentd.journal.records import TaskRecord
from agentd.supervision.fairness import at_owner_cap, fair_order
from protocol.api import QUOTA_EXCEEDED, ListParams, ListRequest, SubmitParams, SubmitRequest, TaskSpec
from tests.support.as_user import NOGROUP, fork_as_nobody
from tests.support.daemon import running_daemon, scripted, start_daemon, write_config
from tests.support.privilege import AS_ANOTHER_USER
from tests.support.rss import MiB, rss_growth_during


def _record(n: int, owner: int) -> TaskRecord:
    return TaskRecord(
        task_id=f"t{n}",
        run_id=f"r{n}",
        owner_uid=owner,
        idempotency_key=None,
        spec=TaskSpec(instruction="x"),
        state="queued",
        created_at=float(n),
    )


@pytest.mark.parametrize(
    ("quota", "queued", "pending", "spec", "cap"),
    [
        pytest.param(Quota(), 10_000, 10**9, 10**6, None, id="no-caps"),
        pytest.param(Quota(max_queued=3), 2, 0, 10, None, id="under-queued-cap"),
        pytest.param(Quota(max_queued=3), 3, 0, 10, "max_queued_per_uid = 3", id="at-queued-cap"),
        pytest.param(Quota(max_pending_bytes=100), 0, 60, 40, None, id="exactly-at-bytes-cap"),
        pytest.param(
            Quota(max_pending_bytes=100), 0, 60, 41, "max_pending_bytes_per_uid = 100", id="over-bytes"
        ),
    ],
)
def test_a_quota_names_the_cap_it_refuses(
    quota: Quota, queued: int, pending: int, spec: int, cap: str | None
) -> None:
    problem = quota_problem(quota, queued=queued, pending_bytes=pending, spec_bytes=spec)
    if cap is None:
        assert problem is None
    else:
        assert problem is not None and cap in problem


@pytest.mark.parametrize(
    ("queued", "running", "last", "order"),
    [
        pytest.param([(1, 100), (2, 100), (3, 200)], {}, {}, ["t1", "t3", "t2"], id="owners-take-turns"),
        pytest.param(
            [(1, 100), (2, 200)], {100: 1}, {}, ["t2", "t1"], id="the-owner-running-less-goes-first"
        ),
        pytest.param([(1, 100), (2, 100)], {}, {}, ["t1", "t2"], id="one-owner-is-fifo"),
        pytest.param(
            [(1, 100), (2, 100), (3, 200)],
            {},
            {100: 7},
            ["t3", "t1", "t2"],
            id="the-owner-served-longest-ago",
        ),
        pytest.param(
            [(1, 100), (2, 100), (3, 100), (4, 200), (5, 300)],
            {200: 2},
            {},
            ["t1", "t5", "t2", "t3", "t4"],
            id="three-owners",
        ),
    ],
)
def test_fair_order_is_round_robin_across_owners(
    queued: list[tuple[int, int]], running: dict[int, int], last: dict[int, int], order: list[str]
) -> None:
    picked = fair_order([_record(n, owner) for n, owner in queued], running, last)
    assert [r.task_id for r in picked] == order


def _slow(tmp_path: Path, delay_s: float = 30) -> str:
    return scripted("slow", [{"text": "done", "delay_s": delay_s}], tmp_path) + '[defaults]\nmodel = "slow"\n'


@pytest.mark.processes
def test_per_uid_caps_refuse_with_a_retryable_error_naming_the_cap(tmp_path: Path) -> None:
    lines = 'max_concurrent_tasks = 1\nmax_queued_per_uid = 3\nmax_pending_bytes_per_uid = "96K"\n'
    with running_daemon(tmp_path, _slow(tmp_path), daemon_lines=lines) as daemon:
        running = daemon.submit("the one that runs")
        daemon.wait_log("task.started", task_id=running)
        queued = [daemon.submit(f"queued {i}") for i in range(3)]
        with pytest.raises(ApiClientError) as caught, daemon.client() as client:
            client.call(SubmitRequest(params=SubmitParams(spec=TaskSpec(instruction="one too many"))))
        assert caught.value.code == QUOTA_EXCEEDED
        assert caught.value.retryable
        assert "daemon.max_queued_per_uid = 3" in caught.value.message
        done = daemon.cli("submit", "one too many")
        assert done.returncode == 1
        assert "max_queued_per_uid" in done.stderr
        # The cap clears as the user's queue drains: one cancelled, one more fits.
        daemon.call("task.cancel", {"task_id": queued[0]})
        daemon.submit("fits again")
        # The bytes cap: the unfinished tasks' specs may hold at most 96 KiB.
        daemon.call("task.cancel", {"task_id": queued[1]})
        daemon.call("task.cancel", {"task_id": queued[2]})
        daemon.submit("x" * 60_000)
        with pytest.raises(ApiClientError) as caught, daemon.client() as client:
            client.call(SubmitRequest(params=SubmitParams(spec=TaskSpec(instruction="y" * 60_000))))
        assert caught.value.code == QUOTA_EXCEEDED
        assert "daemon.max_pending_bytes_per_uid" in caught.value.message


@pytest.mark.processes
@AS_ANOTHER_USER
def test_another_users_task_does_not_wait_behind_one_users_queue(tmp_path: Path) -> None:
    run = tmp_path / "run"
    socket_path = run / "agentd.sock"
    daemon_lines = f'socket_group = "{NOGROUP}"\nmax_concurrent_tasks = 1\n'
    config = write_config(tmp_path, _slow(tmp_path, delay_s=1), daemon=daemon_lines, socket=socket_path)
    daemon = start_daemon(tmp_path, config, socket=socket_path)
    try:
        mine = [daemon.submit(f"root {i}") for i in range(6)]
        seen = fork_as_nobody(run, mine[0], "agentd.sock", [])
        theirs = seen["submit"]["result"]["task_id"]
        for task_id in [*mine, theirs]:
            daemon.wait(task_id, timeout_s=60)
        started = [line["task_id"] for line in daemon.log() if line.get("event") == "task.started"]
        # First in first out would start it seventh; round robin starts it as soon as root's
        # running task gives way.
        assert started.index(theirs) == 1, started
    finally:
        assert daemon.stop() == 0


@pytest.mark.processes
def test_task_list_memory_is_bounded_by_the_page_not_the_journal(tmp_path: Path) -> None:
    lines = (
        'max_concurrent_tasks = 1\nmax_queued_per_uid = "infinity"\nmax_pending_bytes_per_uid = "infinity"\n'
    )
    with running_daemon(tmp_path, _slow(tmp_path), daemon_lines=lines) as daemon:
        big = "z" * 1_000_000
        with daemon.client(timeout_s=60) as client:
            for _ in range(150):
                client.call(SubmitRequest(params=SubmitParams(spec=TaskSpec(instruction=big))))

        def lister() -> int:
            with daemon.client(timeout_s=60) as client:
                views = client.call(ListRequest(params=ListParams(limit=1000)))
            assert all(len(v.instruction) <= 201 and v.result is None for v in views)
            return len(views)

        growth, counts = rss_growth_during(daemon.pid, lister)
        assert counts == [150] * 16
        assert growth < 50 * MiB, f"RSS grew by {growth / MiB:.0f} MiB"


@pytest.mark.parametrize(
    ("running", "cap", "full"), [(0, None, False), (10**6, None, False), (1, 2, False), (2, 2, True)]
)
def test_an_owner_at_its_running_cap_starts_no_more(running: int, cap: int | None, full: bool) -> None:
    assert at_owner_cap(running, cap) is full


@pytest.mark.processes
@AS_ANOTHER_USER
def test_one_users_waiting_tasks_do_not_hold_every_slot(tmp_path: Path) -> None:
    """One user's tasks that wait (here on a slow model; an approval holds its task the same way)
    fill at most `max_running_per_uid` slots: another user's task starts at once, and the first
    user's next task waits though a slot is free."""
    run = tmp_path / "run"
    socket_path = run / "agentd.sock"
    daemon_lines = f'socket_group = "{NOGROUP}"\nmax_concurrent_tasks = 3\nmax_running_per_uid = 1\n'
    config = write_config(tmp_path, _slow(tmp_path, delay_s=30), daemon=daemon_lines, socket=socket_path)
    daemon = start_daemon(tmp_path, config, socket=socket_path)
    try:
        first, second = daemon.submit("root 1"), daemon.submit("root 2")
        daemon.wait_log("task.started", task_id=first)
        seen = fork_as_nobody(run, first, "agentd.sock", [])
        theirs = seen["submit"]["result"]["task_id"]
        daemon.wait_log("task.started", task_id=theirs)
        # Two of three slots run; root's second task still waits for root's first.
        view = daemon.call("task.get", {"task_id": second})
        assert isinstance(view, dict) and view["state"] == "queued", view
        for task_id in (first, second, theirs):
            daemon.call("task.cancel", {"task_id": task_id})
    finally:
        assert daemon.stop() == 0
