"""The fake model server itself: keep-alive, recording, abort detection, clean shutdown."""

from __future__ import annotations

import threading

import anyio
import httpx2
import pytest

from tests.support.fake_llm import FakeLLM, Hang, chat, sse

pytestmark = pytest.mark.anyio


def fake_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "fake-llm"]


async def test_requests_on_one_connection_are_recorded_in_order_and_answered_from_the_queue() -> None:
    with FakeLLM(default=chat("default")) as fake:
        fake.enqueue(chat("first"))
        async with httpx2.AsyncClient(base_url=fake.base_url) as client:
            one = await client.post("/chat/completions", json={"n": 1})
            two = await client.post("/chat/completions", json={"n": 2})
        recorded = await fake.wait_requests(2)
    assert one.json()["choices"][0]["message"]["content"] == "first"
    assert two.json()["choices"][0]["message"]["content"] == "default"
    assert [(r.method, r.path, r.json) for r in recorded] == [
        ("POST", "/v1/chat/completions", {"n": 1}),
        ("POST", "/v1/chat/completions", {"n": 2}),
    ]
    assert recorded[0].at <= recorded[1].at


async def test_a_completed_stream_is_not_counted_as_aborted() -> None:
    with FakeLLM() as fake:
        fake.enqueue(sse([{"a": 1}]))
        async with httpx2.AsyncClient(base_url=fake.base_url) as client:
            response = await client.post("/chat/completions", json={})
        assert response.text == 'data: {"a": 1}\n\ndata: [DONE]\n\n'
    assert fake.aborted == 0


async def test_waiting_for_a_request_that_never_comes_fails_within_the_bound() -> None:
    with FakeLLM() as fake, pytest.raises(AssertionError, match=r"timed out after 0\.05s"):
        await fake.wait_requests(1, timeout_s=0.05)


async def test_shutdown_with_a_client_still_waiting_leaves_no_thread_behind() -> None:
    before = len(fake_threads())
    with FakeLLM(default=Hang()) as fake:
        assert len(fake_threads()) == before + 1
        async with httpx2.AsyncClient(base_url=fake.base_url) as client, anyio.create_task_group() as tg:
            tg.start_soon(client.post, "/chat/completions")
            await fake.wait_requests(1)
            tg.cancel_scope.cancel()
        await fake.wait_aborted(1)
    assert len(fake_threads()) == before


async def test_stopping_the_server_mid_request_disconnects_the_client_and_joins_the_thread() -> None:
    before = len(fake_threads())
    fake = FakeLLM(default=Hang()).__enter__()

    async def post_expecting_disconnect(client: httpx2.AsyncClient) -> None:
        with pytest.raises(httpx2.RemoteProtocolError):
            await client.post("/chat/completions")

    with anyio.fail_after(5):
        async with httpx2.AsyncClient(base_url=fake.base_url) as client, anyio.create_task_group() as tg:
            tg.start_soon(post_expecting_disconnect, client)
            await fake.wait_requests(1)
            fake.__exit__(None, None, None)
    assert len(fake_threads()) == before
