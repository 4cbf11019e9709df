"""Real MCP servers under the daemon's own limits: an npm server that needs Node's `fetch`, and a
"server" whose stdout is a flood of junk (e2e: the daemon, a subagent, the server processes)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from protocol.result import TerminalStatus as S
from tests.support.daemon import running_daemon, scripted
from tests.support.fake_llm import FakeLLM, chat
from tests.support.fake_llm import tool_call as fake_tool_call
from tests.support.npm_servers import everything_argv

pytestmark = pytest.mark.processes

PAGE = b"agentd " * 1000


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def page_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/page.txt"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def toml_list(argv: list[str]) -> str:
    return json.dumps(argv)


def test_a_node_server_can_use_fetch_under_the_default_limits(tmp_path: Path) -> None:
    # server-everything's gzip tool fetches its input with Node's built-in fetch (WebAssembly),
    # which fails with "Out of memory" under an 8 GiB RLIMIT_AS.
    with page_server() as url:
        turns: list[dict[str, object]] = [
            {
                "tool_calls": [
                    {
                        "name": "ev__gzip-file-as-resource",
                        "arguments": {"name": "page.gz", "data": url, "outputType": "resource"},
                    }
                ]
            },
            {"text": "{last_tool_result}"},
        ]
        body = (
            scripted("m", turns, tmp_path)
            + f"[mcp.ev]\ncommand = {toml_list(everything_argv())}\ntrust = []\n"
            + '[defaults]\nmodel = "m"\nmcp = ["ev"]\n'
        )
        with running_daemon(tmp_path, body) as daemon:
            view = daemon.wait(daemon.submit("compress the page"), timeout_s=90)
    assert view.status is S.COMPLETED, view
    assert isinstance(view.result, str)
    assert "application/gzip" in view.result, view.result
    assert "Out of memory" not in view.result


def test_a_server_flooding_stdout_with_junk_fails_fast_as_mcp_down_and_the_log_stays_small(
    tmp_path: Path,
) -> None:
    body = (
        scripted("m", [{"text": "unreachable"}], tmp_path)
        + '[mcp.junk]\ncommand = ["sh", "-c", "yes garbage"]\ntrust = []\n'
        + '[defaults]\nmodel = "m"\n'
    )
    with running_daemon(tmp_path, body) as daemon:
        started = time.monotonic()
        done = daemon.cli("submit", "x", "--mcp", "junk", "--wait", "--json", timeout_s=60)
        elapsed = time.monotonic() - started
        assert done.returncode == 6, done.stderr
        view = json.loads(done.stdout)
        assert view["abort"] == "mcp"
        assert "not JSON-RPC" in view["error"]["message"]
        logs = daemon.cli("logs", view["task_id"], "--json")
    # Connect, a few lines, give up, the shutdown ladder (yes ignores EOF): seconds, not the
    # connect timeout; and a handful of log records, not one per line.
    assert elapsed < 20
    garbage = [line for line in logs.stdout.splitlines() if "garbage" in line]
    log_text = daemon.log_path.read_text()
    assert len(garbage) <= 5, garbage
    assert log_text.count("garbage") <= 10
    assert len(log_text) < 200_000


@pytest.mark.parametrize("accepts_images", [True, False])
def test_an_image_from_a_tool_reaches_an_openai_model_that_accepts_images(
    tmp_path: Path, accepts_images: bool
) -> None:
    with FakeLLM() as fake:
        fake.enqueue(chat(tool_calls=[fake_tool_call("ev__get-tiny-image", {})]), chat("a tiny image"))
        body = (
            f'[intelligence.m]\nkind = "openai"\nbase_url = "{fake.base_url}"\nmodel = "m"\n'
            f"images = {'true' if accepts_images else 'false'}\n"
            + f"[mcp.ev]\ncommand = {toml_list(everything_argv())}\ntrust = []\n"
            + '[defaults]\nmodel = "m"\nmcp = ["ev"]\n'
        )
        with running_daemon(tmp_path, body) as daemon:
            view = daemon.wait(daemon.submit("look at the image"), timeout_s=90)
        assert view.status is S.COMPLETED, view
        second: Any = fake.requests[1].json
    messages: list[Any] = second["messages"]
    tool_message = next(m for m in messages if m.get("role") == "tool")
    assert "[image: image/png, " in str(tool_message["content"])
    image_parts = [
        part
        for m in messages
        if m.get("role") == "user" and isinstance(m.get("content"), list)
        for part in m["content"]
        if part.get("type") == "image_url"
    ]
    if accepts_images:
        (part,) = image_parts
        assert str(part["image_url"]["url"]).startswith("data:image/png;base64,iVBORw0KGgo")
        # The image turn follows the tool message, as the API requires.
        assert messages.index(tool_message) < len(messages) - 1
    else:
        assert image_parts == []
