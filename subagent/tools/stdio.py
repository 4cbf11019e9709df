"""The stdio transport: spawn an MCP server, bridge its pipes to the session, and stop it for sure.

Same shape as the SDK's `stdio_client` (an async context manager yielding the `(read, write)`
memory streams `ClientSession` takes) and the same shutdown ladder — the supervisor's kill ladder
(`processes.ladder`, `processes.climb`) with stdin EOF as its polite rung (skipped for a server
that has not answered anything yet: it may not read stdin while it starts) — and on top of it:
the server gets `PR_SET_PDEATHSIG` (it dies with us even if we are SIGKILLed), its own process
group, an allow-listed environment, stdout lines bounded at 16 MiB (an over-long line becomes an
`Exception` item and is never buffered whole) and stderr forwarded to our fd 2, line-capped.
"""

from __future__ import annotations

import functools
import logging
import os
import resource
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectSendStream
from mcp.client._transport import TransportStreams  # the alias the public `mcp.client.Transport` is built on
from mcp.shared.message import SessionMessage
from mcp.types import jsonrpc_message_adapter

from processes.climb import LadderTarget, climb
from processes.ladder import LadderPolicy, plan
from processes.linux import open_pidfd, pdeathsig_preexec
from processes.pipes import read_chunk
from protocol.framing import LineSplitter, Oversize
from protocol.spawn import McpServerSpec
from subagent.errors import AgentError
from subagent.tools.unreadable import UnreadableLines, example

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 16 * 1024 * 1024
STDERR_LINE_BYTES = 8 * 1024
INHERITED_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG")

# The ladder, as in the SDK: stdin EOF, then SIGTERM to the group, then SIGKILL to the group.
PROCESS_TERMINATION_TIMEOUT_S = 2.0
FORCE_KILL_TIMEOUT_S = 2.0
KILL_REAP_TIMEOUT_S = 2.0
LADDER = LadderPolicy(
    cancel_grace_s=PROCESS_TERMINATION_TIMEOUT_S,
    term_grace_s=FORCE_KILL_TIMEOUT_S,
    kill_reap_s=KILL_REAP_TIMEOUT_S,
)
# Time for the writer to flush messages the session already handed over before stdin closes.
WRITER_FLUSH_TIMEOUT_S = 0.5
# Time for the pipes to reach EOF after the server exited; a grandchild may hold them open.
PIPES_EOF_AFTER_EXIT_S = 0.5


class OversizedLine(AgentError, ValueError):
    """The server wrote a stdout line over the cap; it was dropped unread."""


@dataclass(slots=True)
class StdioNotes:
    """What the transport saw that explains a connection failing: the caller reads it afterwards."""

    # Set when the transport gave up on the server (its stdout is not JSON-RPC).
    verdict: str | None = None
    # The server's exit status once it exited (negative: the signal that ended it).
    exit_status: int | None = None
    # The last line it wrote to stderr (capped), the usual place for a dying server's reason.
    last_stderr: str | None = None
    unreadable: UnreadableLines | None = None
    # Set once `exit_status` is known (stdout's EOF can arrive just before the exit is seen).
    exited: anyio.Event = field(default_factory=anyio.Event)

    def exit_text(self) -> str | None:
        """`exited with status 3` / `was killed by SIGKILL`, with its last stderr line; None if alive."""
        if self.exit_status is None:
            return None
        if self.exit_status < 0:
            try:
                how = f"was killed by {signal.Signals(-self.exit_status).name}"
            except ValueError:
                how = f"was killed by signal {-self.exit_status}"
        else:
            how = f"exited with status {self.exit_status}"
        return f"{how} (last stderr: {self.last_stderr})" if self.last_stderr else how


def server_environment(spec: McpServerSpec) -> dict[str, str]:
    """The server's whole environment: a few safe variables of ours plus its own `env` (secrets here only)."""
    env = {k: v for k in INHERITED_ENV if (v := os.environ.get(k)) is not None and not v.startswith("()")}
    env.update({k: v.get_secret_value() for k, v in spec.env.items()})
    return env


