"""A trigger's configuration as the manager's tests build it."""

from __future__ import annotations

from agentd.triggers.manager import TriggerConfig


def trigger(name: str = "inbox", *, index: int = 0, server: str = "files", **kw: object) -> TriggerConfig:
    fields: dict[str, object] = {"uri": None, "glob": None, "debounce_s": 0.1, "max_wait_s": 1.0}
    fields.update(kw)
    if fields["uri"] is None and fields["glob"] is None:
        fields["glob"] = "file:///srv/*"
    return TriggerConfig(
        name=name,
        index=index,
        server=server,
        instruction="changed: {uri} on {server}",
        mcp=(server,),
        **fields,  # type: ignore[arg-type]
    )
