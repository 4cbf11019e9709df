"""Where a forked subagent's private pages come from: a copy-on-write attribution.

Parks `--children` subagents in a model call that never answers (as `bench/child_memory.py`), then
compares each child's private pages with the zygote's, page by page (needs root: pagemap PFNs):

- per mapping kind (pymalloc arenas and other anonymous memory, the malloc heap, stacks, .so data);
- per page: a *copy* (the zygote has the page at that address, the child a different frame) or
  *fresh* (the zygote never touched it: memory the child allocated);
- for each copy, how its 8-byte words differ from the zygote's now: no difference at all (written
  and restored, e.g. a reference count taken and dropped), only reference counts (a word holding a
  small integer followed by a pointer to a type: an object header), or other words; the types whose
  counts changed are tallied.

With `--faults` it also records every page fault of the children (perf's
exceptions:page_fault_user tracepoint) and names what each copy-on-write fault wrote to: the object
at or before the faulting address in the zygote, as type+offset (+0: its reference count).

    sudo python -m bench.cow_pages [--children 10] [--faults] [--smoke]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from agentd.api.client import ApiClient  # noqa: E402
from bench.daemon_procs import open_daemon  # noqa: E402
from bench.throughput import zygote_warm  # noqa: E402
from protocol.api import SubmitParams, SubmitRequest, TaskSpec  # noqa: E402
from tests.support.fake_llm import FakeLLM, Hang  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
PRESENT = 1 << 63
EXCLUSIVE = 1 << 56
PFN_MASK = (1 << 55) - 1
MAX_REFCOUNT = 1 << 32
TOP = 20
CODE_HEADER = 184  # 3.11's PyCodeObject before its bytecode (co_code_adaptive)


@dataclass(frozen=True, slots=True)
class Mapping:
    start: int
    end: int
    perms: str
    path: str

    @property
    def kind(self) -> str:
        if self.path == "[heap]":
            return "heap"
        if self.path.startswith("[stack"):
            return "stack"
        if not self.path:
            return "anon"
        if self.path.startswith("["):
            return self.path
        name = os.path.basename(self.path)
        return "libpython" if name.startswith("libpython") else ("so" if ".so" in name else name)


def mappings(pid: int) -> list[Mapping]:
    out = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in parts[0].split("-"))
            out.append(Mapping(start, end, parts[1], parts[5].strip() if len(parts) > 5 else ""))
    return out


def pagemap(fd: int, start: int, end: int) -> list[int]:
    data = os.pread(fd, 8 * ((end - start) // PAGE), 8 * (start // PAGE))
    return list(struct.unpack(f"{len(data) // 8}Q", data))


@dataclass
class Memory:
    """Reads another process's memory (root, or ptrace rights)."""

    pid: int
    fd: int = field(init=False)

    def __post_init__(self) -> None:
        self.fd = os.open(f"/proc/{self.pid}/mem", os.O_RDONLY)

    def read(self, address: int, size: int) -> bytes:
        if not 0 < address < 1 << 48:
            return b""
        try:
            return os.pread(self.fd, size, address)
        except OSError:
            return b""

    def word(self, address: int) -> int | None:
        data = self.read(address, 8)
        return struct.unpack("Q", data)[0] if len(data) == 8 else None

    def close(self) -> None:
        os.close(self.fd)


