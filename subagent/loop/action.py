"""The JSON-action fallback parser for endpoints without native tool calling
(docs/loop.md, "Native tools and JSON actions").

`parse_action` finds the first balanced `{...}` in a reply that parses as an action — skipping
prose, stray braces, code fences and JSON objects that are not actions — and turns it into a tool
call, a final answer or a refusal. When none does, the `ParseFailure` says what was wrong (no
object at all, an object cut off or invalid at a named character, an object that is not an
action, an action missing a field), which the machine turns into a step-consuming observation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

from pydantic import JsonValue

from subagent.messages import JsonObject

MAX_SCAN = 1_000_000
# Characters the decoder may examine across all candidate objects of one reply: each `{` is a
# candidate, so a hostile reply ("{{{{…") must not cost quadratic time.
MAX_DECODE_WORK = 64 * MAX_SCAN
WINDOW = 4096
# What is left after the decoder's error position when a reply stops mid-token: a literal, a
# number's sign/fraction/exponent, or a \\u escape cut short.
_CUT_TAIL = re.compile(r"t(r(ue?)?)?|f(a(l(se?)?)?)?|n(u(ll?)?)?|[-.eE][0-9]*|u[0-9a-fA-F]{0,4}")
# What a candidate that ended in a RecursionError is charged (the depth Python allows).
RECURSION_WORK = 1000
ARGUMENT_KEYS = ("arguments", "args", "parameters", "action_input")
FINAL = "final"

ACTION_FORMAT = (
    "Reply with exactly one JSON object and nothing else:\n"
    '  {"action": "tool", "tool": "<tool name>", "arguments": {...}}   to call one tool;\n'
    '  {"action": "final", "result": <your answer>}                     when the task is done;\n'
    '  {"action": "refuse", "reason": "<why>"}                          if the task cannot be done.'
)
# Where facts come from: a small model otherwise answers from its imagination instead of calling
# the tool that knows (the contents of a file, a directory's listing, a tool's computed result).
GROUNDING = (
    "Facts about files, directories, servers and other systems come only from tool results: call "
    "the tool that reports them, read its result in the next message, then answer from it. Never "
    "guess or invent them. Take a tool's result over what you expected. If the task needs an "
    "action that none of the tools can perform, refuse instead of claiming it was done."
)


@dataclass(frozen=True, slots=True)
class ToolAction:
    tool: str
    arguments: JsonObject


@dataclass(frozen=True, slots=True)
class FinalAction:
    result: JsonValue


@dataclass(frozen=True, slots=True)
class RefuseAction:
    reason: str


@dataclass(frozen=True, slots=True)
class ParseFailure:
    reason: str


ParsedAction = ToolAction | FinalAction | RefuseAction | ParseFailure


@dataclass(frozen=True, slots=True)
class _Found:
    """A `{` where a JSON object starts and parses; `end` is one past its closing brace."""

    start: int
    end: int
    value: JsonObject


@dataclass(frozen=True, slots=True)
class _Broken:
    """A `{` where decoding failed: at character `at`, for `why` (the decoder's message)."""

    start: int
    at: int
    why: str
    # The reply ended inside this object (cut off, or a string never closed).
    at_end: bool = False


def _reject_constant(name: str) -> JsonValue:
    raise ValueError(f"{name} is not JSON")


# strict=False: small models often put raw newlines inside strings (file contents); accept them.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, strict=False)


class _Scan:
    """The candidate objects of a reply: each `{`, left to right, decoded as JSON, within a work
    budget (`exhausted` once it ran out). `skip_to` moves past an object's inside."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.work = 0
        self.exhausted = False
        self._next = text.find("{")

    def skip_to(self, position: int) -> None:
        if position > self._next:
            self._next = self.text.find("{", position)

    def __iter__(self) -> Iterator[_Found | _Broken]:
        while self._next != -1:
            if self.work > MAX_DECODE_WORK:
                self.exhausted = True
                return
            start = self._next
            self._next = self.text.find("{", start + 1)
            yield self._decode_at(start)

    def _decode_at(self, start: int) -> _Found | _Broken:
        # The decoder's error computes a line number by counting from the start of the string it
        # was given, so decode a window first (prose fails within a few characters) and the
        # rest of the text only when the object runs past the window.
        rest = len(self.text) - start
        for size in (min(WINDOW, rest), rest):
            chunk = self.text[start : start + size]
            self.work += size
            try:
                value, end = _DECODER.raw_decode(chunk)
            except json.JSONDecodeError as exc:
                self.work += exc.pos
                ended = _ends_inside(chunk, exc)
                if ended and size < rest:
                    continue  # cut by the window, not by the reply: decode the whole rest
                return _Broken(start, start + exc.pos, exc.msg, at_end=ended)
            except RecursionError:
                self.work += RECURSION_WORK
                return _Broken(start, start, "nested too deeply")
            except ValueError as exc:  # NaN / Infinity
                return _Broken(start, start, str(exc))
            assert isinstance(value, dict)  # raw_decode at a "{" yields an object or raises
            return _Found(start, start + end, value)
        raise AssertionError("unreachable: the last attempt decodes the whole rest")


def _ends_inside(chunk: str, exc: json.JSONDecodeError) -> bool:
    """Whether decoding failed because `chunk` ended: at its end, in a string never closed, or in
    a literal cut short (`tr`, `nul`)."""
    if exc.pos >= len(chunk) or exc.msg.startswith("Unterminated string"):
        return True
    return _CUT_TAIL.fullmatch(chunk[exc.pos :]) is not None


def extract_json_object(text: str) -> JsonObject | None:
    """Return the first balanced `{...}` in `text` that parses as a JSON object, else None."""
    for candidate in _Scan(text[:MAX_SCAN]):
        if isinstance(candidate, _Found):
            return candidate.value
    return None


def parse_action(text: str) -> ParsedAction:
    """Parse a model's text reply as one action object: the first object that is an action.

    An object with an `"action"` key claims everything inside it: if it is not a valid action,
    objects nested in it are not tried (its failure is reported instead). Objects without that
    key are looked into, so an action wrapped in another object is still found.
    """
    text = text[:MAX_SCAN]
    first_invalid: tuple[int, str] | None = None
    first_plain: _Found | None = None
    furthest: _Broken | None = None
    scan = _Scan(text)
    for candidate in scan:
        if isinstance(candidate, _Broken):
            if furthest is None or candidate.at - candidate.start > furthest.at - furthest.start:
                furthest = candidate
            continue
        parsed = _as_action(candidate.value)
        if isinstance(parsed, ToolAction | FinalAction | RefuseAction):
            return parsed
        if isinstance(parsed, str):
            if first_invalid is None:
                first_invalid = (candidate.start, parsed)
            scan.skip_to(candidate.end)
        elif first_plain is None:
            first_plain = candidate
    if first_invalid is not None:
        at, why = first_invalid
        return ParseFailure(f"the action object at character {at}: {why}")
    if first_plain is not None:
        keys = ", ".join(f'"{k}"' for k in list(first_plain.value)[:6]) or "none"
        return ParseFailure(
            f'the JSON object at character {first_plain.start} is not an action: it has no "action" '
            f"key (its keys: {keys})"
        )
    if furthest is not None:
        return ParseFailure(_describe_broken(furthest))
    if scan.exhausted:
        return ParseFailure(f"no action object within the first {MAX_DECODE_WORK} characters examined")
    return ParseFailure("no JSON object in the reply (it contains no '{')")


def _describe_broken(broken: _Broken) -> str:
    where = f"the JSON object starting at character {broken.start}"
    if broken.at_end:
        return f"{where} is cut off: the reply ends before it is complete ({broken.why.lower()})"
    return f"{where} is not valid JSON: {broken.why.lower()} (character {broken.at})"


def _as_action(obj: JsonObject) -> ToolAction | FinalAction | RefuseAction | str | None:
    """The action `obj` encodes; a string saying what is wrong with an action object; None for an
    object that is no action at all (no `"action"` key and not a bare tool call)."""
    if "action" not in obj:
        name = obj.get("tool", obj.get("name"))
        if isinstance(name, str) and name and any(k in obj for k in ARGUMENT_KEYS):
            # The shape many models write for a call (Hermes/Qwen `<tool_call>`, Ollama).
            return _tool(name, obj)
        return None
    action = obj["action"]
    if action == "tool":
        tool = obj.get("tool", obj.get("name"))
        if not isinstance(tool, str) or not tool:
            return 'a "tool" action needs a "tool" name'
        return _tool(tool, obj)
    if action == FINAL:
        if obj.get("refused") is True:
            return RefuseAction(str(obj.get("reason", obj.get("result", ""))))
        if "result" not in obj:
            return 'a "final" action needs a "result"'
        return FinalAction(obj["result"])
    if action == "refuse":
        return RefuseAction(str(obj.get("reason", "")))
    if isinstance(action, str) and action and any(k in obj for k in ARGUMENT_KEYS):
        # ReAct style: {"action": "<tool>", "action_input": {...}}.
        return _tool(action, obj)
    shown = json.dumps(action, ensure_ascii=False)[:40]
    return f'"action" must be "tool", "final" or "refuse", not {shown}'


def _tool(name: str, obj: JsonObject) -> ToolAction | str:
    key = next((k for k in ARGUMENT_KEYS if k in obj), None)
    arguments: JsonValue = obj[key] if key is not None else {}
    if isinstance(arguments, str):
        # Arguments as an encoded string, as the OpenAI wire format carries them.
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return f'"{key}" is a string that is not a JSON object'
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return f'"{key}" must be a JSON object'
    return ToolAction(name, arguments)
