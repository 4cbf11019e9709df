"""A small synchronous client of the daemon API, for the CLI (docs/design.md §9).

Standard-library sockets and no event loop, so `agentd submit` starts fast. A call sends one of
`protocol.api`'s request models and returns that method's result model, validated; a plain call
(`call_plain`) sends a method and its params as plain JSON and returns the result as JSON, so a
command that reads little (`agentd status`) never imports pydantic or the API's models
(docs/decisions.md, "A read path without the models"). Both ride one transport: one connection
reused across calls; every read bounded in size and in time; every failure, a reply that breaks
the protocol included, an `ApiClientError` whose message tells a person what to do next.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pwd
import select
import socket
import stat
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from agentd.api.peercred import peer_credentials
from agentd.errors import ApiClientError
from protocol.envelope import INVALID_REQUEST, message_kind
from protocol.lines import MAX_API_FRAME, LineSplitter, Oversize

if TYPE_CHECKING:
    from protocol.api import ApiReply, EventsRequest, EventView, Request, TaskView, WatchRequest
    from protocol.jsonrpc import ErrorResponse, Response

# The models are imported where a model call needs them, never at import: a plain call's command
# must not pay for pydantic (docs/decisions.md, "A read path without the models").

# Local error codes: outside JSON-RPC's reserved range and the daemon's 1xxx codes.
UNREACHABLE = 2001  # no daemon at the path, stale socket, or permission denied
TIMED_OUT = 2002  # the daemon did not answer in time
BAD_RESPONSE = 2003  # the answer broke the protocol (too large, not JSON, wrong id, wrong shape)
CONNECTION_LOST = 2004  # the daemon closed the connection before answering
UNTRUSTED_DAEMON = 2005  # the socket is served by a uid that is not root, ours or the service user's

DAEMON_USER = "agentd"  # the system service's user (systemd/agentd.sysusers.conf)

DEFAULT_TIMEOUT_S = 30.0
MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # a list of many tasks; anything larger is a broken daemon
READ_CHUNK = 256 * 1024
EVENT_NOTIFICATION = "task.event"  # `protocol.api.EventNotification`'s method
TASK_CHANGED = "task.changed"  # `protocol.api.TaskChangedNotification`'s method
# as `protocol.api.REPLY_KINDS`
REPLY_KINDS = frozenset({EVENT_NOTIFICATION, TASK_CHANGED, "result", "error"})

ResultT = TypeVar("ResultT")


class ApiClient:
    """A connection to an agentd socket. Use as a context manager, or call `close()`.

    `timeout_s` bounds connecting and each call's answer (`math.inf` for no bound); a call may
    override it, e.g. `task.wait` with a long server-side timeout. Nothing is sent until the
    kernel says (`SO_PEERCRED`) the listener runs as one of `trusted_uids` (default: root, this
    user, and the `agentd` service user): a socket another user squatted never sees a spec.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        trusted_uids: frozenset[int] | None = None,
    ) -> None:
        self._path = os.fspath(path)
        self._trusted_uids = trusted_uids if trusted_uids is not None else trusted_daemon_uids()
        self._timeout_s = timeout_s
        self._max_response = max_response_bytes
        self._sock: socket.socket | None = None
        self._splitter = LineSplitter(max_response_bytes)
        self._lines: deque[bytes | Oversize] = deque()
        self._next_id = 1
        # Invariant: once set (by `shutdown`, from any thread), no new connection is kept.
        self._shut_down = False

    @property
    def path(self) -> str:
        """The socket this client talks to."""
        return self._path

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (the next call opens a new one)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._splitter = LineSplitter(self._max_response)
        self._lines.clear()

    def call(self, request: Request[ResultT], *, timeout_s: float | None = None) -> ResultT:
        """Send one request and return its result, validated. `task.event` notifications are skipped.

        The request's `id` is replaced by this connection's next one.

        Raises:
            ApiClientError: the daemon's error (its code, message and retryable flag), or a local
                failure (`UNREACHABLE`, `TIMED_OUT`, `BAD_RESPONSE`, `CONNECTION_LOST`).
        """
        from protocol.api import EventNotification, TaskChangedNotification

        budget = self._timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + budget
        sent = self._send(request, deadline)
        while True:
            message, _ = self._receive(sent.method, deadline, budget)
            reply = self._reply(message)
            if not isinstance(reply, EventNotification | TaskChangedNotification):
                return self._result_of(reply, sent)

    def call_plain(
        self, method: str, params: dict[str, Any], *, timeout_s: float | None = None
    ) -> PlainResult:
        """Send `method` with `params` as plain JSON; its result as JSON, not validated against
        the models (the caller checks the shape it reads). `task.event` notifications are skipped.

        Raises:
            ApiClientError: as for `call`.
        """
        budget = self._timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + budget
        request_id = self._next_id
        self._next_id += 1
        request = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        self._send_frame(_plain_frame(request), method, deadline)
        while True:
            message, line = self._receive(method, deadline, budget)
            kind = message_kind(message)
            if kind in (EVENT_NOTIFICATION, TASK_CHANGED):
                continue
            if message.get("id") not in (request_id, None):
                raise self._bad_response("an answer to another request")
            if kind == "error":
                error = _error_of(message.get("error"))
                raise error if error is not None else self._bad_response("a malformed error message")
            return PlainResult(message["result"], _result_text(line, request_id))

    def stream(
        self, request: EventsRequest, *, idle_timeout_s: float = math.inf
    ) -> Iterator[EventView | TaskView]:
        """Send `task.events` (typically with `follow`): yield each event, then the task it ended on.

        `idle_timeout_s` bounds the wait for each next message. Stopping the iteration early
        closes the connection, which makes the daemon stop streaming.

        Raises:
            ApiClientError: as for `call`.
        """
        from protocol.api import EventNotification, TaskChangedNotification

        sent = self._send(request, time.monotonic() + self._timeout_s)
        finished = False
        try:
            while True:
                message, _ = self._receive(sent.method, time.monotonic() + idle_timeout_s, idle_timeout_s)
                reply = self._reply(message)
                if isinstance(reply, EventNotification):
                    yield reply.params
                    continue
                if isinstance(reply, TaskChangedNotification):
                    raise self._bad_response("a task.changed notification to task.events")
                view = self._result_of(reply, sent)
                finished = True
                yield view
                return
        finally:
            if not finished:
                self.close()  # the daemon may still be streaming into this connection

    def watch(self, request: WatchRequest) -> Iterator[TaskView]:
        """Send `task.watch`: yield each task that changed, until the daemon stops (or `shutdown`).

        Each read waits as long as it takes; another thread ends it with `shutdown`.

        Raises:
            ApiClientError: as for `call` (`CONNECTION_LOST` once shut down).
        """
        from protocol.api import EventNotification, TaskChangedNotification

        sent = self._send(request, time.monotonic() + self._timeout_s)
        finished = False
        try:
            while True:
                message, _ = self._receive(sent.method, math.inf, math.inf)
                reply = self._reply(message)
                if isinstance(reply, TaskChangedNotification):
                    yield reply.params
                elif isinstance(reply, EventNotification):
                    raise self._bad_response("a task.event notification to task.watch")
                else:
                    self._result_of(reply, sent)
                    finished = True
                    return
        finally:
            if not finished:
                self.close()

    def shutdown(self) -> None:
        """Wake a thread blocked reading this connection; its read then fails as a lost
        connection. Safe to call from another thread."""
        self._shut_down = True
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    # ---- transport -----------------------------------------------------------------------

    def _send(self, request: Request[ResultT], deadline: float) -> Request[ResultT]:
        """Number the request, write it, and return it as sent."""
        from protocol.framing import encode

        numbered = request.model_copy(update={"id": self._next_id})
        self._next_id += 1
        self._send_frame(encode(numbered), request.method, deadline)
        return numbered

    def _send_frame(self, frame: bytes, method: str, deadline: float) -> None:
        """Write one request line (its newline included), connecting first if need be."""
        if len(frame) - 1 > MAX_API_FRAME:  # the newline is not part of the frame
            raise ApiClientError(
                INVALID_REQUEST,
                f"the request is {len(frame) - 1} bytes, over the daemon's {MAX_API_FRAME}-byte cap",
            )
        sock = self._connection(deadline)
        try:
            sock.settimeout(_remaining(deadline))
            sock.sendall(frame)
        except TimeoutError:
            self.close()
            raise ApiClientError(
                TIMED_OUT,
                f"agentd at {self._path} did not take the {method} request in time",
                retryable=True,
            ) from None
        except OSError as exc:
            # The daemon may have refused us and hung up (too many connections): its reason
            # is already waiting in our receive buffer, and says more than EPIPE.
            reason = self._waiting_error(sock)
            self.close()
            if reason is not None:
                raise reason from exc
            raise ApiClientError(
                CONNECTION_LOST,
                f"agentd at {self._path} closed the connection ({exc.strerror}); is it restarting?",
                retryable=True,
            ) from exc

    def _waiting_error(self, sock: socket.socket) -> ApiClientError | None:
        try:
            sock.setblocking(False)
            data = sock.recv(READ_CHUNK)
        except OSError:
            return None
        try:
            message = json.loads(data.split(b"\n", 1)[0])
        except ValueError:
            return None
        if isinstance(message, dict) and message_kind(message) == "error" and message.get("id") is None:
            return _error_of(message.get("error"))
        return None

    def _connection(self, deadline: float) -> socket.socket:
        if self._sock is not None and _readable_now(self._sock):
            # Nothing is owed to us between calls: readable means closed (idle timeout) or junk.
            self.close()
        if self._sock is None:
            self._sock = self._connect(deadline)
            if self._shut_down:  # `shutdown` ran before there was a socket to wake
                self.close()
                raise ApiClientError(
                    CONNECTION_LOST, f"the connection to agentd at {self._path} was shut down"
                )
        return self._sock

    def _connect(self, deadline: float) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(_remaining(deadline))
            sock.connect(self._path)
            _pid, daemon_uid, _gid = peer_credentials(sock)
        except BaseException as exc:
            sock.close()
            if isinstance(exc, OSError):
                raise self._connect_error(exc) from exc
            raise
        if daemon_uid not in self._trusted_uids:
            sock.close()
            raise ApiClientError(
                UNTRUSTED_DAEMON,
                f"the socket at {self._path} is served by uid {daemon_uid}, not by root, you or the "
                f"{DAEMON_USER!r} service user; refusing to send anything to it (another user may be "
                "impersonating agentd)",
            )
        return sock

    def _connect_error(self, exc: OSError) -> ApiClientError:
        path = self._path
        if isinstance(exc, FileNotFoundError | NotADirectoryError):
            return ApiClientError(
                UNREACHABLE, f"no agentd at {path} — is the daemon running? start it with `agentd serve`"
            )
        if isinstance(exc, ConnectionRefusedError):
            return ApiClientError(
                UNREACHABLE,
                f"agentd at {path} refused the connection: the socket is stale (no daemon is running); "
                "start it with `agentd serve`",
                retryable=True,
            )
        if isinstance(exc, PermissionError):
            return ApiClientError(
                UNREACHABLE,
                f"permission denied connecting to agentd at {path}{_access_hint(path)}; "
                "ask its operator to add your user to the socket's group",
            )
        if isinstance(exc, TimeoutError | BlockingIOError):
            return ApiClientError(
                TIMED_OUT,
                f"agentd at {path} did not accept the connection in time (overloaded?)",
                retryable=True,
            )
        return ApiClientError(UNREACHABLE, f"cannot connect to agentd at {path}: {exc.strerror or exc}")

    def _receive(self, method: str, deadline: float, budget: float) -> tuple[dict[str, Any], bytes]:
        """The next message from the daemon (an event, a result or an error) as JSON, with its line."""
        sock = self._sock
        assert sock is not None  # _send connected
        while not self._lines:
            try:
                sock.settimeout(_remaining(deadline))
                data = sock.recv(READ_CHUNK)
            except TimeoutError:
                self.close()  # its answer may still come: this connection is out of step now
                raise ApiClientError(
                    TIMED_OUT,
                    f"agentd at {self._path} did not answer {method} within {budget:g}s",
                    retryable=True,
                ) from None
            except ConnectionResetError:
                data = b""
            except OSError as exc:
                self.close()
                raise ApiClientError(CONNECTION_LOST, f"reading from agentd failed: {exc.strerror}") from exc
            if not data:
                self.close()
                raise ApiClientError(
                    CONNECTION_LOST,
                    f"agentd at {self._path} closed the connection before answering {method} "
                    "(restarting or overloaded?)",
                    retryable=True,
                )
            self._lines.extend(
                line for line in self._splitter.feed(data) if not isinstance(line, bytes) or line
            )
        line = self._lines.popleft()
        if isinstance(line, Oversize):
            raise self._bad_response(f"a message over {self._max_response} bytes")
        try:
            message = json.loads(line)
        except ValueError:
            raise self._bad_response("a message that is not JSON") from None
        if not isinstance(message, dict):
            raise self._bad_response("a message that is not a JSON object")
        if message_kind(message) not in REPLY_KINDS:
            raise self._bad_response("a message that is neither a result nor an error")
        return message, line

    def _reply(self, message: dict[str, Any]) -> ApiReply:
        """A received message as its model."""
        from pydantic import ValidationError

        from protocol.api import REPLY_ADAPTER

        try:
            return REPLY_ADAPTER.validate_python(message)
        except ValidationError:
            raise self._bad_response(f"a malformed {message_kind(message)} message") from None

    def _result_of(self, reply: Response | ErrorResponse, request: Request[ResultT]) -> ResultT:
        from pydantic import ValidationError

        from protocol.jsonrpc import ErrorResponse

        # id null: the daemon could not tie its error to a request (a frame fault, a refusal).
        if reply.id not in (request.id, None):
            raise self._bad_response("an answer to another request")
        if isinstance(reply, ErrorResponse):
            error = reply.error
            raise ApiClientError(error.code, error.message, retryable=_retryable(error.data))
        try:
            return request.validate_result(reply.result)
        except ValidationError:
            raise self._bad_response(f"a {request.method} result of the wrong shape") from None

    def _bad_response(self, what: str) -> ApiClientError:
        self.close()
        return ApiClientError(BAD_RESPONSE, f"agentd at {self._path} sent {what}")


