"""The token store of `agentd mcp login` (subagent/tools/oauth_store.py), without a server: file
permissions, atomic replacement, what a read refuses, the lock across processes, and a provider
adopting a token another subagent refreshed instead of spending its own refresh token."""

from __future__ import annotations

import os
import stat
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl

from protocol.spawn import McpServerSpec
from subagent.errors import LoginRequired
from subagent.oauth_login import parse_redirect
from subagent.tools import oauth_store
from subagent.tools.oauth_store import EXPIRY_MARGIN_S, LoginProvider, StoredLogin, TokenFile

pytestmark = pytest.mark.anyio

URL = "https://mcp.example/mcp"


def a_login(access: str = "a1", refresh: str = "r1", *, obtained_at: float | None = None) -> StoredLogin:
    return StoredLogin(
        url=URL,
        client_info=OAuthClientInformationFull(
            client_id="c1",
            redirect_uris=[AnyUrl("http://127.0.0.1:1/callback")],
            token_endpoint_auth_method="none",
        ),
        tokens=OAuthToken(access_token=access, refresh_token=refresh, expires_in=3600),
        obtained_at=time.time() if obtained_at is None else obtained_at,
    )


@pytest.fixture
def store(tmp_path: Path) -> TokenFile:
    directory = tmp_path / "mcp-oauth"
    directory.mkdir(mode=0o700)
    return TokenFile(directory / "web.json", server="web", url=URL)


def test_a_written_login_is_private_and_reads_back(store: TokenFile) -> None:
    login = a_login()
    store.write(login)
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert store.read() == login
    assert sorted(p.name for p in store.path.parent.iterdir()) == ["web.json"]


def test_a_write_that_fails_leaves_the_previous_login_and_no_temporary(
    store: TokenFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.write(a_login("old"))

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space left"):
        store.write(a_login("new"))
    monkeypatch.undo()
    stored = store.read()
    assert stored is not None and stored.tokens is not None and stored.tokens.access_token == "old"
    assert sorted(p.name for p in store.path.parent.iterdir()) == ["web.json"]


def test_a_file_others_can_read_is_refused_naming_it(store: TokenFile) -> None:
    store.write(a_login())
    os.chmod(store.path, 0o640)
    with pytest.raises(
        LoginRequired, match=r"web\.json is not private to this user \(mode 640\).*agentd mcp login web"
    ):
        store.read()


def test_a_missing_file_or_a_login_for_another_url_is_no_login(store: TokenFile) -> None:
    assert store.read() is None
    store.write(a_login())
    other = TokenFile(store.path, server="web", url="https://elsewhere.example/mcp")
    assert other.read() is None


@pytest.mark.parametrize(
    "body", [b"not json", b'{"format": 99, "url": "x"}', b"x" * (oauth_store.MAX_FILE_BYTES + 1)]
)
def test_an_unreadable_file_asks_for_a_login(store: TokenFile, body: bytes) -> None:
    fd = os.open(store.path, os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(body)
    with pytest.raises(LoginRequired, match="agentd mcp login web"):
        store.read()


def test_a_token_is_stale_a_margin_before_it_expires() -> None:
    login = a_login(obtained_at=1000.0)
    assert login.fresh_until() == 1000.0 + 3600 - EXPIRY_MARGIN_S
    short = StoredLogin(URL, None, OAuthToken(access_token="a", expires_in=10), obtained_at=1000.0)
    assert short.fresh_until() == 1000.0 + 10 - 1.0  # a tenth of a short lifetime
    assert StoredLogin(URL, None, OAuthToken(access_token="a"), obtained_at=1000.0).fresh_until() is None


async def test_the_lock_excludes_another_process_and_is_bounded(store: TokenFile) -> None:
    holder = textwrap.dedent(
        f"""
        import fcntl, os, sys
        fd = os.open({str(store.lock_path)!r}, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("locked", flush=True)
        sys.stdin.readline()
        """
    )
    async with await anyio.open_process([sys.executable, "-c", holder]) as child:
        assert child.stdout is not None and child.stdin is not None
        with anyio.fail_after(30):
            assert (await child.stdout.receive()).startswith(b"locked")
        with pytest.raises(TimeoutError):
            await store.acquire(timeout_s=0.3)
        await child.stdin.send(b"\n")
        with anyio.fail_after(10):
            assert await child.wait() == 0
    fd = await store.acquire(timeout_s=10)
    TokenFile.release(fd)
    assert stat.S_IMODE(store.lock_path.stat().st_mode) == 0o600


async def test_a_provider_adopts_a_token_refreshed_by_another_instead_of_refreshing(store: TokenFile) -> None:
    store.write(a_login("old", "r-old", obtained_at=time.time() - 7200))  # expired
    spec = McpServerSpec.model_validate(
        {"name": "web", "transport": "http", "url": URL, "oauth_login": {"token_file": str(store.path)}}
    )
    provider = LoginProvider(spec)
    await provider._initialize()
    assert not provider.context.is_token_valid()
    # Another subagent refreshed meanwhile: the file holds the rotated pair.
    store.write(a_login("new", "r-new"))
    held = await provider._lock_if_stale()
    assert held is None  # nothing left to refresh, and the lock is not kept
    assert provider.context.current_tokens is not None
    assert provider.context.current_tokens.access_token == "new"
    assert provider.context.current_tokens.refresh_token == "r-new"
    fd = await store.acquire(timeout_s=1)  # free
    TokenFile.release(fd)


async def test_a_provider_that_must_refresh_holds_the_lock(store: TokenFile) -> None:
    store.write(a_login("old", "r-old", obtained_at=time.time() - 7200))
    spec = McpServerSpec.model_validate(
        {"name": "web", "transport": "http", "url": URL, "oauth_login": {"token_file": str(store.path)}}
    )
    provider = LoginProvider(spec)
    await provider._initialize()
    held = await provider._lock_if_stale()
    assert held is not None
    try:
        with pytest.raises(TimeoutError):
            await store.acquire(timeout_s=0.2)
    finally:
        TokenFile.release(held)


def test_a_redirect_is_parsed_and_a_refusal_is_reported() -> None:
    result = parse_redirect("http://127.0.0.1:5/callback?code=abc&state=s1&iss=https%3A%2F%2Fas.example")
    assert (result.code, result.state, result.iss) == ("abc", "s1", "https://as.example")
    with pytest.raises(LoginRequired, match=r"refused: access_denied \(the user said no\)"):
        parse_redirect("http://127.0.0.1:5/callback?error=access_denied&error_description=the+user+said+no")
    with pytest.raises(LoginRequired, match="no `code`"):
        parse_redirect("http://127.0.0.1:5/callback?state=s1")
