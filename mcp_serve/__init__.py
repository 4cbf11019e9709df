"""`agentd mcp serve`: agentd as an MCP server (docs/mcp-server.md).

A program of its own, run by the `agentd` CLI as `python -m mcp_serve`: it speaks MCP on stdio to
one client and the daemon's socket API as the user who started it, through agentd's API client,
so the daemon's scoping, quotas, approvals and admin rule apply unchanged. agentd's own code never
imports it (nor `mcp`): docs/architecture.md.
"""
