"""The context window's budget (docs/loop.md, "Context levers"): what the fixed part of every
request costs, whether it fits at all, and whether compaction would free meaningful room. Pure;
sizes are chars/4 estimates.

The fixed part — the system prompt, the task (instruction and seed) and the tool catalogue — is
sent with every request and is never compacted. When it leaves no room for a reply the run cannot
work, and it fails at once naming the sizes and the fix. Compaction replaces the running
transcript with a summary; it runs only when that frees a meaningful share of the window, so a
loop whose fixed part sits near the high-water mark never re-summarises its own summary.
"""

from __future__ import annotations

from dataclasses import dataclass

from subagent.loop.state import LoopConfig
from subagent.messages import estimate_tokens

# Room a reply needs when the endpoint sets no `max_output_tokens`: an eighth of the window, at least this.
MIN_REPLY_TOKENS = 256
# The summary a compaction call may write: an eighth of the window, within these bounds.
MIN_SUMMARY_TOKENS = 256
MAX_SUMMARY_TOKENS = 4096
# Compaction must free at least a tenth of the window (and never less than this).
MIN_FREED_TOKENS = 128


@dataclass(frozen=True, slots=True)
class HeadSize:
    """The fixed part of every request, in estimated tokens, against the window."""

    prompt_tokens: int
    catalogue_tokens: int
    tools: int
    window: int
    reply_tokens: int

    @property
    def fixed_tokens(self) -> int:
        return self.prompt_tokens + self.catalogue_tokens


def reply_room(config: LoopConfig) -> int:
    """Tokens a reply needs: the endpoint's `max_output_tokens`, else an eighth of the window."""
    if config.max_output_tokens is not None:
        return config.max_output_tokens
    return max(MIN_REPLY_TOKENS, config.context_window // 8)


def head_size(config: LoopConfig, *, prompt_chars: int, catalogue_chars: int, tools: int) -> HeadSize:
    return HeadSize(
        prompt_tokens=estimate_tokens(prompt_chars),
        catalogue_tokens=estimate_tokens(catalogue_chars) if catalogue_chars else 0,
        tools=tools,
        window=config.context_window,
        reply_tokens=reply_room(config),
    )


def head_problem(size: HeadSize) -> str | None:
    """Why the fixed part leaves no room for a reply (naming sizes and the fix), or None when it fits."""
    if size.fixed_tokens + size.reply_tokens <= size.window:
        return None
    left = size.window - size.fixed_tokens
    return (
        f"the fixed part of every request does not fit the model's context window: the system prompt "
        f"and task take about {size.prompt_tokens} tokens and the tool catalogue ({size.tools} tools) "
        f"about {size.catalogue_tokens}, {size.fixed_tokens} together, which leaves {max(left, 0)} of the "
        f"{size.window}-token window where a reply needs {size.reply_tokens}. Use a larger context "
        "window (agentd run --context-window N, or context_window in [intelligence.NAME]) if the model "
        "has one, or grant fewer tools (a tool allow-list: tools = [...] in [mcp.NAME])."
    )


def summary_tokens(context_window: int) -> int:
    """The cap on a compaction call's summary."""
    return max(MIN_SUMMARY_TOKENS, min(MAX_SUMMARY_TOKENS, context_window // 8))


def worth_compacting(*, transcript_chars: int, kept_chars: int, context_window: int) -> bool:
    """Would replacing the transcript by a summary (plus the results kept verbatim) free meaningful room?

    The gain is the transcript minus what survives: the results kept verbatim and a summary as
    long as its cap. It must be at least a tenth of the window: a transcript that is already a
    summary plus a little new work is left alone.
    """
    freed = estimate_tokens(max(transcript_chars - kept_chars, 0)) - summary_tokens(context_window)
    return freed >= max(MIN_FREED_TOKENS, context_window // 10)


def kept_after_compaction(result_chars: list[int], keep_verbatim: int, context_window: int) -> int:
    """How many of the newest tool results (sizes oldest first) a compaction keeps verbatim.

    At most `keep_verbatim`, and only as many as fit a quarter of the window together: on a small
    window, five large results kept verbatim would leave the compacted transcript as large as
    before.
    """
    budget = context_window // 4
    kept, used = 0, 0
    for chars in reversed(result_chars[-keep_verbatim:] if keep_verbatim else []):
        used += estimate_tokens(chars)
        if used > budget:
            break
        kept += 1
    return kept
