"""What the environment offers the loop each turn (`TurnView`): the tools in scope, the resource
catalogue, and the system prompt rendered for them once per catalogue version.

Pure: built by the driver from the tool router, read by `subagent.loop.machine`.
"""

from __future__ import annotations

from dataclasses import dataclass

from subagent.loop import constrain, prompt
from subagent.loop.state import LoopConfig
from subagent.messages import ResponseSchema, ToolSpec


@dataclass(frozen=True, slots=True)
class TurnView:
    """What the environment offers this turn: the tools in scope and the resource catalogue.

    Build it with `TurnView.build` once per catalogue version: that renders the system prompt
    and measures the tools once, instead of every turn.
    """

    tools: tuple[ToolSpec, ...] = ()
    resources: str = ""
    # Serialized size of `tools`, for the forward estimate.
    tools_chars: int = 0
    # Set by `build`: the rendered system prompt and the tools as offered (with `task_refuse`).
    system: str | None = None
    offered: tuple[ToolSpec, ...] = ()
    # The tool mode `system` and `offered` were rendered for.
    tool_mode: str = ""
    # Wire names of tools a granted server lists but this agent's grant leaves out: a call of one
    # is refused as not granted, any other name not offered as a tool that does not exist.
    ungranted: frozenset[str] = frozenset()
    # JSON-action mode: the action union every turn's reply is constrained to (loop/constrain.py).
    actions: ResponseSchema | None = None

    @staticmethod
    def build(
        config: LoopConfig,
        tools: tuple[ToolSpec, ...],
        resources: str,
        tools_chars: int = 0,
        ungranted: frozenset[str] = frozenset(),
    ) -> TurnView:
        offered = (*tools, prompt.refuse_tool_spec()) if config.tool_mode == "native" else tools
        system = prompt.system_prompt(config, resources=resources, tools=offered)
        return TurnView(
            tools=tools,
            resources=resources,
            tools_chars=tools_chars,
            system=system,
            offered=offered,
            tool_mode=config.tool_mode,
            ungranted=ungranted,
            actions=constrain.action_schema(offered, config.contract) if config.tool_mode == "json" else None,
        )
