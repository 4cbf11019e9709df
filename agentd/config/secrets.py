"""Where each secret of the configuration comes from, and reading it when a task needs it.

A `SecretSource` is a reference (an environment variable, a key file, an entry of an env file)
that is resolved at call time, so a rotated key is picked up by the next task without a reload.
Errors name the variable or the file and say what is wrong; they never include a secret's value.
Files that hold secrets must not be readable or writable by every user: agentd refuses them
rather than warning, because a warning in a log is read long after the key has leaked.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import SecretStr

from agentd.errors import AgentdError

MAX_SECRET_FILE_BYTES = 64 * 1024
MASK = "***"

SourceKind = Literal["plain", "env", "file", "env_file", "inline"]


class SecretFileError(AgentdError, ValueError):
    """A secrets file cannot be used; the message names the file, never its content."""


class SecretUnavailable(AgentdError, ValueError):
    """A secret's source cannot be read. `where` is the config key that declared it; the
    message names the variable or file, never the value."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where = where


@dataclass(frozen=True, slots=True)
class SecretSource:
    """One value that may be secret. `plain` values were written in clear in the config file (not
    secrets by the operator's declaration); `inline` ones came from an imported mcpServers JSON
    file, whose env and header values are secrets by custom."""

    kind: SourceKind
    # Invariant: `ref` is the variable name (env), the file path (file, env_file, inline), or ""
    # (plain); `key` is the variable inside an env_file; `where` is the declaring config key.
    ref: str = ""
    where: str = ""
    key: str | None = None
    value: SecretStr | None = None

    def describe(self) -> str:
        """Where the value comes from, safe to print: `env:OPENAI_API_KEY`, `file:/etc/agentd/key`."""
        if self.kind == "env_file":
            return f"env_file:{self.ref}" + (f"#{self.key}" if self.key else "")
        if self.kind == "inline":
            return f"json:{self.ref}"
        return f"{self.kind}:{self.ref}" if self.ref else self.kind

    def read(self, environ: Mapping[str, str]) -> SecretStr:
        """The value now. Raises `SecretUnavailable` naming the variable or file."""
        if self.kind in ("plain", "inline"):
            assert self.value is not None
            return self.value
        if self.kind == "env":
            found = environ.get(self.ref, "")
            if not found:
                raise SecretUnavailable(
                    self.where,
                    f"environment variable {self.ref} is not set (or is empty): set it in the daemon's "
                    "environment (a systemd service: EnvironmentFile=, docs/operations.md)",
                )
            return SecretStr(found)
        try:
            if self.kind == "file":
                return SecretStr(read_key_file(self.ref))
            values = read_env_file(self.ref)
        except SecretFileError as exc:
            raise SecretUnavailable(self.where, str(exc)) from None
        if self.key is None or self.key not in values:
            raise SecretUnavailable(self.where, f"{self.ref} does not define {self.key}")
        return SecretStr(values[self.key])

    def read_all(self) -> dict[str, SecretStr]:
        """Every variable of an `env_file` source, read now. Raises `SecretUnavailable`."""
        try:
            return {k: SecretStr(v) for k, v in read_env_file(self.ref).items()}
        except SecretFileError as exc:
            raise SecretUnavailable(self.where, str(exc)) from None


def _read_private_file(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise SecretFileError(f"{path} is not a regular file")
            if info.st_mode & (stat.S_IROTH | stat.S_IWOTH):
                mode = stat.S_IMODE(info.st_mode)
                raise SecretFileError(
                    f"{path} holds secrets but every user can read or write it (mode {mode:04o}); "
                    f"run `chmod 600 {path}` (or 640 with a group only the daemon's user is in)"
                )
            data = handle.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as exc:
        raise SecretFileError(f"cannot read {path}: {exc.strerror or type(exc).__name__}") from None
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise SecretFileError(f"{path} is larger than {MAX_SECRET_FILE_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretFileError(f"{path} is not UTF-8 text") from None


def check_private_file(path: str) -> None:
    """Refuse a secrets file that every user can read or write. Raises `SecretFileError`."""
    _read_private_file(path)


def read_key_file(path: str) -> str:
    """The key in `path`, surrounding whitespace removed (editors add a final newline)."""
    key = _read_private_file(path).strip()
    if not key:
        raise SecretFileError(f"{path} is empty")
    return key


def read_env_file(path: str) -> dict[str, str]:
    """`KEY=VALUE` lines of `path` (`#` comments, blank lines, an `export ` prefix and one level of
    matching quotes allowed). A bad line is reported by number, never by content."""
    values: dict[str, str] = {}
    for number, raw in enumerate(_read_private_file(path).splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").lstrip()
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier() or not name.isascii():
            raise SecretFileError(f"{path} line {number} is not KEY=VALUE")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[name] = value
    return values
