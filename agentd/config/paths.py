"""Where the configuration file, the socket and the state directory are, before and after the file.

Search order for the file: the `--config` argument, `$AGENTD_CONFIG`, `$XDG_CONFIG_HOME/agentd/
agentd.toml` (default `~/.config/...`), `/etc/agentd/agentd.toml`; none found means the embedded
defaults. The socket and the state directory follow command-line flag > environment override
(`AGENTD_SOCKET`, `AGENTD_STATE_DIR`) > the file > systemd's directories > XDG directories.
The client searches (`client_socket_path`): the same overrides, then the per-user socket the
daemon would bind for this user, then the system service's socket.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

SYSTEM_CONFIG = Path("/etc/agentd/agentd.toml")
SOCKET_NAME = "agentd.sock"
# sun_path is 108 bytes including the terminating NUL.
MAX_SOCKET_PATH_BYTES = 107


@dataclass(frozen=True, slots=True)
class Located:
    """The file to load (None: embedded defaults) and, when it must exist, why."""

    path: Path | None
    # Set when the path came from --config or $AGENTD_CONFIG: a missing file is then an error.
    required_by: str | None = None


def _absolute_env(environ: Mapping[str, str], name: str) -> Path | None:
    # XDG Base Directory: a relative value is invalid and must be ignored.
    value = environ.get(name, "")
    return Path(value) if value and os.path.isabs(value) else None


def _first_dir(environ: Mapping[str, str], name: str) -> Path | None:
    # systemd joins several RuntimeDirectory=/StateDirectory= entries with ':'; the first is ours.
    value = environ.get(name, "").split(":")[0]
    return Path(value) if value and os.path.isabs(value) else None


def _home(environ: Mapping[str, str]) -> Path:
    home = environ.get("HOME")
    return Path(home) if home else Path.home()


def locate_config(path: str | None, environ: Mapping[str, str]) -> Located:
    """The configuration file the search order selects."""
    if path is not None:
        return Located(Path(path), "--config")
    if explicit := environ.get("AGENTD_CONFIG"):
        return Located(Path(explicit), "$AGENTD_CONFIG")
    config_home = _absolute_env(environ, "XDG_CONFIG_HOME") or _home(environ) / ".config"
    for candidate in (config_home / "agentd" / "agentd.toml", SYSTEM_CONFIG):
        if candidate.exists():
            return Located(candidate)
    return Located(None)


def socket_path(
    environ: Mapping[str, str],
    configured: str | None = None,
    override: str | None = None,
    uid: int | None = None,
) -> Path:
    """The daemon's unix socket: `override` (--socket), `$AGENTD_SOCKET`, `configured` (the file),
    `$RUNTIME_DIRECTORY/agentd.sock` (systemd), `$XDG_RUNTIME_DIR/agentd/agentd.sock`, else
    `/run/agentd/agentd.sock` for root and `/tmp/agentd-<uid>/agentd.sock` for others (the daemon
    creates that directory 0700 and refuses one it does not own)."""
    chosen = override or environ.get("AGENTD_SOCKET") or configured
    if chosen:
        return Path(os.path.expanduser(chosen)).absolute()
    if runtime := _first_dir(environ, "RUNTIME_DIRECTORY"):
        return runtime / SOCKET_NAME
    if xdg := _absolute_env(environ, "XDG_RUNTIME_DIR"):
        return xdg / "agentd" / SOCKET_NAME
    uid = os.getuid() if uid is None else uid
    if uid == 0:
        return Path("/run/agentd") / SOCKET_NAME
    return Path(f"/tmp/agentd-{uid}") / SOCKET_NAME


SYSTEM_SOCKET = Path("/run/agentd") / SOCKET_NAME  # the system service's (systemd/agentd.socket)


def client_socket_path(
    environ: Mapping[str, str],
    configured: str | None = None,
    override: str | None = None,
    *,
    uid: int | None = None,
    is_socket: Callable[[Path], bool],
) -> Path:
    """Where a client finds the daemon, first that applies: `override` (--socket), `$AGENTD_SOCKET`,
    `configured` (the config file's `daemon.socket`), each taken as given; else the per-user socket
    (`socket_path`'s default for this user) if one is there, else the system socket if one is there
    (so a member of the `agentd` group reaches the system service without setting anything), else
    the per-user path, which the "no daemon" error then names.
    """
    chosen = override or environ.get("AGENTD_SOCKET") or configured
    if chosen:
        return Path(os.path.expanduser(chosen)).absolute()
    per_user = socket_path(environ, uid=uid)
    for candidate in (per_user, SYSTEM_SOCKET):
        if is_socket(candidate):
            return candidate
    return per_user


def state_dir(environ: Mapping[str, str], configured: str | None = None, override: str | None = None) -> Path:
    """The journal's directory: `override` (--state-dir), `$AGENTD_STATE_DIR`, `configured` (the
    file), `$STATE_DIRECTORY` (systemd), `$XDG_STATE_HOME/agentd`, else `~/.local/state/agentd`."""
    chosen = override or environ.get("AGENTD_STATE_DIR") or configured
    if chosen:
        return Path(os.path.expanduser(chosen)).absolute()
    if state := _first_dir(environ, "STATE_DIRECTORY"):
        return state
    state_home = _absolute_env(environ, "XDG_STATE_HOME") or _home(environ) / ".local" / "state"
    return state_home / "agentd"
