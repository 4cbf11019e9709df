"""The daemon's metrics outputs (`[metrics]`, docs/metrics.md): built, sampled and served.

`build_metrics` returns `NULL_METRICS` unless a listener or a textfile is configured, and only
then imports `prometheus_client` (the `metrics` extra). `exporting` binds the listener (never the
API socket: the configuration refuses that) before the daemon reports ready; `Exporter.run` keeps
the sampled figures current — running and queued tasks, the event loop's lag — and rewrites the
textfile every `textfile_interval_s` and once more when it is cancelled at exit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import anyio

from agentd import logs
from agentd.config.load import Config
from agentd.errors import JournalError, ListenerError
from agentd.journal.store import Journal
from agentd.metrics.address import parse_listen
from agentd.metrics.labels import KnownNames
from agentd.metrics.port import NULL_METRICS, Metrics
from agentd.supervision.supervisor import Supervisor
from protocol.api import TriggerState

TRIGGER_STATES: tuple[str, ...] = get_args(TriggerState)

if TYPE_CHECKING:
    from agentd.metrics.registry import PrometheusMetrics

SAMPLE_INTERVAL_S = 1.0  # running tasks and the loop's lag
QUEUED_REFRESH_S = 5.0  # the queued count costs a journal read
IO_TIMEOUT_S = 5.0  # a journal read or textfile write slower than this is abandoned for this round


def known_names(config: Config) -> KnownNames:
    """The configured names that may appear as label values."""
    return KnownNames(
        endpoints=frozenset(config.intelligence),
        servers=frozenset(config.mcp),
        triggers=frozenset(t.name or f"trigger-{i}" for i, t in enumerate(config.triggers)),
        schedules=frozenset(s.name for s in config.file.schedule),
    )


def wanted(config: Config) -> bool:
    section = config.file.metrics
    return section.listen is not None or section.textfile is not None


def build_metrics(current: Callable[[], Config]) -> Metrics:
    """The daemon's `Metrics`: Prometheus-backed when `[metrics]` asks for an output, else a no-op."""
    if not wanted(current()):
        return NULL_METRICS
    from agentd.metrics.registry import PrometheusMetrics

    cache: dict[int, KnownNames] = {}

    def names() -> KnownNames:
        # Label values follow the live configuration (a reload may add an endpoint), computed
        # once per configuration object, not per event.
        config = current()
        if id(config) not in cache:
            cache.clear()
            cache[id(config)] = known_names(config)
        return cache[id(config)]

    return PrometheusMetrics(names)


class Exporter:
    """Samples the daemon into `metrics` and writes the textfile; does nothing for `NULL_METRICS`."""

    def __init__(self, metrics: Metrics, journal: Journal, textfile: Path | None, interval_s: float) -> None:
        self.metrics = metrics
        self.journal = journal
        self.textfile = textfile
        self.interval_s = interval_s

    async def run(
        self, supervisor: Supervisor, trigger_states: Callable[[], Mapping[str, int]] = dict
    ) -> None:
        if self.metrics is NULL_METRICS:
            return
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._sample, supervisor, trigger_states)
                if self.textfile is not None:
                    tg.start_soon(self._textfile_forever, self.textfile)
        finally:
            if self.textfile is not None:
                with anyio.CancelScope(shield=True):
                    await self._write_textfile(self.textfile)  # the final figures

    async def _sample(self, supervisor: Supervisor, trigger_states: Callable[[], Mapping[str, int]]) -> None:
        queued = 0
        refresh_at = 0.0
        while True:
            asked = anyio.current_time()
            await anyio.sleep(SAMPLE_INTERVAL_S)
            now = anyio.current_time()
            self.metrics.loop_lag(now - asked - SAMPLE_INTERVAL_S)
            if now >= refresh_at:
                refresh_at = now + QUEUED_REFRESH_S
                with anyio.move_on_after(IO_TIMEOUT_S), contextlib.suppress(JournalError):
                    queued = (await self.journal.tasks.counts()).get("queued", 0)
                    schedules = await self.journal.schedules.counts()
                    self.metrics.armed(
                        "schedule", {"armed": schedules["active"], "paused": schedules["paused"]}
                    )
            self.metrics.tasks(running=len(supervisor.running), queued=queued)
            states = trigger_states()
            # Every state, zeros included: a gauge not set again would keep its last count.
            self.metrics.armed("trigger", {state: states.get(state, 0) for state in TRIGGER_STATES})

    async def _textfile_forever(self, path: Path) -> None:
        while True:
            await self._write_textfile(path)
            await anyio.sleep(self.interval_s)

    async def _write_textfile(self, path: Path) -> None:
        from agentd.metrics.exposition import write_textfile

        registry = self.prometheus().registry
        with anyio.move_on_after(IO_TIMEOUT_S):
            try:
                await anyio.to_thread.run_sync(write_textfile, registry, path, abandon_on_cancel=True)
            except OSError as exc:
                logs.get().warning("proc.metrics", err=f"textfile {path}: {exc}")

    def prometheus(self) -> PrometheusMetrics:
        from agentd.metrics.registry import PrometheusMetrics

        assert isinstance(self.metrics, PrometheusMetrics)
        return self.metrics


@contextlib.contextmanager
def exporting(metrics: Metrics, config: Config, journal: Journal) -> Iterator[Exporter]:
    """Bind the metrics listener (if configured) for the block; yields the `Exporter` to run.

    Raises ListenerError when the configured listener cannot be bound.
    """
    section = config.file.metrics
    textfile = Path(section.textfile) if section.textfile is not None else None
    exporter = Exporter(metrics, journal, textfile, section.textfile_interval_s)
    if metrics is NULL_METRICS:
        yield exporter
        return
    from agentd.metrics.exposition import serving

    journal.observe_commits(metrics.journal_commit)
    try:
        with contextlib.ExitStack() as stack:
            if section.listen is not None:
                registry = exporter.prometheus().registry
                try:
                    address = parse_listen(section.listen)
                    deadline = config.daemon.frame_deadline_s
                    where = stack.enter_context(serving(registry, address, request_deadline_s=deadline))
                except (OSError, ValueError) as exc:
                    raise ListenerError(f"metrics listener {section.listen}: {exc}") from exc
                logs.get().info("proc.metrics", listen=where)
            yield exporter
    finally:
        journal.observe_commits(None)
