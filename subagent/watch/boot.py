"""The watcher's boot order: the subagent's (`subagent.boot`, docs/design.md §2), with its own first frame.

1. move the channel to private fds; clear the signal mask and reset SIGTERM/SIGINT/SIGHUP to their
   defaults (a watcher must never inherit the daemon's blocked or ignored signals, or it would
   outlive a drain);
2. PR_SET_PDEATHSIG(SIGKILL), then exit if the supervisor already died;
3. join the cgroup leaf, if any;
4. read the first frame: a valid `ctrl/watch`, or exit 2 without echoing it (it may hold secrets);
5. start the control thread (it answers `ctrl/ping`) and send `ev/ready`; only then import `mcp`;
6. watch until cancelled, the channel closes, the server cannot notify, or the session is lost.
"""

from __future__ import annotations

import faulthandler
import os
import signal

from protocol.exit_codes import ExitCode
from subagent.boot import SPAWN_TIMEOUT_S, die, guard_parent, join_cgroup, private_channel, read_first_line

WHO = "watcher"
DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _default_signals() -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    for sig in DEFAULT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


def main() -> int:
    faulthandler.enable()
    ctrl_in, ctrl_out = private_channel()
    _default_signals()
    if not guard_parent("agentd-watcher"):
        return die(ExitCode.FAILURE, "supervisor exited before we started", WHO)
    join_cgroup()

    from protocol.framing import MAX_FRAME, LineSplitter

    splitter = LineSplitter(MAX_FRAME)
    first, rest = read_first_line(ctrl_in, splitter)
    if first is None:
        return die(
            ExitCode.USAGE,
            f"no ctrl/watch within {SPAWN_TIMEOUT_S:g} s (EOF, timeout or oversized frame)",
            WHO,
        )

    from protocol import control
    from protocol.framing import FrameError, decode
    from protocol.watch import WATCH_DOWN_ADAPTER, Watch

    message = decode(first, WATCH_DOWN_ADAPTER)
    if isinstance(message, FrameError):
        return die(ExitCode.USAGE, f"invalid ctrl/watch: {message.kind} ({message.detail})", WHO)
    if not isinstance(message, Watch):
        return die(ExitCode.USAGE, "the first frame must be ctrl/watch", WHO)

    from subagent.channel import ControlChannel

    channel = ControlChannel(ctrl_in, ctrl_out, splitter=splitter, early_lines=rest)
    channel.start()

    if not channel.send(control.Ready(params=control.ReadyParams(pid=os.getpid()))):
        return die(ExitCode.FAILURE, "control channel closed before ev/ready", WHO)

    from subagent.watch.run import run_watcher  # heavy: mcp, httpx2

    return run_watcher(message.params, channel)
