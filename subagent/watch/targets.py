"""Which URIs a watcher subscribes, and how it describes them (pure).

Exact URIs are subscribed as given, listed or not (a server may refuse one; that is reported).
A glob selects the listed URIs it matches (`protocol.watch.glob_matches`), in listing order,
after the exact ones; the whole selection is capped at `MAX_WATCHED_URIS`, and a cap that cut
anything says so. One `ev/watch_state` carries the subscribed list, so the list is also cut to
fit one frame (`MAX_STATE_URI_BYTES`), again saying so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mcp_types import ServerCapabilities
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from protocol.watch import MAX_WATCHED_URIS, Era, WatchTarget, glob_matches

# The subscribed list of one `ev/watch_state` stays well under the 16 MiB frame cap.
MAX_STATE_URI_BYTES = 4 * 1024 * 1024
MAX_DETAIL_CHARS = 2000
# How many refused URIs a detail names (the rest are counted).
NAMED_REFUSALS = 3


@dataclass(frozen=True, slots=True)
class Interest:
    """What the triggers on this server want: exact URIs and globs, each once, in declaration order."""

    exact: tuple[str, ...]
    globs: tuple[str, ...]

    @classmethod
    def of(cls, targets: Iterable[WatchTarget]) -> Interest:
        exact: dict[str, None] = {}
        globs: dict[str, None] = {}
        for target in targets:
            if target.uri is not None:
                exact[target.uri] = None
            elif target.glob is not None:
                globs[target.glob] = None
        return cls(tuple(exact), tuple(globs))

    @property
    def needs_listing(self) -> bool:
        return bool(self.globs)

    def matches(self, uri: str) -> bool:
        """Whether some trigger on this server would own a change of `uri`."""
        return uri in self.exact or any(glob_matches(g, uri) for g in self.globs)


@dataclass(slots=True)
class Selection:
    """The URIs to subscribe, built from the exact ones plus listed pages; `left_out` counts the cap's cut."""

    interest: Interest
    cap: int = MAX_WATCHED_URIS
    uris: dict[str, None] = field(default_factory=dict)
    left_out: int = 0

    def __post_init__(self) -> None:
        for uri in self.interest.exact:
            self._take(uri)

    def add_listed(self, listed: Iterable[str]) -> None:
        for uri in listed:
            if uri not in self.uris and any(glob_matches(g, uri) for g in self.interest.globs):
                self._take(uri)

    def _take(self, uri: str) -> None:
        if len(self.uris) < self.cap:
            self.uris[uri] = None
        else:
            self.left_out += 1

    @property
    def full(self) -> bool:
        """Past the cap: further pages can only add to `left_out` (a lister may stop here)."""
        return len(self.uris) >= self.cap and self.left_out > 0

    def result(self) -> tuple[str, ...]:
        return tuple(self.uris)


def diff(old: Sequence[str], new: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`(added, removed)` between two subscriptions, each in its own list's order."""
    old_set, new_set = set(old), set(new)
    return tuple(u for u in new if u not in old_set), tuple(u for u in old if u not in new_set)


def era_of(protocol_version: str | None) -> Era:
    """The era of a negotiated version: 2026-07-28, or the handshake family (subscribe/notify)."""
    return "2026-07-28" if protocol_version in MODERN_PROTOCOL_VERSIONS else "2025-11-25"


def unsupported_reason(era: Era, version: str | None, capabilities: ServerCapabilities | None) -> str | None:
    """Why this server cannot tell us about resource changes, or None when it can.

    2025: `resources.subscribe`. 2026: the SDK derives `resources.subscribe` (and `listChanged`)
    from whether `subscriptions/listen` is served, so the same flag says a change stream exists.
    """
    resources = capabilities.resources if capabilities is not None else None
    if resources is None:
        return f"the server offers no resources (protocol {version})"
    if not resources.subscribe:
        if era == "2026-07-28":
            return f"the server has no change stream (no subscriptions/listen; protocol {version})"
        return f"the server does not support resources/subscribe (protocol {version})"
    return None


def state_detail(
    *,
    subscribed: int,
    left_out: int,
    refused: Sequence[tuple[str, str]],
    cut_from_frame: int,
    version: str | None,
) -> str:
    """The `detail` of an `armed` state: the protocol, and every way the list falls short."""
    parts = [f"protocol {version}: {subscribed} URI(s) subscribed"]
    if left_out:
        parts.append(f"{left_out} more matching URI(s) left out: at most {MAX_WATCHED_URIS} are watched")
    if refused:
        named = "; ".join(f"{uri}: {why}" for uri, why in refused[:NAMED_REFUSALS])
        more = f" (+{len(refused) - NAMED_REFUSALS} more)" if len(refused) > NAMED_REFUSALS else ""
        parts.append(f"{len(refused)} refused by the server: {named}{more}")
    if cut_from_frame:
        parts.append(f"this list names the first {subscribed - cut_from_frame} only (frame size)")
    detail = "; ".join(parts)
    return detail if len(detail) <= MAX_DETAIL_CHARS else detail[: MAX_DETAIL_CHARS - 1] + "…"


def fit_frame(uris: Sequence[str], budget: int = MAX_STATE_URI_BYTES) -> tuple[list[str], int]:
    """The URIs that fit one state frame, and how many were cut."""
    kept: list[str] = []
    used = 0
    for uri in uris:
        used += len(uri.encode()) + 3  # quotes and a comma
        if used > budget:
            break
        kept.append(uri)
    return kept, len(uris) - len(kept)
