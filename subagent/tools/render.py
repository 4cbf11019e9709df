"""Turning MCP results into observation text for the model (pure).

Text blocks are joined; binary content is described, never inlined (`[image: image/png, 1234
bytes]`); structured content is shown as compact JSON only when there is no text. Every
observation is capped at `MAX_OBSERVATION_CHARS` with a visible marker: a tool result is
untrusted and can be arbitrarily large.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import mcp_types

from subagent.messages import ImagePart

MAX_OBSERVATION_CHARS = 100_000
# Images kept with one result (decoded bytes); the model sees a placeholder for every image anyway.
MAX_IMAGE_BYTES_PER_RESULT = 2 * 1024 * 1024
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
EMPTY_RESULT = "(the tool returned no content)"
EMPTY_RESOURCE = "(the resource is empty)"


def cap_text(text: str, limit: int = MAX_OBSERVATION_CHARS) -> str:
    """`text` cut at `limit` characters, with a marker saying how much was dropped."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[… truncated: {len(text) - limit} more characters not shown]"


def decoded_size(data: str) -> int:
    """Bytes a base64 string decodes to, computed from its length (the data is never decoded)."""
    return len("".join(data.split()).rstrip("=")) * 3 // 4


def _blob(mime_type: str | None, data: str) -> str:
    return f"{mime_type or 'application/octet-stream'}, {decoded_size(data)} bytes"


def _resource_contents(contents: mcp_types.TextResourceContents | mcp_types.BlobResourceContents) -> str:
    if isinstance(contents, mcp_types.TextResourceContents):
        return contents.text
    return f"[blob: {_blob(contents.mime_type, contents.blob)}]"


def _block(block: mcp_types.ContentBlock) -> str:
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent):
        return f"[image: {_blob(block.mime_type, block.data)}]"
    if isinstance(block, mcp_types.AudioContent):
        return f"[audio: {_blob(block.mime_type, block.data)}]"
    if isinstance(block, mcp_types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, mcp_types.TextResourceContents):
            facts = f" ({_field(resource.mime_type)})" if resource.mime_type else ""
            return f"[resource {_field(resource.uri)}{facts}]\n{resource.text}"
        return f"[resource {_field(resource.uri)}: blob {_blob(resource.mime_type, resource.blob)}]"
    return _link(block)


def _field(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else f"{line[: limit - 1]}…"


def _link(link: mcp_types.ResourceLink) -> str:
    """A resource link with what the server said about it; the model may read it with `resource_read`."""
    parts = [f"[resource link {_field(link.uri)}"]
    if link.name and link.name != link.uri:
        parts.append(f'"{_field(link.name)}"')
    facts = [f for f in (link.mime_type, None if link.size is None else f"{link.size} bytes") if f]
    if facts:
        parts.append(f"({', '.join(_field(f) for f in facts)})")
    text = " ".join(parts)
    description = _field(link.description or "", 500)
    return f"{text}: {description}]" if description else f"{text}]"


def _join(parts: Iterable[str]) -> str:
    return "\n".join(p for p in parts if p)


def render_tool_result(result: mcp_types.CallToolResult) -> str:
    """The observation text for a `tools/call` result (its `is_error` flag is carried separately)."""
    blocks: Sequence[mcp_types.ContentBlock] = result.content
    has_text = any(isinstance(b, mcp_types.TextContent) and b.text for b in blocks)
    text = _join(_block(b) for b in blocks)
    if not has_text and result.structured_content is not None:
        structured = json.dumps(result.structured_content, separators=(",", ":"), ensure_ascii=False)
        text = _join([text, structured])
    return cap_text(text or EMPTY_RESULT)


def _capped_images(candidates: Iterable[ImagePart], cap: int) -> tuple[ImagePart, ...]:
    kept: list[ImagePart] = []
    total = 0
    for image in candidates:
        if image.mime_type in IMAGE_TYPES and total + image.size_bytes <= cap:
            kept.append(image)
            total += image.size_bytes
    return tuple(kept)


def tool_result_images(
    result: mcp_types.CallToolResult, cap: int = MAX_IMAGE_BYTES_PER_RESULT
) -> tuple[ImagePart, ...]:
    """The images of a result a model may be shown: known types, in order, within `cap` bytes."""
    found: list[ImagePart] = []
    for block in result.content:
        if isinstance(block, mcp_types.ImageContent):
            found.append(ImagePart(block.mime_type, "".join(block.data.split())))
        elif isinstance(block, mcp_types.EmbeddedResource) and isinstance(
            block.resource, mcp_types.BlobResourceContents
        ):
            found.append(ImagePart(block.resource.mime_type or "", "".join(block.resource.blob.split())))
    return _capped_images(found, cap)


def resource_images(
    result: mcp_types.ReadResourceResult, cap: int = MAX_IMAGE_BYTES_PER_RESULT
) -> tuple[ImagePart, ...]:
    """The image blobs of a `resources/read` result, as for a tool result."""
    found = [
        ImagePart(c.mime_type or "", "".join(c.blob.split()))
        for c in result.contents
        if isinstance(c, mcp_types.BlobResourceContents)
    ]
    return _capped_images(found, cap)


def render_resource(result: mcp_types.ReadResourceResult) -> str:
    """The observation text for a `resources/read` result: text bodies, blobs described."""
    parts = [_resource_contents(c) for c in result.contents]
    if len(parts) > 1:
        parts = [f"--- {c.uri}\n{p}" for c, p in zip(result.contents, parts, strict=True)]
    return cap_text(_join(parts) or EMPTY_RESOURCE)
