"""`forked_as`: run a function in a forked child that has become another user; return its JSON.
`outcomes`: what such a user gets for each of a list of API requests (run in that child);
`fork_as_nobody`: `ownership_scenario` (or another) as `nobody`: what it saw of a root task.

A fork, not an exec: the interpreter lives under /root, which `nobody` cannot enter. The child
changes into `cwd` while still root (the test's temporary tree above it is closed to other users),
drops its supplementary groups to `groups`, then its gid and uid, runs `fn` and writes what `fn`
returns as JSON to a pipe. The parent reads it, requires exit 0 (a failing child prints its
traceback to the test's stderr) and returns the decoded object.

Call it from a worker thread (`anyio.to_thread.run_sync`) when the server the child talks to runs
on the test's own event loop.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentd.api.client import ApiClient
from agentd.errors import ApiClientError
from protocol.api import (
    CancelParams,
    CancelRequest,
    EventsParams,
    EventsRequest,
    GetRequest,
    ListRequest,
    Request,
    SubmitParams,
    SubmitRequest,
    TaskRef,
    TaskSpec,
)

NOBODY = 65534
NOGROUP = 65534


def forked_as(
    fn: Callable[[], Any],
    *,
    cwd: Path | str,
    uid: int = NOBODY,
    gid: int = NOGROUP,
    groups: list[int] | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run `fn` as `uid`:`gid` with supplementary `groups` (none by default) in a forked child.

    `env`, if given, replaces the child's whole environment before it drops privileges.
    `fn` must return a JSON object (a dict)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            if env is not None:
                os.environ.clear()
                os.environ.update(env)
            os.chdir(cwd)
            os.setgroups(groups or [])
            os.setgid(gid)
            os.setuid(uid)
            with os.fdopen(write_end, "wb") as out:
                out.write(json.dumps(fn()).encode())
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        data = reader.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the forked child failed (its traceback is above)"
    result = json.loads(data)
    assert isinstance(result, dict), result
    return result


def outcomes(path: str, steps: list[tuple[str, Request[Any]]]) -> dict[str, Any]:
    """Each named request's outcome on the socket at `path`: `{"result": …}` or `{"code", "message"}`.
    As JSON: it crosses back to the test through `forked_as`'s pipe."""
    out: dict[str, Any] = {}
    with ApiClient(path, timeout_s=10) as client:
        for name, request in steps:
            try:
                out[name] = {"result": json.loads(request.dump_result(client.call(request)))}
            except ApiClientError as exc:
                out[name] = {"code": exc.code, "message": exc.message}
    return out


def ownership_scenario(root_task: str, path: str) -> dict[str, Any]:
    """What the other user tries, each outcome recorded (runs in the privilege-dropped child)."""
    steps: list[tuple[str, Request[Any]]] = [
        ("get", GetRequest(params=TaskRef(task_id=root_task))),
        ("events", EventsRequest(params=EventsParams(task_id=root_task))),
        ("missing", GetRequest(params=TaskRef(task_id="t999"))),
        ("submit", SubmitRequest(params=SubmitParams(spec=TaskSpec(instruction="mine")))),
        ("list", ListRequest()),
        ("cancel", CancelRequest(params=CancelParams(task_id=root_task))),
    ]
    return outcomes(path, steps)


def fork_as_nobody(
    cwd: Path,
    root_task: str,
    path: str,
    extra_groups: list[int],
    scenario: Callable[[str, str], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Run `scenario` (default `ownership_scenario`) as nobody in a forked child; return what it saw."""
    return forked_as(lambda: (scenario or ownership_scenario)(root_task, path), cwd=cwd, groups=extra_groups)


def preload(package: str) -> None:
    """Import every module of `package` now: a forked child that has become another user cannot
    read the interpreter's files, and the CLI imports a command's module only when it runs it."""
    root = importlib.import_module(package)
    for module in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        importlib.import_module(module.name)
