"""Task ids as a person reads and types them: listings show a short id (a prefix), and every
command that takes a task accepts any unique prefix of one, like git's abbreviated hashes.

A task id is `t_` and 26 Crockford base-32 characters whose first 10 encode the millisecond it
was submitted, so tasks submitted close together share a long prefix. A short id is therefore at
least `t_` + 12 characters (the millisecond and 10 random bits) and longer where two of the tasks
shown would otherwise look alike. A prefix a person typed is turned into its task by the daemon
(`task.match`, docs/decisions.md "Short task ids"); a full id is sent as it is.
"""

from __future__ import annotations

from collections.abc import Iterable

from agentd.api.client import BAD_RESPONSE, ApiClient
from agentd.errors import ApiClientError, UsageError
from protocol.envelope import NOT_FOUND

PREFIX = "t_"
ID_CHARS = 26
SHORT_CHARS = 12
SHOWN_MATCHES = 3
_CROCKFORD = frozenset("0123456789ABCDEFGHJKMNPQRSTVWXYZ")


def short_ids(task_ids: Iterable[str]) -> dict[str, str]:
    """Each id's shortest prefix that no other of `task_ids` starts with, at least
    `t_` + SHORT_CHARS characters."""
    ordered = sorted(set(task_ids))
    out = {}
    for index, task_id in enumerate(ordered):
        shared = 0
        for neighbour in ordered[max(0, index - 1) : index] + ordered[index + 1 : index + 2]:
            shared = max(shared, _common(task_id, neighbour))
        out[task_id] = task_id[: max(len(PREFIX) + SHORT_CHARS, shared + 1)]
    return out


def _common(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def normalised(text: str) -> str:
    """A task id or its start as the daemon spells it: `t_` added when left out, lower-case
    letters raised (`01jb` → `t_01JB`). Anything else is left as typed."""
    body = text.removeprefix(PREFIX)
    if body and set(body.upper()) <= _CROCKFORD:
        return PREFIX + body.upper()
    return text


def is_full(task_id: str) -> bool:
    return (
        task_id.startswith(PREFIX)
        and len(task_id) == len(PREFIX) + ID_CHARS
        and set(task_id[len(PREFIX) :]) <= _CROCKFORD
    )


def _could_start_an_id(text: str) -> bool:
    body = text[len(PREFIX) :]
    return text.startswith(PREFIX) and len(body) <= ID_CHARS and set(body) <= _CROCKFORD


def resolve(client: ApiClient, text: str, *, name: str) -> str:
    """The task id `text` names: itself when whole, else the one task whose id starts with it.

    Raises ApiClientError (NOT_FOUND) when no task of the caller's starts with it, and UsageError
    when several do (naming a few and how to tell them apart). `name` is what the person typed it
    as (`TASK`, `--before`)."""
    wanted = normalised(text)
    if is_full(wanted) or not _could_start_an_id(wanted):
        return wanted  # a full id, or not an id at all: the command's own answer says so
    matches = _matches(client, wanted)
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ApiClientError(NOT_FOUND, f"{name}: no task id you may see starts with {text!r}")
    named = ", ".join(matches[:SHOWN_MATCHES])
    more = " and more" if len(matches) > SHOWN_MATCHES else ""
    raise UsageError(
        f"{name}: {text!r} is the start of several task ids ({named}{more}); type more of the id "
        "(`agentd list` shows them)"
    )


def _matches(client: ApiClient, prefix: str) -> list[str]:
    """`task.match`, a plain call (`agentd status` reads no model): the ids that start with `prefix`."""
    answer = client.call_plain("task.match", {"prefix": prefix, "limit": SHOWN_MATCHES + 1}).value
    task_ids = answer.get("task_ids") if isinstance(answer, dict) else None
    if not isinstance(task_ids, list) or not all(isinstance(task_id, str) for task_id in task_ids):
        raise ApiClientError(
            BAD_RESPONSE, f"agentd at {client.path} sent a task.match result of the wrong shape"
        )
    return task_ids