@dataclass(frozen=True, slots=True)
class PlainResult:
    """A plain call's result: its JSON `value`, and `text`, the result as the daemon wrote it (None
    when the reply was not in the daemon's own form, `agentd.api.frames`). Printed as it is, that
    text is what the result's model would print (`model_dump_json`), every float spelled the same."""

    value: Any
    text: str | None


def _plain_frame(request: dict[str, Any]) -> bytes:
    """A request as one compact JSON line, newline included (UTF-8, as the models write it)."""
    return json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _result_text(line: bytes, request_id: int) -> str | None:
    """The result's own text in a result frame of the daemon's form, else None."""
    head = b'{"jsonrpc":"2.0","id":%d,"result":' % request_id
    if not (line.startswith(head) and line.endswith(b"}")):
        return None
    try:
        return line[len(head) : -1].decode()
    except UnicodeDecodeError:  # JSON in another encoding: parsed, but not the daemon's own form
        return None


def _retryable(data: object) -> bool:
    return isinstance(data, dict) and data.get("retryable") is True


def _error_of(error: object) -> ApiClientError | None:
    """The daemon's JSON-RPC error object as an exception; None when it is not one."""
    if not isinstance(error, dict):
        return None
    code, message = error.get("code"), error.get("message")
    if type(code) is not int or not isinstance(message, str):
        return None
    return ApiClientError(code, message, retryable=_retryable(error.get("data")))


def _remaining(deadline: float) -> float | None:
    """A socket timeout for an absolute monotonic deadline (None = no bound); raises once it passed."""
    if math.isinf(deadline):
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _readable_now(sock: socket.socket) -> bool:
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))


def trusted_daemon_uids() -> frozenset[int]:
    """Who may serve the API socket: root, this user (a per-user daemon), the service user."""
    uids = {0, os.getuid()}
    try:
        uids.add(pwd.getpwnam(DAEMON_USER).pw_uid)
    except KeyError:
        pass
    return frozenset(uids)


def _access_hint(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return " (its directory is closed to this user)"
    return f" (socket mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}, group gid {st.st_gid})"
