"""The zygote's hot code, moved next to each other before the first fork (issue 16).

Calling a Python function writes its code object's reference count (and, on 3.11, its warm-up
counter and the specialising interpreter's inline caches), so every code object a forked task
runs costs that child a copy-on-write copy of the page it sits on. Compiled at import, a task's
~1,000 code objects lie scattered among everything else the imports built, at about 0.7 per page:
measured, a one-turn task ran 962 code objects whose headers sat on 621 distinct pages.
`record` lists the code objects a warm-up run calls; `relocate` gives each a fresh copy, allocated
one after another, and points every function at its copy, so a child copies a few hundred pages
fewer. The originals are kept alive: freed, their memory would be reused by the copies
themselves, scattering them again.
"""

from __future__ import annotations

import gc
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

# The replaced code objects. Never freed (see the module's docstring); they stay shared pages.
_originals: list[types.CodeType] = []


def record(run: Callable[[], object]) -> list[types.CodeType]:
    """The code objects `run` calls, in every thread it starts, in the order first called."""
    seen: dict[int, types.CodeType] = {}

    def profile(frame: types.FrameType, event: str, _arg: object) -> None:
        if event == "call":
            seen.setdefault(id(frame.f_code), frame.f_code)

    hook: Any = profile  # the setprofile stubs want the full trace-function signature
    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        run()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return list(seen.values())


def relocate(hot: list[types.CodeType]) -> int:
    """Give each code object of `hot` a fresh copy, allocated in order, and point every function
    that runs one at its copy (a hot nested function's parent holds the copy in its constants,
    so closures made later use it too). Returns how many functions now run a copy. The copies
    are not yet quickened: run the code again before forking (the zygote's warm-up rounds)."""
    wanted = {id(code) for code in hot}
    copies: dict[int, types.CodeType] = {}

    def copy(code: types.CodeType) -> types.CodeType:
        done = copies.get(id(code))
        if done is not None:
            return done
        consts = tuple(
            copy(c) if isinstance(c, types.CodeType) and id(c) in wanted else c for c in code.co_consts
        )
        fresh = code.replace(co_consts=consts)
        copies[id(code)] = fresh
        _originals.append(code)
        return fresh

    for code in hot:
        copy(code)
    moved = 0
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType):
            fresh = copies.get(id(obj.__code__))
            if fresh is not None:
                obj.__code__ = fresh
                moved += 1
    return moved
