"""Secrets reach only where they are used: never the logs, the journal, `config show`, argv or env."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from protocol.result import TerminalStatus as S
from tests.support.daemon import running_daemon
from tests.support.fake_llm import FakeLLM, Hang, chat

pytestmark = pytest.mark.processes

SECRET = "sk-test-0123456789abcdef-secret"


def test_an_api_key_is_used_but_never_logged_journaled_shown_or_put_in_argv(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        fake.enqueue(Hang())
        body = (
            f'[intelligence.real]\nkind = "openai"\nbase_url = "{fake.base_url}"\nmodel = "m"\n'
            'api_key_env = "AGENTD_TEST_KEY"\n[defaults]\nmodel = "real"\n'
        )
        with running_daemon(tmp_path, body, env={"AGENTD_TEST_KEY": SECRET}) as daemon:
            task_id = daemon.submit("use the key")
            fake.wait_requests_blocking(1, timeout_s=30)
            assert fake.requests[0].headers["authorization"] == f"Bearer {SECRET}"
            pid = daemon.wait_ready([task_id])[task_id]
            child = psutil.Process(pid)
            assert SECRET not in " ".join(child.cmdline())
            assert SECRET not in " ".join(f"{k}={v}" for k, v in child.environ().items())
            daemon.call("task.cancel", {"task_id": task_id})
            assert daemon.wait(task_id).status is S.CANCELLED
            fake.enqueue(chat("done"))
            assert daemon.wait(daemon.submit("again")).status is S.COMPLETED
            shown = subprocess.run(
                [sys.executable, "-m", "agentd", "config", "show", str(daemon.config)],
                capture_output=True,
                text=True,
                timeout=30,
                env={"AGENTD_TEST_KEY": SECRET, "PATH": "/usr/bin:/bin"},
            )
            assert shown.returncode == 0, shown.stderr
            assert "AGENTD_TEST_KEY" in shown.stdout
            assert SECRET not in shown.stdout + shown.stderr
            logs = daemon.cli("logs", task_id, "--json")
            assert SECRET not in logs.stdout
        assert SECRET not in daemon.log_path.read_text()
        for path in (tmp_path / "state").rglob("*"):
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path