class Types:
    """Which addresses in the zygote are type objects, and their names."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.names: dict[int, str | None] = {}
        self.metatype: int | None = None

    def name(self, address: int) -> str | None:
        if address in self.names:
            return self.names[address]
        name = self._name(address)
        self.names[address] = name
        return name

    def _name(self, address: int) -> str | None:
        if address % 8 or address < 1 << 16 or address > 1 << 48:
            return None
        meta = self.memory.word(address + 8)
        if meta is None:
            return None
        # `type` is the one object that is its own type; a metaclass's type is `type`.
        if self.metatype is None and self.memory.word(meta + 8) == meta and self._c_name(meta) == "type":
            self.metatype = meta
        if self.metatype is None or (meta != self.metatype and self.memory.word(meta + 8) != self.metatype):
            return None
        return self._c_name(address)

    def _c_name(self, address: int) -> str | None:
        pointer = self.memory.word(address + 24)  # tp_name, after refcount, type and ob_size
        if not pointer:
            return None
        raw = self.memory.read(pointer, 80).split(b"\0", 1)[0]
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            return None
        return text if text.isprintable() and text else None


@dataclass
class Tally:
    by_kind: collections.Counter[str] = field(default_factory=collections.Counter)
    copies: collections.Counter[str] = field(default_factory=collections.Counter)
    refcount_types: collections.Counter[str] = field(default_factory=collections.Counter)
    other_words: int = 0
    refcount_words: int = 0
    kind: str = ""
    words: collections.Counter[str] = field(default_factory=collections.Counter)
    spread: collections.Counter[str] = field(default_factory=collections.Counter)


def attribute(child: int, zygote: int, types: Types, zygote_memory: Memory) -> Tally:
    tally = Tally()
    child_memory = Memory(child)
    child_map = os.open(f"/proc/{child}/pagemap", os.O_RDONLY)
    zygote_map = os.open(f"/proc/{zygote}/pagemap", os.O_RDONLY)
    try:
        for m in mappings(child):
            if "w" not in m.perms and m.kind not in ("anon", "heap"):
                continue
            child_pages = pagemap(child_map, m.start, m.end)
            zygote_pages = pagemap(zygote_map, m.start, m.end)
            for i, entry in enumerate(child_pages):
                if not entry & PRESENT or not entry & EXCLUSIVE:
                    continue
                tally.by_kind[m.kind] += 1
                z = zygote_pages[i] if i < len(zygote_pages) else 0
                if not z & PRESENT:
                    tally.copies["fresh"] += 1
                    continue
                address = m.start + i * PAGE
                tally.kind = m.kind
                _diff(address, child_memory, zygote_memory, types, tally)
    finally:
        os.close(child_map)
        os.close(zygote_map)
        child_memory.close()
    return tally


def _diff(address: int, child: Memory, zygote: Memory, types: Types, tally: Tally) -> None:
    """Classify one copied page by how its words differ from the zygote's now."""
    mine, theirs = child.read(address, PAGE), zygote.read(address, PAGE)
    if len(mine) != PAGE or len(theirs) != PAGE:
        tally.copies["unreadable"] += 1
        return
    if mine == theirs:
        tally.copies["copy, identical now"] += 1
        return
    a = struct.unpack(f"{PAGE // 8}Q", mine)
    b = struct.unpack(f"{PAGE // 8}Q", theirs)
    others = []
    for k in range(len(a)):
        if a[k] == b[k]:
            continue
        name = _header(k, b, types) if a[k] < MAX_REFCOUNT else None
        if name is not None:  # a small count in an object's header, its type pointer after it
            tally.refcount_words += 1
            tally.refcount_types[name] += 1
        else:
            others.append(k)
    tally.other_words += len(others)
    tally.copies["copy, other words" if others else "copy, refcounts only"] += 1
    bucket = next(f"<= {n}" for n in (0, 4, 32, 128, PAGE // 8) if len(others) <= n)
    tally.spread[f"{tally.kind}, other words {bucket}"] += 1
    if len(others) > 32:  # new objects written over free space: not worth labelling word by word
        return
    classes = set()
    for k in others:
        label = _label(k, b, types)
        tally.words[label] += 1
        name, _, offset = label.partition("+")
        if name == "code" and offset and int(offset) >= CODE_HEADER:
            classes.add("bytecode")
        else:
            classes.add("gc links" if label.startswith("gc_") else name)
    tally.spread["page's other words: " + (", ".join(sorted(classes)) or "none")] += 1


def _header(j: int, b: tuple[int, ...], types: Types) -> str | None:
    if j >= 0 and j + 1 < len(b) and 0 < b[j] < MAX_REFCOUNT:
        return types.name(b[j + 1])
    return None


def _label(k: int, b: tuple[int, ...], types: Types) -> str:
    for ahead, what in ((2, "gc_next"), (1, "gc_prev")):
        name = _header(k + ahead, b, types)
        if name:
            return f"{what} of {name}"
    for j in range(k - 1, max(-1, k - 512), -1):
        name = _header(j, b, types)
        if name:
            return f"{name}+{8 * (k - j)}"
    return "?"


@dataclass
class Parked:
    zygote: int
    children: list[int]
    faults: list[tuple[int, int, int]]  # (pid, address, error code) of each child's page faults


def parked(children: int, base: Path, trace_faults: bool = False) -> Iterator[Parked]:
    """Park `children` subagents in a model call; with `trace_faults`, record their page faults
    (perf's exceptions:page_fault_user tracepoint, system-wide) from before their fork."""
    with FakeLLM(default=Hang()) as fake:
        body = (
            f'[intelligence.fake]\nkind = "openai"\nbase_url = "{fake.base_url}"\nmodel = "m"\n'
            '[defaults]\nmodel = "fake"\n'
        )
        with open_daemon(base, body, daemon_lines=f"max_concurrent_tasks = {children}\n") as bench:
            zygote_warm(bench)
            data = base / "faults.data"
            perf = None
            if trace_faults:
                perf = subprocess.Popen(
                    ["perf", "record", "-q", "-e", "exceptions:page_fault_user", "-a", "-o", str(data)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(1.0)  # perf is recording before the first fork
            with ApiClient(bench.socket, timeout_s=30) as api:
                for i in range(children):
                    api.call(SubmitRequest(params=SubmitParams(spec=TaskSpec(instruction=f"park {i}"))))
            fake.wait_requests_blocking(children, timeout_s=120)
            time.sleep(1.0)
            procs = bench.observe()
            zygote = [p.pid for p in procs if p.name() == "agentd-zygote"]
            subagents = [p.pid for p in procs if p.name() == "agentd-subagent"]
            faults: list[tuple[int, int, int]] = []
            if perf is not None:
                perf.send_signal(signal.SIGINT)
                perf.wait(timeout=60)
                faults = _read_faults(data, set(subagents))
            yield Parked(zygote[0], subagents, faults)


FAULT_LINE = re.compile(r"\s(\d+)\s+\[\d+\].*address=0x([0-9a-f]+).*error_code=0x([0-9a-f]+)")


def _read_faults(data: Path, pids: set[int]) -> list[tuple[int, int, int]]:
    script = subprocess.run(
        ["perf", "script", "-i", str(data)], capture_output=True, text=True, timeout=120, check=True
    )
    out = []
    for line in script.stdout.splitlines():
        match = FAULT_LINE.search(line)
        if match and int(match[1]) in pids:
            out.append((int(match[1]), int(match[2], 16), int(match[3], 16)))
    return out


def fault_labels(
    faults: list[tuple[int, int, int]], zygote: Memory, types: Types
) -> collections.Counter[str]:
    """What each copy-on-write fault wrote to: the object found at or before the address on the
    zygote's page, as type+offset (+0 is its reference count)."""
    labels: collections.Counter[str] = collections.Counter()
    for _pid, address, code in faults:
        if code & 0x7 != 0x7:  # a present page, a write, user mode: a copy
            labels["not a copy (first touch or read)"] += 1
            continue
        page = address - address % PAGE
        raw = zygote.read(page, PAGE)
        if len(raw) != PAGE:
            labels["? unreadable"] += 1
            continue
        b = struct.unpack(f"{PAGE // 8}Q", raw)
        k = (address - page) // 8
        header = _header(k, b, types)
        labels[f"{header}+0" if header else _label(k, b, types)] += 1
    return labels


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--children", type=int, default=10)
    parser.add_argument("--faults", action="store_true", help="label each copy-on-write fault (perf)")
    parser.add_argument("--smoke", action="store_true", help="2 children (CI): runs, no figures to meet")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("cow_pages reads other processes' page frames (/proc/PID/pagemap): run it as root")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        for park in parked(2 if args.smoke else args.children, Path(tmp), args.faults):
            zygote_memory = Memory(park.zygote)
            types = Types(zygote_memory)
            tallies = [attribute(pid, park.zygote, types, zygote_memory) for pid in park.children]
            report(tallies)
            if args.faults:
                labels = fault_labels(park.faults, zygote_memory, types)
                per_child = len(park.faults) / len(park.children)
                print(f"page faults per child {per_child:.0f}; what each wrote to (mean per child):")
                for name, count in labels.most_common(40):
                    print(f"  {name:40} {count / len(park.children):7.1f}")
            zygote_memory.close()
    return 0


def report(tallies: list[Tally]) -> None:
    def median(values: list[int]) -> float:
        return statistics.median(values) if values else 0.0

    def table(title: str, keys: list[str], counts: Callable[[Tally, str], int]) -> None:
        print(title)
        for key in keys:
            print(f"  {key:44} {median([counts(t, key) for t in tallies]):7.0f}")

    def mean_table(title: str, total: collections.Counter[str]) -> None:
        print(title)
        for name, count in total.most_common(TOP):
            print(f"  {name:44} {count / len(tallies):7.1f}")

    kinds = sorted(
        {k for t in tallies for k in t.by_kind}, key=lambda k: -median([t.by_kind[k] for t in tallies])
    )
    table(
        f"private pages per child (median of {len(tallies)}), by mapping:", kinds, lambda t, k: t.by_kind[k]
    )
    print(f"  {'total':44} {median([sum(t.by_kind.values()) for t in tallies]):7.0f}")
    table("by origin:", sorted({k for t in tallies for k in t.copies}), lambda t, k: t.copies[k])
    refcounts, others = median([t.refcount_words for t in tallies]), median([t.other_words for t in tallies])
    print(f"differing words per child: reference counts {refcounts:.0f}, other {others:.0f}")
    table(
        "copied pages by their other differing words (3 pages or more):",
        sorted(
            k for k in {k for t in tallies for k in t.spread} if median([t.spread[k] for t in tallies]) >= 3
        ),
        lambda t, k: t.spread[k],
    )
    mean_table(
        "other words, on pages with <= 32 of them (type+offset of the object before):",
        sum((t.words for t in tallies), collections.Counter()),
    )
    mean_table(
        "changed reference counts by type:", sum((t.refcount_types for t in tallies), collections.Counter())
    )


if __name__ == "__main__":
    sys.exit(main())
