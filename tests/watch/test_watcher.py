"""The resource watcher process against the real fixture servers of both eras, over stdio."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import anyio
import anyio.to_thread
import psutil
import pytest

from protocol.control import Cancel, CancelParams
from protocol.framing import LineSplitter, decode, encode
from protocol.spawn import REVEAL_SECRETS
from protocol.watch import WATCH_UP_ADAPTER, ResourceChanged, Watch, WatchState, WatchTarget
from tests.fixtures.watch_changes import bump, create, delete, drop_streams
from tests.support.watcher import REPO, WatcherHarness, fixture_argv, spawn_watcher, watch_payload

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

ERAS = [pytest.param("2025", id="2025-11-25"), pytest.param("2026", id="2026-07-28")]
ERA_NAME = {"2025": "2025-11-25", "2026": "2026-07-28"}
ITEMS = [f"watch://item/{i}" for i in range(3)]
ALL_ITEMS = [WatchTarget(trigger="all", glob="watch://item/*")]


def server_pids(watcher: WatcherHarness) -> list[int]:
    return [p.pid for p in psutil.Process(watcher.pid).children(recursive=True)]


async def armed_with_synthetics(watcher: WatcherHarness, uris: list[str]) -> None:
    """`armed` naming `uris`, then exactly one synthetic `ev/resource` per URI, after it."""
    state = await watcher.state("armed")
    assert state.subscribed == uris
    await watcher.resources_for(len(uris))
    armed_at = next(
        i for i, f in enumerate(watcher.frames) if isinstance(f, WatchState) and f.params.state == "armed"
    )
    after = [f for f in watcher.frames[armed_at:] if isinstance(f, ResourceChanged)]
    assert [f.params.uri for f in after] == uris
    assert all(f.params.synthetic for f in after)
    assert len(watcher.resources()) == len(uris)  # none before `armed`


@pytest.mark.parametrize("era", ERAS)
async def test_armed_then_one_synthetic_per_uri_then_a_bump_is_one_change(era: str, tmp_path: Path) -> None:
    targets = [WatchTarget(trigger="one", uri=ITEMS[0]), *ALL_ITEMS]  # item 0 twice: subscribed once
    payload = watch_payload(fixture_argv(era, "--state", str(tmp_path)), targets)
    async with spawn_watcher(payload) as watcher:
        await armed_with_synthetics(watcher, ITEMS)
        assert watcher.states()[-1].era == ERA_NAME[era]
        bump(tmp_path, ITEMS[1])
        changes = await watcher.resources_for(4)
        assert changes[3].uri == ITEMS[1] and not changes[3].synthetic
        bump(tmp_path, ITEMS[2])
        changes = await watcher.resources_for(5)
        assert [c.uri for c in changes[3:]] == [ITEMS[1], ITEMS[2]]
        connects = watcher.events_named("mcp.connect")
        assert connects[0].fields["outcome"] == "ok"
        assert connects[0].fields["protocol"] == ERA_NAME[era]


@pytest.mark.parametrize("era", ERAS)
async def test_only_the_exact_uri_is_watched_and_other_changes_are_not_forwarded(
    era: str, tmp_path: Path
) -> None:
    payload = watch_payload(
        fixture_argv(era, "--state", str(tmp_path)), [WatchTarget(trigger="one", uri=ITEMS[2])]
    )
    async with spawn_watcher(payload) as watcher:
        await armed_with_synthetics(watcher, [ITEMS[2]])
        bump(tmp_path, ITEMS[0])
        bump(tmp_path, ITEMS[2])
        changes = await watcher.resources_for(2)
        await anyio.sleep(0.3)  # a forwarded change of item 0 would have arrived by now
        assert [(c.uri, c.synthetic) for c in watcher.resources()] == [(ITEMS[2], True), (ITEMS[2], False)]
        assert changes


@pytest.mark.parametrize("era", ERAS)
async def test_a_glob_picks_up_a_resource_created_after_arming(era: str, tmp_path: Path) -> None:
    payload = watch_payload(fixture_argv(era, "--state", str(tmp_path), "--resources", "2"), ALL_ITEMS)
    async with spawn_watcher(payload) as watcher:
        await armed_with_synthetics(watcher, ITEMS[:2])
        create(tmp_path, "watch://item/new")
        create(tmp_path, "watch://other/x")  # listed, but matches no glob
        state = await watcher.state("armed", nth=2)
        assert state.subscribed == [*ITEMS[:2], "watch://item/new"]
        changes = await watcher.resources_for(3)
        assert (changes[2].uri, changes[2].synthetic) == ("watch://item/new", True)
        bump(tmp_path, "watch://item/new")
        changes = await watcher.resources_for(4)
        assert (changes[3].uri, changes[3].synthetic) == ("watch://item/new", False)
        assert [e.fields["outcome"] for e in watcher.events_named("mcp.connect")][-1] == "refreshed"


@pytest.mark.parametrize("era", ERAS)
async def test_a_resource_gone_from_the_listing_is_no_longer_watched(era: str, tmp_path: Path) -> None:
    payload = watch_payload(fixture_argv(era, "--state", str(tmp_path)), ALL_ITEMS)
    async with spawn_watcher(payload) as watcher:
        await armed_with_synthetics(watcher, ITEMS)
        delete(tmp_path, ITEMS[1])
        state = await watcher.state("armed", nth=2)
        assert state.subscribed == [ITEMS[0], ITEMS[2]]
        bump(tmp_path, ITEMS[2])
        changes = await watcher.resources_for(4)
        assert [(c.uri, c.synthetic) for c in changes[3:]] == [
            (ITEMS[2], False)
        ]  # no synthetic for a removal


async def test_a_glob_is_listed_across_pages(tmp_path: Path) -> None:
    argv = fixture_argv("2025", "--state", str(tmp_path), "--resources", "25", "--page-size", "4")
    async with spawn_watcher(watch_payload(argv, ALL_ITEMS)) as watcher:
        state = await watcher.state("armed")
        assert state.subscribed == [f"watch://item/{i}" for i in range(25)]
        assert len(await watcher.resources_for(25)) == 25


@pytest.mark.parametrize("era", ERAS)
async def test_a_server_without_subscriptions_is_unsupported_once_and_exits_0(
    era: str, tmp_path: Path
) -> None:
    payload = watch_payload(fixture_argv(era, "--state", str(tmp_path), "--no-subscribe"), ALL_ITEMS)
    async with spawn_watcher(payload) as watcher:
        assert await watcher.wait_exit() == 0
        states = [s for s in watcher.states() if s.state != "connecting"]
        assert [s.state for s in states] == ["unsupported"]
        assert states[0].era == ERA_NAME[era]
        expected = "no change stream" if era == "2026" else "does not support resources/subscribe"
        assert states[0].detail is not None and expected in states[0].detail
        assert watcher.resources() == []


@pytest.mark.parametrize("era", ERAS)
async def test_a_server_that_exits_ends_the_watcher_with_an_event_and_exit_6(
    era: str, tmp_path: Path
) -> None:
    payload = watch_payload(fixture_argv(era, "--state", str(tmp_path), "--exit-after", "1"), ALL_ITEMS)
    async with spawn_watcher(payload) as watcher:
        await watcher.state("armed")
        assert await watcher.wait_exit(timeout_s=60) == 6
        (lost,) = watcher.events_named("mcp.disconnect")
        err = str(lost.fields["err"])
        assert "exited with status 3" in err, err
        assert "--exit-after" in err  # the server's last stderr line says why
        assert b"session lost" in watcher.stderr


async def test_a_dropped_change_stream_is_listened_again_with_a_synthetic_per_uri(tmp_path: Path) -> None:
    payload = watch_payload(fixture_argv("2026", "--state", str(tmp_path)), ALL_ITEMS)
    async with spawn_watcher(payload) as watcher:
        await armed_with_synthetics(watcher, ITEMS)
        drop_streams(tmp_path)
        await watcher.state("connecting", nth=2)
        state = await watcher.state("armed", nth=2)
        assert state.subscribed == ITEMS
        changes = await watcher.resources_for(6)
        assert [(c.uri, c.synthetic) for c in changes[3:]] == [(u, True) for u in ITEMS]
        bump(tmp_path, ITEMS[0])  # the new stream delivers
        changes = await watcher.resources_for(7)
        assert (changes[6].uri, changes[6].synthetic) == (ITEMS[0], False)
        assert watcher.events_named("mcp.connect")[-1].fields["outcome"] == "reconnected"


async def test_a_change_stream_lost_again_and_again_is_a_lost_session(tmp_path: Path) -> None:
    payload = watch_payload(fixture_argv("2026", "--state", str(tmp_path)), ALL_ITEMS)
    async with spawn_watcher(payload) as watcher:
        await watcher.state("armed")
        for round_ in range(4):
            drop_streams(tmp_path)
            if round_ < 3:
                await watcher.state("armed", nth=round_ + 2)
        assert await watcher.wait_exit(timeout_s=60) == 6
        (lost,) = watcher.events_named("mcp.disconnect")
        assert "4 times within 60 s" in str(lost.fields["err"])


@pytest.mark.parametrize("era", ERAS)
async def test_ping_is_answered_and_cancel_closes_the_session_and_its_server(
    era: str, tmp_path: Path
) -> None:
    payload = watch_payload(fixture_argv(era, "--state", str(tmp_path)), ALL_ITEMS)
    async with spawn_watcher(payload) as watcher:
        await watcher.state("armed")
        pong = await watcher.ping()
        assert pong.seq == 1 and pong.loop_age_ms < 5000
        servers = server_pids(watcher)
        assert servers, "the MCP server runs as the watcher's child"
        started = anyio.current_time()
        await watcher.cancel()
        assert await watcher.wait_exit(timeout_s=30) == 0
        assert anyio.current_time() - started < 8  # the stdio ladder's bound
        assert not [p for p in servers if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


async def test_a_closed_channel_ends_the_watcher_with_exit_0(tmp_path: Path) -> None:
    payload = watch_payload(fixture_argv("2025", "--state", str(tmp_path)), ALL_ITEMS)
    async with spawn_watcher(payload) as watcher:
        await watcher.state("armed")
        servers = server_pids(watcher)
        await watcher.close_stdin()
        assert await watcher.wait_exit(timeout_s=30) == 0
        assert not [p for p in servers if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


async def test_a_server_that_cannot_start_is_a_lost_session(tmp_path: Path) -> None:
    payload = watch_payload([str(tmp_path / "no-such-server")], ALL_ITEMS)
    async with spawn_watcher(payload) as watcher:
        assert await watcher.wait_exit() == 6
        (connect,) = watcher.events_named("mcp.connect")
        assert connect.fields["outcome"] == "failed"
        assert "no-such-server" in str(connect.fields["err"])
        assert "could not connect" in str(watcher.events_named("mcp.disconnect")[0].fields["err"])


async def test_a_daemon_that_stops_reading_cannot_keep_the_watcher_from_exiting(tmp_path: Path) -> None:
    """1,500 synthetic deliveries overflow the unread pipe and 4,500 changes pile up behind them;
    a cancel still ends the watcher promptly, exit 0, with its server gone."""
    argv = fixture_argv("2026", "--state", str(tmp_path), "--resources", "1500", "--page-size", "500")
    payload = watch_payload(argv, ALL_ITEMS)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    process = await anyio.open_process(
        [sys.executable, "-m", "subagent.watch"], env=env, start_new_session=True, stderr=subprocess.DEVNULL
    )
    try:
        assert process.stdin is not None and process.stdout is not None
        await process.stdin.send(encode(Watch(params=payload), context=REVEAL_SECRETS))
        splitter, armed = LineSplitter(), False
        with anyio.fail_after(90):
            while not armed:  # read up to `armed`, then never again
                for line in splitter.feed(await process.stdout.receive()):
                    frame = decode(line, WATCH_UP_ADAPTER)
                    armed = armed or (isinstance(frame, WatchState) and frame.params.state == "armed")
        servers = [p.pid for p in psutil.Process(process.pid).children(recursive=True)]
        for uri in [f"watch://item/{i}" for i in range(1500)]:
            bump(tmp_path, uri, times=3)
        await anyio.sleep(1)  # let the changes reach the watcher (it cannot tell us: nobody reads)
        await process.stdin.send(encode(Cancel(params=CancelParams(reason="drain"))))
        started = anyio.current_time()
        with anyio.fail_after(30):
            assert await process.wait() == 0
        assert anyio.current_time() - started < 15
        assert not [p for p in servers if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with anyio.CancelScope(shield=True):
            await process.aclose()


# A careless spawner: SIGTERM blocked and SIGHUP ignored survive exec (the daemon blocks its signals).
CARELESS = (
    "import os, signal, sys; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT});"
    " signal.signal(signal.SIGHUP, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " os.execv(sys.executable, [sys.executable, '-m', 'subagent.watch'])"
)


def _signal_set(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no {field} in /proc/{pid}/status")


async def test_a_watcher_clears_an_inherited_signal_mask_so_sigterm_ends_it(tmp_path: Path) -> None:
    payload = watch_payload(fixture_argv("2025", "--state", str(tmp_path)), ALL_ITEMS)
    async with spawn_watcher(payload, argv=[sys.executable, "-c", CARELESS]) as watcher:
        await watcher.state("armed")
        term = 1 << (signal.SIGTERM - 1)
        hup = 1 << (signal.SIGHUP - 1)
        assert _signal_set(watcher.pid, "SigBlk") == 0
        assert _signal_set(watcher.pid, "SigIgn") & (term | hup) == 0
        for server in server_pids(watcher):  # and its MCP server inherits the clean mask
            assert _signal_set(server, "SigBlk") & term == 0
        servers = server_pids(watcher)
        os.kill(watcher.pid, signal.SIGTERM)
        assert await watcher.wait_exit(timeout_s=15) == -signal.SIGTERM
        # PDEATHSIG takes the server down with it (the subreaper reaps it).
        _, alive = await anyio.to_thread.run_sync(lambda: psutil.wait_procs(_procs(servers), timeout=10))
        assert not alive


def _procs(pids: list[int]) -> list[psutil.Process]:
    found = []
    for pid in pids:
        with suppress(psutil.NoSuchProcess):
            found.append(psutil.Process(pid))
    return found
