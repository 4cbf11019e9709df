"""The authorization-code login against a real OAuth-protected MCP server (`mcp_oauth.py`, built
with the SDK's server auth helpers): `subagent.oauth_login.login` stores the login, and the
tool layer (`open_tools`, the subagent's own code) uses it, refreshes it under the token file's
lock when it expires, and fails with a message naming `agentd mcp login` when it cannot.

The server rotates refresh tokens and refuses a spent one, and records every token-endpoint
outcome in a ledger file: "no refresh was refused" is read there, not guessed.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp.shared.auth import AuthorizationCodeResult
from pydantic import JsonValue

from protocol.spawn import McpServerSpec
from subagent.errors import McpFatal
from subagent.oauth_login import login, parse_redirect
from subagent.tools import open_tools
from subagent.tools.oauth_store import TokenFile
from tests.support.leaks import kill_all, wait_no_descendants
from tests.tools.servers import FIXTURES, EventLog, make_payload, tool_call

pytestmark = pytest.mark.anyio

ROUTERS = 5


@dataclass
class OAuthServer:
    url: str
    ledger: Path
    # Ledger lines before the current test: one server serves the module.
    seen: int = 0

    def _all(self) -> list[dict[str, object]]:
        if not self.ledger.exists():
            return []
        return [json.loads(line) for line in self.ledger.read_text().splitlines()]

    def grants(self) -> list[dict[str, object]]:
        """This test's token-endpoint outcomes."""
        return self._all()[self.seen :]

    def start_test(self) -> None:
        self.seen = len(self._all())


@pytest.fixture(scope="module")
async def module_oauth_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[OAuthServer]:
    ledger = tmp_path_factory.mktemp("oauth") / "ledger.jsonl"
    argv = [sys.executable, str(FIXTURES / "mcp_oauth.py"), "--ledger", str(ledger)]
    async with await anyio.open_process(argv) as server:
        assert server.stdout is not None
        with anyio.fail_after(30):
            line = await server.stdout.receive()
        yield OAuthServer(f"http://127.0.0.1:{int(line.split()[1])}/mcp", ledger)
        server.terminate()
        with anyio.fail_after(10):
            await server.wait()
    strays = wait_no_descendants(timeout_s=10.0)
    kill_all(strays)
    assert not strays


@pytest.fixture
def oauth_server(module_oauth_server: OAuthServer) -> OAuthServer:
    module_oauth_server.start_test()
    return module_oauth_server


def server_spec(url: str, token_dir: Path) -> dict[str, JsonValue]:
    return {
        "name": "web",
        "transport": "http",
        "url": url,
        "connect_timeout_s": 20,
        "oauth_login": {"token_file": str(token_dir / "web.json")},
    }


async def approve_at_once(spec: McpServerSpec) -> None:
    """The login, with the browser played by following the authorization endpoint's redirect."""
    redirected: list[str] = []

    async def browser(authorization_url: str) -> None:
        async with httpx2.AsyncClient(follow_redirects=False, timeout=10) as client:
            redirected.append((await client.get(authorization_url)).headers["location"])

    async def callback() -> AuthorizationCodeResult:
        return parse_redirect(redirected.pop())

    await login(spec, port=8976, redirect_handler=browser, callback_handler=callback)


def token_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "mcp-oauth"
    directory.mkdir(mode=0o700)
    return directory


def expire(file: TokenFile) -> str:
    """Make the stored token look expired to every client (as an hour passing would); return the
    refresh token it holds."""
    login_ = file.read()
    assert login_ is not None and login_.tokens is not None and login_.tokens.refresh_token
    file.write(replace(login_, obtained_at=login_.obtained_at - 7200))
    return login_.tokens.refresh_token


