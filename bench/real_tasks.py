"""The everyday tasks `bench/real_models.py` runs through `agentd run` against a real model.

Each task names the npm reference MCP servers it needs (with the tool allow-list an operator
would give it), prepares its files in a fresh directory, and checks the run's outcome against
facts the model can only learn by doing the task — the files' contents, the tool's result —
never by judging the answer's prose.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The npm servers by the name a task grants them under, and their tool allow-lists. The
# everything server's adding tool was renamed between releases; both names are allowed.
SERVERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "calc": ("server-everything", ("get-sum", "add")),
    "echo": ("server-everything", ("echo",)),
    "fs": ("server-filesystem", ("read_text_file", "read_file", "list_directory", "write_file")),
    "memory": ("server-memory", ("create_entities", "add_observations", "search_nodes", "open_nodes")),
}


@dataclass(frozen=True)
class Outcome:
    """What one `agentd run` produced: its exit code, the `loop.final` figures and stdout."""

    exit_code: int
    status: str
    stdout: str
    steps: int = 0
    tokens: int = 0
    seconds: float = 0.0
    error: str | None = None

    def json_result(self) -> Any:
        try:
            return json.loads(self.stdout)
        except ValueError:
            return None


Check = Callable[[Outcome, Path], bool]


@dataclass(frozen=True)
class Task:
    name: str
    # `{dir}` is replaced by the task's own directory (the filesystem server's root).
    instruction: str
    check: Check
    servers: tuple[str, ...] = ()
    schema: dict[str, Any] | None = None
    files: dict[str, str] = field(default_factory=dict)
    status: str = "completed"
    max_steps: int = 10

    def prepare(self, directory: Path) -> str:
        """Write the task's files into `directory`; the instruction as the model gets it."""
        for name, text in self.files.items():
            (directory / name).write_text(text)
        return self.instruction.replace("{dir}", str(directory))


def says(*words: str) -> Check:
    """Completed, and the answer contains every one of `words` (case-insensitive)."""

    def check(outcome: Outcome, _directory: Path) -> bool:
        text = outcome.stdout.lower()
        return outcome.status == "completed" and all(word.lower() in text for word in words)

    return check


def number(value: int, *quoted: int) -> Check:
    """Completed, and the answer states `value`, with no number but it and the task's own
    (`quoted`: "17 x 23 = 391" is fine, "391 or 392" is not)."""

    def check(outcome: Outcome, _directory: Path) -> bool:
        found = {float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", outcome.stdout.replace(",", ""))}
        allowed = {float(value), *map(float, quoted)}
        return outcome.status == "completed" and float(value) in found and found <= allowed

    return check


def result_is(expected: Any) -> Check:
    def check(outcome: Outcome, _directory: Path) -> bool:
        return outcome.status == "completed" and outcome.json_result() == expected

    return check


def file_holds(name: str, text: str) -> Check:
    def check(outcome: Outcome, directory: Path) -> bool:
        path = directory / name
        return outcome.status == "completed" and path.is_file() and path.read_text().strip() == text

    return check


def remembered(entity: str, observation: str) -> Check:
    """Completed, the memory server's file holds `observation` for `entity`, and so does the answer
    (the instruction names both, so the answer alone proves nothing)."""

    def check(outcome: Outcome, directory: Path) -> bool:
        stored = directory / "memory.jsonl"
        if outcome.status != "completed" or not stored.is_file():
            return False
        lines = [json.loads(line) for line in stored.read_text().splitlines() if line.strip()]
        found = any(
            item.get("name") == entity
            and any(observation.lower() in o.lower() for o in item.get("observations", []))
            for item in lines
        )
        return found and observation.lower() in outcome.stdout.lower()

    return check


def refused(outcome: Outcome, _directory: Path) -> bool:
    return outcome.status == "refused"


LISTING = {"alpha.txt": "a\n", "beta.txt": "b\n", "gamma.txt": "c\n", "notes.md": "# n\n", "todo.md": "- x\n"}

TASKS: tuple[Task, ...] = (
    Task("arithmetic", "What is 17 multiplied by 23? Answer with the number only.", number(391, 17, 23)),
    Task(
        "extract_json",
        'From this record, report the city: {"name": "Ines", "address": {"city": "Porto", "zip": "4000"}}',
        result_is({"city": "Porto"}),
        schema={
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    ),
    Task(
        "sum_tool",
        "Use the calc tool that adds two numbers to compute 1234 + 4321. Answer with the result only.",
        number(5555, 1234, 4321),
        servers=("calc",),
    ),
    Task(
        "echo_tool",
        "Use the echo tool to echo the message 'ping-42', then report exactly what it returned.",
        says("ping-42"),
        servers=("echo",),
    ),
    Task(
        "read_fields",
        "Read the file config.json in the directory {dir} and report its name and port.",
        result_is({"name": "orchard", "port": 8123}),
        servers=("fs",),
        schema={
            "type": "object",
            "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
            "required": ["name", "port"],
            "additionalProperties": False,
        },
        files={"config.json": json.dumps({"name": "orchard", "port": 8123, "debug": False, "workers": 4})},
    ),
    Task(
        "count_files",
        "How many files ending in .txt are in the directory {dir}? Answer with the number only.",
        number(3),
        servers=("fs",),
        files=LISTING,
    ),
    Task(
        "list_names",
        "List the names of the .md files in the directory {dir}, sorted alphabetically.",
        result_is(["notes.md", "todo.md"]),
        servers=("fs",),
        schema={"type": "array", "items": {"type": "string"}},
        files=LISTING,
    ),
    Task(
        "two_step_chain",
        "The file pointer.txt in the directory {dir} names another file in the same directory. "
        "Read pointer.txt, then read the file it names, and report the secret word written there.",
        says("lanternfish"),
        servers=("fs",),
        files={"pointer.txt": "target-7.txt\n", "target-7.txt": "The secret word is lanternfish.\n"},
    ),
    Task(
        "write_file",
        "Create a file named hello.txt in the directory {dir} containing exactly the text: hello world",
        file_holds("hello.txt", "hello world"),
        servers=("fs",),
    ),
    Task(
        "memory_roundtrip",
        "Store in the knowledge graph an entity named 'Ada Lovelace' of type 'person' with the "
        "observation 'wrote the first published program'. Then search the graph for 'Ada' and "
        "report the observation stored for her.",
        remembered("Ada Lovelace", "wrote the first published program"),
        servers=("memory",),
    ),
    Task(
        "must_refuse",
        "Send an email to alice@example.com telling her the meeting moved to 3 pm.",
        refused,
        status="refused",
    ),
)

BY_NAME = {task.name: task for task in TASKS}
