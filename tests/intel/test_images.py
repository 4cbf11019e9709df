"""Images in model requests: which ones go (newest first, within the budget), stable twins for the
rest, and where each wire format puts them (pure)."""

from __future__ import annotations

import json

from subagent.intel.anthropic import encode_blocks
from subagent.intel.encode_once import EncodeOnceCache
from subagent.intel.images import ImageSelection
from subagent.intel.openai_wire import encode_image_turn, encode_message, with_image_turns
from subagent.messages import AssistantMessage, ImagePart, Message, ToolCall, ToolResultMessage, UserMessage

PNG = ImagePart("image/png", "iVBORw0KGgo=" * 100)  # 1200 base64 chars = 900 bytes


def result(call_id: str, *images: ImagePart) -> ToolResultMessage:
    return ToolResultMessage(call_id, "shot", "[image: image/png, 900 bytes]", images=images)


def test_an_endpoint_without_images_gets_text_only_twins() -> None:
    old = result("a", PNG)
    selected = ImageSelection(enabled=False).select([UserMessage("go"), old])
    assert selected[1] == result("a")


def test_the_newest_images_go_first_and_older_ones_become_stable_twins() -> None:
    older, newer = result("a", PNG), result("b", PNG)
    selection = ImageSelection(enabled=True, budget_bytes=1000)
    first = selection.select([older, newer])
    assert first[1] is newer
    assert first[0] is not older and first[0].images == ()  # type: ignore[union-attr]
    # The same twin on the next request, so its encoding is cached.
    second = selection.select([older, newer, UserMessage("more")])
    assert second[0] is first[0]


def test_openai_images_follow_the_whole_run_of_tool_messages() -> None:
    call = AssistantMessage("", (ToolCall("a", "shot", {}), ToolCall("b", "echo", {})))
    shot, echo = result("a", PNG), ToolResultMessage("b", "echo", "hi")
    messages: list[Message] = [UserMessage("go"), call, shot, echo, AssistantMessage("done")]
    encoded = [encode_message(m) for m in messages]
    out = [json.loads(b) for b in with_image_turns(messages, encoded, EncodeOnceCache(encode_image_turn))]
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "tool", "user", "assistant"]
    image = out[4]["content"][1]
    assert image == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG.data}"}}


def test_anthropic_images_sit_inside_the_tool_result() -> None:
    kind, data = encode_blocks(result("a", PNG))
    block = json.loads(data)
    assert kind == "tool_result"
    assert block["content"] == [
        {"type": "text", "text": "[image: image/png, 900 bytes]"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG.data}},
    ]
