"""`agentd status`, `agentd list` and `agentd submit --json` against a real daemon answer without
importing pydantic or the API's models (`python -X importtime` lists every module a command
imported), and print what the models print; a flag value the plain checks cannot vouch for still
takes the model path, which words the refusal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.cli.task_text import status_lines
from protocol.api import GetRequest, ListParams, ListRequest, SubmitResult, TaskRef
from tests.support.daemon import Daemon, start_daemon, write_config
from tests.support.leaks import wait_no_descendants

# What a plain command must not import: the models and what builds them.
HEAVY = ("pydantic", "pydantic_core", "protocol.api", "protocol.jsonrpc", "protocol.result")
ENV = {**os.environ, "COLUMNS": "120"}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, str]]:
    """A daemon on the embedded defaults (the scripted model) with one task that has ended."""
    workdir = tmp_path_factory.mktemp("plain")
    started = start_daemon(workdir, write_config(workdir, ""))
    try:
        task_id = started.submit("say hello")
        assert started.wait(task_id).exit_code == 0
        yield started, task_id
    finally:
        code = started.stop(timeout_s=40)
        assert code == 0, started.log_path.read_text()[-3000:]
        strays = wait_no_descendants(timeout_s=10.0)
        assert not strays, f"processes left behind: {strays}"


def _run(daemon: Daemon, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """The command, and every module it imported (from `-X importtime` on stderr)."""
    argv = [sys.executable, "-X", "importtime", "-m", "agentd", *args, "--socket", str(daemon.socket)]
    done = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=60)
    imported = {
        line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")
    }
    return done, imported - {"imported package"}


def _heavy(imported: set[str]) -> set[str]:
    return {name for name in imported if name.split(".")[0] in HEAVY or name in HEAVY}


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["status", "TASK"], id="status"),
        pytest.param(["status", "SHORT"], id="status-short-id"),
        pytest.param(["status", "TASK", "--json"], id="status-json"),
        pytest.param(["list"], id="list"),
        pytest.param(["list", "--json", "--state", "terminal"], id="list-json"),
        pytest.param(["submit", "plain hello", "--json", "--max-steps", "5"], id="submit-json"),
        pytest.param(["submit", "plain hello"], id="submit"),
    ],
)
def test_a_plain_command_imports_neither_pydantic_nor_the_models(
    daemon: tuple[Daemon, str], args: list[str]
) -> None:
    started, task_id = daemon
    typed = [{"TASK": task_id, "SHORT": task_id[:14].lower()}.get(arg, arg) for arg in args]
    done, imported = _run(started, *typed)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "agentd.cli.plain_commands" in imported
    assert _heavy(imported) == set()


def test_status_json_and_list_json_print_what_the_models_print(daemon: tuple[Daemon, str]) -> None:
    started, task_id = daemon
    with started.client() as client:
        view = client.call(GetRequest(params=TaskRef(task_id=task_id)))
        views = client.call(ListRequest(params=ListParams(state="terminal")))
    done, _ = _run(started, "status", task_id, "--json")
    assert done.stdout == view.model_dump_json() + "\n"
    done, _ = _run(started, "list", "--json", "--state", "terminal")
    # Tasks other tests submitted may end in between: the one that had ended is compared.
    (listed,) = [v for v in views if v.task_id == task_id]
    assert listed.model_dump_json() in done.stdout.splitlines()
    assert all(json.loads(line)["state"] == "terminal" for line in done.stdout.splitlines())


def test_status_prints_what_the_models_print(daemon: tuple[Daemon, str]) -> None:
    started, task_id = daemon
    with started.client() as client:
        view = client.call(GetRequest(params=TaskRef(task_id=task_id)))
    done, _ = _run(started, "status", task_id)
    expected = [*status_lines(view, now=0.0), "result:", *str(view.result).splitlines()]
    # The `submitted` line says how long ago, which moves with the clock.
    assert [line for line in done.stdout.splitlines() if not line.startswith("submitted")] == [
        line for line in expected if not line.startswith("submitted")
    ]


def test_submit_json_prints_the_submit_result(daemon: tuple[Daemon, str]) -> None:
    started, _ = daemon
    done, _ = _run(started, "submit", "plain json", "--json", "--idempotency-key", "k-1")
    assert done.returncode == 0, done.stderr[-2000:]
    first = SubmitResult.model_validate_json(done.stdout)
    again, _ = _run(started, "submit", "plain json", "--json", "--idempotency-key", "k-1")
    assert SubmitResult.model_validate_json(again.stdout).task_id == first.task_id
    assert json.loads(again.stdout)["created"] is False
    assert started.wait(first.task_id).exit_code == 0


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        pytest.param(["list", "--limit", "0"], "--limit", id="list-limit"),
        pytest.param(["submit", "x", "--max-steps", "0"], "--max-steps", id="submit-max-steps"),
        pytest.param(["status", "t_" + "A" * 70], "--task-id", id="status-long-id"),
    ],
)
def test_a_value_the_plain_checks_cannot_vouch_for_is_refused_in_the_models_words(
    daemon: tuple[Daemon, str], args: list[str], flag: str
) -> None:
    started, _ = daemon
    done, imported = _run(started, *args)
    assert done.returncode == 2
    assert f"agentd {args[0]}: {flag}:" in done.stderr
    assert "pydantic" in imported  # the model path


def test_a_socket_with_no_daemon_is_named_by_the_plain_path_too(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "agentd", "status", "t_1", "--socket", str(tmp_path / "none.sock")]
    done = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith("agentd status: no agentd at ")
