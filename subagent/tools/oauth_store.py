"""The tokens of an `agentd mcp login`, shared by every subagent that uses the server.

One JSON file per server in the daemon's state directory (`mcp-oauth/NAME.json`, 0600, in a
0700 directory): the server's URL (a login is for one URL), the authorization server's metadata
(so a refresh goes to its token endpoint without discovery), the client registration, and the
tokens with the time they were obtained. A write is atomic (a temporary file in the same
directory, fsynced, renamed over) and happens only under an exclusive `flock` of `NAME.lock`.

OAuth 2.1 rotates a public client's refresh token on every use: two subagents refreshing with the
same refresh token would each invalidate the other's result. So `LoginProvider` (the SDK's
`OAuthClientProvider`) refreshes only while it holds the lock, after reading the file again: a
subagent that finds the token another one already refreshed adopts it instead of spending its own,
now stale, refresh token. Tokens are only ever written as the answer to a refresh of the token the
file holds (or by a new login), so the last write is always the newest valid token.

The subagent never runs the browser step: where the SDK would send a person to the authorization
endpoint, `LoginProvider` raises `LoginRequired`, which says to run `agentd mcp login NAME`.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from pydantic import AnyUrl

from protocol.spawn import McpServerSpec, OAuthLoginSpec
from subagent.errors import LoginRequired

FORMAT = 1
MAX_FILE_BYTES = 256 * 1024
LOCK_POLL_S = 0.02
LOCK_TIMEOUT_S = 15.0
# A token is refreshed this long before the expiry the server gave (at most a tenth of its
# lifetime), so it does not lapse between the check and the server reading it.
EXPIRY_MARGIN_S = 30.0
CALLBACK_PATH = "/callback"
_PARTS = ("client_info", "tokens", "metadata", "resource_metadata")


def redirect_uri(port: int) -> str:
    """The loopback redirect URI of a login (RFC 8252 §7.3: IP literal, any port)."""
    return f"http://127.0.0.1:{port}{CALLBACK_PATH}"


def client_metadata(login: OAuthLoginSpec, port: int) -> OAuthClientMetadata:
    """What the login registers (RFC 7591): a native public client with a loopback redirect."""
    return OAuthClientMetadata(
        client_name="agentd",
        redirect_uris=[AnyUrl(redirect_uri(port))],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        scope=login.scope,
    )


def preregistered_client(login: OAuthLoginSpec, port: int) -> OAuthClientInformationFull | None:
    """The configured public client, when there is one (no dynamic registration then)."""
    if login.client_id is None:
        return None
    return OAuthClientInformationFull(
        client_id=login.client_id,
        redirect_uris=[AnyUrl(redirect_uri(port))],
        grant_types=["authorization_code", "refresh_token"],
        token_endpoint_auth_method="none",
        scope=login.scope,
    )


@dataclass(frozen=True, slots=True)
class StoredLogin:
    """One server's login as kept on disk."""

    url: str
    client_info: OAuthClientInformationFull | None
    tokens: OAuthToken | None
    # Our clock when `tokens` were issued: their expiry is this plus `expires_in`.
    obtained_at: float
    metadata: OAuthMetadata | None = None
    resource_metadata: ProtectedResourceMetadata | None = None

    def fresh_until(self) -> float | None:
        """When the access token should be refreshed (pure); None: the server gave no expiry."""
        if self.tokens is None or self.tokens.expires_in is None:
            return None
        lifetime = float(self.tokens.expires_in)
        return self.obtained_at + lifetime - min(EXPIRY_MARGIN_S, lifetime / 10)

    def to_json(self) -> bytes:
        parts = (self.client_info, self.tokens, self.metadata, self.resource_metadata)
        body: dict[str, object] = {"format": FORMAT, "url": self.url, "obtained_at": self.obtained_at}
        for key, model in zip(_PARTS, parts, strict=True):
            body[key] = None if model is None else model.model_dump(mode="json", exclude_none=True)
        return json.dumps(body, indent=1).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> StoredLogin:
        """Parse a token file. Raises ValueError (or ValidationError, a ValueError) when it is not one."""
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("url"), str):
            raise ValueError("not an agentd token file of this version")

        def part(key: str) -> object:
            return data.get(key)

        client, tokens, metadata, resource = (part(k) for k in _PARTS)
        return cls(
            url=data["url"],
            client_info=None if client is None else OAuthClientInformationFull.model_validate(client),
            tokens=None if tokens is None else OAuthToken.model_validate(tokens),
            obtained_at=float(data.get("obtained_at") or 0.0),
            metadata=None if metadata is None else OAuthMetadata.model_validate(metadata),
            resource_metadata=None
            if resource is None
            else ProtectedResourceMetadata.model_validate(resource),
        )


