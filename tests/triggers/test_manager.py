"""The trigger manager over a real journal with real watcher processes (the protocol-speaking
fixture `tests/fixtures/fake_watcher.py`): changes become journaled tasks carrying trigger and
uri, debounce and overflow hold, the governor restarts a killed watcher and gives up on a
flapping one, `unsupported` is not retried, pause/resume/restart and reloads work, and no
watcher outlives the manager."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
import structlog

from agentd.journal.records import TaskRecord
from agentd.journal.store import Journal
from agentd.supervision.liveness import LivenessPolicy
from agentd.triggers.manager import ManagerOptions, TriggerConfig, TriggerManager, WarmSessions
from agentd.triggers.plan import Delivery, GovernorPolicy
from processes.ladder import LadderPolicy
from protocol.result import TerminalStatus
from protocol.spawn import McpServerSpec
from protocol.watch import QUOTED_NOTE
from tests.support.trigger_config import trigger

pytestmark = [pytest.mark.anyio, pytest.mark.processes]
FAKE_WATCHER = Path(__file__).resolve().parents[1] / "fixtures" / "fake_watcher.py"
WAIT_S = 10.0


def options(control: Path, **governor: float) -> ManagerOptions:
    return ManagerOptions(
        governor=GovernorPolicy(**{"backoff_initial_s": 0.05, "backoff_max_s": 0.2, **governor}),  # type: ignore[arg-type]
        liveness=LivenessPolicy(ping_interval_s=0.2, missed_pongs=3, ready_timeout_s=10.0),
        ladder=LadderPolicy(cancel_grace_s=0.5, term_grace_s=0.5, kill_reap_s=2.0),
        argv=(sys.executable, str(FAKE_WATCHER), str(control)),
    )


class Control:
    """The fake watcher's control directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._n = 0

    def mode(self, mode: str) -> None:
        (self.path / "mode").write_text(mode)

    def uris(self, uris: Iterable[str]) -> None:
        (self.path / "uris").write_text("\n".join(uris) + "\n")

    def emit(self, changes: Sequence[tuple[str, str | None]]) -> None:
        self._n += 1
        tmp = self.path / f"tmp-{self._n}"
        tmp.write_text(json.dumps([{"uri": u, "etag": e} for u, e in changes]))
        tmp.rename(self.path / f"emit-{self._n:06d}.json")

    def starts(self) -> list[dict[str, object]]:
        return [json.loads(p.read_text()) for p in sorted(self.path.glob("started-*.json"))]

    def start_pids(self) -> list[int]:
        return [int(p.stem.split("-")[1]) for p in sorted(self.path.glob("started-*.json"))]

    def emitted(self) -> bool:
        return not list(self.path.glob("emit-*.json"))


@pytest.fixture
def control(tmp_path: Path) -> Control:
    path = tmp_path / "control"
    path.mkdir()
    return Control(path)


