"""The environment variables the supervisor sets for a subagent and the subagent (or a later
supervisor) reads back: their names, in one place.

Imports nothing: `subagent.boot` reads these before its first frame, when it may import almost
nothing (docs/design.md §2). The operator's own variables (`AGENTD_SOCKET`, `AGENTD_CONFIG`, …) are not a
contract between the two processes; they live in `agentd.config`.
"""

SUPERVISOR_PID_ENV = "AGENTD_SUPERVISOR_PID"
"""The pid of the supervisor that started the child. At boot the child exits unless it is its
parent (the fork→prctl race, docs/design.md §2); the zygote's grandchild waits until it is. Unset (a child
started by hand or by a test harness), the check is skipped."""

RUN_MARKER_ENV = "AGENTD_RUN_MARKER"
"""`<run_id>/<handle>`: a restarted supervisor reads it from `/proc/<pid>/environ` to recognise a
child of a run it journaled (recovery, docs/design.md §8)."""

ZYGOTE_RUN_ID = "zygote"
"""The run id in the zygote's own marker. A subagent forked from the zygote sets its run's marker
after the fork, so `/proc/<pid>/environ` (the block the process was exec'd with) shows the zygote's
marker, `zygote/0`, instead."""

SUBAGENT_NICE_ENV = "AGENTD_SUBAGENT_NICE"
"""The zygote's only: nice levels it adds to each subagent it forks (`supervision.subagent_nice`).
The zygote itself stays at the daemon's priority, so that its forks keep pace with a burst."""

CGROUP_ENV = "AGENTD_CGROUP"
"""The cgroup v2 leaf directory the child joins at boot, if the supervisor made one."""

SPAWN_TIMEOUT_ENV = "AGENTD_SPAWN_TIMEOUT_S"
"""Seconds the child waits for its first frame (`ctrl/spawn`) before it exits 2; default 30."""

TEST_FAULT_ENV = "AGENTD_TEST_FAULT"
"""Chaos tests only: `<fault>[@<handle>]` makes a real subagent misbehave on purpose once it is
connected (`subagent/faults.py`). The spawner passes it on from the daemon's own environment — set
by whoever starts the daemon, never by a socket client (nothing in a request reaches a child's
environment) nor by a model."""
