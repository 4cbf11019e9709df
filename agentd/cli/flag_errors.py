"""Errors about values a person typed, in the words of the flag they typed.

A flag's value is checked by the same models the API and the configuration use, whose errors
name internal fields (`limits.deadline_s`), print regular expressions and give bounds without
their unit. These functions put the flag in front and say the rule in words: `--every: must be
at least 1s`, `--mcp: use letters, digits, ...`. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

# A task spec's fields as the flags of `agentd submit` and `agentd run` that set them.
TASK_FLAGS: Mapping[str, str] = {
    "instruction": "INSTRUCTION",
    "model": "--model",
    "mcp": "--mcp",
    "max_steps": "--max-steps",
    "max_tokens": "--max-tokens",
    "max_cost": "--max-cost",
    "deadline_s": "--deadline",
    "output_contract": "--output-schema",
    "approve": "--approve",
    "on_budget": "--on-budget",
}
# A spec problem's key, as the daemon's admission check names it (`mcp[0]: no MCP server ...`).
_SPEC_KEY = re.compile(r"^(model|mcp\[\d+\]|approve): ")


def _flag(loc: tuple[int | str, ...], flags: Mapping[str, str]) -> tuple[str, str]:
    """The flag for an error at `loc` and the field it names (the last named part with a flag;
    else `--field-name`, how argparse spells a field)."""
    names = [part for part in loc if isinstance(part, str)]
    for name in reversed(names):
        if name in flags:
            return flags[name], name
    last = names[-1] if names else ""
    return f"--{last.replace('_', '-')}", last


def flag_problem(exc: ValidationError, flags: Mapping[str, str]) -> str:
    """The first error of `exc` as `FLAG: what is wrong`, durations with their unit, no regex."""
    # Only a bad value pays for the configuration's wording (it loads the configuration models).
    from agentd.config.problems import bound_message, pattern_words

    error = exc.errors(include_url=False, include_input=False)[0]
    flag, field = _flag(tuple(error["loc"]), flags)
    seconds = field.endswith("_s")
    message = bound_message(error["type"], error.get("ctx"), seconds=seconds)
    if message is None and error["type"] == "string_pattern_mismatch":
        message = pattern_words(str(error.get("ctx", {}).get("pattern", "")))
    if message is None:
        message = str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        message = message.replace("Input should be", "should be")
    return f"{flag}: {message}"


def spec_problem(message: str) -> str:
    """A spec problem from the admission check (`mcp[0]: no MCP server named 'x' ...`) with the
    flag that set the key (`--mcp: no MCP server named 'x' ...`)."""
    match = _SPEC_KEY.match(message)
    if match is None:
        return message
    key = match.group(1)
    flag = TASK_FLAGS.get(key.split("[")[0], key)
    return f"{flag}: {message[match.end() :]}"