def trade_address_space_for_data() -> None:
    """`preexec_fn` body for a tool server: lift the soft `RLIMIT_AS` to its hard limit and bound
    `RLIMIT_DATA` (private writable memory) by the old soft value instead.

    Address space is what runtimes reserve, not what they use: under 8 GiB of it Node's
    WebAssembly (and so its `fetch`) fails to start. `RLIMIT_DATA` counts only memory that can
    be written, so it still stops a runaway allocation. No-op when the soft limit is the hard one
    (nothing can be lifted).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == hard:
        return
    data_soft, data_hard = resource.getrlimit(resource.RLIMIT_DATA)
    bound = soft if data_hard == resource.RLIM_INFINITY else min(soft, data_hard)
    if data_soft == resource.RLIM_INFINITY or data_soft > bound:
        resource.setrlimit(resource.RLIMIT_DATA, (bound, data_hard))
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))


def _server_preexec(parent_pid: int) -> None:
    pdeathsig_preexec(parent_pid)
    trade_address_space_for_data()


def _spawn(spec: McpServerSpec) -> subprocess.Popen[bytes]:
    # Must run on the event-loop thread: PDEATHSIG fires when the *thread* that forked the child
    # exits, so a worker-thread spawn would kill the server when that worker retires.
    process = subprocess.Popen(
        spec.command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=server_environment(spec),
        cwd=spec.cwd,
        close_fds=True,
        start_new_session=True,
        preexec_fn=functools.partial(_server_preexec, os.getpid()),
    )
    for pipe in (process.stdin, process.stdout, process.stderr):
        assert pipe is not None
        os.set_blocking(pipe.fileno(), False)
    return process


def parse_line(line: bytes | Oversize) -> SessionMessage | Exception:
    """One stdout line as a session message, or the reason it is not one (returned, not raised)."""
    if isinstance(line, Oversize):
        return OversizedLine(f"MCP server wrote a {line.size}-byte line (cap {MAX_LINE_BYTES}); dropped")
    if not line.lstrip().startswith(b"{"):
        # Not even a JSON object: skip the parser (a flood of log lines must stay cheap).
        return ValueError("not a JSON-RPC message")
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


class _CappedLines:
    """Splits stderr into lines, keeping at most `cap` bytes of each (the rest is counted, not kept)."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._buf = bytearray()
        self._dropped = 0

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        *complete, rest = data.split(b"\n")
        for piece in complete:
            self._take(piece)
            out.append(self._flush())
        self._take(rest)
        return out

    def close(self) -> list[bytes]:
        return [self._flush()] if self._buf or self._dropped else []

    def _take(self, piece: bytes) -> None:
        room = self._cap - len(self._buf)
        self._buf += piece[:room]
        self._dropped += max(0, len(piece) - room)

    def _flush(self) -> bytes:
        line = bytes(self._buf) + (f" […{self._dropped} bytes dropped]".encode() if self._dropped else b"")
        self._buf.clear()
        self._dropped = 0
        return line


def _write_stderr(data: bytes) -> None:
    with suppress(OSError):  # our stderr gone or full: a server's log line is not worth blocking for
        os.write(2, data)


async def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        await anyio.wait_writable(fd)
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            continue
        view = view[written:]


