"""What the daemon asks the configuration for a task: endpoint chains, MCP grants, limits cut to
the ceilings, loop knobs, and the Rule-of-Two verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.errors import ConfigError, NotConfigured
from protocol.api import SpecLimits, TaskSpec
from protocol.spawn import Limits, LoopKnobs
from tests.config.conftest import Load

CHAIN = """
[intelligence.a]
kind = "openai"
model = "gpt"
fallback = ["b", "c"]
[intelligence.b]
kind = "anthropic"
model = "claude"
[intelligence.c]
kind = "openai"
base_url = "http://127.0.0.1:11434/v1"
model = "llama"
[intelligence.d]
kind = "scripted"
script = "s.json"
"""


@pytest.fixture
def chain(load: Load, tmp_path: Path) -> Load:
    (tmp_path / "s.json").write_text("{}")
    return load


def test_a_chain_is_the_endpoint_then_its_fallbacks_in_order(chain: Load) -> None:
    endpoints = chain(CHAIN).endpoint_chain("a")
    assert [(e.name, e.kind, e.model) for e in endpoints] == [
        ("a", "openai", "gpt"),
        ("b", "anthropic", "claude"),
        ("c", "openai", "llama"),
    ]


def test_fallbacks_are_not_followed_transitively(chain: Load) -> None:
    text = CHAIN.replace('model = "claude"', 'model = "claude"\nfallback = ["d"]')
    assert [e.name for e in chain(text).endpoint_chain("a")] == ["a", "b", "c"]


def test_base_urls_default_by_kind_and_scripted_has_none(chain: Load) -> None:
    config = chain(CHAIN)
    urls = {e.name: e.base_url for e in (*config.endpoint_chain("a"), *config.endpoint_chain("d"))}
    assert urls == {
        "a": "https://api.openai.com/v1",
        "b": "https://api.anthropic.com",
        "c": "http://127.0.0.1:11434/v1",
        "d": None,
    }


def test_no_name_means_defaults_model_else_the_first_endpoint(chain: Load) -> None:
    assert chain(CHAIN).endpoint_chain(None)[0].name == "a"
    assert chain(CHAIN + "[defaults]\nmodel = 'c'\n").endpoint_chain(None)[0].name == "c"


def test_an_unknown_endpoint_names_the_key_and_the_choices(chain: Load) -> None:
    with pytest.raises(NotConfigured) as caught:
        chain(CHAIN).endpoint_chain("gpt5")
    assert (
        str(caught.value)
        == "model: no intelligence endpoint named 'gpt5' is configured (available: a, b, c, d)"
    )
    assert isinstance(caught.value, LookupError)


SERVERS = """
[mcp.fs]
command = "mcp-fs --root '/srv/my data'"
args = ["--ro"]
tools = ["read_file"]
trust = ["sensitive"]
required = false
call_timeout_s = "1m"
[mcp.web]
url = "https://mcp.example/mcp"
headers = { "X-Team" = "infra" }
trust = ["untrusted_input", "egress"]
[mcp.inbox]
command = ["mcp-inbox"]
[mcp.calc]
command = ["mcp-calc"]
trust = []
[mcp.mail]
command = ["mcp-mail"]
trust = ["egress"]
"""


def test_an_mcp_spec_carries_transport_argv_scope_and_timeouts(load: Load) -> None:
    spec = load(SERVERS).mcp_spec("fs")
    assert spec.transport == "stdio"
    assert spec.command == ["mcp-fs", "--root", "/srv/my data", "--ro"]
    assert (spec.tools, spec.trust, spec.required, spec.call_timeout_s) == (
        ["read_file"],
        ["sensitive"],
        False,
        60.0,
    )
    web = load(SERVERS).mcp_spec("web")
    assert (web.transport, web.url, web.headers["X-Team"].get_secret_value()) == (
        "http",
        "https://mcp.example/mcp",
        "infra",
    )


def test_an_untagged_server_is_granted_as_untrusted_input(load: Load) -> None:
    assert load(SERVERS).mcp_spec("inbox").trust == ["untrusted_input"]


def test_an_unknown_server_names_the_key_and_the_choices(load: Load) -> None:
    with pytest.raises(
        NotConfigured,
        match=r"mcp: no MCP server named 'nope' is configured \(available: fs, web, inbox, calc, mail\)",
    ):
        load(SERVERS).mcp_spec("nope")


def test_a_task_naming_no_servers_gets_the_default_grant(load: Load) -> None:
    config = load(SERVERS + "[defaults]\nmcp = ['fs', 'calc']\n")
    assert config.mcp_names_for(TaskSpec(instruction="x")) == ["fs", "calc"]
    assert config.mcp_names_for(TaskSpec(instruction="x", mcp=["web", "web"])) == ["web"]
    with pytest.raises(NotConfigured, match=r"mcp\[1\]: no MCP server named 'nope'"):
        config.mcp_names_for(TaskSpec(instruction="x", mcp=["web", "nope"]))


@pytest.mark.parametrize(
    ("asked", "expected"),
    [
        pytest.param(
            SpecLimits(),
            Limits(max_steps=40, max_tokens=200_000, deadline_s=600.0, remaining_depth=4),
            id="defaults",
        ),
        pytest.param(
            SpecLimits(max_steps=7, max_tokens=1000, deadline_s=30),
            Limits(max_steps=7, max_tokens=1000, deadline_s=30.0),
            id="within",
        ),
        pytest.param(
            SpecLimits(max_steps=10_000, max_tokens=10**9, deadline_s=86_400),
            Limits(max_steps=400, max_tokens=2_000_000, deadline_s=7200.0),
            id="cut-to-ceilings",
        ),
    ],
)
def test_task_limits_default_and_are_cut_to_the_ceilings(
    load: Load, asked: SpecLimits, expected: Limits
) -> None:
    assert load("").limits_for(TaskSpec(instruction="x", limits=asked)) == expected


def test_configured_defaults_and_ceilings_apply(load: Load) -> None:
    text = "[defaults]\nmax_steps = 10\ndeadline = '1m'\nmax_depth = 2\nmax_tokens_ceiling = 5000\nmax_tokens = 5000\n"
    limits = load(text).limits_for(TaskSpec(instruction="x", limits=SpecLimits(max_tokens=9999)))
    assert limits == Limits(max_steps=10, max_tokens=5000, deadline_s=60.0, remaining_depth=2)


def test_loop_overrides_reach_the_loop_knobs(load: Load) -> None:
    knobs = load("[loop]\nrepeat_cap = 5\ncompaction_high_water = 0.5\n").loop_knobs()
    assert knobs == LoopKnobs(repeat_cap=5, compaction_high_water=0.5)


@pytest.mark.parametrize(
    ("grant", "extra", "violation"),
    [
        pytest.param(["fs", "web"], "", "fs, web", id="sensitive-plus-untrusted-egress"),
        pytest.param(
            ["fs", "inbox", "mail"], "", "untrusted_input (inbox)", id="untagged-counts-as-untrusted"
        ),
        pytest.param(["fs", "mail"], "", None, id="two-of-three"),
        pytest.param(["fs", "calc", "mail"], "", None, id="explicitly-empty-tags-carry-nothing"),
        pytest.param(["web"], "", None, id="one-server-two-tags"),
        pytest.param(
            ["fs", "web"], "[security]\nallow_rule_of_two_violation = true\n", None, id="global-escape-hatch"
        ),
    ],
)
def test_the_rule_of_two_refuses_untrusted_input_plus_sensitive_plus_egress(
    load: Load, grant: list[str], extra: str, violation: str | None
) -> None:
    why = load(extra + SERVERS).rule_of_two_violation(grant)
    if violation is None:
        assert why is None
    else:
        assert why is not None and violation in why and "Rule of Two" in why


def test_every_server_of_a_violating_grant_must_consent(load: Load) -> None:
    consenting = SERVERS.replace(
        'trust = ["sensitive"]', 'trust = ["sensitive"]\nallow_rule_of_two_violation = true'
    )
    why = load(consenting).rule_of_two_violation(["fs", "web"])
    assert why is not None and why.endswith("set allow_rule_of_two_violation = true on web")
    both = consenting.replace(
        'trust = ["untrusted_input", "egress"]',
        'trust = ["untrusted_input", "egress"]\nallow_rule_of_two_violation = true',
    )
    assert load(both).rule_of_two_violation(["fs", "web"]) is None


def test_a_violating_default_grant_is_a_validation_error(load: Load) -> None:
    with pytest.raises(ConfigError, match=r"defaults\.mcp: granting fs, web together"):
        load(SERVERS + "[defaults]\nmcp = ['fs', 'web']\n")


def test_a_trigger_grant_is_its_servers_plus_the_watched_one(load: Load) -> None:
    text = (
        SERVERS
        + "[defaults]\nmcp = ['calc']\n[[trigger]]\nserver = 'inbox'\nglob = 'mail://*'\ninstruction = 'read {uri}'\n"
    )
    text += "[[trigger]]\nserver = 'inbox'\nuri = 'mail://a'\nmcp = ['mail']\ninstruction = 'x'\n"
    config = load(text)
    assert config.trigger_grant(0) == ["calc", "inbox"]
    assert config.trigger_grant(1) == ["mail", "inbox"]
