"""The zygote spawner seen from outside: its pid, its state, and which children it forked."""

from __future__ import annotations

import time

import psutil

from tests.support.daemon import (
    FAST_SUPERVISION,
    Daemon,
)

SLOW = [{"text": "zzz", "delay_s": 60}]


def zygote_pid(daemon: Daemon, timeout_s: float = 30.0) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        for line in daemon.log():
            if line.get("event") == "proc.ready" and line.get("process") == "zygote":
                return int(str(line["pid"]))
        assert time.monotonic() < deadline, "the zygote never became ready"
        time.sleep(0.05)


def forked_from_zygote(pid: int) -> bool:
    """A forked child keeps the zygote's argv (`-m subagent.zygote`); an exec'd one has `-m subagent`."""
    return bool(psutil.Process(pid).cmdline()[-2:] == ["-m", "subagent.zygote"])


def zygote_state(daemon: Daemon) -> str:
    status = daemon.call("daemon.status")
    assert isinstance(status, dict)
    return str(status["zygote"])


def wait_zygote_state(daemon: Daemon, want: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (state := zygote_state(daemon)) != want:
        assert time.monotonic() < deadline, f"the zygote stayed {state}, never {want}"
        time.sleep(0.05)


# The fork requests in flight when the zygote dies fall back to exec, together with the ones that
# follow: a dozen interpreters importing at once on two cores keep their loops busy for seconds
# after `ev/ready`, which the tests' usual 0.6 s liveness budget would take for a wedge.
PATIENT_PINGS = FAST_SUPERVISION.replace("missed_pongs = 3", "missed_pongs = 100")
