"""Context levers, in RFC 0007 §3.9 order: stub stale tool results, then compact by summary.

Lever 1 runs after every tool turn and keeps the last `keep_verbatim` tool results intact.
Lever 2 replaces the running transcript with one summary (plus the last results verbatim)
when the forward estimate crosses the high-water mark. Lever 3 (notes) is a self-tool.
"""

from __future__ import annotations

from dataclasses import replace

from subagent.loop.progress import canonical_json
from subagent.messages import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage

SUMMARIZE_INSTRUCTION = (
    "Summarize this conversation so far for your own continuation of the task. Preserve decisions "
    "made, unresolved problems, key facts and identifiers (paths, URIs, ids, numbers), and the "
    "current plan; drop redundant chatter. Reply with the summary only."
)
COMPACTION_SYSTEM = "You compress an agent's working transcript into a faithful, dense summary."
ARGS_PREVIEW = 80


def _call_preview(call: ToolCall | None, name: str) -> str:
    if call is None or call.arguments is None:
        return f"{name}(…)"
    args = canonical_json(call.arguments)
    if len(args) > ARGS_PREVIEW:
        args = args[: ARGS_PREVIEW - 1] + "…"
    return f"{name}({args})"


def stub_text(call: ToolCall | None, name: str) -> str:
    return f"[tool result for {_call_preview(call, name)} elided; call the tool again if you need it]"


def stub_stale_tool_results(transcript: tuple[Message, ...], keep: int) -> tuple[Message, ...]:
    """Lever 1: replace all but the newest `keep` tool-result bodies with stubs.

    Messages that are already stubs, and all other messages, are returned as the same objects,
    so an adapter's per-message encoding cache stays warm.
    """
    result_positions = [i for i, m in enumerate(transcript) if isinstance(m, ToolResultMessage)]
    stale = result_positions[: max(0, len(result_positions) - keep)]
    to_stub = [i for i in stale if not _is_stub(transcript[i])]
    if not to_stub:
        return transcript
    calls = {c.id: c for m in transcript if isinstance(m, AssistantMessage) for c in m.tool_calls}
    out = list(transcript)
    for i in to_stub:
        msg = out[i]
        assert isinstance(msg, ToolResultMessage)
        out[i] = replace(msg, text=stub_text(calls.get(msg.call_id), msg.name), stubbed=True)
    return tuple(out)


def _is_stub(msg: Message) -> bool:
    return isinstance(msg, ToolResultMessage) and msg.stubbed


def compaction_messages(head: tuple[Message, ...], transcript: tuple[Message, ...]) -> tuple[Message, ...]:
    """The messages of the one summarize call (lever 2)."""
    return (*head, *transcript, UserMessage(SUMMARIZE_INSTRUCTION, kind="instruction"))


def compacted_transcript(summary: str, transcript: tuple[Message, ...], keep: int) -> tuple[Message, ...]:
    """Reinitialise: [summary] + the last `keep` verbatim tool results, as one user message.

    The results travel as text in a user message because a provider rejects tool results
    whose assistant tool calls were compacted away.
    """
    recent = (
        [m for m in transcript if isinstance(m, ToolResultMessage) and not m.stubbed][-keep:] if keep else []
    )
    parts = [f"[Summary of the work so far]\n{summary.strip()}"]
    if recent:
        parts.append("[Most recent tool results, verbatim]")
        parts.extend(f"- {m.name} ({'error' if m.is_error else 'ok'}):\n{m.text}" for m in recent)
    return (UserMessage("\n\n".join(parts), kind="summary"),)


def mechanical_compaction(transcript: tuple[Message, ...], keep: int) -> tuple[Message, ...]:
    """Fallback when the summarize call itself cannot fit: keep only the newest results."""
    return compacted_transcript("(earlier turns were dropped to fit the context window)", transcript, keep)
