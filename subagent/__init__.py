"""The subagent: one OS process that runs one task's agentic loop.

`python -m subagent` boots per docs/design.md §2 (see `boot`), talks to its supervisor over the
control channel (`channel`), and drives the pure loop (`loop/`) with the model adapters
(`intel/`) and the MCP tool layer (`tools/`) in `run`. Importing this package is cheap.
"""
