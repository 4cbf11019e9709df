"""The configuration mapped onto each component's options (journal, supervisor).

One place where config keys become the frozen option objects the journal and the supervisor take,
so neither of them reads the configuration itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentd.config.load import Config
from agentd.config.sections import ScheduleSection, TriggerSection
from agentd.executors.remote import TemporalSettings
from agentd.journal.quota import Quota
from agentd.journal.retention import Retention
from agentd.journal.store import JournalOptions
from agentd.spawning.spawner import ExecSpawner, RLimits
from agentd.spawning.zygote_spawner import ZygoteSpawner
from agentd.supervision.daily_caps import CapsConfig
from agentd.supervision.liveness import LivenessPolicy
from agentd.supervision.ports import RunOptions
from agentd.supervision.pricing import Price
from agentd.supervision.provider_limits import EndpointLimits
from agentd.supervision.supervisor import SupervisorOptions
from processes.ladder import LadderPolicy
from protocol.api import ScheduleSpec, SpecLimits, TaskSpec
from protocol.spawn import Limits, SpawnPayload, WarmSpec

if TYPE_CHECKING:
    from agentd.triggers.manager import ManagerOptions, TriggerConfig


def _finite(value: int | float | None) -> int | None:
    if value is None or value == float("inf"):
        return None
    return int(value)


def build_spawner(config: Config, *, zygote: bool) -> ExecSpawner | ZygoteSpawner:
    """The subagents' spawner: forked from a zygote if `zygote`, else exec'd, below the daemon's
    priority as `[supervision]` says."""
    section = config.supervision
    if zygote:
        return ZygoteSpawner(
            warm_wait_s=section.zygote_wait_s, batch=section.batch_scheduling, nice=section.subagent_nice
        )
    return ExecSpawner(batch=section.batch_scheduling, nice=section.subagent_nice)


def submit_quota(config: Config) -> Quota:
    return Quota(
        max_queued=_finite(config.daemon.max_queued_per_uid),
        max_pending_bytes=_finite(config.daemon.max_pending_bytes_per_uid),
        max_schedules=_finite(config.daemon.max_schedules_per_uid),
        max_fires_per_minute=_finite(config.daemon.max_fires_per_minute_per_uid),
    )


def retention(config: Config) -> Retention:
    journal = config.file.journal
    return Retention(task_s=journal.task_retention, transcript_s=journal.transcript_retention)


def journal_options(config: Config) -> JournalOptions:
    return JournalOptions(
        events_per_task=config.daemon.max_events_per_task,
        max_transcript_bytes=config.file.journal.max_transcript_bytes,
    )


def supervisor_options(config: Config) -> SupervisorOptions:
    sup = config.supervision
    lim = config.limits
    run = RunOptions(
        liveness=LivenessPolicy(
            ping_interval_s=sup.ping_interval_s,
            missed_pongs=sup.missed_pongs,
            starved_grace_s=sup.starved_grace_s,
            loop_stall_s=sup.loop_stall_s,
            deadline_backstop_s=sup.deadline_backstop_s,
            ready_timeout_s=sup.ready_timeout_s,
            eof_grace_s=sup.eof_grace_s,
            max_faults=sup.max_protocol_faults,
        ),
        ladder=LadderPolicy(
            cancel_grace_s=sup.cancel_grace_s, term_grace_s=sup.term_grace_s, kill_reap_s=sup.kill_reap_s
        ),
        rlimits=RLimits(
            address_space=_finite(lim.address_space_bytes),
            cpu_seconds=_finite(lim.cpu_seconds),
            nofile=lim.nofile,
            core=0,
        ),
        memory_max=_finite(lim.memory_max_bytes),
        pids_max=_finite(lim.pids_max),
        child_argv=tuple(sup.child_command) if sup.child_command else None,
        child_steps=config.defaults.child_max_steps,
        child_tokens=config.defaults.child_max_tokens,
        stderr_line_cap=sup.stderr_line_cap,
        prices=prices(config),
    )
    return SupervisorOptions(
        max_concurrent_tasks=config.daemon.max_concurrent_tasks,
        max_running_per_uid=_finite(config.daemon.max_running_per_uid),
        drain_timeout_s=config.daemon.drain_timeout_s,
        on_stop=config.daemon.on_stop,
        park_approval_after_s=config.daemon.park_approval_after,
        on_budget=config.defaults.on_budget,
        budget_wait_timeout_s=config.defaults.budget_wait_timeout,
        orphan_sweep_interval_s=sup.orphan_sweep_interval_s,
        spawn_window=sup.spawn_window,
        run=run,
        provider_limits=provider_limits(config),
        daily_caps=daily_caps(config),
    )


def daily_caps(config: Config) -> CapsConfig:
    """Each user's daily caps (`[budgets]`) and each trigger's (`[[trigger]] daily_cost`)."""
    budgets = config.file.budgets
    return CapsConfig(
        uid_cost=budgets.per_uid_daily_cost,
        uid_tokens=budgets.per_uid_daily_tokens,
        trigger_cost={
            section.name or f"trigger-{index}": section.daily_cost
            for index, section in enumerate(config.file.trigger)
            if section.daily_cost is not None
        },
    )


def prices(config: Config) -> dict[str, Price]:
    """The priced endpoints (`[intelligence.NAME] price`), each with its price."""
    return {
        name: Price(
            input=section.price.input,
            output=section.price.output,
            cached_input=section.price.cached_input
            if section.price.cached_input is not None
            else section.price.input,
            max_reply_tokens=section.max_output_tokens or section.context_window,
        )
        for name, section in config.file.intelligence.items()
        if section.price is not None
    }


def provider_limits(config: Config) -> dict[str, EndpointLimits]:
    """The endpoints with a provider limit (`[intelligence.NAME]`), each with its limits."""
    return {
        name: EndpointLimits(
            max_concurrent=section.max_concurrent_requests,
            requests_per_minute=section.requests_per_minute,
            tokens_per_minute=section.tokens_per_minute,
        )
        for name, section in config.file.intelligence.items()
        if section.limited
    }


# A warm session's steps over its life are bounded by its tokens; steps get the wire's ceiling.
WARM_SESSION_STEPS = 100_000


def warm_payload(base: SpawnPayload, section: TriggerSection) -> SpawnPayload:
    """A `route = "continue"` trigger's session payload: `base` (its instruction, endpoint and MCP
    grant, as a task of the trigger would get) made warm, with the trigger's per-delivery budgets
    and its session's token cap and lifetime (docs/warm-sessions.md)."""
    return base.model_copy(
        update={
            "warm": True,
            "session": WarmSpec(
                turn_max_steps=section.turn_max_steps,
                turn_max_tokens=section.turn_max_tokens,
                turn_deadline_s=section.turn_deadline,
                idle_timeout_s=section.session_idle_timeout,
            ),
            "limits": Limits(
                max_steps=WARM_SESSION_STEPS,
                max_tokens=section.session_max_tokens,
                deadline_s=section.session_max_life,
                remaining_depth=base.limits.remaining_depth,
            ),
        }
    )


