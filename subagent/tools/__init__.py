"""The subagent's tools: granted MCP servers (stdio and streamable HTTP) plus agentd's self-tools.

`open_tools` connects every granted server concurrently and yields a `ToolRouter`, the one
surface the loop uses: `specs()` (wire-named), `resource_catalogue()`, `version` and `call()`.
`call()` raises only `McpFatal` (a required server is gone for good) or cancellation.
"""

from __future__ import annotations

from subagent.tools.router import ToolRouter, open_tools
from subagent.tools.selftools import SupervisorLink

__all__ = ["SupervisorLink", "ToolRouter", "open_tools"]