class TokenFile:
    """One server's token file and its lock. Reads refuse a file others could read or change."""

    def __init__(self, path: Path, *, server: str, url: str) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name.removesuffix(".json") + ".lock")
        self.server = server
        self.url = url

    def login_required(self, why: str) -> LoginRequired:
        return LoginRequired(f"{why}: run `agentd mcp login {self.server}` as the daemon's user")

    def read(self) -> StoredLogin | None:
        """The stored login for this server's URL; None when there is none (or it is for another URL).

        Raises:
            LoginRequired: the file is not private, too large or unreadable.
        """
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self.login_required(f"cannot read {self.path}: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_uid != os.geteuid() or st.st_mode & 0o077:
                raise self.login_required(
                    f"{self.path} is not private to this user (mode {st.st_mode & 0o777:o}); remove it"
                )
            raw = f.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise self.login_required(f"{self.path} is over {MAX_FILE_BYTES} bytes")
        try:
            login = StoredLogin.from_json(raw)
        except ValueError as exc:
            raise self.login_required(f"{self.path} is unreadable ({type(exc).__name__})") from None
        return login if login.url == self.url else None

    def write(self, login: StoredLogin) -> None:
        """Replace the file atomically (0600). The caller holds the lock."""
        directory = self.path.parent
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=directory)  # mode 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(login.to_json())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)  # the rename itself survives a crash
        finally:
            os.close(dir_fd)

    async def acquire(self, timeout_s: float = LOCK_TIMEOUT_S) -> int:
        """Take the exclusive lock; the returned descriptor is what `release` closes.

        Raises:
            TimeoutError: another holder kept it for `timeout_s`.
        """
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            with anyio.fail_after(timeout_s):
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        return fd
                    except BlockingIOError:
                        await anyio.sleep(LOCK_POLL_S)
        except BaseException:
            os.close(fd)
            raise

    @staticmethod
    def release(fd: int) -> None:
        os.close(fd)  # closing the descriptor drops its flock

    @asynccontextmanager
    async def locked(self, timeout_s: float = LOCK_TIMEOUT_S) -> AsyncIterator[None]:
        fd = await self.acquire(timeout_s)
        try:
            yield
        finally:
            self.release(fd)


class StoredTokens:
    """The SDK's `TokenStorage` over a `TokenFile`, for a subagent: it reads the login and writes
    refreshed tokens back; a registration it is handed is kept in memory only (only a login
    registers a client for good)."""

    def __init__(self, file: TokenFile) -> None:
        self.file = file
        self.loaded: StoredLogin | None = None
        self._client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        self.loaded = self.file.read()
        return self.loaded.tokens if self.loaded is not None else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        # Only the provider's refresh calls this, holding the file's lock.
        current = self.file.read()
        base = current or self.loaded
        login = StoredLogin(
            url=self.file.url,
            client_info=base.client_info if base is not None else self._client,
            tokens=tokens,
            obtained_at=time.time(),
            metadata=base.metadata if base is not None else None,
            resource_metadata=base.resource_metadata if base is not None else None,
        )
        self.file.write(login)
        self.loaded = login

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        login = self.loaded if self.loaded is not None else self.file.read()
        return login.client_info if login is not None else self._client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._client = client_info


