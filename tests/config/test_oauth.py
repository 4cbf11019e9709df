"""`[mcp.NAME] oauth_*`: client credentials for a remote server, read at call time, never shown."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from agentd.cli.config_commands import cmd_show
from tests.config.conftest import Load, Problems, has_problem

SECRET = "oauth-SECRET-value-123"
SERVER = "[mcp.t]\nurl = 'https://mcp.example/mcp'\noauth_client_id = 'agentd'\n"
LOGIN = "[mcp.t]\nurl = 'https://mcp.example/mcp'\noauth_flow = 'authorization_code'\n"


def test_an_authorization_code_server_is_granted_its_token_file_not_client_credentials(load: Load) -> None:
    config = load(LOGIN + "oauth_scope = 'notes:read'\noauth_redirect_port = 8976\n")
    spec = config.mcp_spec("t")
    assert spec.oauth is None
    assert spec.oauth_login is not None
    assert spec.oauth_login.token_file == str(config.state_dir / "mcp-oauth" / "t.json")
    assert (spec.oauth_login.client_id, spec.oauth_login.scope, spec.oauth_login.redirect_port) == (
        None,
        "notes:read",
        8976,
    )
    with_client = load(LOGIN + "oauth_client_id = 'pre-registered'\n").mcp_spec("t")
    assert with_client.oauth is None
    assert with_client.oauth_login is not None and with_client.oauth_login.client_id == "pre-registered"


def test_a_client_secret_from_the_environment_becomes_the_spec(load: Load) -> None:
    text = SERVER + "oauth_client_secret_env = 'T_SECRET'\noauth_issuer = 'https://auth.example'\n"
    spec = load(text, env={"T_SECRET": SECRET}).mcp_spec("t")
    assert spec.oauth is not None
    assert (spec.oauth.method, spec.oauth.client_id, spec.oauth.issuer) == (
        "client_secret_basic",
        "agentd",
        "https://auth.example",
    )
    assert spec.oauth.client_secret is not None and spec.oauth.client_secret.get_secret_value() == SECRET
    assert SECRET not in spec.model_dump_json()


def test_a_private_key_file_means_private_key_jwt(load: Load, tmp_path: Path) -> None:
    key = tmp_path / "client.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----\n")
    key.chmod(0o600)
    spec = load(SERVER + "oauth_private_key_file = 'client.pem'\noauth_jwt_algorithm = 'ES256'\n").mcp_spec(
        "t"
    )
    assert spec.oauth is not None
    assert (spec.oauth.method, spec.oauth.jwt_algorithm) == ("private_key_jwt", "ES256")
    assert spec.oauth.private_key is not None
    assert spec.oauth.private_key.get_secret_value().startswith("-----BEGIN PRIVATE KEY-----")


def test_config_show_never_prints_the_secret(load: Load) -> None:
    config = load(SERVER + "oauth_client_secret_env = 'T_SECRET'\n", env={"T_SECRET": SECRET})
    out = io.StringIO()
    assert cmd_show(str(config.path), out, io.StringIO()) == 0
    assert SECRET not in out.getvalue()
    assert "T_SECRET" in out.getvalue()


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        pytest.param(SERVER, "mcp.t.oauth_client_secret_env", "a client secret is required", id="no-secret"),
        pytest.param(
            "[mcp.t]\nurl = 'https://h/mcp'\noauth_client_secret_env = 'X'\n",
            "mcp.t.oauth_client_secret_env",
            "needs oauth_client_id",
            id="no-client-id",
        ),
        pytest.param(
            SERVER + "oauth_method = 'private_key_jwt'\noauth_client_secret_env = 'X'\n",
            "mcp.t.oauth_private_key_file",
            "required for oauth_method private_key_jwt",
            id="jwt-without-key",
        ),
        pytest.param(
            "[mcp.t]\ncommand = 'srv'\noauth_client_id = 'a'\noauth_client_secret_env = 'X'\n",
            "mcp.t.oauth_client_id",
            "applies to http and sse servers only",
            id="on-stdio",
        ),
        pytest.param(
            LOGIN + "oauth_client_secret_env = 'X'\n",
            "mcp.t.oauth_client_secret_env",
            "an authorization_code login is a public client",
            id="login-with-a-secret",
        ),
        pytest.param(
            SERVER + "oauth_client_secret_env = 'X'\noauth_redirect_port = 8080\n",
            "mcp.t.oauth_redirect_port",
            'applies to oauth_flow = "authorization_code" only',
            id="redirect-port-without-login",
        ),
        pytest.param(
            "[mcp.t]\ncommand = 'srv'\noauth_flow = 'authorization_code'\n",
            "mcp.t.oauth_flow",
            "applies to http and sse servers only",
            id="login-on-stdio",
        ),
        pytest.param(
            SERVER + "oauth_client_secret_env = 'X'\noauth_issuer = 'auth.example'\n",
            "mcp.t.oauth_issuer",
            "http(s) issuer URL",
            id="issuer-not-a-url",
        ),
    ],
)
def test_oauth_mistakes_are_reported_under_their_key(
    problems: Problems, text: str, key: str, fragment: str
) -> None:
    assert has_problem(problems(text, env={"X": "x"}), key, fragment)
