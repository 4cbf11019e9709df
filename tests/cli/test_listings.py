"""What the client commands print for a person (pure): tables fitted to the terminal, short task
ids, `status`'s reason of the ending, `cancel`'s and `schedules`' words, plurals, and model text
escaped wherever it is shown."""

from __future__ import annotations

import pytest
from pydantic import JsonValue

from agentd.cli.approval_commands import describe_approval, render_approval
from agentd.cli.columns import Column, cells, clip, fit, render
from agentd.cli.display import plural
from agentd.cli.listing_commands import schedule_lines
from agentd.cli.progress import detached, render_event
from agentd.cli.task_ids import is_full, normalised, short_ids
from agentd.cli.task_text import cancel_line, list_lines, status_lines
from protocol.api import ApprovalView, EventView, ScheduleSpec, ScheduleView, TaskView
from protocol.result import RunError, RunUsage, TerminalStatus

NOW = 1_800_000_000.0
ID_A = "t_01JBX4K9Q2M7AAAAAAAAAAAAAA"
ID_B = "t_01JBX4K9Q2M7AAAAAAAAAAAAAB"  # shares 27 characters with ID_A
ID_C = "t_01JBX5ZZZZZZZZZZZZZZZZZZZZ"


def _task(task_id: str = ID_A, **fields: object) -> TaskView:
    base: dict[str, object] = {
        "task_id": task_id,
        "run_id": "r_1",
        "owner_uid": 1000,
        "state": "running",
        "created_at": NOW - 125,
        "instruction": "summarise the overnight alerts",
        "model": "m",
    }
    return TaskView.model_validate({**base, **fields})


# ---- columns ----------------------------------------------------------------------------------


def test_a_table_that_fits_is_shown_whole() -> None:
    columns = (Column("ID", keep=True), Column("NOTE", shrink=True))
    assert render(columns, [("a", "short")], 80) == ["ID  NOTE", "a   short"]


def test_free_text_is_cut_first_then_low_rank_columns_go_and_a_header_is_never_cut() -> None:
    columns = (
        Column("ID", keep=True),
        Column("AGE", rank=0, right=True),
        Column("STATE", keep=True),
        Column("INSTRUCTION", shrink=True, rank=1),
    )
    natural = [14, 5, 9, 200]
    assert fit(columns, natural, 80) == [14, 5, 9, 80 - 14 - 5 - 9 - 6]
    # At 45 cells the instruction is cut to its header's width; at 40 AGE has to go too.
    assert fit(columns, natural, 45) == [14, 5, 9, 11]
    assert fit(columns, natural, 40) == [14, None, 9, 40 - 14 - 9 - 4]
    # Narrower than the kept columns: they stay, whole (the terminal wraps).
    assert fit(columns, natural, 10) == [14, None, 9, None]


def test_wide_characters_take_two_cells_and_a_cut_ends_with_an_ellipsis() -> None:
    assert cells("日本") == 4
    assert clip("日本語のテキスト", 7) == "日本語…"
    assert clip("plain", 5) == "plain"
    assert clip("plainer", 5) == "plai…"


# ---- short ids --------------------------------------------------------------------------------


def test_a_short_id_is_fourteen_characters_or_as_long_as_needed_to_be_unique() -> None:
    assert short_ids([ID_A, ID_C]) == {ID_A: ID_A[:14], ID_C: ID_C[:14]}
    assert short_ids([ID_A, ID_B, ID_C]) == {ID_A: ID_A, ID_B: ID_B, ID_C: ID_C[:14]}


@pytest.mark.parametrize(
    ("typed", "sent"),
    [
        pytest.param("t_01jbx4", "t_01JBX4", id="lower-case"),
        pytest.param("01JBX4", "t_01JBX4", id="without-t_"),
        pytest.param("s_01JBX4", "s_01JBX4", id="not-a-task-id"),
        pytest.param("what?", "what?", id="not-an-id"),
    ],
)
def test_a_typed_id_is_spelled_as_the_daemon_spells_it(typed: str, sent: str) -> None:
    assert normalised(typed) == sent


def test_only_a_whole_id_skips_the_lookup() -> None:
    assert is_full(ID_A)
    assert not is_full(ID_A[:-1])
    assert not is_full("t_01JBX4K9Q2M7AAAAAAAAAAAAAI")  # I is not a Crockford digit