class LoginProvider(OAuthClientProvider):
    """The SDK's authorization-code provider over a stored login: bearer tokens from the file, a
    refresh under the file's lock, and `LoginRequired` wherever a person would be needed."""

    def __init__(self, spec: McpServerSpec) -> None:
        login, url = spec.oauth_login, spec.url
        assert login is not None and url is not None  # the caller checked
        self.file = TokenFile(Path(login.token_file), server=spec.name, url=url)
        self._storage = StoredTokens(self.file)
        # The metadata would only be used to register a client, which a subagent never does (the
        # flow stops at `_no_person` first); any port makes it valid.
        super().__init__(
            url,
            client_metadata(login, login.redirect_port or 1),
            self._storage,
            redirect_handler=self._no_person,
            callback_handler=self._no_callback,
        )

    def check(self) -> None:
        """Fail before connecting when there is no login to use.

        Raises:
            LoginRequired: no stored login for this server's URL (or an unusable file).
        """
        login = self.file.read()
        if login is None or login.tokens is None:
            raise self.file.login_required(f"no OAuth login is stored for {self.file.url}")

    async def _no_person(self, authorization_url: str) -> None:
        raise self.file.login_required("the server wants a new OAuth authorization")

    async def _no_callback(self) -> AuthorizationCodeResult:
        raise self.file.login_required("the server wants a new OAuth authorization")

    def _adopt(self, login: StoredLogin | None) -> None:
        """Take a login read from the file as the current one."""
        self.context.current_tokens = login.tokens if login is not None else None
        self.context.token_expiry_time = login.fresh_until() if login is not None else None
        if login is None:
            return
        if login.client_info is not None:
            self.context.client_info = login.client_info
        # Restored so a refresh goes to the discovered token endpoint with the right resource.
        if login.metadata is not None and self.context.oauth_metadata is None:
            self.context.oauth_metadata = login.metadata
        if login.resource_metadata is not None and self.context.protected_resource_metadata is None:
            self.context.protected_resource_metadata = login.resource_metadata

    async def _initialize(self) -> None:
        await super()._initialize()
        self._adopt(self._storage.loaded)

    async def _lock_if_stale(self) -> int | None:
        """When the token needs refreshing: lock the file, adopt a token refreshed meanwhile, and
        keep the lock (returned) only if this flow must refresh itself."""
        if self.context.is_token_valid():
            return None
        held = await self.file.acquire()
        try:
            login = self.file.read()
            if login is not None and login.tokens is not None and login.tokens != self.context.current_tokens:
                self._adopt(login)  # another subagent refreshed: its refresh token is the live one
            if self.context.is_token_valid() or not self.context.can_refresh_token():
                self.file.release(held)
                return None
        except BaseException:
            self.file.release(held)
            raise
        return held

    async def _auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        for attempt in range(2):
            if not self._initialized:  # first use, or the SDK dropped a login whose refresh failed
                await self._initialize()
            if attempt:
                # The server refused the token: treat it as expired (refresh, or adopt a newer one).
                self.context.token_expiry_time = 0.0
            held = await self._lock_if_stale()
            flow = super()._auth_flow(request)
            refused = False
            try:
                outgoing = await flow.__anext__()
                while True:
                    if outgoing is request and held is not None:
                        self.file.release(held)  # the refresh (if any) is written: let others in
                        held = None
                    response = yield outgoing
                    if outgoing is request and response.status_code == 401:
                        refused = True  # not the SDK's browser flow: refresh once, else ask for a login
                        break
                    outgoing = await flow.asend(response)
            except StopAsyncIteration:
                return
            finally:
                if held is not None:
                    self.file.release(held)
                await flow.aclose()
            if not refused:
                return
        raise self.file.login_required("the server refused the stored OAuth login (HTTP 401)")


def login_provider(spec: McpServerSpec) -> LoginProvider | None:
    """The provider of an `authorization_code` server, or None for any other."""
    if spec.oauth_login is None or spec.url is None:
        return None
    return LoginProvider(spec)
