"""The root of `agentd.toml` and the embedded defaults.

`AgentdFile` is the whole file's shape (its JSON Schema is `agentd config schema`). An empty file
and no file at all give the same configuration: the embedded defaults, which run on a fresh
machine with no API key by pointing the default endpoint at the built-in scripted model.
"""

from __future__ import annotations

from pydantic import Field

from agentd.config.bundled import EMBEDDED_SCRIPT
from agentd.config.sections import (
    BudgetsSection,
    DaemonSection,
    DefaultsSection,
    ExecutorSection,
    JournalSection,
    LimitsSection,
    LoopSection,
    MetricsSection,
    ScheduleSection,
    Section,
    SecuritySection,
    SupervisionSection,
    TriggerSection,
)
from agentd.config.servers import IntelligenceSection, McpSection
from agentd.config.types import ConfigPath, Name

__all__ = ["EMBEDDED_ENDPOINT", "EMBEDDED_SCRIPT", "AgentdFile", "embedded_intelligence"]

EMBEDDED_ENDPOINT = "demo"


def embedded_intelligence() -> dict[str, IntelligenceSection]:
    """The endpoint used when the file declares none: the scripted model playing EMBEDDED_SCRIPT."""
    endpoint = IntelligenceSection(kind="scripted", model="scripted-demo", script=str(EMBEDDED_SCRIPT))
    return {EMBEDDED_ENDPOINT: endpoint}


class AgentdFile(Section):
    """agentd.toml: every table is optional; an empty file is the embedded defaults."""

    daemon: DaemonSection = Field(default_factory=DaemonSection, description="The daemon process.")
    defaults: DefaultsSection = Field(
        default_factory=DefaultsSection, description="What a task gets when it does not say."
    )
    limits: LimitsSection = Field(default_factory=LimitsSection, description="Containment of each subagent.")
    supervision: SupervisionSection = Field(
        default_factory=SupervisionSection, description="Liveness detection and the kill ladder."
    )
    loop: LoopSection = Field(default_factory=LoopSection, description="Agentic loop knobs for every task.")
    security: SecuritySection = Field(default_factory=SecuritySection, description="Daemon-wide policy.")
    journal: JournalSection = Field(
        default_factory=JournalSection, description="What the journal keeps of ended tasks."
    )
    metrics: MetricsSection = Field(
        default_factory=MetricsSection, description="Prometheus metrics outputs (off by default)."
    )
    budgets: BudgetsSection = Field(
        default_factory=BudgetsSection, description="Daily caps on what each user spends."
    )
    executor: ExecutorSection = Field(
        default_factory=ExecutorSection, description="Where tasks run: here, or on Temporal workers."
    )
    intelligence: dict[Name, IntelligenceSection] = Field(
        default_factory=embedded_intelligence,
        description="Model endpoints by name. Declaring any replaces the embedded `demo` endpoint.",
    )
    mcp: dict[Name, McpSection] = Field(default_factory=dict, description="MCP servers by name.")
    mcp_servers_json: ConfigPath | None = Field(
        default=None,
        description="A JSON file in the desktop clients' mcpServers format to import servers from; "
        "an [mcp.*] table of the same name wins.",
    )
    trigger: list[TriggerSection] = Field(
        default_factory=list, max_length=256, description="Reactive triggers ([[trigger]] entries)."
    )
    schedule: list[ScheduleSection] = Field(
        default_factory=list,
        max_length=1000,
        description="Schedules the daemon owns ([[schedule]] entries): cron, interval or loop.",
    )
