"""`agentd mcp login NAME`'s helper: the OAuth authorization-code login (PKCE) for one MCP server.

The daemon's code may not import `mcp`, so the CLI runs `python -m subagent.oauth_login
--spec-fd N [--paste] [--timeout S]` as the daemon's user, with the server's grant
(`McpServerSpec` JSON) on descriptor N. The helper connects to the server with the SDK's
`OAuthClientProvider`: the server's 401 starts discovery (protected-resource and
authorization-server metadata), dynamic client registration unless a client id is configured,
and the authorization request. The helper prints the authorization URL — it opens nothing — and
takes the redirect on a loopback listener (RFC 8252 §7.3), or, with `--paste`, the redirected URL
pasted on stdin (a browser on another machine cannot reach this host's loopback). Once the
server has listed its tools with the new token, the login (registration, metadata, tokens) is
written to the server's token file under its lock (subagent/tools/oauth_store.py). Tokens are
never printed or logged.

Exit status: 0 logged in, 1 the login failed (the reason on stderr), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TextIO
from urllib.parse import parse_qs, urlsplit

import anyio
from mcp import ClientSession
from mcp.client._probe import negotiate_auto
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthToken
from pydantic import ValidationError

from protocol.spawn import LoopKnobs, McpServerSpec
from subagent.errors import LoginRequired
from subagent.tools.connection import CLIENT_INFO
from subagent.tools.http import open_http_transport
from subagent.tools.oauth_store import (
    CALLBACK_PATH,
    StoredLogin,
    TokenFile,
    client_metadata,
    preregistered_client,
    redirect_uri,
)

MAX_SPEC_BYTES = 1024 * 1024
DEFAULT_TIMEOUT_S = 300.0
POLL_S = 0.05

RedirectHandler = Callable[[str], Awaitable[None]]
CallbackHandler = Callable[[], Awaitable[AuthorizationCodeResult]]


def parse_redirect(url: str) -> AuthorizationCodeResult:
    """The code, state and issuer of a redirected URL (pure).

    Raises:
        LoginRequired: the authorization server refused, or the URL carries no code.
    """
    query = parse_qs(urlsplit(url.strip()).query)

    def one(key: str) -> str | None:
        values = query.get(key)
        return values[0] if values else None

    error = one("error")
    if error is not None:
        detail = one("error_description")
        raise LoginRequired(f"the authorization server refused: {error}" + (f" ({detail})" if detail else ""))
    code = one("code")
    if not code:
        raise LoginRequired("the redirected URL has no `code` parameter; paste the whole URL")
    return AuthorizationCodeResult(code=code, state=one("state"), iss=one("iss"))


class _MemoryLogin:
    """The SDK's `TokenStorage` for one login attempt: nothing touches the token file until the
    whole flow has worked, so a failed login leaves the previous one in place."""

    def __init__(self, client: OAuthClientInformationFull | None) -> None:
        self.client = client
        self.tokens: OAuthToken | None = None
        self.obtained_at = 0.0

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens
        self.obtained_at = time.time()

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


async def login(
    spec: McpServerSpec, *, port: int, redirect_handler: RedirectHandler, callback_handler: CallbackHandler
) -> tuple[StoredLogin, int]:
    """Run the authorization-code flow against `spec`'s server and store the login.

    Returns the stored login and how many tools the server listed with it.

    Raises:
        LoginRequired: the flow did not produce tokens (the reason says why).
    """
    assert spec.oauth_login is not None and spec.url is not None  # checked by the caller
    storage = _MemoryLogin(preregistered_client(spec.oauth_login, port))
    provider = OAuthClientProvider(
        spec.url,
        client_metadata(spec.oauth_login, port),
        storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    async with AsyncExitStack() as stack:
        read, write = await stack.enter_async_context(open_http_transport(spec, LoopKnobs(), provider))
        session = await stack.enter_async_context(ClientSession(read, write, client_info=CLIENT_INFO))
        await negotiate_auto(session)
        capabilities = session.server_capabilities
        tools = len((await session.list_tools()).tools) if capabilities and capabilities.tools else 0
    if storage.tokens is None:
        raise LoginRequired(
            "the server let the client in without OAuth; it needs no login (remove its oauth_flow)"
        )
    stored = StoredLogin(
        url=spec.url,
        client_info=storage.client,
        tokens=storage.tokens,
        obtained_at=storage.obtained_at,
        metadata=provider.context.oauth_metadata,
        resource_metadata=provider.context.protected_resource_metadata,
    )
    file = TokenFile(Path(spec.oauth_login.token_file), server=spec.name, url=spec.url)
    async with file.locked():
        file.write(stored)
    return stored, tools


class _Redirects:
    """Where a redirect arrives from: the loopback listener's thread, or a line pasted on stdin."""

    def __init__(self) -> None:
        self.urls: queue.Queue[str] = queue.Queue()

    def listener(self, port: int) -> ThreadingHTTPServer:
        urls = self.urls

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if urlsplit(self.path).path != CALLBACK_PATH:
                    self.send_error(404)
                    return
                urls.put(self.path)
                body = b"agentd: the login was received; you can close this page.\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # the request line carries the code: never logged

        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="login-listener", daemon=True).start()
        return server

    def read_pasted(self, stream: TextIO) -> None:
        def reader() -> None:
            for line in stream:
                if line.strip():
                    self.urls.put(line.strip())
                    return

        threading.Thread(target=reader, name="login-paste", daemon=True).start()

    async def next(self) -> AuthorizationCodeResult:
        while True:
            try:
                return parse_redirect(self.urls.get_nowait())
            except queue.Empty:
                await anyio.sleep(POLL_S)