# ---- list -------------------------------------------------------------------------------------


def test_list_shows_short_id_age_state_model_and_the_start_of_the_instruction_within_the_width() -> None:
    views = [
        _task(ID_A, instruction="line one\nline two " + "x" * 300),
        _task(ID_C, state="terminal", status="deadline", exit_code=124, model=None),
    ]
    lines = list_lines(views, now=NOW, width=80)
    assert lines[0].split() == ["ID", "AGE", "STATE", "MODEL", "INSTRUCTION"]
    assert lines[1].startswith(f"{ID_A[:14]}  2m05s  running   m      line one line two xxx")
    assert lines[1].endswith("…")
    assert lines[2].split() == [ID_C[:14], "2m05s", "deadline", "-", *views[1].instruction.split()]
    assert all(cells(line) <= 80 for line in lines)


def test_a_narrow_terminal_drops_the_model_before_anything_else() -> None:
    lines = list_lines([_task()], now=NOW, width=45)
    assert lines[0].split() == ["ID", "AGE", "STATE", "INSTRUCTION"]
    assert lines[1] == f"{ID_A[:14]}  2m05s  running  summarise th…"
    assert all(cells(line) <= 45 for line in lines)


def test_an_instruction_cannot_move_the_cursor_in_a_listing() -> None:
    (_, row) = list_lines([_task(instruction="\x1b[2Jwipe\u202e")], now=NOW, width=120)
    assert "\x1b" not in row and "\u202e" not in row
    assert "\\x1b[2Jwipe\\u202e" in row


# ---- status -----------------------------------------------------------------------------------


def test_status_says_why_a_deadline_task_ended_and_where_its_partial_result_is() -> None:
    view = _task(
        state="terminal",
        status=TerminalStatus.DEADLINE,
        exit_code=124,
        partial=True,
        started_at=NOW - 100,
        ended_at=NOW - 95,
        usage=RunUsage(steps=1, tokens_in=10, tokens_out=2),
    )
    lines = status_lines(view, now=NOW)
    assert lines[0] == f"task         {ID_A}"
    assert lines[1] == "state        deadline (exit 124)"
    assert lines[2] == "why          the deadline passed after 5.0 s; the partial result is below"
    assert "usage        1 step · 12 tokens (10 in, 2 out)" in lines
    assert "time         ran 5.0 s" in lines


def test_status_gives_the_errors_kind_and_message_on_one_escaped_line() -> None:
    view = _task(
        state="terminal",
        status=TerminalStatus.CRASHED,
        exit_code=4,
        abort="intelligence",
        error=RunError(kind="auth", message="401 from the endpoint\n\x1b]0;pwned\x07"),
    )
    why = next(line for line in status_lines(view, now=NOW) if line.startswith("why"))
    assert why == (
        "why          the model endpoint could not be used — auth: 401 from the endpoint \\x1b]0;pwned\\x07"
    )


def test_a_task_waiting_for_a_person_says_where_to_decide() -> None:
    lines = status_lines(_task(state="awaiting_approval"), now=NOW)
    assert f"why          a tool call waits for a person: `agentd approvals {ID_A}` shows it" in lines


@pytest.mark.parametrize(
    ("view", "said"),
    [
        pytest.param(_task(), f"cancelling {ID_A}: it was running;", id="running"),
        pytest.param(
            _task(state="terminal", status="cancelled", exit_code=1), f"cancelled {ID_A}", id="queued"
        ),
        pytest.param(
            _task(state="terminal", status="completed", exit_code=0),
            f"{ID_A} had already ended (completed): nothing to cancel",
            id="ended",
        ),
    ],
)
def test_cancel_says_what_it_did(view: TaskView, said: str) -> None:
    assert cancel_line(view).startswith(said)


# ---- schedules --------------------------------------------------------------------------------


def test_schedules_show_is_one_labelled_line_per_fact() -> None:
    view = ScheduleView(
        schedule_id="s_1",
        owner_uid=1000,
        trigger=ScheduleSpec(kind="cron", cron="0 7 * * 1-5", tz="Europe/Berlin", max_runs=10),
        instruction="Summarise\novernight alerts",
        state="active",
        next_fire_at=0.0,
        runs=1,
        last_task_id=ID_A,
        last_status=TerminalStatus.COMPLETED,
        last_fire_at=NOW - 60,
    )
    assert schedule_lines(view, now=NOW) == [
        "schedule     s_1",
        "state        active",
        "when         cron: 0 7 * * 1-5 (Europe/Berlin)",
        "next fire    1970-01-01 00:00:00Z",
        "instruction  Summarise overnight alerts",
        "runs         1 run of 10 · 0 failed · 0 skipped",
        "tokens       0",
        f"last run     {ID_A} completed, 1m00s ago",
        "its tasks    agentd list --schedule s_1",
    ]


