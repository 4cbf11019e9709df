"""The journal's on-disk format: schema, migrations, connection settings, and error triage.

`migrate` brings any older database to `SCHEMA_VERSION` (tracked in `PRAGMA user_version`) in one
transaction; a database written by a newer agentd is refused rather than guessed at.
`unavailable_reason` decides which SQLite failures are environmental (retryable, reported as
`JournalUnavailable`) as opposed to a bug or a constraint in one operation.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agentd.errors import JournalError

SCHEMA_VERSION = 13
BUSY_TIMEOUT_MS = 5000

# Invariant: `seq` is the rowid alias, so it is the submission order and survives VACUUM (an
# implicit rowid does not); the queue and "newest first" both order by it, never by wall-clock
# `created_at`, which can step backwards. `task_id` is the public key (UNIQUE, FK target).
_V1 = """
CREATE TABLE tasks (
    seq             INTEGER PRIMARY KEY,
    task_id         TEXT    NOT NULL UNIQUE,
    run_id          TEXT    NOT NULL,
    owner_uid       INTEGER NOT NULL,
    idempotency_key TEXT,
    spec            TEXT    NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'queued'
                    CHECK (state IN ('queued', 'starting', 'running', 'terminal')),
    status          TEXT,
    exit_code       INTEGER,
    result          TEXT,
    partial         INTEGER NOT NULL DEFAULT 0,
    usage           TEXT,
    abort           TEXT,
    error           TEXT,
    attempts        INTEGER NOT NULL DEFAULT 0,
    pid             INTEGER,
    pid_start_time  REAL,
    created_at      REAL    NOT NULL,
    started_at      REAL,
    ended_at        REAL,
    UNIQUE (owner_uid, idempotency_key),
    CHECK ((state = 'terminal') = (status IS NOT NULL))
);
-- Entries of a one-column index are ordered by rowid within a key: these serve the FIFO queue
-- (state = 'queued' ORDER BY seq), recovery, counts, and per-owner listing newest first.
CREATE INDEX tasks_by_state ON tasks (state);
CREATE INDEX tasks_by_owner ON tasks (owner_uid);

CREATE TABLE nodes (
    task_id        TEXT    NOT NULL REFERENCES tasks (task_id),
    handle         TEXT    NOT NULL,
    parent         TEXT,
    depth          INTEGER NOT NULL,
    pid            INTEGER,
    pid_start_time REAL,
    state          TEXT    NOT NULL CHECK (state IN ('starting', 'running', 'terminal')),
    status         TEXT,
    usage          TEXT,
    grant_steps    INTEGER,
    grant_tokens   INTEGER,
    created_at     REAL    NOT NULL,
    ended_at       REAL,
    PRIMARY KEY (task_id, handle)
) WITHOUT ROWID;

