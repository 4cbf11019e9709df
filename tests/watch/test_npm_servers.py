"""The watcher against the npm reference servers (2025-11-25, TypeScript SDK), over stdio.

Their changes can only be caused on the watcher's own connection, so `stdio_injector.py` sits in
between and calls the server's tool after the watcher's first `resources/subscribe`:
`server-memory`'s `create_entities` (the graph changes: `resources/updated`), once the test has
seen the synthetic delivery, and `server-everything`'s `toggle-subscriber-updates` (an update for
each URI subscribed so far at once, then for every subscribed URI each 5 s) at once.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from protocol.spawn import McpServerSpec
from protocol.watch import WatchPayload, WatchTarget
from tests.support.npm_servers import everything_argv, node, server_script
from tests.support.watcher import FIXTURES, spawn_watcher

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

GRAPH = "memory://knowledge-graph"


def injected(call: str, arguments: dict[str, object], server: list[str], go: Path | None = None) -> list[str]:
    injector = str(FIXTURES / "stdio_injector.py")
    return [
        sys.executable,
        injector,
        "--after",
        "resources/subscribe",
        "--call",
        call,
        "--args",
        json.dumps(arguments),
        *(["--go", str(go)] if go is not None else []),
        "--",
        *server,
    ]


def payload(command: list[str], target: WatchTarget, env: dict[str, str] | None = None) -> WatchPayload:
    spec = McpServerSpec(name="npm", transport="stdio", command=command, env=env or {})
    return WatchPayload(watcher_id="npm", server=spec, targets=[target])


async def test_server_memory_notifies_a_graph_change(tmp_path: Path) -> None:
    entity = {"name": "watcher", "entityType": "test", "observations": ["seen"]}
    go = tmp_path / "go"
    server = [node(), str(server_script("server-memory"))]
    command = injected("create_entities", {"entities": [entity]}, server, go)
    env = {"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")}
    async with spawn_watcher(payload(command, WatchTarget(trigger="graph", uri=GRAPH), env)) as watcher:
        state = await watcher.state("armed")
        assert (state.era, state.subscribed) == ("2025-11-25", [GRAPH])
        # The graph changes only after the synthetic delivery: a change that came while the
        # watcher was still subscribing would be a real delivery before it, or folded into it.
        assert [(c.uri, c.synthetic) for c in await watcher.resources_for(1)] == [(GRAPH, True)]
        go.touch()
        changes = await watcher.resources_for(2)
        assert [(c.uri, c.synthetic) for c in changes[:2]] == [(GRAPH, True), (GRAPH, False)]
        await watcher.wait_stderr(b"create_entities answered with a result")
        await watcher.cancel()
        assert await watcher.wait_exit(timeout_s=30) == 0


async def test_server_everything_notifies_after_toggle_subscriber_updates() -> None:
    command = injected("toggle-subscriber-updates", {}, everything_argv())
    target = WatchTarget(trigger="docs", glob="demo://resource/static/document/*")
    async with spawn_watcher(payload(command, target)) as watcher:
        state = await watcher.state("armed")
        assert state.era == "2025-11-25" and state.subscribed
        # The toggle runs after the first subscribe, so the server's first update may even come
        # before `armed`; the 5 s interval brings more.
        await watcher.wait_for(lambda _f: any(not c.synthetic for c in watcher.resources()))
        # Every subscribed URI is reported: by its synthetic delivery, or by a real update that
        # replaced it in the outbox while still unsent (per URI, newest wins). Waited for by URI,
        # not by count: a loaded machine can bring a URI's real updates before another's synthetic.
        subscribed = set(state.subscribed)
        await watcher.wait_for(lambda _f: {c.uri for c in watcher.resources()} >= subscribed)
        changes = watcher.resources()
        assert {c.uri for c in changes} == subscribed
        assert any(not c.synthetic for c in changes)
        await watcher.cancel()
        assert await watcher.wait_exit(timeout_s=30) == 0