# ---- progress ---------------------------------------------------------------------------------


def _event(event: str, **fields: JsonValue) -> EventView:
    return EventView(seq=1, ts=0.0, event=event, fields=fields)


@pytest.mark.parametrize(
    ("event", "line"),
    [
        pytest.param(
            _event("loop.step", step=3, kind="tools", tool_calls=1, tokens_in=1, tokens_out=0),
            "step 3 · tools · 1 tool call · 1 token",
            id="one-call",
        ),
        pytest.param(
            _event("loop.step", step=4, kind="tools", tool_calls=2, tokens_in=5, tokens_out=7),
            "step 4 · tools · 2 tool calls · 12 tokens",
            id="two-calls",
        ),
        pytest.param(
            _event("loop.final", status="completed", steps=1, tokens=40),
            "■ completed after 1 step, 40 tokens",
            id="final",
        ),
        pytest.param(
            _event("mcp.connect", server="demo", outcome="ok", tools=1),
            "  MCP demo: ok (1 tool)",
            id="connect",
        ),
        pytest.param(
            _event("subagent.exit", handle="0.1", pid=42, status="completed", exit="exited with code 0"),
            "  ⏹ subagent 0.1 (pid 42) exited with code 0",
            id="exit",
        ),
        pytest.param(
            _event("subagent.signal", pid=42, rung="sigterm", cause="deadline"),
            "  ! subagent 0 (pid 42): sigterm (deadline)",
            id="signal",
        ),
        pytest.param(
            _event("mcp.log", server="ev", level="error", message="disk\x1b[2J full"),
            "  MCP ev error: disk\\x1b[2J full",
            id="escaped",
        ),
    ],
)
def test_progress_lines_count_in_words_and_escape_what_servers_wrote(event: EventView, line: str) -> None:
    assert render_event(event) == line


def test_ctrl_c_says_the_task_goes_on_and_how_to_reach_it() -> None:
    text = detached(ID_A)
    assert "the task goes on" in text
    assert f"agentd logs -f {ID_A}" in text and f"agentd cancel {ID_A}" in text


def test_plural() -> None:
    assert [plural(n, "step") for n in (0, 1, 2)] == ["0 steps", "1 step", "2 steps"]
    assert plural(2, "try", "tries") == "2 tries"


# ---- approvals --------------------------------------------------------------------------------


def _approval(arguments: JsonValue) -> ApprovalView:
    return ApprovalView(
        call="a_1",
        task_id=ID_A,
        handle="0",
        owner_uid=1000,
        server="gh",
        tool="merge",
        arguments=arguments,
        state="pending",
        requested_at=NOW - 5,
        expires_at=NOW + 3600,
    )


def test_approvals_show_the_arguments_exactly_and_escaped() -> None:
    line = describe_approval(_approval({"cmd": "rm  -rf /tmp/x", "note": "\x9b2J\u202eevil"}), now=NOW)
    # Two spaces stay two; 8-bit CSI and the right-to-left override are shown, not obeyed.
    assert '"cmd": "rm  -rf /tmp/x"' in line
    assert "\x9b" not in line and "\u202e" not in line
    assert "\\x9b2J\\u202eevil" in line
    assert "more characters" not in line and "…" not in line


def test_long_arguments_say_they_are_cut_and_how_to_see_them() -> None:
    line = describe_approval(_approval({"body": "y" * 5000}), now=NOW)
    assert "more characters; `agentd approvals --json` shows them all]" in line
    # Before: cut at 200 characters with a bare "…".
    assert line.count("y") > 3900
    event = EventView(
        seq=1,
        ts=NOW,
        event="approval.requested",
        fields={"server": "gh", "tool": "merge", "arguments": '{"body": "' + "y" * 1990 + "…"},
    )
    shown = render_approval(event)
    assert shown is not None and shown.endswith("[cut; `agentd approvals --json` shows them all]")