CREATE TABLE events (
    task_id TEXT    NOT NULL REFERENCES tasks (task_id),
    seq     INTEGER NOT NULL,
    ts      REAL    NOT NULL,
    event   TEXT    NOT NULL,
    fields  TEXT    NOT NULL,
    PRIMARY KEY (task_id, seq)
) WITHOUT ROWID;
"""

# v2: the per-uid caps (agentd/journal/quota.py) sum the spec bytes of a uid's unfinished tasks on
# every submit; a stored size keeps that from reading every spec, and the (state, owner) index
# keeps it to that uid's unfinished rows.
_V2 = """
ALTER TABLE tasks ADD COLUMN spec_bytes INTEGER NOT NULL DEFAULT 0;
UPDATE tasks SET spec_bytes = length(CAST(spec AS BLOB));
CREATE INDEX tasks_by_state_owner ON tasks (state, owner_uid);
"""

# v3: recurring work (docs/design.md §11). A schedule row holds its trigger and counters; each fire is a
# task carrying `schedule_id` and the occurrence it fired for (`fire_at`). A fire's task insert and
# the schedule's advance to its next occurrence commit together, and (schedule_id, fire_at) is
# unique, so no occurrence fires twice, across restarts included. `idle` is a finished run's
# "nothing done" report, which a loop's backoff reads.
_V3 = """
CREATE TABLE schedules (
    seq             INTEGER PRIMARY KEY,
    schedule_id     TEXT    NOT NULL UNIQUE,
    owner_uid       INTEGER NOT NULL,
    idempotency_key TEXT,
    name            TEXT,
    kind            TEXT    NOT NULL CHECK (kind IN ('cron', 'interval', 'loop')),
    trigger_spec    TEXT    NOT NULL,
    spec            TEXT    NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'paused', 'ended')),
    note            TEXT,
    next_fire_at    REAL,
    runs            INTEGER NOT NULL DEFAULT 0,
    failures        INTEGER NOT NULL DEFAULT 0,
    skipped         INTEGER NOT NULL DEFAULT 0,
    tokens_used     INTEGER NOT NULL DEFAULT 0,
    pause_s         REAL,
    last_task_id    TEXT,
    last_status     TEXT,
    last_error      TEXT,
    last_fire_at    REAL,
    created_at      REAL    NOT NULL,
    UNIQUE (owner_uid, idempotency_key)
);
CREATE INDEX schedules_by_owner ON schedules (owner_uid);
ALTER TABLE tasks ADD COLUMN schedule_id TEXT;
ALTER TABLE tasks ADD COLUMN fire_at REAL;
ALTER TABLE tasks ADD COLUMN idle INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX tasks_by_fire ON tasks (schedule_id, fire_at) WHERE schedule_id IS NOT NULL;
"""

# v4: the approval gate. One row per gated tool call a subagent holds for a person;
# it outlives the daemon, so a request pending at a restart stays decidable, and a decision not yet
# `consumed` is honoured once when the requeued run makes the same call (same `digest`: server,
# tool, arguments). `call_id` is the public id a person names (`agentd approve TASK CALL`).
_V4 = """
CREATE TABLE approvals (
    seq          INTEGER PRIMARY KEY,
    call_id      TEXT    NOT NULL UNIQUE,
    task_id      TEXT    NOT NULL REFERENCES tasks (task_id),
    run_id       TEXT    NOT NULL,
    handle       TEXT    NOT NULL,
    owner_uid    INTEGER NOT NULL,
    tool_call_id TEXT    NOT NULL,
    server       TEXT    NOT NULL,
    tool         TEXT    NOT NULL,
    arguments    TEXT    NOT NULL,
    digest       TEXT    NOT NULL,
    instruction  TEXT    NOT NULL,
    state        TEXT    NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'approved', 'denied', 'expired', 'withdrawn')),
    consumed     INTEGER NOT NULL DEFAULT 0,
    reason       TEXT,
    decided_by   INTEGER,
    requested_at REAL    NOT NULL,
    expires_at   REAL    NOT NULL,
    decided_at   REAL
);
CREATE INDEX approvals_by_task ON approvals (task_id, digest);
CREATE INDEX approvals_by_state ON approvals (state);
"""

# v5: reactive triggers (docs/design.md §11; docs/triggers.md). A delivery becomes a task carrying the
# trigger's name and the URI it is about; the partial index serves each trigger's unfinished count
# (its `max_inflight`) and its listing. `trigger_state` holds what an operator set on a trigger
# that must survive a restart: whether it is paused.
_V5 = """
ALTER TABLE tasks ADD COLUMN trigger TEXT;
ALTER TABLE tasks ADD COLUMN uri TEXT;
CREATE INDEX tasks_by_trigger ON tasks (trigger, state) WHERE trigger IS NOT NULL;
CREATE TABLE trigger_state (
    name       TEXT    PRIMARY KEY,
    paused     INTEGER NOT NULL DEFAULT 0,
    updated_at REAL    NOT NULL
) WITHOUT ROWID;
"""

# v6: which executor ran a task (`local`, `temporal`) and where: this host's name for a local
# run, the Temporal worker's identity for a remote one (docs/temporal.md). NULL until it runs.
_V6 = """
ALTER TABLE tasks ADD COLUMN executor TEXT;
ALTER TABLE tasks ADD COLUMN worker TEXT;
"""

# v7: the per-uid caps' sum reads only the (state, owner) index, not each unfinished row of the
# table as well: that made every submit cost ~0.5 ms of the writer thread once a user had 1,000
# tasks unfinished. It also keeps the plan on the index should statistics (ANALYZE)
# ever favour a scan of the table, which costs ~6 ms per submit at 20,000 tasks.
_V7 = """
DROP INDEX tasks_by_state_owner;
CREATE INDEX tasks_by_state_owner ON tasks (state, owner_uid, spec_bytes);
"""

# v8: resume (docs/durability.md). `steps` holds each node's transcript, item by item, in the order
# its subagent handed them over (protocol/transcript.py); a resumed run replays them. A task's
# `resumes` counts its runs that went on from a journaled transcript (after a restart or a park),
# and `first_started_at` keeps when its first run started, so its deadline runs in wall time
# across them. A forked task names the task and step its transcript was copied from. A task whose
# budget ran out with `on_budget = "pause"` waits queued with `paused_at` set (the scheduler leaves
# it) and the run's result kept, until `agentd extend` raises its budget or the wait times out.
_V8 = """
CREATE TABLE steps (
    task_id TEXT    NOT NULL REFERENCES tasks (task_id),
    handle  TEXT    NOT NULL,
    seq     INTEGER NOT NULL,
    ts      REAL    NOT NULL,
    kind    TEXT    NOT NULL,
    body    TEXT    NOT NULL,
    PRIMARY KEY (task_id, handle, seq)
) WITHOUT ROWID;
ALTER TABLE tasks ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN first_started_at REAL;
ALTER TABLE tasks ADD COLUMN forked_from TEXT;
ALTER TABLE tasks ADD COLUMN forked_step INTEGER;
ALTER TABLE tasks ADD COLUMN paused_at REAL;
ALTER TABLE tasks ADD COLUMN paused_result TEXT;
"""

# v9: a task's transcript is bounded (`[journal] max_transcript_bytes`): each step keeps its body's
# size, and each task the sum, so the oldest tool results past the cap are found and digested
# without reading every body.
_V9 = """
ALTER TABLE steps ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN transcript_bytes INTEGER NOT NULL DEFAULT 0;
UPDATE steps SET bytes = length(CAST(body AS BLOB));
UPDATE tasks SET transcript_bytes =
    (SELECT COALESCE(SUM(bytes), 0) FROM steps WHERE steps.task_id = tasks.task_id);