async def test_a_stored_login_is_used_and_the_file_is_private(
    oauth_server: OAuthServer, tmp_path: Path
) -> None:
    tokens = token_dir(tmp_path)
    payload = make_payload(server_spec(oauth_server.url, tokens))
    await approve_at_once(payload.mcp_servers[0])
    file = tokens / "web.json"
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert [f.name for f in tokens.iterdir() if f.name.startswith(".")] == []  # no temporary left
    async with open_tools(payload, sink=EventLog()) as router:
        outcome = await router.call(tool_call("web__whoami"), timeout_s=10)
    assert outcome.text.startswith("client ")
    assert oauth_server.grants() == [{"grant": "authorization_code", "ok": True}]


async def test_concurrent_subagents_refresh_once_and_keep_the_rotated_token(
    oauth_server: OAuthServer, tmp_path: Path
) -> None:
    tokens = token_dir(tmp_path)
    payload = make_payload(server_spec(oauth_server.url, tokens))
    await approve_at_once(payload.mcp_servers[0])
    file = TokenFile(tokens / "web.json", server="web", url=oauth_server.url)
    spent = expire(file)

    texts: list[str] = []

    async def one_task() -> None:
        # Each router has its own provider and its own descriptor on the lock, as separate
        # subagent processes would (flock is per open file, not per process).
        async with open_tools(payload, sink=EventLog()) as router:
            texts.append((await router.call(tool_call("web__whoami"), timeout_s=20)).text)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for _ in range(ROUTERS):
                tg.start_soon(one_task)
    assert len(texts) == ROUTERS and all(t.startswith("client ") for t in texts)
    refreshes = [g for g in oauth_server.grants() if g["grant"] == "refresh_token"]
    assert refreshes == [{"grant": "refresh_token", "ok": True}]  # one refresh, none refused
    stored = file.read()
    assert stored is not None and stored.tokens is not None
    assert stored.tokens.refresh_token not in (None, spent)  # the rotated token was written back
    # ...and it is live: the next expiry refreshes with it.
    expire(file)
    async with open_tools(payload, sink=EventLog()) as router:
        assert (await router.call(tool_call("web__whoami"), timeout_s=10)).text.startswith("client ")
    assert [g["ok"] for g in oauth_server.grants() if g["grant"] == "refresh_token"] == [True, True]


async def test_no_stored_login_fails_the_connect_naming_the_command(
    oauth_server: OAuthServer, tmp_path: Path
) -> None:
    payload = make_payload(server_spec(oauth_server.url, token_dir(tmp_path)))
    with pytest.raises(McpFatal, match=r"run `agentd mcp login web` as the daemon's user"):
        async with open_tools(payload, sink=EventLog()):
            pass
    assert oauth_server.grants() == []


async def test_a_refused_refresh_asks_for_a_new_login(oauth_server: OAuthServer, tmp_path: Path) -> None:
    tokens = token_dir(tmp_path)
    payload = make_payload(server_spec(oauth_server.url, tokens))
    await approve_at_once(payload.mcp_servers[0])
    file = TokenFile(tokens / "web.json", server="web", url=oauth_server.url)
    stored = file.read()
    assert stored is not None and stored.tokens is not None
    # A refresh token the server no longer honours (revoked, or spent by a copy of the file).
    dead = stored.tokens.model_copy(update={"refresh_token": "revoked", "access_token": "expired"})
    file.write(replace(stored, tokens=dead, obtained_at=stored.obtained_at - 7200))
    with pytest.raises(McpFatal, match=r"agentd mcp login web"):
        async with open_tools(payload, sink=EventLog()):
            pass
    assert {"grant": "refresh_token", "ok": False} in oauth_server.grants()
    assert file.read() is not None  # a failed refresh never erases the stored login


async def test_a_token_file_others_can_read_is_refused(oauth_server: OAuthServer, tmp_path: Path) -> None:
    tokens = token_dir(tmp_path)
    payload = make_payload(server_spec(oauth_server.url, tokens))
    await approve_at_once(payload.mcp_servers[0])
    os.chmod(tokens / "web.json", 0o644)
    with pytest.raises(McpFatal, match=r"not private to this user \(mode 644\)"):
        async with open_tools(payload, sink=EventLog()):
            pass
