"""The `auto` tool mode's one judgement (pure): did a native-mode reply without tool calls mean to
call a tool? A call written out as JSON, or an offered tool named as a word in the prose, says so;
anything else is an answer. (The switch itself lives in the machine.)
"""

from __future__ import annotations

from subagent.loop.action import ToolAction, parse_action


def written_tool_call(text: str, callable_tools: frozenset[str]) -> ToolAction | str | None:
    """Whether a native-mode reply without tool calls shows the model *meant* to call a tool: a
    call written out as JSON (returned as the action), or an offered tool named in its prose
    (returned as that name). None when it reads as an answer."""
    if not callable_tools or ("{" not in text and not any(name in text for name in callable_tools)):
        return None
    parsed = parse_action(text)
    if isinstance(parsed, ToolAction) and parsed.tool in callable_tools:
        return parsed
    return next((name for name in sorted(callable_tools) if names_tool(text, name)), None)


def names_tool(text: str, name: str) -> bool:
    start = text.find(name)
    while start != -1:
        before = text[start - 1] if start else " "
        end = start + len(name)
        after = text[end] if end < len(text) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return True
        start = text.find(name, start + 1)
    return False
