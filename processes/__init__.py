"""Linux process primitives and the kill ladder, shared by the supervisor and the subagent.

Standard library (and anyio in the ladder driver) only; no agentd, subagent or pydantic imports.
"""
