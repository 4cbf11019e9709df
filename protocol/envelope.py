"""The JSON-RPC 2.0 envelope as plain JSON: the error codes (JSON-RPC's own, in the -32768..-32000
range it reserves, and the daemon's 1xxx) and `message_kind`, which tells a call from a result
from an error. Standard library only, so a client that reads plain JSON (`agentd status`) needs
no models; `protocol.jsonrpc` and `protocol.api` re-export what they share with it.
"""

from __future__ import annotations

from typing import Any

# The standard error codes (JSON-RPC reserves -32768..-32000 for the protocol itself).
PARSE_ERROR = -32700  # not UTF-8, or not JSON
INVALID_REQUEST = -32600  # JSON, but not a request object
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

# Application error codes.
NOT_FOUND = 1001
FORBIDDEN = 1002
UNAVAILABLE = 1003  # retryable: the journal could not commit (disk full, I/O error)
DRAINING = 1004  # retryable elsewhere/later: the daemon is shutting down
INVALID_SPEC = 1005  # the spec names something the config does not have, or breaks a limit
TOO_MANY_CONNECTIONS = 1006
QUOTA_EXCEEDED = 1007  # retryable: the caller is at a per-uid cap (the message names it)
IDEMPOTENCY_CONFLICT = 1008  # the idempotency key was used for a different spec (the message names it)


def message_kind(value: Any) -> str:
    """A union discriminator: a message's `method`, else `"error"` or `"result"` for a response.

    Called by pydantic both on raw input (a dict) and on a model instance (when serialising).
    A dict that is neither a call nor a response is `"unknown"`, which no union tags.
    """
    if isinstance(value, dict):
        method = value.get("method")
        if isinstance(method, str):
            return method
        if "error" in value:
            return "error"
        if "result" in value:
            return "result"
        return "unknown"
    method = getattr(value, "method", None)
    if isinstance(method, str):
        return method
    return "error" if getattr(value, "error", None) is not None else "result"
