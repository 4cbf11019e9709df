"""Validating the shape of the whole file at once, so one `agentd config validate` names every
problem.

Pydantic stops a model at its first bad value only per field, and a file that fails validation
gives no parsed file to run the cross-key and environment checks on. So each round reports every
error, sets aside what each error points at, and validates the rest again; the checks then run on
what is valid. What is set aside: the bad value (its default then applies); the table a required
key is missing from; a list inside a table as a whole; one `[[trigger]]` or `[[schedule]]` entry
(the entries after it keep their own index in every message). Pure: data in, data out.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentd.config.file import AgentdFile
from agentd.config.problems import problems_from_validation
from agentd.errors import ConfigProblem

# Each round sets at least one thing aside; a file with more errors than this many rounds can
# take is reported with the problems found so far.
MAX_ROUNDS = 32
# Top-level arrays of tables: their entries are set aside one by one, keeping the others' indices.
ENTRY_LISTS = ("trigger", "schedule")
# Top-level tables of named entries: a name set aside still exists for the cross-key checks.
NAMED_TABLES = ("intelligence", "mcp")
_ENTRY_KEY = re.compile(r"^(trigger|schedule)\[(\d+)\]")

Path_ = tuple[str | int, ...]


@dataclass(slots=True)
class Shape:
    """The outcome of `validate_shape`: the file made of what is valid, and every shape problem."""

    file: AgentdFile | None
    problems: list[ConfigProblem] = field(default_factory=list)
    # `intelligence.NAME` / `mcp.NAME` entries set aside whole: they exist, invalid, and reported.
    set_aside: set[str] = field(default_factory=set)
    # For each entry list with entries set aside: the original index of each entry still present.
    indices: dict[str, list[int]] = field(default_factory=dict)

    def explains(self, problem: ConfigProblem) -> bool:
        """Whether a cross-key `problem` (keys as written) only follows from what was set aside:
        it names an entry that exists but is invalid, or a key or table that already has a shape
        problem (whose rules saw a default, not the value written)."""
        if problem.about is not None and problem.about in self.set_aside:
            return True
        key = problem.key
        return any(p.key == key or p.key.startswith((f"{key}.", f"{key}[")) for p in self.problems)

    def original_key(self, key: str) -> str:
        """`key` (`trigger[1].route`) with its entry index as written in the file."""
        match = _ENTRY_KEY.match(key)
        if match is None or match.group(1) not in self.indices:
            return key
        kept = self.indices[match.group(1)]
        index = int(match.group(2))
        if index >= len(kept):
            return key
        return f"{match.group(1)}[{kept[index]}]{key[match.end() :]}"


def validate_shape(data: Mapping[str, object], base_dir: Path) -> Shape:
    """Validate `data` as agentd.toml, reporting every shape problem over as many rounds as it takes."""
    work: dict[str, Any] = copy.deepcopy(dict(data))
    shape = Shape(file=None)
    for _ in range(MAX_ROUNDS):
        try:
            shape.file = AgentdFile.model_validate(work, context={"base_dir": base_dir})
            return shape
        except ValidationError as exc:
            reported = {p.key for p in shape.problems}
            for problem in problems_from_validation(exc, AgentdFile):
                key = shape.original_key(problem.key)
                # A required key set aside last round is now missing: already reported.
                if key not in reported:
                    shape.problems.append(ConfigProblem(key, problem.message))
            targets = _outermost({_target(work, _path(error["loc"])) for error in exc.errors()})
            if () in targets:
                return shape  # nothing smaller than the whole file to set aside
            for target in sorted(targets, key=_removal_order):
                _remove(work, target, shape)
    return shape


def _path(loc: tuple[int | str, ...]) -> Path_:
    # A bad dict key is reported at (..., key, "[key]"): the entry under that key goes.
    return tuple(part for part in loc if part != "[key]")


def _target(data: object, path: Path_) -> Path_:
    """What to set aside for an error at `path`: the deepest part of it that exists (a missing key
    sets its table aside), never smaller than a whole list nested inside a table."""
    node = data
    reached: list[str | int] = []
    for part in path:
        if isinstance(part, int):
            if len(reached) != 1 or reached[0] not in ENTRY_LISTS:
                return tuple(reached)  # a list inside a table goes as a whole
            if not (isinstance(node, list) and part < len(node)):
                return tuple(reached)
            node = node[part]
        else:
            if not (isinstance(node, dict) and part in node):
                return tuple(reached)
            node = node[part]
        reached.append(part)
    return tuple(reached)


def _outermost(targets: set[Path_]) -> set[Path_]:
    """The targets not inside another one (setting aside a table takes its keys with it)."""
    return {t for t in targets if not any(o != t and t[: len(o)] == o for o in targets)}


def _removal_order(target: Path_) -> tuple[int, ...]:
    # Entries of a list go last-first, so each index still points at the entry it named.
    return tuple(-p if isinstance(p, int) else 0 for p in target)


def _remove(data: dict[str, Any], target: Path_, shape: Shape) -> None:
    parent: Any = data
    for part in target[:-1]:
        parent = parent[part]
    last = target[-1]
    if isinstance(last, int):
        name = str(target[0])
        kept = shape.indices.setdefault(name, list(range(len(parent))))
        del kept[last]
    elif len(target) == 2 and target[0] in NAMED_TABLES:
        shape.set_aside.add(f"{target[0]}.{last}")
    del parent[last]
