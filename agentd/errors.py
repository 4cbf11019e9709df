"""The supervisor's error tree.

    AgentdError
     ├── SpawnError            a subagent process could not be started
     └── (other components add their subclasses below, each documented where it is raised)
"""

from __future__ import annotations


class AgentdError(Exception):
    """Root of the supervisor's error tree."""


class SpawnError(AgentdError):
    """A subagent process could not be started (exec failed, pipes, limits)."""
