"""Who may use a configured MCP server or model endpoint (`allow = ["user:alice", "group:devs"]`).

An entry names a user or a group by name or number. Unset: everyone who may connect, as before
the key existed. Names are looked up in the system's user and group databases (cached: a lookup
through NSS may be slow, and a config's entries are few); an entry whose name is no longer known
permits no one.
"""

from __future__ import annotations

import functools
import grp
import pwd
from collections.abc import Iterable

ALLOW_FORM = '"user:NAME", "user:UID", "group:NAME" or "group:GID"'


def entry_problem(entry: str) -> str | None:
    """Why `entry` is not a usable allow entry (the form, or a name the system does not know)."""
    kind, _, who = entry.partition(":")
    if kind not in ("user", "group") or not who:
        return f"{entry!r} is not {ALLOW_FORM}"
    if _resolve(kind, who) is None:
        return f"{entry!r}: no {kind} of that name on this host"
    return None


@functools.lru_cache(maxsize=256)
def _resolve(kind: str, who: str) -> int | None:
    if who.isdigit():
        return int(who)
    try:
        return pwd.getpwnam(who).pw_uid if kind == "user" else grp.getgrnam(who).gr_gid
    except KeyError:
        return None


def permits(allow: Iterable[str] | None, uid: int, groups: Iterable[int]) -> bool:
    """Whether a user `uid` in `groups` is one the list names (None: no list, everyone)."""
    if allow is None:
        return True
    group_set = frozenset(groups)
    for entry in allow:
        kind, _, who = entry.partition(":")
        number = _resolve(kind, who)
        if number is not None and (number == uid if kind == "user" else number in group_set):
            return True
    return False
