"""The spawn payload: secrets stay masked unless the spawn encoder reveals them; bad payloads are rejected."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from pydantic import SecretStr, ValidationError

from protocol import framing
from protocol.control import DOWN_ADAPTER, UP_ADAPTER, HandleParams, Spawn, SpawnRequestParams, SupSpawn
from protocol.spawn import REVEAL_SECRETS, EndpointSpec, McpServerSpec, SpawnPayload
from tests.protocol import strategies as s

API_KEY = "sk-test-api-key-0123456789"
ENV_SECRET = "sk-test-env-secret-abcdef"
HEADER_SECRET = "Bearer sk-test-header-secret-xyz"
SECRETS = (API_KEY, ENV_SECRET, HEADER_SECRET)
MASK = "**********"

ENDPOINT: dict[str, Any] = {"kind": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m"}
BASE: dict[str, Any] = {"task_id": "t1", "run_id": "r1", "instruction": "do it", "intelligence": [ENDPOINT]}


def _payload_with_secrets() -> SpawnPayload:
    return SpawnPayload(
        task_id="t1",
        run_id="r1",
        instruction="do it",
        intelligence=[
            EndpointSpec(kind="openai", base_url="http://127.0.0.1:1/v1", api_key=SecretStr(API_KEY))
        ],
        mcp_servers=[
            McpServerSpec(
                name="files",
                transport="stdio",
                command=["mcp-files"],
                env={"TOKEN": SecretStr(ENV_SECRET)},
            ),
            McpServerSpec(
                name="web",
                transport="http",
                url="http://127.0.0.1:2/mcp",
                headers={"Authorization": SecretStr(HEADER_SECRET)},
            ),
        ],
    )


def _secret_values(payload: SpawnPayload) -> list[str]:
    found = [e.api_key.get_secret_value() for e in payload.intelligence if e.api_key is not None]
    for server in payload.mcp_servers:
        found += [v.get_secret_value() for v in (*server.env.values(), *server.headers.values())]
    return found


# ---- secrets ------------------------------------------------------------------------------------


def test_spawn_encoded_revealing_secrets_carries_every_secret_in_clear() -> None:
    message = Spawn(params=_payload_with_secrets())
    line = framing.encode(message, context=REVEAL_SECRETS)
    for secret in SECRETS:
        assert secret in line.decode()
    decoded = framing.decode(line[:-1], DOWN_ADAPTER)
    assert decoded == message
    assert isinstance(decoded, Spawn)
    assert _secret_values(decoded.params) == [API_KEY, ENV_SECRET, HEADER_SECRET]


def test_spawn_encoded_without_the_reveal_context_masks_every_secret() -> None:
    line = framing.encode(Spawn(params=_payload_with_secrets()))
    for secret in SECRETS:
        assert secret not in line.decode()
    params = json.loads(line)["params"]
    assert params["intelligence"][0]["api_key"] == MASK
    assert params["mcp_servers"][0]["env"] == {"TOKEN": MASK}
    assert params["mcp_servers"][1]["headers"] == {"Authorization": MASK}
    decoded = framing.decode(line[:-1], DOWN_ADAPTER)
    assert isinstance(decoded, Spawn)
    assert _secret_values(decoded.params) == [MASK, MASK, MASK]


@pytest.mark.parametrize(
    "context",
    [
        pytest.param(None, id="no-context"),
        pytest.param({}, id="empty-context"),
        pytest.param({"reveal_secrets": "yes"}, id="truthy-but-not-true"),
        pytest.param({"reveal_secrets": 1}, id="one-is-not-true"),
    ],
)
def test_only_reveal_secrets_true_unmasks_secrets(context: dict[str, object] | None) -> None:
    line = framing.encode(Spawn(params=_payload_with_secrets()), context=context)
    for secret in SECRETS:
        assert secret not in line.decode()


def test_masked_none_api_key_stays_null() -> None:
    payload = SpawnPayload.model_validate(BASE)
    assert json.loads(payload.model_dump_json())["intelligence"][0]["api_key"] is None


@pytest.mark.parametrize(
    "render",
    [
        pytest.param(repr, id="repr"),
        pytest.param(str, id="str"),
        pytest.param(lambda p: repr(Spawn(params=p)), id="repr-of-spawn-message"),
        pytest.param(lambda p: str(p.intelligence), id="str-of-endpoints"),
        pytest.param(lambda p: repr(p.mcp_servers), id="repr-of-servers"),
        pytest.param(lambda p: p.model_dump_json(), id="model-dump-json"),
        pytest.param(lambda p: str(p.model_dump()), id="str-of-model-dump"),
    ],
)
def test_rendering_a_payload_never_shows_a_secret(render: Any) -> None:
    text = render(_payload_with_secrets())
    for secret in SECRETS:
        assert secret not in text


@settings(max_examples=25, deadline=None)
@given(payload=s.spawn_payloads)
def test_no_generated_secret_leaks_through_repr_str_or_a_masked_frame(payload: SpawnPayload) -> None:
    masked = framing.encode(Spawn(params=payload)).decode()
    revealed = framing.encode(Spawn(params=payload), context=REVEAL_SECRETS).decode()
    for secret in _secret_values(payload):
        assert secret not in repr(payload)
        assert secret not in str(payload)
        assert secret not in masked
        assert secret in revealed


# ---- validation ---------------------------------------------------------------------------------


def _with(**changes: Any) -> dict[str, Any]:
    return {**BASE, **changes}


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param({k: v for k, v in BASE.items() if k != "intelligence"}, id="missing-intelligence"),
        pytest.param(_with(intelligence=[]), id="empty-intelligence"),
        pytest.param(_with(intelligence=[{"kind": "scripted"}]), id="scripted-endpoint-without-script-path"),
        pytest.param(_with(intelligence=[{"kind": "openai"}]), id="openai-endpoint-without-base-url"),
        pytest.param(_with(intelligence=[{"kind": "bedrock", "base_url": "x"}]), id="unknown-endpoint-kind"),
        pytest.param(
            _with(mcp_servers=[{"name": "web", "transport": "http"}]), id="http-mcp-server-without-url"
        ),
        pytest.param(
            _with(mcp_servers=[{"name": "fs", "transport": "stdio"}]), id="stdio-mcp-server-without-command"
        ),
        pytest.param(
            _with(
                mcp_servers=[
                    {"name": "fs", "transport": "stdio", "command": ["a"]},
                    {"name": "fs", "transport": "http", "url": "http://127.0.0.1/mcp"},
                ]
            ),
            id="duplicate-server-names",
        ),
        pytest.param(
            _with(mcp_servers=[{"name": "-x", "transport": "stdio", "command": ["a"]}]), id="bad-name"
        ),
        pytest.param(_with(handle="1"), id="handle-not-rooted-at-0"),
        pytest.param(_with(handle="0..1"), id="handle-with-empty-segment"),
        pytest.param(_with(handle="0.a"), id="handle-with-letter"),
        pytest.param(_with(handle="0.12345"), id="handle-segment-too-long"),
        pytest.param(_with(handle="0\n"), id="handle-with-trailing-newline"),
        pytest.param(_with(handle=""), id="empty-handle"),
        pytest.param(_with(depth=17), id="depth-over-16"),
        pytest.param(_with(instruction=""), id="empty-instruction"),
        pytest.param(_with(task_id=""), id="empty-task-id"),
        pytest.param(_with(surprise=True), id="extra-field"),
    ],
)
def test_an_invalid_spawn_payload_is_rejected(payload: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        SpawnPayload.model_validate(payload)


@pytest.mark.parametrize("handle", ["0", "0.1", "0.1.22", "0.9999.0"])
def test_a_well_formed_handle_is_accepted(handle: str) -> None:
    assert SpawnPayload.model_validate(_with(handle=handle)).handle == handle
    assert HandleParams(handle=handle).handle == handle


@pytest.mark.parametrize("handle", ["1", "0..1", "0.a", "0.", ".0", "0.12345", "00"])
def test_a_sup_request_on_a_malformed_handle_is_a_shape_error(handle: str) -> None:
    frame = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "sup/wait", "params": {"handle": handle}})
    decoded = framing.decode(frame.encode(), UP_ADAPTER)
    assert isinstance(decoded, framing.FrameError)
    assert decoded.kind == "shape"


FORGED = {"handle": "0.1", "depth": 0, "task_id": "forged-task", "run_id": "forged-run"}


def test_spawn_request_params_ignore_forged_identity_fields() -> None:
    params = SpawnRequestParams.model_validate({"instruction": "sub task", **FORGED})
    dumped = params.model_dump()
    for field in FORGED:
        assert field not in dumped
        assert not hasattr(params, field)


def test_a_sup_spawn_frame_with_forged_identity_decodes_and_drops_the_forgery() -> None:
    frame = {"jsonrpc": "2.0", "id": 3, "method": "sup/spawn", "params": {"instruction": "x", **FORGED}}
    decoded = framing.decode(json.dumps(frame).encode(), UP_ADAPTER)
    assert isinstance(decoded, SupSpawn)
    reencoded = framing.encode(decoded).decode()
    assert "forged" not in reencoded
    assert '"depth"' not in reencoded
