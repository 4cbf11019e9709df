"""How often one user's schedules may fire (`[daemon] max_fires_per_minute_per_uid`): pure.

A sliding window of each owner's fires in the last minute, in memory: a restart forgets it, which
at worst lets one more minute's worth of fires through. Only owners with a fire in the window are
kept, each with at most the cap's number of times, so the memory is bounded by the caps.
"""

from __future__ import annotations

from collections import deque

WINDOW_S = 60.0


class FireRate:
    def __init__(self, window_s: float = WINDOW_S) -> None:
        self._window_s = window_s
        self._fires: dict[int, deque[float]] = {}

    def admit(self, owner_uid: int, now: float, cap: int | None) -> str | None:
        """Count a fire of `owner_uid` at `now`, or say why it is over `cap` (nothing counted)."""
        if cap is None:
            return None
        fires = self._fires.setdefault(owner_uid, deque())
        while fires and fires[0] <= now - self._window_s:
            fires.popleft()
        if len(fires) >= cap:
            return (
                f"your schedules fired {len(fires)} times in the last minute, the cap "
                f"(daemon.max_fires_per_minute_per_uid = {cap})"
            )
        fires.append(now)
        return None

    def forget(self, owner_uid: int, at: float) -> None:
        """Take back a fire `admit` counted at `at` that did not happen (the journal refused it)."""
        fires = self._fires.get(owner_uid)
        if fires is not None and at in fires:
            fires.remove(at)
        if not fires:
            self._fires.pop(owner_uid, None)