"""

# v10: a user's schedules count against the per-uid caps like its tasks: each keeps its spec's
# size, so the bytes a user's schedules hold are summed from the owner index without reading a
# spec (`[daemon] max_pending_bytes_per_uid`).
_V10 = """
ALTER TABLE schedules ADD COLUMN spec_bytes INTEGER NOT NULL DEFAULT 0;
UPDATE schedules SET spec_bytes = length(CAST(spec AS BLOB));
DROP INDEX schedules_by_owner;
CREATE INDEX schedules_by_owner ON schedules (owner_uid, spec_bytes);
"""

# v11: a task waiting for a person's approval is parked: its subagent stops and its slot frees,
# and the scheduler leaves it queued until that call is decided or `parked_until` passes.
_V11 = """
ALTER TABLE tasks ADD COLUMN parked_call TEXT;
ALTER TABLE tasks ADD COLUMN parked_until REAL;
"""

# v12: daily caps (docs/budgets.md). `spend` sums what ended tasks spent per scope (`uid:N`,
# `trigger:NAME`, `schedule:ID`) and quarter hour of their end, so a day of any zone is a short range
# of one scope's rows and outlives the tasks' retention; filled from the tasks that already ended.
# A task a cap holds back waits queued with `deferred_until` (wall clock) and the reason.
_V12 = """
CREATE TABLE spend (
    scope    TEXT    NOT NULL,
    bucket   INTEGER NOT NULL,
    cost_usd REAL    NOT NULL DEFAULT 0,
    tokens   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, bucket)
) WITHOUT ROWID;
ALTER TABLE tasks ADD COLUMN deferred_until REAL;
ALTER TABLE tasks ADD COLUMN deferred_reason TEXT;
INSERT INTO spend (scope, bucket, cost_usd, tokens)
    SELECT scope, bucket, SUM(cost), SUM(tokens) FROM (
        SELECT 'uid:' || owner_uid AS scope, CAST(ended_at / 900 AS INTEGER) * 900 AS bucket,
            COALESCE(json_extract(usage, '$.cost_usd'), 0) AS cost,
            COALESCE(json_extract(usage, '$.tokens_in'), 0) + COALESCE(json_extract(usage, '$.tokens_out'), 0)
                AS tokens
        FROM tasks WHERE state = 'terminal' AND ended_at IS NOT NULL AND usage IS NOT NULL
        UNION ALL
        SELECT 'trigger:' || trigger, CAST(ended_at / 900 AS INTEGER) * 900,
            COALESCE(json_extract(usage, '$.cost_usd'), 0),
            COALESCE(json_extract(usage, '$.tokens_in'), 0) + COALESCE(json_extract(usage, '$.tokens_out'), 0)
        FROM tasks WHERE state = 'terminal' AND ended_at IS NOT NULL AND usage IS NOT NULL
            AND trigger IS NOT NULL
        UNION ALL
        SELECT 'schedule:' || schedule_id, CAST(ended_at / 900 AS INTEGER) * 900,
            COALESCE(json_extract(usage, '$.cost_usd'), 0),
            COALESCE(json_extract(usage, '$.tokens_in'), 0) + COALESCE(json_extract(usage, '$.tokens_out'), 0)
        FROM tasks WHERE state = 'terminal' AND ended_at IS NOT NULL AND usage IS NOT NULL
            AND schedule_id IS NOT NULL
    ) GROUP BY scope, bucket;