def config_schedules(config: Config) -> dict[str, tuple[ScheduleSpec, TaskSpec]]:
    """The `[[schedule]]` tables as the trigger and the task spec of each, by name."""
    return {section.name: _schedule(section) for section in config.file.schedule}


def _schedule(section: ScheduleSection) -> tuple[ScheduleSpec, TaskSpec]:
    kind = "cron" if section.cron is not None else "interval" if section.every is not None else "loop"
    trigger = ScheduleSpec(
        kind=kind,
        cron=section.cron,
        tz=section.tz,
        every_s=section.every,
        interval_s=section.interval,
        max_runs=section.max_runs,
        missed=section.missed,
        overlap=section.overlap,
        max_failures=section.max_failures,
        idle_backoff_max_s=section.idle_backoff_max,
        max_total_tokens=section.max_total_tokens,
        daily_cost=section.daily_cost,
    )
    spec = TaskSpec(
        instruction=section.instruction,
        model=section.model,
        mcp=list(section.mcp or []),
        limits=SpecLimits(
            max_steps=section.max_steps, max_tokens=section.max_tokens, deadline_s=section.deadline
        ),
        labels={"schedule": section.name},
    )
    return trigger, spec


def trigger_configs(config: Config) -> list[TriggerConfig]:
    """The `[[trigger]]` tables as the trigger manager runs them, in declaration order."""
    # Imported here: `agentd run` (which imports this module) runs no triggers.
    from agentd.triggers.manager import TriggerConfig

    out = []
    for index, section in enumerate(config.triggers):
        out.append(
            TriggerConfig(
                name=section.name or f"trigger-{index}",
                index=index,
                server=section.server,
                instruction=section.instruction,
                uri=section.uri,
                glob=section.glob,
                route=section.route,
                model=section.model,
                mcp=tuple(config.trigger_grant(index)),
                debounce_s=section.debounce_ms / 1000,
                max_wait_s=section.max_wait_ms / 1000,
                max_inflight=section.max_inflight,
                overflow=section.overflow,
                prestart=section.prestart,
                on_arm=section.on_arm,
            )
        )
    return out


def trigger_manager_options(config: Config) -> ManagerOptions:
    """How resource watchers run: the subagents' liveness and ladder, the restart governor."""
    from agentd.triggers.manager import ManagerOptions
    from agentd.triggers.plan import GovernorPolicy

    sup = config.supervision
    run = supervisor_options(config).run
    return ManagerOptions(
        governor=GovernorPolicy(
            backoff_initial_s=sup.restart_backoff_initial_s,
            backoff_max_s=sup.restart_backoff_max_s,
            max_restarts=sup.restart_max,
            window_s=sup.restart_window_s,
        ),
        liveness=run.liveness,
        ladder=run.ladder,
        argv=tuple(sup.watch_command) if sup.watch_command else None,
        stderr_line_cap=sup.stderr_line_cap,
    )


def temporal_settings(config: Config) -> TemporalSettings:
    section = config.file.executor
    return TemporalSettings(
        target=section.target,
        namespace=section.namespace,
        task_queue=section.task_queue,
        connect_timeout_s=section.connect_timeout_s,
        heartbeat_timeout_s=section.heartbeat_timeout_s,
    )
