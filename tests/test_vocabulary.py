"""The closed event vocabulary, the code that emits it and docs/events.md stay in step (docs/design.md §13).

No processes and no imports of the code under scan: the source is read as text and parsed.

The scan is deliberately simple. It walks every module under `agentd/` and `subagent/` and looks
at the event argument of these calls:

- `<anything>.debug/.info/.warning/.error/.critical/.exception(EVENT, ...)`: structlog and stdlib
  loggers alike;
- `sink(EVENT, ...)`, `_sink(EVENT, ...)`, `emit(EVENT, ...)`, `_journal(EVENT, ...)`, called as a
  plain name or as an attribute: the subagent's event sinks and the supervisor's journal helper;
- `append_event(TASK_ID, EVENT, ...)`: the journal's own signature puts the event second;
- `Note(EVENT, ...)`: the loop machine's record of an event for its driver to send.

An argument counts when it is a string literal, or a name bound at module level to a string
literal (`EV_CONNECT = "api.connect"`). Strings without a dot, or with whitespace, are log messages
rather than event names (`logger.warning("MCP server %s: ...")`) and are skipped. Anything
computed at run time (`channel.emit(note.event, ...)`) is not seen here; those values come from
the literals this scan does see, or from the pydantic `EventName` type, which validates them.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from protocol.api import EVENT_NOTIFICATION, METHODS
from protocol.events import EVENT_NAMES

REPO = Path(__file__).resolve().parent.parent
SCANNED = ("agentd", "subagent")
EVENTS_DOC = REPO / "docs" / "events.md"

LOG_METHODS = frozenset({"debug", "info", "warning", "error", "critical", "exception"})
SINKS = frozenset({"sink", "_sink", "emit", "_journal"})
# Where the event name sits among the positional arguments, for calls that do not put it first.
EVENT_POSITION = {"append_event": 1}
RECORDS = frozenset({"Note"})

GROUPS = frozenset(name.partition(".")[0] for name in EVENT_NAMES)
# A backticked `group.action` in the doc; three-part names (`tool.result.err`) are field references.
DOC_NAME = re.compile(r"`([a-z][a-z0-9_]*\.[a-z][a-z0-9_]*)`")
# Dotted names that share an event group's prefix but are the daemon API's methods (docs/design.md §9).
API_NAMES = METHODS | {EVENT_NOTIFICATION}


def _module_strings(tree: ast.Module) -> dict[str, str]:
    """Module-level `NAME = "literal"` bindings (plain and annotated assignments)."""
    bound: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant) and isinstance(value.value, str):
            bound[target.id] = value.value
    return bound


def _callee(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def _event_argument(call: ast.Call, callee: str) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == "event":
            return keyword.value
    if callee in LOG_METHODS or callee in SINKS or callee in RECORDS or callee in EVENT_POSITION:
        position = EVENT_POSITION.get(callee, 0)
        if len(call.args) > position:
            return call.args[position]
    return None


def _looks_like_an_event(text: str) -> bool:
    return "." in text and not any(ch.isspace() for ch in text)


def emitted_names() -> Iterator[tuple[str, str]]:
    """Every event name the scan finds, with `path:line` of the call."""
    for package in SCANNED:
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            constants = _module_strings(tree)
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                callee = _callee(node)
                if callee is None:
                    continue
                argument = _event_argument(node, callee)
                if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                    name = argument.value
                elif isinstance(argument, ast.Name) and argument.id in constants:
                    name = constants[argument.id]
                else:
                    continue
                if _looks_like_an_event(name):
                    yield name, f"{path.relative_to(REPO)}:{node.lineno}"


def documented_names() -> set[str]:
    """Backticked `group.action` names in docs/events.md whose group is an event group."""
    text = EVENTS_DOC.read_text(encoding="utf-8")
    return {
        name for name in DOC_NAME.findall(text) if name.partition(".")[0] in GROUPS and name not in API_NAMES
    }


def test_every_event_in_the_vocabulary_is_documented() -> None:
    missing = sorted(EVENT_NAMES - documented_names())
    assert missing == [], f"add these to docs/events.md: {missing}"


def test_every_event_the_doc_names_is_in_the_vocabulary() -> None:
    unknown = sorted(documented_names() - EVENT_NAMES)
    assert unknown == [], f"docs/events.md names events protocol/events.py lacks: {unknown}"


def test_the_scan_sees_each_kind_of_emission_site() -> None:
    found = {name for name, _ in emitted_names()}
    # A logger literal, a journal call, a sink, a `Note`, and a module constant (agentd/api/connection.py).
    assert {"task.terminal", "limit.exceeded", "tool.result", "loop.compact", "api.connect"} <= found


def test_the_code_emits_only_names_in_the_vocabulary() -> None:
    outside = sorted(f"{name} at {where}" for name, where in emitted_names() if name not in EVENT_NAMES)
    assert outside == [], "event names outside protocol/events.py:\n" + "\n".join(outside)
