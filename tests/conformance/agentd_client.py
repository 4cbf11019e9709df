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
import tempfile

import anyio
import httpx2
from mcp.shared.auth import AuthorizationCodeResult

from protocol.spawn import McpServerSpec, SpawnPayload
from subagent.messages import ToolCall
from subagent.oauth_login import login, parse_redirect
from subagent.telemetry import discard_events
from subagent.tools import open_tools

# The tool each scenario's server offers, with arguments it accepts.
CALLS: dict[str, tuple[str, dict[str, object]]] = {
    "tools_call": ("add_numbers", {"a": 2, "b": 3}),
    "sse-retry": ("test_reconnection", {}),
}


# Scenarios whose authorization server offers only the authorization-code grant: the adapter
# first runs `agentd mcp login`'s flow with a redirect handler that plays the person approving.
LOGIN_SCENARIOS = (
    "auth/metadata-",
    "auth/token-endpoint-auth-",
    "auth/scope-",
    "auth/2025-03-26-",
    "auth/offline-access-",
    "auth/basic-cimd",
    "auth/resource-mismatch",
)


# The redirect URI's port: nothing listens there, as the adapter takes the redirect itself.
PORT = 8976


def payload(url: str, scenario: str, token_dir: str | None = None) -> SpawnPayload:
    server: dict[str, object] = {"name": "conf", "transport": "http", "url": url, "connect_timeout_s": 20}
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    if token_dir is not None:
        server["oauth_login"] = {"token_file": os.path.join(token_dir, "conf.json")}
    elif "client_id" in context:
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


async def headless_login(spec: McpServerSpec) -> None:
    """`agentd mcp login`'s flow, approving at once: the suite's authorization endpoint redirects
    without asking anyone, so fetching it (not following) yields the redirect a browser would get."""
    redirected: list[str] = []

    async def approve(authorization_url: str) -> None:
        async with httpx2.AsyncClient(follow_redirects=False, timeout=20) as client:
            response = await client.get(authorization_url)
        redirected.append(response.headers["location"])

    async def callback() -> AuthorizationCodeResult:
        return parse_redirect(redirected.pop())

    await login(spec, port=PORT, redirect_handler=approve, callback_handler=callback)


async def main(url: str) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    with tempfile.TemporaryDirectory() as token_dir:
        task = payload(url, scenario, token_dir if scenario.startswith(LOGIN_SCENARIOS) else None)
        if task.mcp_servers[0].oauth_login is not None:
            await headless_login(task.mcp_servers[0])
        return await use_tools(task, scenario)


async def use_tools(task: SpawnPayload, scenario: str) -> int:
    async with open_tools(task, sink=discard_events) as router:
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
