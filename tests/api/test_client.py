"""The synchronous CLI client: results, streams, and an error message a person can act on."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from agentd.api.client import BAD_RESPONSE, CONNECTION_LOST, TIMED_OUT, UNREACHABLE, ApiClient
from agentd.api.limits import ApiLimits
from agentd.errors import ApiClientError
from protocol.api import (
    NOT_FOUND,
    TOO_MANY_CONNECTIONS,
    UNAVAILABLE,
    EventsParams,
    EventsRequest,
    EventView,
    GetRequest,
    Request,
    StatusRequest,
    SubmitParams,
    SubmitRequest,
    SubmitResult,
    TaskRef,
    TaskSpec,
    TaskView,
)
from protocol.jsonrpc import INVALID_REQUEST
from tests.api.harness import RawConnection, Server, serving

# ---- against a real server (the blocking client runs in a worker thread) -----------------


def _submit(instruction: str) -> SubmitRequest:
    return SubmitRequest(params=SubmitParams(spec=TaskSpec(instruction=instruction)))


def _get(task_id: str) -> GetRequest:
    return GetRequest(params=TaskRef(task_id=task_id))


@pytest.mark.anyio
async def test_call_returns_the_result_model_of_the_requests_method(server: Server) -> None:
    def session() -> tuple[SubmitResult, TaskView]:
        with ApiClient(server.path) as client:
            submitted = client.call(_submit("from a model"))
            return submitted, client.call(_get(submitted.task_id))

    submitted, got = await anyio.to_thread.run_sync(session)
    assert submitted == SubmitResult(task_id="t1", state="queued", created=True)
    assert got.instruction == "from a model"


@pytest.mark.anyio
async def test_an_error_answer_raises_with_the_daemons_code_message_and_retryable_flag(
    server: Server,
) -> None:
    def attempt(request: Request[Any]) -> ApiClientError:
        with ApiClient(server.path) as client, pytest.raises(ApiClientError) as failed:
            client.call(request)
        return failed.value

    unavailable = await anyio.to_thread.run_sync(attempt, _submit("unavailable"))
    missing = await anyio.to_thread.run_sync(attempt, _get("t404"))
    assert (unavailable.code, unavailable.retryable) == (UNAVAILABLE, True)
    assert (missing.code, missing.message, missing.retryable) == (NOT_FOUND, "no task 't404'", False)


@pytest.mark.anyio
async def test_a_plain_call_answers_the_json_and_the_text_the_result_model_dumps(server: Server) -> None:
    def session() -> tuple[object, str | None, TaskView]:
        with ApiClient(server.path) as client:
            submitted = client.call_plain("task.submit", {"spec": {"instruction": "plain"}})
            answer = client.call_plain("task.get", {"task_id": submitted.value["task_id"]})
            return answer.value, answer.text, client.call(_get(submitted.value["task_id"]))

    value, text, view = await anyio.to_thread.run_sync(session)
    assert text == view.model_dump_json()
    assert TaskView.model_validate(value) == view


@pytest.mark.anyio
async def test_a_plain_call_raises_the_daemons_error_as_a_model_call_does(server: Server) -> None:
    def attempt() -> ApiClientError:
        with ApiClient(server.path) as client, pytest.raises(ApiClientError) as failed:
            client.call_plain("task.get", {"task_id": "t404"})
        return failed.value

    missing = await anyio.to_thread.run_sync(attempt)
    assert (missing.code, missing.message, missing.retryable) == (NOT_FOUND, "no task 't404'", False)


@pytest.mark.anyio
async def test_stream_yields_each_event_then_the_final_task(server: Server) -> None:
    async with await RawConnection.open(server.path) as owner:
        task_id = (await owner.request("task.submit", {"spec": {"instruction": "x"}}))["result"]["task_id"]
    items: list[EventView | TaskView] = []

    def follow() -> None:
        with ApiClient(server.path) as client:
            request = EventsRequest(params=EventsParams(task_id=task_id, follow=True))
            items.extend(client.stream(request, idle_timeout_s=10))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, follow)
            await server.backend.streaming.wait()
            server.backend.finish(task_id)
    assert [i.event for i in items if isinstance(i, EventView)] == ["task.submitted", "task.terminal"]
    final = items[-1]
    assert isinstance(final, TaskView)
    assert final.state == "terminal"


@pytest.mark.anyio
async def test_leaving_a_stream_early_hangs_up_so_the_daemon_stops_streaming(server: Server) -> None:
    async with await RawConnection.open(server.path) as owner:
        task_id = (await owner.request("task.submit", {"spec": {"instruction": "x"}}))["result"]["task_id"]

    def first_event_only() -> object:
        with ApiClient(server.path) as client:
            request = EventsRequest(params=EventsParams(task_id=task_id, follow=True))
            for item in client.stream(request, idle_timeout_s=10):
                return item
        return None

    first = await anyio.to_thread.run_sync(first_event_only)
    assert isinstance(first, EventView)
    with anyio.fail_after(5):
        await server.backend.iterator_closed.wait()


@pytest.mark.anyio
async def test_a_refusal_for_too_many_connections_is_reported_as_retryable(socket_path: Path) -> None:
    async with (
        serving(socket_path, limits=ApiLimits(max_connections_per_uid=1)) as server,
        await RawConnection.open(server.path) as holder,
    ):
        assert "result" in await holder.request("daemon.status")

        def refused() -> ApiClientError:
            with ApiClient(server.path) as client, pytest.raises(ApiClientError) as failed:
                client.call(StatusRequest())
            return failed.value

        error = await anyio.to_thread.run_sync(refused)
    assert (error.code, error.retryable) == (TOO_MANY_CONNECTIONS, True)


@pytest.mark.anyio
async def test_a_connection_the_daemon_closed_while_idle_is_reopened(socket_path: Path) -> None:
    async with serving(socket_path, limits=ApiLimits(idle_timeout_s=0.1)) as server:
        client = ApiClient(server.path)
        with client:
            await anyio.to_thread.run_sync(client.call, StatusRequest())
            # The daemon's idle timeout closes the connection: wait until the close reaches us
            # (EOF makes the socket readable), so the next call must reopen.
            assert client._sock is not None
            with anyio.fail_after(10):
                await anyio.wait_readable(client._sock)
            assert (await anyio.to_thread.run_sync(client.call, StatusRequest())).journal_ok


# ---- failures, without a daemon --------------------------------------------------------


def _error(path: Path, *, timeout_s: float = 5.0) -> ApiClientError:
    with ApiClient(path, timeout_s=timeout_s) as client, pytest.raises(ApiClientError) as failed:
        client.call(StatusRequest())
    return failed.value


def test_a_missing_socket_says_no_daemon_is_running_and_how_to_start_one(tmp_path: Path) -> None:
    error = _error(tmp_path / "agentd.sock")
    assert error.code == UNREACHABLE
    assert error.message == (
        f"no agentd at {tmp_path / 'agentd.sock'} — is the daemon running? start it with `agentd serve`"
    )
    assert not error.retryable


def test_a_stale_socket_says_the_daemon_is_not_running(tmp_path: Path) -> None:
    path = tmp_path / "agentd.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(str(path))
    error = _error(path)
    assert error.code == UNREACHABLE
    assert "refused the connection: the socket is stale" in error.message
    assert "agentd serve" in error.message


def test_a_request_over_the_frame_cap_is_refused_before_sending(tmp_path: Path) -> None:
    # Within the spec's character cap, but two bytes a character: over the 1 MiB frame cap.
    with ApiClient(tmp_path / "unused.sock") as client, pytest.raises(ApiClientError) as failed:
        client.call(_submit("é" * 600_000))
    assert failed.value.code == INVALID_REQUEST
    assert "over the daemon's 1048576-byte cap" in failed.value.message


@pytest.fixture
def silent_daemon(tmp_path: Path) -> Iterator[Path]:
    """A socket that accepts into its backlog and never answers."""
    path = tmp_path / "agentd.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(4)
        yield path


def test_a_daemon_that_does_not_answer_in_time_is_a_retryable_timeout(silent_daemon: Path) -> None:
    error = _error(silent_daemon, timeout_s=0.2)
    assert error.code == TIMED_OUT
    assert error.message == f"agentd at {silent_daemon} did not answer daemon.status within 0.2s"
    assert error.retryable


def _one_shot_daemon(path: Path, reply: Callable[[socket.socket], None]) -> threading.Thread:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(5)
                conn.recv(65536)
                reply(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_daemon_that_hangs_up_before_answering_is_a_lost_connection(tmp_path: Path) -> None:
    path = tmp_path / "agentd.sock"
    thread = _one_shot_daemon(path, lambda conn: None)
    error = _error(path, timeout_s=5)
    thread.join(5)
    assert error.code == CONNECTION_LOST
    assert "closed the connection before answering daemon.status" in error.message
    assert error.retryable


@pytest.mark.parametrize(
    ("reply", "what"),
    [
        pytest.param(b"not json\n", "not JSON", id="not-json"),
        pytest.param(b"[1]\n", "not a JSON object", id="not-object"),
        pytest.param(b'{"jsonrpc":"2.0","id":99,"result":1}\n', "another request", id="wrong-id"),
        pytest.param(b'{"jsonrpc":"2.0","id":1}\n', "neither a result nor an error", id="empty"),
        pytest.param(b"x" * 4096 + b"\n", "over 1024 bytes", id="oversize"),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"result":{"pid":"one"}}\n',
            "a daemon.status result of the wrong shape",
            id="wrong-result-shape",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}\n',
            "a malformed error",
            id="bad-error",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","method":"task.event","params":{"seq":"x"}}\n',
            "a malformed task.event",
            id="bad-event",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","method":"task.other"}\n', "neither a result nor an error", id="unknown"
        ),
    ],
)
def test_a_broken_answer_is_a_bad_response(tmp_path: Path, reply: bytes, what: str) -> None:
    path = tmp_path / "agentd.sock"
    thread = _one_shot_daemon(path, lambda conn: conn.sendall(reply))
    with (
        ApiClient(path, timeout_s=5, max_response_bytes=1024) as client,
        pytest.raises(ApiClientError) as failed,
    ):
        client.call(StatusRequest())
    thread.join(5)
    assert failed.value.code == BAD_RESPONSE
    assert what in failed.value.message
