"""`agentd mcp login` end to end: a real daemon, an MCP server behind its own OAuth authorization
server (tests/fixtures/mcp_oauth.py, the SDK's server auth helpers: authorization code + PKCE,
dynamic registration, rotating refresh tokens), the CLI's login with its loopback listener, and
tasks whose subagents use the stored tokens.

The browser is played by following the printed authorization URL's redirect to the login's
loopback listener: the test server approves without asking anyone.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from protocol.result import TerminalStatus as S
from subagent.tools.oauth_store import TokenFile
from tests.support.daemon import Daemon, running_daemon, scripted
from tests.support.leaks import kill_all, wait_no_descendants

# Three processes start the SDK (the OAuth server, the login helper, a subagent): slow on a busy machine.
pytestmark = [pytest.mark.processes, pytest.mark.timeout(300)]

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "mcp_oauth.py"
AUTHORIZE = re.compile(r"^\s+(http://127\.0\.0\.1:\d+/authorize\?\S+)$")


@pytest.fixture
def oauth_url(tmp_path: Path) -> Iterator[str]:
    argv = [sys.executable, str(FIXTURE), "--ledger", str(tmp_path / "ledger.jsonl")]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # bounded by the test's timeout; the server prints at once
        yield f"http://127.0.0.1:{int(line.split()[1])}/mcp"
    finally:
        server.terminate()
        server.wait(timeout=10)
    strays = wait_no_descendants(timeout_s=10.0)
    kill_all(strays)
    assert not strays


def login(daemon: Daemon, name: str) -> subprocess.CompletedProcess[str]:
    """Run `agentd mcp login NAME` and approve in the 'browser' once it prints the URL."""
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentd",
            "mcp",
            "login",
            name,
            "--config",
            str(daemon.config),
            "--timeout",
            "90s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert cli.stdout is not None
        printed: list[str] = []
        for line in cli.stdout:  # ends when the helper exits, at the latest after --timeout
            printed.append(line)
            if match := AUTHORIZE.match(line.rstrip("\n")):
                page = httpx2.get(match.group(1), follow_redirects=True, timeout=30)
                assert page.status_code == 200 and "login was received" in page.text
                break
        out, err = cli.communicate(timeout=120)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    return subprocess.CompletedProcess(cli.args, cli.returncode, "".join(printed) + out, err)


def test_a_task_uses_a_server_after_agentd_mcp_login(tmp_path: Path, oauth_url: str) -> None:
    turns: list[dict[str, object]] = [
        {"tool_calls": [{"name": "web__whoami", "arguments": {}}]},
        {"text": "{last_tool_result}"},
    ]
    body = (
        scripted("m", turns, tmp_path)
        + f'[mcp.web]\nurl = "{oauth_url}"\noauth_flow = "authorization_code"\ntrust = []\n'
        + '[defaults]\nmodel = "m"\nmcp = ["web"]\n'
    )
    with running_daemon(tmp_path, body) as daemon:
        before = daemon.wait(daemon.submit("who am I?"), timeout_s=90)
        assert (before.status, before.abort, before.exit_code) == (S.CRASHED, "mcp", 6), before
        assert before.error is not None and "run `agentd mcp login web`" in before.error.message, before.error

        done = login(daemon, "web")
        assert done.returncode == 0, done
        assert "logged in to web (1 tool)" in done.stdout
        assert f"the login will be stored in {tmp_path / 'state' / 'mcp-oauth' / 'web.json'}" in done.stderr

        view = daemon.wait(daemon.submit("who am I?"), timeout_s=90)
        assert view.status is S.COMPLETED, view
        assert isinstance(view.result, str) and view.result.startswith("client "), view.result

        token_file = tmp_path / "state" / "mcp-oauth" / "web.json"
        stored = TokenFile(token_file, server="web", url=oauth_url).read()
        assert stored is not None and stored.tokens is not None and stored.tokens.refresh_token
        secrets = (stored.tokens.access_token, stored.tokens.refresh_token)
        shown = (
            daemon.cli("config", "show", str(daemon.config)).stdout + daemon.cli("logs", view.task_id).stdout
        )
    assert (token_file.stat().st_mode & 0o777, token_file.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    journal = b"".join(p.read_bytes() for p in (tmp_path / "state").glob("agentd.db*"))
    for secret in secrets:
        assert secret not in done.stdout + done.stderr + shown
        assert secret not in daemon.log_path.read_text()
        assert secret.encode() not in journal


def test_login_refuses_a_server_without_the_authorization_code_flow(tmp_path: Path) -> None:
    body = '[mcp.plain]\nurl = "http://127.0.0.1:9/mcp"\ntrust = []\n'
    config = tmp_path / "agentd.toml"
    config.write_text(f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n' + body)
    run = subprocess.run(
        [sys.executable, "-m", "agentd", "mcp", "login", "plain", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert 'does not use oauth_flow = "authorization_code"' in run.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "agentd", "mcp", "login", "nope", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "no MCP server named 'nope' (configured: plain)" in missing.stderr


def test_a_headless_login_takes_the_pasted_redirect(tmp_path: Path, oauth_url: str) -> None:
    # The browser is elsewhere: it cannot reach this host's loopback, so the person pastes the URL
    # it was sent to. Nothing here fetches the callback; only the pasted line can finish the login.
    config = tmp_path / "agentd.toml"
    config.write_text(
        f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n'
        f'[mcp.web]\nurl = "{oauth_url}"\noauth_flow = "authorization_code"\ntrust = []\n'
    )
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentd",
            "mcp",
            "login",
            "web",
            "--config",
            str(config),
            "--paste",
            "--timeout",
            "90s",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert cli.stdout is not None and cli.stdin is not None
        for line in cli.stdout:
            if match := AUTHORIZE.match(line.rstrip("\n")):
                redirected = httpx2.get(match.group(1), follow_redirects=False, timeout=30).headers[
                    "location"
                ]
                break
        else:
            raise AssertionError("no authorization URL printed")
        assert "paste the URL" in cli.stdout.readline() + cli.stdout.readline()
        cli.stdin.write(redirected + "\n")
        cli.stdin.flush()
        out, err = cli.communicate(timeout=120)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert cli.returncode == 0, (out, err)
    assert "logged in to web" in out
    assert (
        TokenFile(tmp_path / "state" / "mcp-oauth" / "web.json", server="web", url=oauth_url).read()
        is not None
    )
