"""What this process learned about its endpoints: which need JSON actions, which refuse a response
schema.

When an `auto` run switches to JSON actions, the driver records the endpoint here; a later run in
the same process (a warm session's next turn, an in-process embedding) starts that endpoint in
JSON actions instead of paying the failed native turn again. Likewise, once an endpoint rejected a
request's response schema (constrained decoding, intel/failover.py), its requests go without one.
Process memory only, on purpose: a server restarted with tool calling or grammars enabled is tried
again by the next process.
"""

from __future__ import annotations

from protocol.spawn import EndpointSpec

# Invariant: (base URL or script, model) of every endpoint a run switched to JSON actions.
_JSON_ONLY: set[tuple[str, str]] = set()
# Invariant: (base URL or script, model) of every endpoint that rejected a response schema.
_UNCONSTRAINED: set[tuple[str, str]] = set()


def _key(spec: EndpointSpec) -> tuple[str, str]:
    return (spec.base_url or spec.script_path or spec.name, spec.model)


def remember_json_actions(spec: EndpointSpec) -> None:
    """Record that `spec` needed JSON actions."""
    _JSON_ONLY.add(_key(spec))


def needs_json_actions(spec: EndpointSpec) -> bool:
    """Whether a run in this process already switched `spec` to JSON actions."""
    return _key(spec) in _JSON_ONLY


def remember_unconstrained(spec: EndpointSpec) -> None:
    """Record that `spec` rejected a request's response schema."""
    _UNCONSTRAINED.add(_key(spec))


def rejects_constraints(spec: EndpointSpec) -> bool:
    """Whether `spec` rejected a response schema before in this process."""
    return _key(spec) in _UNCONSTRAINED


def forget_all() -> None:
    """Forget every endpoint (tests)."""
    _JSON_ONLY.clear()
    _UNCONSTRAINED.clear()
