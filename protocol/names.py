"""Names and task handles as every channel spells them: a configured name (an endpoint, an MCP
server, a trigger) and a task's place in its tree (`0`, `0.1`, `0.1.2`). Apart from `spawn.py`
so that a module that needs only a name — the socket API, the CLI — does not build the spawn
payload's models."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

Name = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
# A handle: `0` for the root, then one `.N` per level below it.
HANDLE_PATTERN = r"^0(\.[0-9]{1,4})*$"
Handle = Annotated[str, Field(min_length=1, max_length=64, pattern=HANDLE_PATTERN)]
