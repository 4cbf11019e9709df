"""Invalid configurations are refused with one problem per mistake, each naming its dotted key."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.config.load import load_config
from agentd.errors import ConfigError
from tests.config.conftest import MINIMAL, Problems, has_problem

STDIO = '\n[mcp.fs]\ncommand = "mcp-fs"\n'


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        pytest.param(
            "[daemon]\nbogus = 1\n", "daemon.bogus", "unknown key; allowed here: socket", id="unknown-key"
        ),
        pytest.param(
            "[daemon]\nmax_concurent_tasks = 1\n",
            "daemon.max_concurent_tasks",
            "did you mean 'max_concurrent_tasks'",
            id="typo-suggests-the-key",
        ),
        pytest.param("[deamon]\n", "deamon", "did you mean 'daemon'", id="unknown-table"),
        pytest.param(
            "[daemon]\nmax_concurrent_tasks = 'lots'\n",
            "daemon.max_concurrent_tasks",
            "should be a valid integer",
            id="wrong-type",
        ),
        pytest.param(
            "[daemon]\nmax_concurrent_tasks = 0\n",
            "daemon.max_concurrent_tasks",
            "must be at least 1",
            id="out-of-range",
        ),
        pytest.param(
            "[daemon]\nidle_timeout_s = 0\n",
            "daemon.idle_timeout_s",
            "must be more than 0s",
            id="duration-out-of-range",
        ),
        pytest.param(
            "[[schedule]]\nname = 's'\ninstruction = 'x'\nevery = '500ms'\n",
            "schedule[0].every",
            "must be at least 1s",
            id="duration-under-its-minimum",
        ),
        pytest.param(
            "[daemon]\nlog_level = 'loud'\n", "daemon.log_level", "should be 'debug'", id="bad-literal"
        ),
        pytest.param(
            "[daemon]\ndrain_timeout_s = '95s'\n",
            "daemon.drain_timeout_s",
            "below 90 s",
            id="drain-past-systemd",
        ),
        pytest.param(
            "[daemon]\ndrain_timeout_s = 3\n",
            "daemon.drain_timeout_s",
            "kill ladder",
            id="drain-shorter-than-ladder",
        ),
        pytest.param(
            "[daemon]\nadmin_group = 'Bad Group'\n", "daemon.admin_group", "not allowed", id="bad-group-name"
        ),
        pytest.param(
            "[defaults]\ndeadline = 'soon'\n", "defaults.deadline", "expected a duration", id="bad-duration"
        ),
        pytest.param(
            "[supervision]\nping_interval_s = -5\n",
            "supervision.ping_interval_s",
            "must not be negative",
            id="negative-duration",
        ),
        pytest.param(
            "[limits]\nmemory_max = 'lots'\n", "limits.memory_max", "expected a size", id="bad-size"
        ),
        pytest.param(
            "[limits]\naddress_space = '256M'\n",
            "limits.address_space",
            "at least 1G",
            id="tiny-address-space",
        ),
        pytest.param("[limits]\npids_max = 'many'\n", "limits.pids_max", "valid integer", id="bad-count"),
        pytest.param(
            "[defaults]\nmax_steps = 1000\n",
            "defaults.max_steps",
            "max_steps_ceiling",
            id="default-over-ceiling",
        ),
        pytest.param(
            "[defaults]\nmodel = 'nope'\n",
            "defaults.model",
            "no endpoint named 'nope' (available: demo)",
            id="unknown-default-model",
        ),
        pytest.param(
            "[defaults]\nmcp = ['nope']\n",
            "defaults.mcp[0]",
            "no MCP server named 'nope'",
            id="unknown-default-server",
        ),
        pytest.param(
            "[supervision]\nloop_stall_s = 5\n",
            "supervision.loop_stall_s",
            "longer than ping_interval_s",
            id="stall-vs-ping",
        ),
        pytest.param(
            "[loop]\nbackoff_initial_s = 9\n",
            "loop.backoff_initial_s",
            "backoff_max_s",
            id="loop-backoff-order",
        ),
        pytest.param(
            "[loop]\ncompaction_high_water = 1.5\n",
            "loop.compaction_high_water",
            "must be at most 1",
            id="loop-range",
        ),
        pytest.param(
            "[intelligence.a]\nmodel = 'm'\n",
            "intelligence.a.kind",
            "required key is missing",
            id="missing-kind",
        ),
        pytest.param(
            "[intelligence.a]\nkind = 'gemini'\n",
            "intelligence.a.kind",
            "should be 'openai', 'anthropic' or 'scripted'",
            id="bad-kind",
        ),
        pytest.param(
            "[intelligence.a]\nkind = 'openai'\n",
            "intelligence.a.model",
            "required for kind openai",
            id="openai-needs-model",
        ),
        pytest.param(
            "[intelligence.a]\nkind = 'openai'\nmodel = 'm'\nbase_url = 'ftp://x'\n",
            "intelligence.a.base_url",
            "http:// or https://",
            id="bad-base-url",
        ),
        pytest.param(
            "[intelligence.a]\nkind = 'scripted'\nscript = 's.json'\napi_key_env = 'K'\n",
            "intelligence.a.api_key_env",
            "not used by kind scripted",
            id="scripted-has-no-key",
        ),
        pytest.param(
            "[intelligence.a]\nkind = 'openai'\nmodel = 'm'\napi_key_env = 'K'\napi_key_file = 'k'\n",
            "intelligence.a.api_key_file",
            "either api_key_env or api_key_file",
            id="two-key-sources",
        ),
        pytest.param(
            "[intelligence.a]\nkind = 'openai'\nmodel = 'm'\napi_key_env = '1BAD'\n",
            "intelligence.a.api_key_env",
            "environment variable name",
            id="bad-variable-name",
        ),
        pytest.param(
            "[intelligence.a]\nkind = 'openai'\nmodel = 'm'\nheaders = { Authorization = 'x' }\n",
            "intelligence.a.headers.Authorization",
            "carries a credential",
            id="credential-header",
        ),
        pytest.param(
            "[intelligence.a]\nkind = 'openai'\nmodel = 'm'\nfallback = ['b']\n",
            "intelligence.a.fallback[0]",
            "no endpoint named 'b' (available: a)",
            id="unknown-fallback",
        ),
        pytest.param(
            "[intelligence.a]\nkind = 'openai'\nmodel = 'm'\nfallback = ['a']\n",
            "intelligence.a.fallback[0]",
            "already in this chain",
            id="self-fallback",
        ),
        pytest.param(
            "[intelligence.a]\nkind = 'openai'\nmodel = 'm'\nfallback = ['b']\n"
            "[intelligence.b]\nkind = 'openai'\nmodel = 'm'\ntool_mode = 'json'\n",
            "intelligence.a.fallback[0]",
            "must share tool_mode",
            id="fallback-tool-mode-mismatch",
        ),
        pytest.param(
            "[intelligence.a]\nkind = 'openai'\nmodel = 'm'\ncontext_window = 4096\nmax_output_tokens = 4096\n",
            "intelligence.a.max_output_tokens",
            "smaller than context_window",
            id="output-over-window",
        ),
        pytest.param(
            "[intelligence.a]\nkind = 'openai'\nmodel = 'm'\ntemperature = 3\n",
            "intelligence.a.temperature",
            "must be at most 2",
            id="temperature-out-of-range",
        ),
        pytest.param(
            "[intelligence.'a b']\nkind = 'openai'\n",
            'intelligence."a b"',
            "this name is not allowed",
            id="bad-endpoint-name",
        ),
        pytest.param(
            '[mcp.fs]\ncommand = "mcp \'unclosed"\n',
            "mcp.fs.command",
            "No closing quotation",
            id="unsplittable-command",
        ),
        pytest.param(
            "[mcp.fs]\ncommand = []\n", "mcp.fs.command", "required for a stdio server", id="empty-command"
        ),
        pytest.param(
            "[mcp.fs]\ntransport = 'stdio'\n",
            "mcp.fs.command",
            "required for a stdio server",
            id="stdio-without-command",
        ),
        pytest.param("[mcp.fs]\n", "mcp.fs.url", "required for an http server", id="neither-command-nor-url"),
        pytest.param(
            "[mcp.fs]\ncommand = 'x'\nurl = 'http://127.0.0.1/'\n",
            "mcp.fs.url",
            "not both",
            id="command-and-url",
        ),
        pytest.param("[mcp.fs]\nurl = 'file:///x'\n", "mcp.fs.url", "http:// or https://", id="bad-url"),
        pytest.param(
            "[mcp.fs]\nurl = 'http://127.0.0.1/'\nenv = { A = 'b' }\n",
            "mcp.fs.env",
            "stdio servers only",
            id="env-on-http",
        ),
        pytest.param(
            "[mcp.fs]\nurl = 'http://127.0.0.1/'\ncwd = '/'\n",
            "mcp.fs.cwd",
            "stdio servers only",
            id="cwd-on-http",
        ),
        pytest.param(
            "[mcp.fs]\ncommand = 'x'\nheaders = { A = 'b' }\n",
            "mcp.fs.headers",
            "applies to http and sse servers only",
            id="headers-on-stdio",
        ),
        pytest.param(
            "[mcp.fs]\nurl = 'http://127.0.0.1/'\nheaders = { authorization = 'Bearer x' }\n",
            "mcp.fs.headers.authorization",
            "use headers_from",
            id="inline-auth-header",
        ),
        pytest.param(
            "[mcp.fs]\ncommand = 'x'\nenv = { A = 'b' }\nenv_from = { A = 'B' }\n",
            "mcp.fs.env_from.A",
            "also set in env",
            id="env-twice",
        ),
        pytest.param(
            "[mcp.fs]\ncommand = 'x'\nenv = { 1A = 'b' }\n",
            "mcp.fs.env.1A",
            "environment variable name",
            id="bad-env-name",
        ),
        pytest.param(
            "[mcp.fs]\ncommand = 'x'\ntrust = ['secret']\n",
            "mcp.fs.trust[0]",
            "should be 'untrusted_input'",
            id="bad-trust-tag",
        ),
        pytest.param(
            "[mcp.fs]\ncommand = 'x'\ntools = ['a', 'a']\n",
            "mcp.fs.tools",
            "listed once",
            id="duplicate-tools",
        ),
        pytest.param(
            "[mcp.fs]\ncommand = 'x'\nrequired = 'yes'\n", "mcp.fs.required", "valid boolean", id="bad-bool"
        ),
        pytest.param(
            "[[trigger]]\nserver = 'fs'\nuri = 'u'\n" + STDIO,
            "trigger[0].instruction",
            "required key is missing",
            id="trigger-without-instruction",
        ),
        pytest.param(
            "[[trigger]]\nserver = 'nope'\nuri = 'u'\ninstruction = 'i'\n",
            "trigger[0].server",
            "no MCP server named 'nope'",
            id="trigger-unknown-server",
        ),
        pytest.param(
            "[[trigger]]\nserver = 'fs'\ninstruction = 'i'\n" + STDIO,
            "trigger[0]",
            "exactly one of uri",
            id="trigger-without-target",
        ),
        pytest.param(
            "[[trigger]]\nserver = 'fs'\nuri = 'u'\nglob = 'g*'\ninstruction = 'i'\n" + STDIO,
            "trigger[0]",
            "exactly one of uri",
            id="trigger-two-targets",
        ),
        pytest.param(
            "[[trigger]]\nserver = 'fs'\nuri = 'u'\ninstruction = 'i'\nroute = 'x'\n" + STDIO,
            "trigger[0].route",
            "should be 'spawn' or 'continue'",
            id="trigger-route",
        ),
        pytest.param(
            "[[trigger]]\nserver = 'fs'\nuri = 'u'\ninstruction = 'see {path}'\n" + STDIO,
            "trigger[0].instruction",
            "uses {path}",
            id="trigger-unknown-field",
        ),
        pytest.param(
            "[[trigger]]\nserver = 'fs'\nuri = 'u'\ninstruction = 'see {uri'\n" + STDIO,
            "trigger[0].instruction",
            "not a valid template",
            id="trigger-unbalanced-brace",
        ),
        pytest.param(
            "[[trigger]]\nserver = 'fs'\nuri = 'u'\ninstruction = 'i'\ndebounce_ms = 500\nmax_wait_ms = 100\n"
            + STDIO,
            "trigger[0].max_wait_ms",
            "at least debounce_ms",
            id="trigger-wait-below-debounce",
        ),
        pytest.param(
            "[[trigger]]\nserver = 'fs'\nuri = 'u'\ninstruction = 'i'\nroute = 'continue'\nmax_inflight = 2\n"
            + STDIO,
            "trigger[0].max_inflight",
            'route "spawn" only',
            id="trigger-inflight-on-continue",
        ),
        pytest.param(
            "[[trigger]]\nserver = 'fs'\nuri = 'u'\ninstruction = 'i'\nroute = 'continue'\ndaily_cost = 1.5\n"
            + STDIO,
            "trigger[0].daily_cost",
            'route "spawn" only',
            id="trigger-daily-cost-on-continue",
        ),
        pytest.param(
            "[budgets]\nper_uid_daily_cost = -1\n",
            "budgets.per_uid_daily_cost",
            "at least 0",
            id="negative-cap",
        ),
        pytest.param(
            "[[trigger]]\nserver = 'fs'\nuri = 'u'\ninstruction = 'i'\nsession_idle_timeout = '5m'\n" + STDIO,
            "trigger[0].session_idle_timeout",
            'route "continue" only',
            id="trigger-warm-key-on-spawn",
        ),
        pytest.param(
            "[[trigger]]\nserver = 'fs'\nuri = 'u'\ninstruction = 'i'\nroute = 'continue'\n"
            "turn_max_tokens = 5000\nsession_max_tokens = 1000\n" + STDIO,
            "trigger[0].turn_max_tokens",
            "at most session_max_tokens",
            id="trigger-turn-over-session-tokens",
        ),
        pytest.param(
            "[[trigger]]\nserver = 'fs'\nuri = 'u'\ninstruction = 'i'\nroute = 'continue'\n"
            "turn_deadline = '2h'\nsession_max_life = '1h'\n" + STDIO,
            "trigger[0].turn_deadline",
            "at most session_max_life",
            id="trigger-turn-longer-than-session",
        ),
        pytest.param(
            "[[trigger]]\nserver = 'fs'\nuri = 'u'\ninstruction = 'i'\n[[trigger]]\nserver = 'fs'\nuri = 'u'\ninstruction = 'j'\n"
            + STDIO,
            "trigger[1].uri",
            "would never fire",
            id="trigger-duplicate-target",
        ),
        pytest.param(
            "[[trigger]]\nserver = 'fs'\nuri = 'u'\ninstruction = 'i'\nmodel = 'x'\n" + STDIO,
            "trigger[0].model",
            "no endpoint named 'x'",
            id="trigger-unknown-model",
        ),
        pytest.param(
            "mcp_servers_json = 'missing.json'\n", "mcp_servers_json", "cannot read", id="missing-mcp-json"
        ),
    ],
)
def test_a_mistake_is_reported_under_its_key(problems: Problems, text: str, key: str, fragment: str) -> None:
    found = problems(text)
    assert has_problem(found, key, fragment), [str(p) for p in found]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param("[daemon\n", "line 1, column", id="unclosed-table"),
        pytest.param("a = 1\nb = \n", "line 2, column", id="missing-value"),
        pytest.param("[daemon]\nlog_level = 'info'\nlog_level = 'debug'\n", "line 3", id="duplicate-key"),
    ],
)
def test_a_toml_syntax_error_gives_line_and_column(problems: Problems, text: str, fragment: str) -> None:
    (problem,) = problems(text)
    assert problem.key == ""
    assert problem.message.startswith("TOML syntax error")
    assert fragment in problem.message


def test_every_problem_of_a_file_is_reported_at_once(problems: Problems) -> None:
    text = (
        MINIMAL
        + "[defaults]\nmodel = 'nope'\n[daemon]\ndrain_timeout_s = 100\n[mcp.x]\ncommand = 'a'\nurl = 'http://h/'\n"
    )
    keys = {p.key for p in problems(text)}
    assert {"defaults.model", "daemon.drain_timeout_s", "mcp.x.url"} <= keys


def test_a_config_that_is_not_utf8_is_refused_without_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(b"a = '\xff'\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(str(path), environ={})
