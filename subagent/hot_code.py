"""The zygote's hot code, moved next to each other before the first fork.

Calling a Python function writes its code object's reference count (and, on 3.11, its warm-up
counter and the specialising interpreter's inline caches), so every code object a forked task
runs costs that child a copy-on-write copy of the page it sits on. Compiled at import, a task's
~1,000 code objects lie scattered among everything else the imports built, at about 0.7 per page:
measured, a one-turn task ran 962 code objects whose headers sat on 621 distinct pages.
`record` lists the code objects a warm-up run calls; `relocate` gives each a fresh copy, allocated
one after another, and points every function at its copy, so a child copies a few hundred pages
fewer; `quickened_by_next_call` has the next warm-up run quicken the copies (3.11). The
originals are kept alive: freed, their memory would be reused by the copies themselves,
scattering them again.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

# The replaced code objects. Never freed (see the module's docstring); they stay shared pages.
_originals: list[types.CodeType] = []


def record(run: Callable[[], object]) -> list[types.CodeType]:
    """The code objects `run` calls, in every thread it starts, in the order first called (so
    that code called together is copied together)."""
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


def relocate(hot: list[types.CodeType]) -> list[types.CodeType]:
    """Give each code object of `hot` a fresh copy, allocated in order, and point every function
    that runs one at its copy (a hot nested function's parent holds the copy in its constants,
    so closures made later use it too). Returns the copies. They are not yet quickened: run them
    once more under `quickened_by_next_call` before forking."""
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
    function = types.FunctionType
    for obj in gc.get_objects():
        if type(obj) is function:  # not isinstance: a walk over every object the zygote holds
            fresh = copies.get(id(obj.__code__))
            if fresh is not None:
                obj.__code__ = fresh
    return list(copies.values())


# CPython 3.11 quickens a code object (rewrites its bytecode into the specialising interpreter's
# form) when its warm-up counter, a short that starts at -8 and counts calls and loop iterations,
# reaches 0. A copy made by `relocate` starts at -8 again, and a child that took one to its 8th
# call would rewrite its bytecode there; running the warm-up eight more times instead costs the
# zygote's start ~0.3 s of CPU. Here the counter sits after the header's three words, three
# pointers and `co_flags`; `_counter_works` checks that on a function of its own before use.
_WARMUP_OFFSET = 52
_WARMUP_START = -8


def _counter(code: types.CodeType) -> ctypes.c_short:
    return ctypes.c_short.from_address(id(code) + _WARMUP_OFFSET)


def _counter_works() -> bool:
    if sys.version_info[:2] != (3, 11) or sys.implementation.name != "cpython":
        return False

    def probe() -> None:
        pass

    if _counter(probe.__code__).value != _WARMUP_START:
        return False
    for _ in range(-_WARMUP_START):
        probe()
    return _counter(probe.__code__).value == 0


@contextlib.contextmanager
def quickened_by_next_call(codes: list[types.CodeType]) -> Iterator[None]:
    """Within the block, each of `codes` not yet quickened is quickened by its next call (3.11;
    elsewhere a no-op). One that was not called meanwhile gets its counter back, so that its
    first call in a child does not quicken it there."""
    primed = []
    if _counter_works():
        for code in codes:
            counter = _counter(code)
            if _WARMUP_START <= counter.value < -1:
                primed.append((counter, counter.value))
                counter.value = -1
    try:
        yield
    finally:
        for counter, value in primed:
            if counter.value == -1:
                counter.value = value
