"""The messages between the supervisor's `ZygoteSpawner` and the zygote process (docs/design.md §10).

One JSON document per SOCK_SEQPACKET datagram, discriminated by `type`. Down (supervisor →
zygote): `Fork`, with the child's three pipe ends riding along as SCM_RIGHTS. Up (zygote →
supervisor): `Ready` or `StartFailed` once, then one `Forked` or `ForkFailed` per `Fork`. Every
datagram fits its direction's byte cap; the receiver reads no more than that.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

MAX_REQUEST = 64 * 1024
"""Byte cap of one down datagram (a `Fork`); the supervisor refuses to send a bigger one."""
MAX_REPLY = 4096
"""Byte cap of one up datagram; `MAX_ERROR_CHARS` keeps every up message under it."""
MAX_ERROR_CHARS = 500
"""An error's length in characters: even escaped (6 bytes a character) it fits `MAX_REPLY`."""

RequestId = Annotated[int, Field(strict=True, ge=1)]
Pid = Annotated[int, Field(strict=True, gt=0)]
Error = Annotated[str, Field(max_length=MAX_ERROR_CHARS)]


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---- down: supervisor -> zygote ------------------------------------------------------------


class Fork(_Message):
    """Fork one subagent. SCM_RIGHTS carries its fds 0, 1, 2: stdin's read end, stdout's and
    stderr's write ends. `env` is only what differs per child; the zygote adds its own base."""

    type: Literal["fork"] = "fork"
    id: RequestId
    env: dict[str, str]


# ---- up: zygote -> supervisor --------------------------------------------------------------


class Ready(_Message):
    """The zygote's imports are done: it serves `Fork` from now on."""

    type: Literal["ready"] = "ready"
    pid: Pid


class StartFailed(_Message):
    """The zygote cannot serve (it exits after sending this); spawns keep using exec."""

    type: Literal["start_failed"] = "start_failed"
    error: Error


class Forked(_Message):
    """The subagent of request `id` runs as `pid`, reparented to the supervisor."""

    type: Literal["forked"] = "forked"
    id: RequestId
    pid: Pid


class ForkFailed(_Message):
    """Request `id` forked nothing; the fds it carried are closed."""

    type: Literal["fork_failed"] = "fork_failed"
    # Invariant: None only when the request was unreadable, so no id in it could be trusted.
    id: RequestId | None
    error: Error


FromZygote = Annotated[Ready | StartFailed | Forked | ForkFailed, Field(discriminator="type")]

TO_ZYGOTE_ADAPTER: TypeAdapter[Fork] = TypeAdapter(Fork)
FROM_ZYGOTE_ADAPTER: TypeAdapter[FromZygote] = TypeAdapter(FromZygote)


def encode(message: Fork | FromZygote) -> bytes:
    """One message as one datagram: compact JSON, no newline (SOCK_SEQPACKET keeps boundaries)."""
    return message.model_dump_json().encode()
