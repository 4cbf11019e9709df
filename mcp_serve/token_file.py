"""The bearer token of `agentd mcp serve --http`: read from a file only its owner can read, or
made (and shown once) when the file is missing.

Whoever holds the token acts as the user who started the server, so a file that others may read
or that another user owns is refused rather than used.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from mcp_serve.access import MIN_TOKEN_CHARS, AccessError


@dataclass(frozen=True, slots=True)
class Token:
    value: str
    created: bool


def default_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "agentd" / "mcp-http-token"


def open_token(path: Path) -> Token:
    """The token in `path`, made when the file is missing.

    Raises:
        AccessError: the file is unsafe, empty or unreadable (the message names --token-file).
    """
    try:
        return Token(_read(path), created=False)
    except FileNotFoundError:
        pass
    value = secrets.token_urlsafe(32)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return Token(_read(path), created=False)  # another server made it meanwhile
    except OSError as exc:
        raise AccessError(f"--token-file {path}: cannot create it: {exc.strerror}") from None
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    return Token(value, created=True)


def _read(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise AccessError(f"--token-file {path}: cannot read it: {exc.strerror}") from None
    with os.fdopen(fd) as handle:
        info = os.fstat(handle.fileno())
        if info.st_uid != os.getuid():
            raise AccessError(f"--token-file {path}: owned by uid {info.st_uid}, not by you")
        if info.st_mode & 0o077:
            mode = stat.S_IMODE(info.st_mode)
            raise AccessError(f"--token-file {path}: others may read it (mode {mode:o}); chmod 600 it")
        value = handle.read().strip()
    if len(value) < MIN_TOKEN_CHARS or any(c.isspace() for c in value):
        raise AccessError(
            f"--token-file {path}: expected one token of at least {MIN_TOKEN_CHARS} characters "
            "(delete the file to have a new one made)"
        )
    return value
