"""agentd's MCP client layer as the official conformance suite's client under test.

The suite (`npx @modelcontextprotocol/conformance client --command "python agentd_client.py"
--scenario NAME`) starts a test server and runs this with its url as the last argument and the
scenario in `MCP_CONFORMANCE_SCENARIO` (extra data, e.g. client credentials, in
`MCP_CONFORMANCE_CONTEXT`). It connects through `subagent.tools.open_tools` — the code a task's
subagent runs — and does what the scenario expects: list, call its tool, disconnect.
"""

from __future__ import annotations

import json
import os
import sys

import anyio

from protocol.spawn import SpawnPayload
from subagent.messages import ToolCall
from subagent.telemetry import discard_events
from subagent.tools import open_tools

# The tool each scenario's server offers, with arguments it accepts.
CALLS: dict[str, tuple[str, dict[str, object]]] = {
    "tools_call": ("add_numbers", {"a": 2, "b": 3}),
    "sse-retry": ("test_reconnection", {}),
}


def payload(url: str, scenario: str) -> SpawnPayload:
    server: dict[str, object] = {"name": "conf", "transport": "http", "url": url, "connect_timeout_s": 20}
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    if "client_id" in context:
        server["oauth"] = {
            "client_id": context["client_id"],
            "client_secret": context.get("client_secret"),
            "private_key": context.get("private_key_pem"),
            "method": context.get("token_endpoint_auth_method")
            or ("private_key_jwt" if context.get("private_key_pem") else "client_secret_basic"),
            "jwt_algorithm": context.get("signing_algorithm") or "ES256",
        }
    return SpawnPayload.model_validate(
        {
            "task_id": "conformance",
            "run_id": scenario,
            "instruction": "conformance",
            "intelligence": [{"kind": "scripted", "script_path": "/dev/null"}],
            "mcp_servers": [server],
        }
    )


async def main(url: str) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    async with open_tools(payload(url, scenario), sink=discard_events) as router:
        names = {spec.name for spec in router.specs()}
        print(f"tools: {sorted(names)}")
        tool, arguments = CALLS.get(scenario, ("", {}))
        if f"conf__{tool}" in names:
            call = ToolCall(id="c1", name=f"conf__{tool}", arguments=dict(arguments))  # type: ignore[arg-type]
            outcome = await router.call(call, timeout_s=20)
            print(f"{tool}: {outcome.text}")
            return 1 if outcome.is_error else 0
        if tool:
            print(f"the server did not offer {tool}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[-1]))
