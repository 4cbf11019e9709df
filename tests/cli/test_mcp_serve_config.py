"""`agentd mcp serve --print-config CLIENT`: the JSON each client's configuration takes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentd.cli.mcp_serve_command import client_config


@pytest.mark.parametrize(
    ("client", "path"),
    [
        pytest.param("claude", ("mcpServers", "agentd"), id="claude"),
        pytest.param("cursor", ("mcpServers", "agentd"), id="cursor"),
        pytest.param("vscode", ("servers", "agentd"), id="vscode"),
    ],
)
def test_each_client_gets_its_own_shape(client: str, path: tuple[str, str]) -> None:
    config = client_config(client, ["/usr/bin/agentd", "mcp", "serve"])
    entry = config[path[0]][path[1]]  # type: ignore[index]
    assert entry["command"] == "/usr/bin/agentd"
    assert entry["args"] == ["mcp", "serve"]
    assert ("type" in entry) == (client == "vscode")


def test_print_config_prints_json_that_runs_mcp_serve_on_the_given_socket() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentd",
            "mcp",
            "serve",
            "--print-config",
            "claude",
            "--socket",
            "/run/x.sock",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    entry = json.loads(done.stdout)["mcpServers"]["agentd"]
    assert entry["args"][-4:] == ["mcp", "serve", "--socket", "/run/x.sock"]


def test_an_unknown_client_is_a_usage_error_naming_the_choices() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentd", "mcp", "serve", "--print-config", "emacs"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--print-config" in done.stderr and "claude" in done.stderr
