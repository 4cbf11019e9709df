"""The zygote's hot code relocation (`subagent.hot_code`): copies that behave as the originals,
used by every function that runs them, allocated together."""

from __future__ import annotations

import dis
import json
import subprocess
import sys
import threading

import anyio
import anyio.lowlevel
import pytest

from subagent import hot_code

READY_TIMEOUT_S = 60.0


def _adder(base: int):  # type: ignore[no-untyped-def]  # returns a closure, made after relocation too
    def add(x: int) -> int:
        return base + x

    return add


class _Counter:
    def __init__(self) -> None:
        self.n = 0

    def bump(self) -> int:
        self.n += 1
        return self.n


async def _double(x: int) -> int:
    await anyio.lowlevel.checkpoint()
    return 2 * x


def _in_a_thread() -> int:
    out: list[int] = []
    worker = threading.Thread(target=lambda: out.append(_Counter().bump()))
    worker.start()
    worker.join()
    return out[0]


def _cold() -> str:
    return "cold"


def _work() -> None:
    assert _adder(1)(2) == 3
    assert _Counter().bump() == 1
    assert anyio.run(_double, 4) == 8
    assert _in_a_thread() == 1


def test_relocated_functions_run_copies_that_behave_as_before() -> None:
    before = {f: f.__code__ for f in (_adder, _Counter.bump, _double, _in_a_thread, _cold)}
    hot = hot_code.record(_work)
    names = {code.co_name for code in hot}
    assert {"_adder", "add", "bump", "_double", "_in_a_thread", "<lambda>"} <= names  # the thread's too
    assert "_cold" not in names
    copies = hot_code.relocate(hot)
    assert len(copies) == len(hot)
    for function in (_adder, _Counter.bump, _double, _in_a_thread):
        assert function.__code__ is not before[function]
        assert function.__code__.co_code == before[function].co_code
    assert _cold.__code__ is before[_cold]  # not run, not moved
    _work()  # everything still works, closures made now included
    made_now = _adder(5)
    assert made_now(1) == 6
    assert made_now.__code__ in {c for c in _adder.__code__.co_consts if hasattr(c, "co_code")}


def _first_op(function: object) -> str:
    return next(dis.get_instructions(function, adaptive=True)).opname  # type: ignore[arg-type]


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="3.11's warm-up counter and RESUME_QUICK")
def test_copies_called_once_under_quickened_by_next_call_are_quickened_the_others_keep_their_count() -> None:
    def called() -> int:
        return 1

    def not_called() -> int:
        return 2

    copies = hot_code.relocate(hot_code.record(lambda: (called(), not_called())))
    assert _first_op(called) == _first_op(not_called) == "RESUME"  # fresh copies
    with hot_code.quickened_by_next_call(copies):
        called()
    assert _first_op(called) == "RESUME_QUICK"
    not_called()  # its first call after the warm-up, as in a child: not quickened by it
    assert _first_op(not_called) == "RESUME"


# In a fresh interpreter standing in for the zygote: warm up as it does, then list the code objects
# one more scripted task runs and how many distinct pages their headers sit on.
SPREAD_SCRIPT = """
import json, sys, os, tempfile
from subagent import hot_code, zygote
zygote.PACK_HOT_CODE = sys.argv[1] == "pack"
zygote._warm_run()
with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, "warm.json"), "w") as f:
        json.dump({"model": "warm", "turns": [{"text": "warm"}]}, f)
    codes = hot_code.record(lambda: zygote._warm_one("scripted", tmp))
print(json.dumps({"codes": len(codes), "pages": len({id(c) >> 12 for c in codes})}))
"""


def _spread(mode: str) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-I", "-c", SPREAD_SCRIPT, mode],
        capture_output=True,
        text=True,
        timeout=READY_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    spread: dict[str, int] = json.loads(done.stdout)
    return spread


def test_the_zygote_packs_the_code_a_task_runs_onto_fewer_pages() -> None:
    """Measured: a scripted task's 456 code objects sat on 339 pages (0.74 each) unpacked, on 136
    (0.30) packed; the bound between them leaves room for allocator noise."""
    packed, scattered = _spread("pack"), _spread("scattered")
    assert packed["codes"] > 100 and scattered["codes"] > 100
    assert packed["pages"] / packed["codes"] < 0.5 < scattered["pages"] / scattered["codes"]
