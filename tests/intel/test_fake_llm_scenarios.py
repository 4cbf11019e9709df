"""The fake model server's scenarios for local-model failures: a reply that stalls after half its
body, and replies chosen from the request (for concurrent tasks, where queue order is arbitrary)."""

from __future__ import annotations

import anyio
import httpx2
import pytest

from tests.support.fake_llm import FakeLLM, Recorded, Reply, Respond, chat, stall_midway

pytestmark = pytest.mark.anyio


async def test_a_stalled_reply_sends_headers_and_half_its_body_then_nothing() -> None:
    reply = chat("x" * 100)
    with FakeLLM(default=stall_midway(reply)) as fake:
        async with (
            httpx2.AsyncClient(base_url=fake.base_url) as client,
            client.stream("POST", "/chat/completions", json={}) as response,
        ):
            assert response.status_code == 200
            assert response.headers["content-length"] == str(len(reply.body))
            received = b""
            with anyio.move_on_after(0.3):
                async for chunk in response.aiter_bytes():
                    received += chunk
        await fake.wait_aborted(1)
    assert received == reply.body[: len(reply.body) // 2]


async def test_respond_chooses_each_reply_from_its_request() -> None:
    def echo(request: Recorded) -> Reply:
        assert isinstance(request.json, dict)
        return chat(f"you said {request.json['n']}")

    with FakeLLM(default=Respond(echo)) as fake:
        async with httpx2.AsyncClient(base_url=fake.base_url) as client:
            texts = [
                (await client.post("/chat/completions", json={"n": n})).json()["choices"][0]["message"][
                    "content"
                ]
                for n in (2, 1)
            ]
    assert texts == ["you said 2", "you said 1"]
