"""agentd's own words to the model, and answers that only repeat them (pure).

Every message the loop writes to the model itself — a re-ask, an error observation, a refused
call — starts with `MARK`, so neither the model nor a reader can take it for the task's data,
and a final answer that carries the mark was copied from it. A small model also echoes those
messages without the mark, or the placeholders of the action format (`<your answer>`); so each
message's fixed sentences (its details in parentheses, schema listings and JSON left out) are
kept, and an answer made mostly of them is a parrot, not a result (docs/loop.md "Parroted
answers").
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from subagent.loop.action import ACTION_FORMAT, GROUNDING

MARK = "[agentd]"
# Sentences shorter than this are too common to tell an echo from an answer.
MIN_SENTENCE_CHARS = 20
# An answer at least this share of which is agentd's sentences is a parrot.
PARROT_SHARE = 0.5
# Sentences of the run's own feedback kept (the newest), bounded for long runs.
MAX_SENTENCES = 64
# An answer this long that is a piece of one of the run's feedback sentences was cut from it.
MIN_PIECE_CHARS = 30
# Parenthesised details nested deeper than this are kept (a bound on the work, not a rule).
MAX_NESTING = 4
PLACEHOLDERS = frozenset({"your answer", "why", "tool name"})

REASK = (
    "Your answer repeated a message from agentd (the runtime that runs you) instead of giving the "
    "result of the task. Answer with the result of the task itself."
)

_DETAIL = re.compile(r"\([^()]*\)|\{.*?\}|^\s*- .*$|^\s*\{.*$", re.MULTILINE)
_SENTENCE_END = re.compile(r"[.!?:;\n]+")
_NOT_WORD = re.compile(r"[^0-9a-z]+")


def mark(text: str) -> str:
    """`text` as agentd's own message to the model."""
    return f"{MARK} {text}"


def sentences(text: str) -> tuple[str, ...]:
    """The fixed sentences of an agentd message, normalised (details and listings left out)."""
    fixed = text.replace(MARK, " ")
    for _ in range(MAX_NESTING):  # inner parentheses first, then the ones around them
        fixed, removed = _DETAIL.subn(" ", fixed)
        if not removed:
            break
    found = (_normal(part) for part in _SENTENCE_END.split(fixed))
    return tuple(s for s in found if len(s) >= MIN_SENTENCE_CHARS)


def remembered(known: tuple[str, ...], text: str) -> tuple[str, ...]:
    """`known` with the sentences of one more message, the newest `MAX_SENTENCES` kept."""
    added = tuple(s for s in sentences(text) if s not in known)
    return (known + added)[-MAX_SENTENCES:] if added else known


def parrots(answer: str, sent: Iterable[str]) -> bool:
    """Whether `answer` only repeats agentd's messages: it carries the mark, is a placeholder of
    the action format, is a long piece of one of the `sent` sentences (the run's feedback), or is
    mostly made of those and the standing instructions."""
    if MARK in answer:
        return True
    normal = _normal(answer)
    if not normal:
        return False
    if normal in PLACEHOLDERS:
        return True
    covered = 0
    for sentence in sent:
        if len(normal) >= MIN_PIECE_CHARS and normal in sentence:
            return True
        if sentence in normal:
            covered += len(sentence)
    covered += sum(len(sentence) for sentence in INSTRUCTIONS if sentence in normal)
    return covered >= PARROT_SHARE * len(normal)


def _normal(text: str) -> str:
    return _NOT_WORD.sub(" ", text.lower()).strip()


# The standing instructions of every JSON-action request (the system prompt carries them too).
INSTRUCTIONS = (
    sentences(ACTION_FORMAT.replace("<", "(").replace(">", ")")) + sentences(GROUNDING) + sentences(REASK)
)
