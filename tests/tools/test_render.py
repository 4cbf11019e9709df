"""Rendering MCP results as observation text (pure): table tests over the content kinds."""

from __future__ import annotations

import base64

import mcp_types as t
import pytest

from subagent.tools.render import (
    EMPTY_RESULT,
    MAX_OBSERVATION_CHARS,
    cap_text,
    decoded_size,
    render_resource,
    render_tool_result,
)

PNG = base64.b64encode(b"\x89PNG" + bytes(96)).decode()  # 100 bytes


def text(value: str) -> t.TextContent:
    return t.TextContent(type="text", text=value)


@pytest.mark.parametrize(
    ("result", "observation"),
    [
        pytest.param(t.CallToolResult(content=[text("a"), text("b")]), "a\nb", id="text-blocks-joined"),
        pytest.param(
            t.CallToolResult(content=[t.ImageContent(type="image", data=PNG, mime_type="image/png")]),
            "[image: image/png, 100 bytes]",
            id="image-described",
        ),
        pytest.param(
            t.CallToolResult(content=[t.AudioContent(type="audio", data="AAAA", mime_type="audio/wav")]),
            "[audio: audio/wav, 3 bytes]",
            id="audio-described",
        ),
        pytest.param(
            t.CallToolResult(
                content=[
                    t.EmbeddedResource(
                        type="resource",
                        resource=t.TextResourceContents(
                            uri="x://doc", mime_type="text/plain", text="inline body"
                        ),
                    )
                ]
            ),
            "[resource x://doc (text/plain)]\ninline body",
            id="embedded-text-resource",
        ),
        pytest.param(
            t.CallToolResult(
                content=[
                    t.EmbeddedResource(
                        type="resource",
                        resource=t.BlobResourceContents(
                            uri="x://bin", blob="AAAA", mime_type="application/zip"
                        ),
                    )
                ]
            ),
            "[resource x://bin: blob application/zip, 3 bytes]",
            id="embedded-blob-resource",
        ),
        pytest.param(
            t.CallToolResult(content=[t.ResourceLink(type="resource_link", uri="x://far", name="far")]),
            '[resource link x://far "far"]',
            id="resource-link",
        ),
        pytest.param(
            t.CallToolResult(
                content=[
                    t.ResourceLink(
                        type="resource_link",
                        uri="x://far",
                        name="far.gz",
                        description="The compressed\nreport.",
                        mime_type="application/gzip",
                        size=12,
                    )
                ]
            ),
            '[resource link x://far "far.gz" (application/gzip, 12 bytes): The compressed report.]',
            id="resource-link-with-its-facts",
        ),
        pytest.param(
            t.CallToolResult(content=[], structured_content={"result": 3, "ok": True}),
            '{"result":3,"ok":true}',
            id="structured-only-as-compact-json",
        ),
        pytest.param(
            t.CallToolResult(content=[text("3")], structured_content={"result": 3}),
            "3",
            id="structured-hidden-behind-text",
        ),
        pytest.param(t.CallToolResult(content=[]), EMPTY_RESULT, id="empty"),
    ],
)
def test_tool_results(result: t.CallToolResult, observation: str) -> None:
    assert render_tool_result(result) == observation


def test_a_huge_result_is_capped_with_a_marker() -> None:
    rendered = render_tool_result(t.CallToolResult(content=[text("x" * (MAX_OBSERVATION_CHARS + 10))]))
    assert rendered.startswith("x" * MAX_OBSERVATION_CHARS)
    assert rendered.endswith("[… truncated: 10 more characters not shown]")


def test_resources_render_text_and_describe_blobs() -> None:
    one = t.ReadResourceResult(contents=[t.TextResourceContents(uri="a://1", text="body")])
    two = t.ReadResourceResult(
        contents=[
            t.TextResourceContents(uri="a://1", text="body"),
            t.BlobResourceContents(uri="a://2", blob=PNG, mime_type="image/png"),
        ]
    )
    assert render_resource(one) == "body"
    assert render_resource(two) == "--- a://1\nbody\n--- a://2\n[blob: image/png, 100 bytes]"


@pytest.mark.parametrize(
    ("data", "size"), [("", 0), ("AA==", 1), ("AAA=", 2), ("AAAA", 3), ("AAA", 2), ("AA AA\n", 3)]
)
def test_decoded_sizes(data: str, size: int) -> None:
    assert decoded_size(data) == size


def test_short_text_is_not_capped() -> None:
    assert cap_text("abc", 3) == "abc"
