"""Process exit codes: what every agentd process returns, and what `agentd run` and
`agentd submit --wait` map a task's status to (docs/design.md §12, docs/exit-codes.md).

Standard library only, so a subagent can exit with one before it imports anything else.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2  # configuration or usage error (a bad flag, a bad spawn payload), before any effect
    PARTIAL = 3
    INTELLIGENCE = 4
    REFUSED = 5
    MCP = 6
    BUDGET = 7
    DEADLINE = 124
    INTERRUPTED = 130  # the client was interrupted (Ctrl-C) while it waited; 128 + SIGINT
