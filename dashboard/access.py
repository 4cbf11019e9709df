"""Who may reach `agentd web` (pure): where it listens, and whether one request is let in.

Every request is checked in this order: its `Host` must be this server's (a web page that reaches
a loopback port through DNS rebinding names its own host), a browser's `Origin` must be this
server's own, the session cookie must be one this server issued, and a request that changes
anything must carry the session's CSRF token in a header. `Keys` holds the secrets: the one-time
launch token printed in the URL, and the sessions it was exchanged for.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import quote

from agentd.api import listen_address
from agentd.api.listen_address import Listen, ListenError
from dashboard.errors import AccessError

CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD"})


def parse_listen(value: str, *, allow_remote: bool) -> Listen:
    """`HOST:PORT` as given to `--listen` (`listen_address.parse_listen`).

    Raises:
        AccessError: not HOST:PORT, or not a loopback address without `--allow-remote`.
    """
    try:
        return listen_address.parse_listen(
            value,
            flag="--listen",
            allow_remote=allow_remote,
            remote_advice="and put TLS and authentication in front: docs/web.md",
        )
    except ListenError as exc:
        raise AccessError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    message: str


@dataclass(frozen=True, slots=True)
class Origins:
    """The names this server answers to. `port` is the port actually bound. With `remote`, any
    `Host` is accepted (the server is reached by names it cannot know, through a proxy), but an
    `Origin` must still name the same host and port the request did."""

    listen: Listen
    port: int
    remote: bool = False

    def hosts(self) -> frozenset[str]:
        return self.listen.hosts(self.port)

    def refusal(self, headers: Mapping[str, str]) -> Refusal | None:
        """Why this request's `Host` or `Origin` is refused, or None. `headers` keys are lower case."""
        host = headers.get("host", "").lower()
        if not self.remote and host not in self.hosts():
            return Refusal(421, f"Host {host!r} is not this server's loopback address")
        origin = headers.get("origin")
        if origin is not None:
            allowed = {f"http://{host}", f"https://{host}"} if self.remote else _http(self.hosts())
            if origin.lower().rstrip("/") not in allowed:
                return Refusal(403, f"Origin {origin!r} is not this server's; agentd web refuses it")
        return None


def _http(hosts: frozenset[str]) -> frozenset[str]:
    return frozenset(f"http://{host}" for host in hosts)


@dataclass(slots=True)
class Keys:
    """The launch token and the sessions it was exchanged for (state of one server process).

    Invariant: the launch token is exchanged at most once; afterwards only a session cookie gets
    in. A session's CSRF token is derived from it with a server secret, so it is never stored.
    """

    launch_token: str
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    sessions: set[str] = field(default_factory=set)
    redeemed: bool = False

    def redeem(self, presented: str) -> str | None:
        """A new session for the launch token, or None: wrong, or already used."""
        if self.redeemed or not hmac.compare_digest(presented.encode(), self.launch_token.encode()):
            return None
        self.redeemed = True
        session = secrets.token_urlsafe(32)
        self.sessions.add(session)
        return session

    def known(self, session: str | None) -> bool:
        if not session:
            return False
        return any(hmac.compare_digest(session.encode(), known.encode()) for known in self.sessions)

    def csrf(self, session: str) -> str:
        return hmac.new(self.secret, session.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, session: str, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(), self.csrf(session).encode())


def cookie_name(port: int) -> str:
    """One cookie per port: browsers share cookies between the ports of one host."""
    return f"agentd_web_{port}"


def parse_cookies(header: str) -> dict[str, str]:
    cookies: dict[str, str] = {}
    for part in header.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep and name not in cookies:
            cookies[name] = value
    return cookies


@dataclass(frozen=True, slots=True)
class Admit:
    """Let the request in, as `session`."""

    session: str


@dataclass(frozen=True, slots=True)
class Exchange:
    """The launch token was good: set the session cookie and send the browser to `location`."""

    session: str
    location: str


Verdict = Admit | Exchange | Refusal


def own_path(path: str) -> str:
    """`path` (percent-encoded) if it can only name a page of this server, else `/`: browsers
    read `//host` as another site (and a backslash as a slash, which the encoding escapes)."""
    if not path.startswith("/") or path.startswith("//"):
        return "/"
    return quote(path, safe="/-._~!$&'()*+,;=:@")


def decide(
    keys: Keys,
    origins: Origins,
    *,
    method: str,
    path: str,
    query_token: str | None,
    headers: Mapping[str, str],
) -> Verdict:
    """What to do with one request (`headers` keys lower case)."""
    refused = origins.refusal(headers)
    if refused is not None:
        return refused
    session = parse_cookies(headers.get("cookie", "")).get(cookie_name(origins.port))
    has_session = keys.known(session)
    if query_token is not None and method in SAFE_METHODS:
        if has_session:
            assert session is not None
            return Exchange(session, own_path(path))  # a reload of the printed URL: drop the token
        fresh = keys.redeem(query_token)
        if fresh is None:
            return Refusal(401, "the token is wrong or was already used; `agentd web` prints a new one")
        return Exchange(fresh, own_path(path))
    if not has_session or session is None:
        return Refusal(401, "open the URL `agentd web` printed (it carries a one-time token)")
    if method not in SAFE_METHODS and not keys.csrf_ok(session, headers.get(CSRF_HEADER)):
        return Refusal(403, "a request that changes something needs this page's CSRF token")
    return Admit(session)