class _StdoutReader:
    """The server's stdout as session messages: JSON-RPC lines go to the session, the rest is
    counted (`UnreadableLines`); too many before the first readable one close the read side."""

    def __init__(
        self,
        spec: McpServerSpec,
        notes: StdioNotes,
        fd: int,
        sink: MemoryObjectSendStream[SessionMessage | Exception],
    ) -> None:
        self._name = spec.name
        self._notes = notes
        self._fd = fd
        self.sink = sink
        self.unreadable = notes.unreadable = UnreadableLines(spec.name)
        # Whether the server has said anything: one that has not holds no session worth a polite exit.
        self.answered = False
        self.done = anyio.Event()

    async def run(self) -> None:
        splitter = LineSplitter(MAX_LINE_BYTES)
        try:
            async with self.sink:
                while chunk := await read_chunk(self._fd):
                    for line in splitter.feed(chunk):
                        await self._deliver(line)
                for line in splitter.close():
                    await self._deliver(line)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            # The session is gone; keep draining so a server blocked on a full pipe can exit.
            while await read_chunk(self._fd):
                pass
        finally:
            if (report := self.unreadable.summary(anyio.current_time())) is not None:
                logger.warning("%s", report)
            self.done.set()

    async def _deliver(self, line: bytes | Oversize) -> None:
        if not isinstance(line, Oversize) and not line.strip():
            return
        item = parse_line(line)
        if isinstance(item, SessionMessage):
            self.answered = True
            self.unreadable.readable()
            await self.sink.send(item)
            return
        report = self.unreadable.note(line.size if isinstance(line, Oversize) else line, anyio.current_time())
        if report is not None:
            logger.warning("%s", report)
        if self.unreadable.hopeless:
            self._notes.verdict = self.unreadable.verdict()
            logger.warning("MCP server %s: %s", self._name, self._notes.verdict)
            raise anyio.ClosedResourceError  # ends the session's read side, as an EOF would


async def _forward_stderr(fd: int, prefix: bytes, notes: StdioNotes, done: anyio.Event) -> None:
    """Copy the server's stderr to ours, each line capped and prefixed; the last one is noted."""

    def forward(line: bytes) -> None:
        if line.strip():
            notes.last_stderr = example(line.strip())
        _write_stderr(prefix + line + b"\n")

    lines = _CappedLines(STDERR_LINE_BYTES)
    try:
        while chunk := await read_chunk(fd):
            for line in lines.feed(chunk):
                forward(line)
        for line in lines.close():
            forward(line)
    finally:
        done.set()


