"""The supervisor's error tree.

    AgentdError
     ├── SpawnError            a subagent process could not be started
     ├── JournalError          the durable journal (agentd/journal.py)
     │    ├── JournalUnavailable   retryable: the write was not committed (disk full, I/O error,
     │    │                        read-only or locked database, writer stalled, journal closed)
     │    ├── JournalLocked        another agentd holds the state dir's lock
     │    ├── TaskNotFound         no task has that id
     │    └── InvalidTransition    the task's state does not allow the requested transition
     └── (other components add their subclasses below, each documented where it is raised)
"""

from __future__ import annotations


class AgentdError(Exception):
    """Root of the supervisor's error tree."""


class SpawnError(AgentdError):
    """A subagent process could not be started (exec failed, pipes, limits)."""


class JournalError(AgentdError):
    """The durable journal failed or refused an operation."""


class JournalUnavailable(JournalError):
    """Retryable: the operation was not committed, so nothing was acknowledged."""


class JournalLocked(JournalError):
    """Another agentd process holds the exclusive lock on the state directory."""


class TaskNotFound(JournalError):
    """No task with that id exists in the journal."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"no task {task_id!r}")
        self.task_id = task_id


class InvalidTransition(JournalError):
    """A lifecycle transition was requested from a state that does not allow it."""

    def __init__(self, task_id: str, state: str, wanted: str) -> None:
        super().__init__(f"task {task_id!r} is {state}; cannot move it to {wanted}")
        self.task_id = task_id
        self.state = state
        self.wanted = wanted