def _reason(exc: BaseException) -> str:
    """The innermost useful message of a failure that crossed the SDK's task groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__


async def _main(args: argparse.Namespace, spec: McpServerSpec, out: TextIO) -> int:
    assert spec.oauth_login is not None
    redirects = _Redirects()
    try:
        server = redirects.listener(spec.oauth_login.redirect_port)
    except OSError as exc:
        print(f"cannot listen on 127.0.0.1:{spec.oauth_login.redirect_port}: {exc.strerror}", file=sys.stderr)
        return 1
    port = int(server.server_address[1])
    if args.paste:
        redirects.read_pasted(sys.stdin)

    async def show(url: str) -> None:
        print(
            f"Open this URL in a browser and approve agentd's access to {spec.name}:\n\n  {url}\n", file=out
        )
        where = f"Waiting for the redirect to {redirect_uri(port)}"
        if args.paste:
            where += " (or paste the URL the browser was sent to, then Enter)"
        print(where + f"; giving up after {args.timeout:g} s.", file=out, flush=True)

    try:
        with anyio.fail_after(args.timeout):
            stored, tools = await login(
                spec, port=port, redirect_handler=show, callback_handler=redirects.next
            )
    except TimeoutError:
        print(f"login to {spec.name} failed: no redirect within {args.timeout:g} s", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 — any failure of the flow is reported, none is a crash
        print(f"login to {spec.name} failed: {_reason(exc)}", file=sys.stderr)
        return 1
    finally:
        server.shutdown()
        server.server_close()
    assert stored.tokens is not None
    refresh = (
        "with a refresh token"
        if stored.tokens.refresh_token
        else "no refresh token: log in again when it expires"
    )
    saved = spec.oauth_login.token_file
    listed = f"{tools} tool" + ("" if tools == 1 else "s")
    print(f"logged in to {spec.name} ({listed}); tokens saved in {saved} ({refresh})", file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m subagent.oauth_login")
    parser.add_argument(
        "--spec-fd", type=int, required=True, help="descriptor holding the McpServerSpec JSON"
    )
    parser.add_argument("--paste", action="store_true", help="also accept the redirected URL on stdin")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds to wait in all")
    args = parser.parse_args(argv)
    if not 1 <= args.timeout <= 3600:
        print("--timeout must be between 1 and 3600 seconds", file=sys.stderr)
        return 2
    try:
        with os.fdopen(args.spec_fd, "rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
        if len(raw) > MAX_SPEC_BYTES:
            raise ValueError(f"over {MAX_SPEC_BYTES} bytes")
        spec = McpServerSpec.model_validate(json.loads(raw))
    except (OSError, ValueError, ValidationError) as exc:
        print(f"unreadable server spec: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if spec.oauth_login is None or spec.url is None:
        print(f'{spec.name} is not an HTTP server with oauth_flow = "authorization_code"', file=sys.stderr)
        return 2
    return anyio.run(_main, args, spec, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
