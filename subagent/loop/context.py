"""Context levers, in the order docs/loop.md gives ("Context levers"): stub stale tool results,
then compact by summary.

Lever 1 runs after every tool turn and keeps the last `keep_verbatim` tool results intact.
Lever 2 replaces the running transcript with one summary (plus the last results verbatim)
when the forward estimate crosses the high-water mark. Lever 3 (notes) is a self-tool.
"""

from __future__ import annotations

from dataclasses import replace

from subagent.loop.progress import canonical_json
from subagent.messages import Message, ToolCall, ToolResultMessage, UserMessage

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


def stub_oldest(
    transcript: tuple[Message, ...], verbatim: tuple[tuple[int, str], ...], keep: int
) -> tuple[tuple[Message, ...], tuple[tuple[int, str], ...], int]:
    """Lever 1: stub the oldest verbatim tool results until at most `keep` remain.

    Returns the new transcript, the new verbatim list and the change in characters. Only the
    results that age out are replaced; every other message stays the same object, so an
    adapter's per-message encoding cache stays warm.
    """
    if len(verbatim) <= keep:
        return transcript, verbatim, 0
    aged, kept = verbatim[: len(verbatim) - keep], verbatim[len(verbatim) - keep :]
    out = list(transcript)
    delta = 0
    for index, stub in aged:
        msg = out[index]
        assert isinstance(msg, ToolResultMessage)
        out[index] = replace(msg, text=stub, stubbed=True, images=())
        delta += len(stub) - len(msg.text)
    return tuple(out), kept, delta


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
