"""Where the files agentd ships for its defaults are: the example MCP server and the scripts of
the built-in scripted model.

They are package data under `agentd/examples/`, found next to this package, so a source
checkout, an editable install and an installed wheel all find them from any working directory.
They are programs and data run by other processes, never imported.
"""

from __future__ import annotations

from pathlib import Path

BUNDLED_DIR = Path(__file__).resolve().parents[1] / "examples"
BUNDLED_SCRIPTS_DIR = BUNDLED_DIR / "scripts"
# The example MCP server (stdio) that `agentd demo` grants its task.
DEMO_SERVER = BUNDLED_DIR / "mcp_demo_server.py"
# What `agentd demo` plays against DEMO_SERVER.
DEMO_SCRIPT = BUNDLED_SCRIPTS_DIR / "demo.json"
# What the embedded `demo` endpoint, and a scripted endpoint without `script`, plays: it uses
# only the self-tools, so it runs with no MCP server at all.
EMBEDDED_SCRIPT = BUNDLED_SCRIPTS_DIR / "notes-roundtrip.json"
