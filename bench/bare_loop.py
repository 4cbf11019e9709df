"""The control for `bench/loop_cpu.py`: a bare, hand-written agentic loop.

What a careful engineer writes in an afternoon with the same libraries the subagent uses: an
`httpx2.AsyncClient` streaming OpenAI chat completions (SSE) and the SDK's `ClientSession` over
its `stdio_client`, negotiating the same protocol era (`negotiate_auto`). Each turn sends the
whole transcript and the server's tools, parses the streamed deltas into tool calls, calls each
on the MCP server and appends the results — and nothing else: no limits, no events, no
telemetry, no tracing, no retries. It stops at the first reply without a tool call.

    python bench/bare_loop.py BASE_URL SERVER_SCRIPT
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client._probe import negotiate_auto


async def _complete(client: httpx2.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One streamed chat completion, reassembled into a message with its tool calls."""
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    async with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    text.append(delta["content"])
                for part in delta.get("tool_calls") or ():
                    call = calls.setdefault(part["index"], {"id": "", "name": "", "arguments": ""})
                    call["id"] = part.get("id") or call["id"]
                    function = part.get("function") or {}
                    call["name"] += function.get("name") or ""
                    call["arguments"] += function.get("arguments") or ""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for _, c in sorted(calls.items())
        ]
    return message


async def run(base_url: str, server_script: str) -> int:
    params = StdioServerParameters(command=sys.executable, args=[server_script])
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write) as session,
        httpx2.AsyncClient(timeout=60) as client,
    ):
        await negotiate_auto(session)
        listed = await session.list_tools()
        tools = [
            {
                "type": "function",
                "function": {
                    "name": f"demo__{t.name}",
                    "description": t.description or "",
                    "parameters": t.input_schema,
                },
            }
            for t in listed.tools
        ]
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a helpful agent."},
            {"role": "user", "content": "count until told to stop"},
        ]
        url = f"{base_url}/chat/completions"
        turns = 0
        while True:
            body = {"model": "fake", "messages": messages, "tools": tools, "stream": True}
            message = await _complete(client, url, body)
            turns += 1
            messages.append(message)
            if "tool_calls" not in message:
                return turns
            for call in message["tool_calls"]:
                name = call["function"]["name"].removeprefix("demo__")
                arguments = json.loads(call["function"]["arguments"] or "{}")
                result = await session.call_tool(name, arguments)
                content = "\n".join(getattr(block, "text", "") for block in result.content)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})


def main() -> int:
    base_url, server_script = sys.argv[1], sys.argv[2]
    turns = anyio.run(run, base_url, server_script)
    print(f"bare loop: {turns} turns", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