async def until(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    with anyio.move_on_after(timeout_s):
        while not condition():  # noqa: ASYNC110 - state in another process and the manager
            await anyio.sleep(0.02)
        return
    raise AssertionError(f"timed out waiting for {what}")


@asynccontextmanager
async def running(
    journal: Journal,
    configs: list[TriggerConfig],
    opts: ManagerOptions,
    warm: WarmSessions | None = None,
    parked: Parked | None = None,
) -> AsyncIterator[tuple[TriggerManager, list[int]]]:
    woken: list[int] = []
    manager = TriggerManager(
        journal,
        server_spec=lambda name: McpServerSpec(name=name, transport="stdio", command=["unused"]),
        on_fired=lambda: woken.append(1),
        log=structlog.get_logger(),
        options=opts,
        owner_uid=os.getuid(),
        warm=warm,
        parking=parked,
    )
    await manager.load()
    manager.configure(configs)
    async with anyio.create_task_group() as tg:
        tg.start_soon(manager.serve)
        try:
            yield manager, woken
        finally:
            with anyio.fail_after(10):
                await manager.stop()
            assert manager.owned_pids() == set()
            tg.cancel_scope.cancel()


class Parked:
    """Stands in for the supervisor's parking: records what the manager prestarts and tears up."""

    def __init__(self) -> None:
        self.parked: dict[str, TaskRecord] = {}
        self.holds: list[float] = []
        self.torn: dict[str, str] = {}

    def prestart(self, record: TaskRecord, hold_s: float) -> bool:
        self.parked[record.task_id] = record
        self.holds.append(hold_s)
        return True

    def discard(self, task_id: str, reason: str) -> None:
        self.torn[task_id] = reason


async def tasks(journal: Journal) -> list[TaskRecord]:
    return sorted(await journal.tasks.list(None, limit=1000), key=lambda t: t.created_at)


async def count(journal: Journal, uri: str | None = None) -> int:
    return sum(1 for t in await tasks(journal) if uri is None or t.uri == uri)


async def test_a_change_becomes_a_journaled_task_with_trigger_and_uri(
    journal: Journal, control: Control
) -> None:
    control.uris(["file:///srv/a"])
    async with running(journal, [trigger()], options(control.path)) as (manager, woken):
        # The synthetic "possibly changed" after arming is the first delivery.
        await until(lambda: manager.view("inbox").tasks_started == 1, "the synthetic delivery")
        assert manager.view("inbox").state == "armed" and manager.view("inbox").subscribed == 1
        control.emit([("file:///srv/a", "v2")])
        await until(lambda: manager.view("inbox").tasks_started == 2, "the change's task")
        records = await tasks(journal)
        assert [(t.trigger, t.uri, t.state) for t in records] == [("inbox", "file:///srv/a", "queued")] * 2
        full = await journal.tasks.get(records[1].task_id)
        assert full is not None
        # The URI is the watched server's text: quoted data, followed by a note that says so.
        assert full.spec.instruction == f'changed: "file:///srv/a" on files\n\n{QUOTED_NOTE}'
        assert full.spec.mcp == ["files"] and full.owner_uid == os.getuid()
        assert len(woken) == 2
        started = control.starts()
        assert len(started) == 1
        payload = started[0]["payload"]
        assert payload["targets"] == [{"trigger": "inbox", "uri": None, "glob": "file:///srv/*"}]  # type: ignore[index]


async def test_200_changes_to_one_uri_are_one_task_and_5_uris_are_5(
    journal: Journal, control: Control
) -> None:
    control.uris([])
    config = trigger(debounce_s=0.3, max_wait_s=5.0, max_inflight=10)
    async with running(journal, [config], options(control.path)) as (manager, _):
        await until(lambda: manager.view("inbox").state == "armed", "armed")
        control.emit([("file:///srv/one", f"e{i}") for i in range(200)])
        await until(lambda: manager.view("inbox").tasks_started == 1, "one delivery")
        control.emit([(f"file:///srv/{i}", None) for i in range(5)] * 10)
        await until(lambda: manager.view("inbox").tasks_started == 6, "five deliveries")
        await anyio.sleep(0.5)  # a trailing window more: nothing else may come
        records = await tasks(journal)
        assert len(records) == 6
        assert sorted(t.uri or "" for t in records[1:]) == [f"file:///srv/{i}" for i in range(5)]
        first = await journal.tasks.get(records[0].task_id)
        events = await journal.events_after(records[0].task_id, 0)
        assert first is not None and any(e.fields.get("etag") == "e199" for e in events)


@pytest.mark.parametrize(
    ("overflow", "expected"),
    [
        ("coalesce", ["u0", "u1", "u2", "u3"]),  # every URI, one delivery each (u1 coalesced)
        ("drop_newest", ["u0", "u1"]),  # one waits (max_inflight 1), the rest are dropped
        ("drop_oldest", ["u0", "u3"]),  # the newest waiting one survives
    ],
)
async def test_max_inflight_and_overflow(
    journal: Journal, control: Control, overflow: str, expected: list[str]
) -> None:
    control.uris([])
    config = trigger(debounce_s=0.05, max_wait_s=0.05, max_inflight=1, overflow=overflow)
    async with running(journal, [config], options(control.path)) as (manager, _):
        await until(lambda: manager.view("inbox").state == "armed", "armed")
        for uri in ("u0", "u1", "u2", "u1", "u3"):
            control.emit([(f"file:///srv/{uri}", None)])
            await until(control.emitted, "emitted")
            await anyio.sleep(0.15)  # past the debounce: each is its own delivery
        assert manager.view("inbox").tasks_started == 1
        # Tasks end one by one; each frees the one slot.
        while True:
            current = [t for t in await tasks(journal) if t.state != "terminal"]
            assert len(current) <= 1
            before = manager.view("inbox").tasks_started
            for record in current:
                await journal.tasks.mark_terminal(record.task_id, TerminalStatus.COMPLETED, exit_code=0)
                manager.task_ended(record)
            await anyio.sleep(0.2)
            if manager.view("inbox").tasks_started == before:
                break
        assert [(t.uri or "").rsplit("/", 1)[1] for t in await tasks(journal)] == expected
        view = manager.view("inbox")
        assert view.dropped == (0 if overflow == "coalesce" else 3)


async def test_kill_9_of_the_watcher_is_rearmed_with_one_synthetic_delivery_per_uri(
    journal: Journal, control: Control
) -> None:
    uris = [f"file:///srv/{i}" for i in range(3)]
    control.uris(uris)
    async with running(journal, [trigger(max_inflight=10)], options(control.path)) as (manager, _):
        await until(lambda: manager.view("inbox").tasks_started == 3, "the first arming's deliveries")
        (pid,) = control.start_pids()
        os.kill(pid, signal.SIGKILL)
        await until(lambda: len(control.starts()) == 2, "a restarted watcher")
        await until(lambda: manager.view("inbox").tasks_started == 6, "the re-arming's deliveries")
        assert manager.view("inbox").state == "armed"
        assert sorted(t.uri or "" for t in await tasks(journal)) == sorted(uris * 2)


async def test_on_arm_skip_starts_tasks_only_for_real_changes(journal: Journal, control: Control) -> None:
    uris = [f"file:///srv/{i}" for i in range(3)]
    control.uris(uris)
    skip = trigger(max_inflight=10, on_arm="skip")
    async with running(journal, [skip], options(control.path)) as (manager, _):
        await until(lambda: manager.view("inbox").state == "armed", "armed")
        # A real change after the synthetic ones: only it starts a task.
        control.emit([("file:///srv/1", "v2")])
        await until(lambda: manager.view("inbox").tasks_started == 1, "the change's task")
        assert [t.uri for t in await tasks(journal)] == ["file:///srv/1"]
        # Re-arming after a kill -9, and resuming, deliver nothing of their own either.
        (pid,) = control.start_pids()
        os.kill(pid, signal.SIGKILL)
        await until(lambda: len(control.starts()) == 2, "a restarted watcher")
        await until(lambda: manager.view("inbox").state == "armed", "re-armed")
        await manager.pause("inbox")
        await manager.resume("inbox")
        control.emit([("file:///srv/2", "v2")])
        await until(lambda: manager.view("inbox").tasks_started == 2, "the second change's task")
        await anyio.sleep(0.3)  # a debounce window and more: nothing else follows
        assert [t.uri for t in await tasks(journal)] == ["file:///srv/1", "file:///srv/2"]


async def test_a_flapping_watcher_fails_after_the_limit_and_restart_tries_again(
    journal: Journal, control: Control
) -> None:
    control.mode("die")
    async with running(journal, [trigger()], options(control.path, max_restarts=2)) as (manager, _):
        await until(lambda: manager.view("inbox").state == "failed", "failed")
        assert len(control.starts()) == 3  # the first start and two restarts
        assert manager.failed() == ["inbox"] and manager.summary() == {"failed": 1}
        assert "exited with code 3" in (manager.view("inbox").last_error or "")
        await anyio.sleep(0.5)
        assert len(control.starts()) == 3  # failed: not restarted again
        # A reload with the trigger unchanged tries a failed watcher again (with a fresh count).
        manager.configure([trigger()])
        await until(lambda: len(control.starts()) == 6, "three more starts after the reload")
        await until(lambda: manager.view("inbox").state == "failed", "failed again")
        control.mode("normal")
        control.uris([])
        manager.restart("inbox")
        await until(lambda: manager.view("inbox").state == "armed", "armed after a restart")


async def test_unsupported_is_shown_and_not_restarted(journal: Journal, control: Control) -> None:
    control.mode("unsupported")
    async with running(journal, [trigger()], options(control.path)) as (manager, _):
        await until(lambda: manager.view("inbox").state == "unsupported", "unsupported")
        await until(lambda: manager.owned_pids() == set(), "the watcher's exit")
        await anyio.sleep(0.5)
        assert len(control.starts()) == 1
        assert manager.view("inbox").last_error == "no resources.subscribe"


async def test_pause_survives_a_restart_and_resume_redelivers(journal: Journal, control: Control) -> None:
    control.uris(["file:///srv/a"])
    async with running(journal, [trigger(max_inflight=10)], options(control.path)) as (manager, _):
        await until(lambda: manager.view("inbox").tasks_started == 1, "armed")
        assert (await manager.pause("inbox")).state == "paused"
        control.emit([("file:///srv/a", None)])
        await until(control.emitted, "emitted")
        await anyio.sleep(0.3)
        assert manager.view("inbox").tasks_started == 1
    # A new manager (a daemon restart) reads the pause from the journal.
    async with running(journal, [trigger(max_inflight=10)], options(control.path)) as (manager, _):
        await until(lambda: len(control.starts()) == 2, "the second watcher")
        await anyio.sleep(0.3)
        assert manager.view("inbox").state == "paused" and manager.view("inbox").tasks_started == 1
        view = await manager.resume("inbox")
        assert view.state == "armed"
        await until(lambda: manager.view("inbox").tasks_started == 2, "the resume's synthetic delivery")


async def test_reload_keeps_unchanged_watchers_and_adds_and_removes_triggers(
    journal: Journal, control: Control
) -> None:
    control.uris([])
    files = trigger("inbox", server="files")
    status = trigger("status", index=1, server="status", uri="status://incidents", glob=None)
    async with running(journal, [files], options(control.path)) as (manager, _):
        await until(lambda: manager.view("inbox").state == "armed", "armed")
        (files_pid,) = control.start_pids()
        manager.configure([files, status])
        await until(lambda: manager.view("status").state == "armed", "the added trigger armed")
        assert files_pid in manager.owned_pids() and len(control.starts()) == 2
        # Changing the targets of a server restarts only its watcher.
        more = trigger("more", index=2, server="status", uri="status://other", glob=None)
        manager.configure([files, status, more])
        await until(lambda: len(control.starts()) == 3, "the status watcher restarted")
        await until(lambda: manager.view("more").state == "armed", "armed")
        assert files_pid in manager.owned_pids()
        manager.configure([status, more])
        await until(lambda: files_pid not in manager.owned_pids(), "the removed server's watcher stopped")
        assert [v.name for v in manager.views()] == ["status", "more"]
        with pytest.raises(KeyError):
            manager.view("inbox")


async def test_a_stuck_watcher_is_killed_and_restarted(journal: Journal, control: Control) -> None:
    control.mode("mute")
    control.uris([])
    async with running(journal, [trigger()], options(control.path, max_restarts=5)) as (manager, _):
        await until(lambda: len(control.starts()) >= 2, "a restart after missed pongs")
        await until(
            lambda: "after it was stuck (unresponsive)" in (manager.view("inbox").last_error or ""),
            "the reason shown",
        )


async def test_a_watcher_sending_malformed_frames_is_killed_and_restarted(
    journal: Journal, control: Control
) -> None:
    control.mode("junk")
    async with running(journal, [trigger()], options(control.path, max_restarts=5)) as (manager, _):
        await until(lambda: len(control.starts()) >= 2, "a restart after protocol faults")
        await until(
            lambda: "after it was stuck (faulty)" in (manager.view("inbox").last_error or ""),
            "the reason shown",
        )


class RecordingSessions:
    def __init__(self) -> None:
        self.configured: list[list[str]] = []
        self.delivered: list[tuple[str, Delivery]] = []

    def configure(self, triggers: Sequence[TriggerConfig]) -> None:
        self.configured.append([t.name for t in triggers])

    async def deliver(self, trigger: TriggerConfig, delivery: Delivery) -> None:
        self.delivered.append((trigger.name, delivery))

    def failed(self, name: str) -> str | None:
        return None

    def reset(self, name: str) -> None:
        return None


async def test_continue_deliveries_go_to_the_warm_sessions_seam_not_the_journal(
    journal: Journal, control: Control
) -> None:
    control.uris(["feed://x"])
    sessions = RecordingSessions()
    configs = [trigger("feed", uri="feed://x", glob=None, route="continue")]
    async with running(journal, configs, options(control.path), warm=sessions) as (manager, _):
        await until(lambda: len(sessions.delivered) == 1, "the synthetic delivery")
        control.emit([("feed://x", "e1")] * 20)
        await until(lambda: len(sessions.delivered) == 2, "the change")
        assert sessions.delivered[1] == ("feed", Delivery("feed://x", "e1"))
        assert sessions.configured == [["feed"]] and manager.view("feed").deliveries == 2
        assert await tasks(journal) == []


async def test_a_trigger_removed_and_re_added_still_counts_its_unfinished_tasks(
    journal: Journal, control: Control
) -> None:
    control.uris(["file:///srv/a"])
    async with running(journal, [trigger(max_inflight=1)], options(control.path)) as (manager, _):
        await until(lambda: manager.view("inbox").tasks_started == 1, "the synthetic delivery")
        manager.configure([])
        manager.configure([trigger(max_inflight=1)])
        await until(lambda: manager.view("inbox").inflight == 1, "its unfinished task counted again")
        await until(lambda: len(control.starts()) == 2, "the new watcher")
        await until(lambda: manager.view("inbox").waiting == 1, "the re-arming's delivery held at the gate")
        assert manager.view("inbox").tasks_started == 1 and len(await tasks(journal)) == 1


async def test_a_window_prestarts_its_task_which_is_journaled_with_the_parked_ids(
    journal: Journal, control: Control
) -> None:
    """Prestart policy (docs/triggers.md#prestart): a window that opens with a slot free parks
    the task-to-be; its delivery is journaled with those ids; one that would wait at
    `max_inflight` parks none and tears up a park made before the slot filled; a paused
    trigger's open windows are torn up; `prestart = False` never parks."""
    parked = Parked()
    configs = [
        trigger("inbox", uri="file:///srv/a", debounce_s=0.3, max_wait_s=2.0, max_inflight=1),
        trigger("other", index=1, uri="file:///srv/b", debounce_s=0.3, max_wait_s=2.0),
        trigger("plain", index=2, uri="file:///srv/c", debounce_s=0.3, prestart=False),
    ]
    control.uris(["file:///srv/a", "file:///srv/b", "file:///srv/c"])
    async with running(journal, configs, options(control.path), parked=parked) as (manager, _):
        await until(lambda: manager.view("inbox").state == "armed", "armed")
        # The synthetic deliveries after arming: `inbox` and `other` parked, `plain` not.
        await until(lambda: len(parked.parked) == 2, "two parks")
        assert {r.uri for r in parked.parked.values()} == {"file:///srv/a", "file:///srv/b"}
        assert all(h == 2.0 + 30.0 for h in parked.holds)  # max_wait + the slack
        await until(lambda: manager.view("plain").tasks_started == 1, "plain's task")
        await until(lambda: manager.view("inbox").tasks_started == 1, "inbox's task")
        journaled = {t.task_id: t for t in await tasks(journal)}
        for task_id, record in parked.parked.items():
            assert journaled[task_id].run_id == record.run_id  # the very ids the child carries
            assert journaled[task_id].spec.instruction == record.spec.instruction
            assert (journaled[task_id].trigger, journaled[task_id].uri) == (record.trigger, record.uri)
        assert not parked.torn
        # `inbox`'s one slot is taken (its task never ends here): a new window parks nothing.
        control.emit([("file:///srv/a", "2")])
        await until(lambda: manager.view("inbox").waiting == 1, "the delivery waiting at the gate")
        assert len(parked.parked) == 2
        # A window of `other`, torn up by a pause before it closes.
        control.emit([("file:///srv/b", "2")])
        await until(lambda: len(parked.parked) == 3, "other's second park")
        (new,) = set(parked.parked) - set(journaled)
        await manager.pause("other")
        assert parked.torn == {new: "its trigger was paused"}
        await anyio.sleep(0.5)  # past its window: nothing is journaled for it
        assert new not in {t.task_id for t in await tasks(journal)}