"""

# A listing (`task.list`, `schedule.list`) shows each spec as a summary: the instruction cut to
# `LIST_INSTRUCTION_CHARS`, and for a task its model and servers. The summary is written beside the
# spec when the spec is written, so a page costs time and memory in proportion to its length, never
# to what clients stored (docs/design.md §14): cutting it from the spec at each read parsed every
# listed spec whole, five times (SQLite 3.40 keeps no parsed JSON between calls).
LIST_INSTRUCTION_CHARS = 200


def summary_sql(spec: str, *, task: bool) -> str:
    """The SQL expression of the summary of the spec JSON `spec` (a column, or a parameter such
    as `?5`): a task's (`task`) or a schedule's."""
    instruction = f"json_extract({spec}, '$.instruction')"
    fields = (
        f"'instruction', CASE WHEN length({instruction}) > {LIST_INSTRUCTION_CHARS}"
        f" THEN substr({instruction}, 1, {LIST_INSTRUCTION_CHARS}) || '…' ELSE {instruction} END"
    )
    if task:
        fields += f", 'model', json_extract({spec}, '$.model'), 'mcp', json(json_extract({spec}, '$.mcp'))"
    return f"json_object({fields})"


# v13: the listing summary of each task and schedule (above), filled from the specs already stored.
_V13 = f"""
ALTER TABLE tasks ADD COLUMN summary TEXT;
UPDATE tasks SET summary = {summary_sql("spec", task=True)};
ALTER TABLE schedules ADD COLUMN summary TEXT;
UPDATE schedules SET summary = {summary_sql("spec", task=False)};
"""

# Index i holds the script that takes a database from version i to i + 1.
_MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11, _V12, _V13)
assert len(_MIGRATIONS) == SCHEMA_VERSION

# SQLite primary result codes (the low byte of an extended code) that describe the environment
# rather than the operation: retrying later, or after an operator frees space, can succeed.
_UNAVAILABLE = {
    sqlite3.SQLITE_FULL: "database or disk is full",
    sqlite3.SQLITE_IOERR: "I/O error",
    sqlite3.SQLITE_READONLY: "database is read-only",
    sqlite3.SQLITE_BUSY: "database is locked",
    sqlite3.SQLITE_LOCKED: "database table is locked",
    sqlite3.SQLITE_CANTOPEN: "cannot open the database file",
    sqlite3.SQLITE_NOMEM: "out of memory",
    sqlite3.SQLITE_CORRUPT: "database disk image is malformed",
    sqlite3.SQLITE_NOTADB: "file is not a database",
    sqlite3.SQLITE_PROTOCOL: "locking protocol error",
}


def unavailable_reason(exc: sqlite3.Error) -> str | None:
    """Return what went wrong if `exc` is environmental (retryable), else None (a bug or constraint)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        # A closed connection or a misuse: the journal cannot write, but retrying will not help
        # this process; still not the caller's fault, so report it as unavailable.
        return str(exc) if isinstance(exc, sqlite3.ProgrammingError) else None
    primary = code & 0xFF
    if primary not in _UNAVAILABLE:
        return None
    return str(exc) or _UNAVAILABLE[primary]


def connect_writer(path: Path) -> sqlite3.Connection:
    """Open the single write connection, configure it for durability, and migrate the schema.

    The connection is handed to the writer thread afterwards, hence `check_same_thread=False`;
    it is never used by two threads at once.
    """
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # Takes effect only on a new (empty) database: retention's deletes then give their pages
        # back to the file system a batch at a time (agentd/journal/retention.py).
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode != "wal":
            raise JournalError(f"journal {path}: cannot enable WAL mode (got {mode!r})")
        # FULL fsyncs the WAL on every COMMIT: an acknowledged write survives power loss.
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        migrate(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn


def connect_reader(path: Path) -> sqlite3.Connection:
    """Open a read-only connection (WAL lets it read while the writer commits)."""
    conn = sqlite3.connect(
        f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
    )
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA query_only = ON")
    return conn


def migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Apply every pending migration in one IMMEDIATE transaction; refuse a newer schema."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise JournalError(
                f"journal {path} has schema v{version}, newer than this agentd's v{SCHEMA_VERSION}"
            )
        for script in _MIGRATIONS[version:]:
            # executescript() would COMMIT first; run the statements inside our transaction.
            for statement in _statements(script):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _statements(script: str) -> list[str]:
    lines = [line for line in script.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
