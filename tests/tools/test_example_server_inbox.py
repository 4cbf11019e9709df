"""The bundled example server's inbox, shared over streamable HTTP: a `post` from one client
reaches a 2025-11-25 subscriber (`resources/subscribe`) and a 2026-07-28 listener
(`subscriptions/listen`) on other connections; an unsubscribed client hears nothing more; the
inbox reads back what was posted."""

from __future__ import annotations

import socket
import subprocess
import sys
import warnings

import anyio
import mcp_types as types
import pytest
from mcp import Client

from agentd.config.bundled import DEMO_SERVER

pytestmark = [pytest.mark.anyio, pytest.mark.processes]
WAIT_S = 30.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _connect(url: str, **kw: object) -> Client:
    # The server takes a second or more to import `mcp` and bind: try until it answers.
    with anyio.fail_after(WAIT_S):
        while True:
            try:
                async with Client(url, read_timeout_seconds=5) as probe:
                    await probe.list_tools()
                return Client(url, read_timeout_seconds=5, **kw)  # type: ignore[arg-type]
            except Exception:
                await anyio.sleep(0.2)


async def test_a_post_notifies_subscribers_of_both_eras_on_other_connections() -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    server = await anyio.open_process(
        [sys.executable, str(DEMO_SERVER), "--port", str(port)], stderr=subprocess.DEVNULL
    )
    heard: list[str] = []
    first_heard = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            heard.append(str(message.params.uri))
            first_heard.set()

    try:
        legacy = await _connect(url, mode="legacy", message_handler=on_message)
        async with legacy, Client(url, read_timeout_seconds=5) as modern, Client(url) as poster:
            assert legacy.server_capabilities.resources is not None
            assert legacy.server_capabilities.resources.subscribe
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # resources/subscribe is the 2025 era's, on purpose
                await legacy.session.subscribe_resource("notes://inbox")
            async with modern.listen(resource_subscriptions=["notes://inbox"]) as stream:
                posted = await poster.call_tool("post", {"text": "first"})
                assert not posted.is_error
                with anyio.fail_after(WAIT_S):
                    async for event in stream:
                        assert getattr(event, "uri", None) == "notes://inbox"
                        break
                    await first_heard.wait()
            assert heard == ["notes://inbox"]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                await legacy.session.unsubscribe_resource("notes://inbox")
            await poster.call_tool("post", {"text": "second"})
            await anyio.sleep(0.5)  # a notification would have arrived by now
            assert heard == ["notes://inbox"]
            read = await modern.read_resource("notes://inbox")
            assert [c.text for c in read.contents if isinstance(c, types.TextResourceContents)] == [
                "first\nsecond"
            ]
    finally:
        server.terminate()
        with anyio.fail_after(10):
            await server.wait()
