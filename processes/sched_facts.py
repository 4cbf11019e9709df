"""What the kernel's scheduler says of one process, read from /proc: its threads' states, the CPU
time they ran and the time they waited on a run queue for a CPU (docs/design.md §6, "Starved or
stuck").

The supervisor reads this only for a child whose pongs are overdue, to tell a child that was not
given the CPU from one that had it and did not answer. Standard library only; a read never blocks
on a disk (procfs), and a process or thread that vanishes mid-read is not an error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# Thread states (the third field of /proc/PID/task/TID/stat) of a thread that will not run again
# until something outside it acts: stopped by a signal, stopped by a tracer, exiting, dead.
HALTED_STATES = frozenset("TtZXx")
RUNNABLE_STATE = "R"

_TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class SchedFacts:
    """One look at every thread of a process.

    `run_ns` and `wait_ns` are cumulative since the threads started (the first two fields of each
    thread's schedstat). Invariant: the kernel adds a thread's run-queue wait when the thread is
    next given a CPU, so a thread waiting right now has not had that wait added yet; `runnable`
    is what shows it.
    """

    threads: int
    # Some thread is in state R: running, or queued for a CPU.
    runnable: bool
    # Every thread is stopped (SIGSTOP, a tracer) or exiting: nothing it does can answer.
    halted: bool
    run_ns: int
    wait_ns: int
    # False where the kernel keeps no schedstat: `run_ns` then comes from clock ticks and
    # `wait_ns` is 0.
    schedstat: bool = True


def read_sched_facts(pid: int) -> SchedFacts | None:
    """The scheduler's facts of every thread of `pid`; None when the process is gone or /proc
    cannot be read."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    states: list[str] = []
    run_ns = wait_ns = 0
    schedstat = True
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        try:
            state, ticks_ns = _parse_stat(_read(f"{base}/stat"))
        except (OSError, ValueError, IndexError):
            continue  # the thread ended between the listing and the read
        states.append(state)
        try:
            fields = _read(f"{base}/schedstat").split()
            run_ns += int(fields[0])
            wait_ns += int(fields[1])
        except (OSError, ValueError, IndexError):
            schedstat = False
            run_ns += ticks_ns
    if not states:
        return None
    return SchedFacts(
        threads=len(states),
        runnable=RUNNABLE_STATE in states,
        halted=all(state in HALTED_STATES for state in states),
        run_ns=run_ns,
        wait_ns=wait_ns if schedstat else 0,
        schedstat=schedstat,
    )


def _read(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as file:
        return file.read()


def _parse_stat(text: str) -> tuple[str, int]:
    """A thread's state and its user + system CPU time in ns from its stat line. The name field
    may hold spaces and parentheses, so the fields are counted from its last `)`."""
    rest = text[text.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    return rest[0], (int(rest[11]) + int(rest[12])) * _TICK_NS
