"""Finding and masking credentials an operator wrote inline: in a URL or in a command's arguments.

Pure. `config show` prints URLs and argv through `redact_url` / `redact_argv`, so a password in a
URL's userinfo, any query value, or the value of a credential-looking flag never reaches a
terminal; `url_credentials` / `argv_credentials` name what was found so `config validate` can say
that such values belong in `api_key_env` / `api_key_file` / `env_from` / `headers_from`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from agentd.config.secrets import MASK

# A flag or variable name that names a credential: `--token`, `--api-key`, `PASSWORD=`, `-auth`.
_CREDENTIAL_NAME = re.compile(
    r"(token|secret|passw(or)?d|passwd|api[-_]?key|apikey|access[-_]?key|auth|credential|bearer|cookie)",
    re.IGNORECASE,
)
_FLAG = re.compile(r"^--?[A-Za-z][\w.-]*$")
_ASSIGNMENT = re.compile(r"^(--?)?([A-Za-z_][\w.-]*)=(.*)$", re.DOTALL)


def url_credentials(url: str) -> list[str]:
    """What in `url` looks like a credential: its userinfo, and query keys naming one."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found = []
    if parts.username is not None or parts.password is not None:
        found.append("userinfo")
    found += [f"query {key!r}" for key, _ in parse_qsl(parts.query, keep_blank_values=True) if _named(key)]
    return found


def redact_url(url: str) -> str:
    """`url` with its userinfo, every query value and any fragment masked (the rest kept)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rpartition('@')[2]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(key, MASK) for key, _ in pairs], safe="*")
    fragment = MASK if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def argv_credentials(argv: Sequence[str]) -> list[str]:
    """The credential-looking flags and assignments in `argv` (their names, never values)."""
    found = []
    for index, arg in enumerate(argv):
        if (assignment := _ASSIGNMENT.match(arg)) and _named(assignment.group(2)):
            found.append(assignment.group(2))
        elif _FLAG.match(arg) and _named(arg) and index + 1 < len(argv):
            found.append(arg)
        elif "://" in arg and url_credentials(arg):
            found.append(f"argument {index}")
    return found


def redact_argv(argv: Sequence[str]) -> list[str]:
    """`argv` with the value of every credential-looking flag or assignment masked, and URLs
    passed through `redact_url`."""
    shown: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            shown.append(MASK)
            mask_next = False
        elif (assignment := _ASSIGNMENT.match(arg)) and _named(assignment.group(2)):
            shown.append(f"{assignment.group(1) or ''}{assignment.group(2)}={MASK}")
        elif _FLAG.match(arg) and _named(arg):
            shown.append(arg)
            mask_next = True
        elif "://" in arg:
            shown.append(redact_url(arg))
        else:
            shown.append(arg)
    return shown


def _named(name: str) -> bool:
    return _CREDENTIAL_NAME.search(name) is not None
