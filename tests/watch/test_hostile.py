"""A watcher given a bad first frame says so on stderr, never echoes it, and exits 2."""

from __future__ import annotations

import json
import sys

import anyio
import pytest

from protocol.environment import SUPERVISOR_PID_ENV
from tests.support.watcher import spawn_watcher

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

SECRET = "sk-do-not-echo-1234"
SERVER = {"name": "files", "transport": "stdio", "command": ["true"], "env": {"TOKEN": SECRET}}


def frame(params: object, method: str = "ctrl/watch") -> bytes:
    return json.dumps({"jsonrpc": "2.0", "method": method, "params": params}).encode() + b"\n"


@pytest.mark.parametrize(
    ("data", "says"),
    [
        pytest.param(b"not json " + SECRET.encode() + b"\n", b"invalid ctrl/watch: json", id="garbage"),
        pytest.param(b"\xff\xfe" + SECRET.encode() + b"\n", b"invalid ctrl/watch: encoding", id="not-utf8"),
        pytest.param(
            frame({"watcher_id": "w", "server": SERVER, "targets": []}),
            b"invalid ctrl/watch: shape",
            id="no-targets",
        ),
        pytest.param(
            frame(
                {"watcher_id": "w", "server": SERVER, "targets": [{"trigger": "t", "uri": "a", "glob": "b*"}]}
            ),
            b"invalid ctrl/watch: shape",
            id="uri-and-glob",
        ),
        pytest.param(
            frame(
                {"watcher_id": "w", "server": SERVER, "targets": [{"trigger": "t", "uri": "a"}], SECRET: 1}
            ),
            b"invalid ctrl/watch: shape",
            id="unknown-field",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"method":"ctrl/ping","params":{"seq":1}}\n',
            b"the first frame must be ctrl/watch",
            id="ping-first",
        ),
        pytest.param(
            frame({"task_id": "t", "run_id": "r", "instruction": SECRET}, method="ctrl/spawn"),
            b"invalid ctrl/watch: shape",
            id="a-spawn-frame",
        ),
        pytest.param(b"{" + b" " * (17 * 1024 * 1024) + b"}\n", b"no ctrl/watch", id="oversized"),
        pytest.param(b"", b"no ctrl/watch", id="eof"),
    ],
)
async def test_a_bad_first_frame_exits_2_without_echoing_it(data: bytes, says: bytes) -> None:
    async with spawn_watcher(data) as watcher:
        await watcher.close_stdin()
        assert await watcher.wait_exit() == 2
        assert says in watcher.stderr, watcher.stderr
        assert SECRET.encode() not in watcher.stderr
        assert watcher.frames == []


async def test_a_watcher_whose_supervisor_is_not_its_parent_exits_at_once() -> None:
    async with spawn_watcher(None, env={SUPERVISOR_PID_ENV: "1"}) as watcher:
        assert await watcher.wait_exit() == 1
        assert watcher.frames == []


async def test_boot_imports_nothing_heavy_before_the_first_frame() -> None:
    # docs/design.md §2, as for a subagent: pydantic comes with the first frame, `mcp` after `ev/ready`.
    code = (
        "import json, sys, subagent.watch.boot; print(json.dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('protocol', 'processes', 'pydantic', 'anyio', 'mcp', 'httpx2'))))"
    )
    done = await anyio.run_process([sys.executable, "-I", "-c", code])
    assert json.loads(done.stdout) == ["protocol", "protocol.environment", "protocol.exit_codes"]