class _StdioServer:
    """One spawned MCP server and its pipes: the tasks that bridge them to the session, and the
    shutdown ladder that stops it for sure. Built without an await, so a cancellation cannot fall
    between the spawn and the task group that owns it."""

    def __init__(self, spec: McpServerSpec, notes: StdioNotes) -> None:
        self.spec = spec
        self.notes = notes
        self.process = process = _spawn(spec)
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        self.stdin, self.stdout, self.stderr = process.stdin, process.stdout, process.stderr
        self.stdin_fd, self.stdout_fd, self.stderr_fd = (
            p.fileno() for p in (self.stdin, self.stdout, self.stderr)
        )
        try:
            self.pidfd = open_pidfd(process.pid)
        except OSError:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()  # SIGKILLed just now: the wait is immediate
            raise
        read_writer, self.read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        self.write_stream, self._write_reader = anyio.create_memory_object_stream[SessionMessage](0)
        self.reader = _StdoutReader(spec, notes, self.stdout_fd, read_writer)
        self.exited, self.writer_done, self.stderr_done = anyio.Event(), anyio.Event(), anyio.Event()
        # Invariant: these outlive a caller's cancellation (the ladder needs them) and end only when
        # shutdown cancels them explicitly, after the server is gone.
        self.pipes_scope = anyio.CancelScope(shield=True)
        self.writer_scope = anyio.CancelScope()

    # ---- the pipes ---------------------------------------------------------------------------

    async def run_pipes(self) -> None:
        with self.pipes_scope:
            async with anyio.create_task_group() as pipes:
                pipes.start_soon(self.reader.run)
                prefix = f"[mcp:{self.spec.name}] ".encode()
                pipes.start_soon(_forward_stderr, self.stderr_fd, prefix, self.notes, self.stderr_done)
                pipes.start_soon(self._watch_exit)

    async def write_stdin(self) -> None:
        try:
            with self.writer_scope:
                async with self._write_reader:
                    async for message in self._write_reader:
                        data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                        await _write_all(self.stdin_fd, data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server stopped reading: end the read side so no request waits forever.
            self.reader.sink.close()
        finally:
            self.writer_done.set()

    async def _watch_exit(self) -> None:
        process = self.process
        with suppress(anyio.ClosedResourceError):
            await anyio.wait_readable(self.pidfd)
        # The exited leader is a zombie until reaped, which pins its process-group id: sweeping
        # the group now can only hit the server's own leftovers (they may hold our pipes open).
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.poll()  # reaps this pid only (waitpid(pid)), never another child of ours
        self.notes.exit_status = process.returncode
        self.notes.exited.set()
        self.exited.set()
        with anyio.move_on_after(PIPES_EOF_AFTER_EXIT_S):
            await self.reader.done.wait()
        if not self.reader.done.is_set():  # something outside the group still holds stdout open
            self.reader.sink.close()

    # ---- stopping it -------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Close the session's streams, flush the writer, climb the ladder; every wait bounded."""
        self.read_stream.close()
        self.write_stream.close()
        with anyio.move_on_after(WRITER_FLUSH_TIMEOUT_S):
            await self.writer_done.wait()
        self.writer_scope.cancel()
        with anyio.move_on_after(WRITER_FLUSH_TIMEOUT_S):
            await self.writer_done.wait()
        target = LadderTarget(
            request_exit=self._close_stdin, signal_group=self._signal_group, wait_exited=self.exited.wait
        )
        # A server retired before it answered anything (a task that ended while the server was
        # still starting, behind a catalogue hint) may not be reading stdin yet: EOF would only
        # wait out the first rung, so it gets SIGTERM at once.
        rungs = plan(LADDER, start="cancel" if self.reader.answered else "sigterm")
        await climb(target, rungs, reason="session closed")
        if not self.exited.is_set():
            logger.warning("MCP server %s (pid %d) outlived SIGKILL", self.spec.name, self.process.pid)
        else:
            # Forward what the server wrote last: a dying server's stderr is the useful part.
            with anyio.move_on_after(PIPES_EOF_AFTER_EXIT_S):
                await self.stderr_done.wait()
        self.pipes_scope.cancel()

    async def _close_stdin(self, _reason: str) -> None:
        anyio.notify_closing(self.stdin_fd)
        self.stdin.close()  # EOF: the polite request to exit

    def _signal_group(self, sig: int) -> None:
        if not self.exited.is_set():  # the leader is unreaped, so its pid still names our group
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, sig)

    def close(self) -> None:
        """Release the fds and reap the server if it has exited (after the task group is gone)."""
        for fd in (self.stdout_fd, self.stderr_fd, self.pidfd):
            anyio.notify_closing(fd)
        self.stdout.close()
        self.stderr.close()
        os.close(self.pidfd)
        if self.process.returncode is None:
            self.process.poll()


@asynccontextmanager
async def open_stdio_transport(
    spec: McpServerSpec, notes: StdioNotes | None = None
) -> AsyncIterator[TransportStreams]:
    """Spawn the server in `spec` and yield the session's `(read_stream, write_stream)` pair.

    Lines that are not JSON-RPC never reach the session: they are counted and summarised in the
    log (`UnreadableLines`), and if more than a few arrive before the first readable message the
    read side is closed, so `initialize` fails at once; `notes` then says why.

    Raises:
        OSError: the command could not be started.
    """
    server = _StdioServer(spec, notes if notes is not None else StdioNotes())
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.run_pipes)
            tg.start_soon(server.write_stdin)
            try:
                yield server.read_stream, server.write_stream
            finally:
                # Every wait inside is bounded; shielded so a cancelled caller cannot leak the server.
                with anyio.CancelScope(shield=True):
                    await server.shutdown()
                tg.cancel_scope.cancel()
    finally:
        server.close()
