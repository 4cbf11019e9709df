"""Accumulating an OpenAI chat-completions event stream into one `ModelReply` (pure).

Content and refusal deltas are concatenated; tool-call deltas are merged by `index` (the id and
name arrive once, the arguments in fragments); usage comes from the final chunk when the request
asked for `stream_options.include_usage`. The stream is complete at `[DONE]`, or at EOF after a
`finish_reason`; anything else is a broken stream the adapter retries.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import JsonValue

from subagent.intel.classify import says_tool_call_unparsed
from subagent.intel.openai_wire import parse_usage, refusal_of
from subagent.intel.replies import decode_arguments
from subagent.intel.reply_body import NotJson, decode_json
from subagent.intel.sse import SseEvent
from subagent.messages import ModelReply, TokenUsage

DONE = "[DONE]"


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class ChatStream:
    """Feed each SSE event to `on_event`; it returns True once the stream needs no more reading."""

    def __init__(self, new_id: Callable[[], str]) -> None:
        self._new_id = new_id
        self._text: list[str] = []
        self._refusal: list[str] | None = None
        self._calls: dict[int, _PartialCall] = {}
        self._usage: TokenUsage | None = None
        self._model = ""
        self.finish_reason: str | None = None
        self.done = False
        # Set when a chunk could not be understood; the reply becomes `malformed`.
        self.problem: str | None = None
        # Set when the server sent an error object mid-stream; the adapter retries.
        self.server_error: str | None = None
        # Set when the error chunk says the server could not parse its model's tool call.
        self.unparsed_tool_call = False

    def on_event(self, event: SseEvent) -> bool:
        if event.data.strip() == DONE:
            self.done = True
            return True
        chunk = decode_json(event.data)
        if isinstance(chunk, NotJson):
            self.problem = "a stream chunk is not JSON"
            return True
        if not isinstance(chunk, dict):
            self.problem = "a stream chunk is not a JSON object"
            return True
        if chunk.get("error") is not None:
            error = chunk["error"]
            code = error.get("code") or error.get("type") if isinstance(error, dict) else None
            self.server_error = (
                f"the stream reported an error ({code})" if code else "the stream reported an error"
            )
            self.unparsed_tool_call = says_tool_call_unparsed(json.dumps(error))
            return True
        if isinstance(chunk.get("model"), str):
            self._model = str(chunk["model"])
        self._usage = parse_usage(chunk.get("usage")) or self._usage
        choices = chunk.get("choices")
        if choices is None or choices == []:
            return False
        if not isinstance(choices, list) or not isinstance(choices[0], dict):
            self.problem = "a stream chunk has malformed choices"
            return True
        choice = choices[0]
        finish = choice.get("finish_reason")
        if isinstance(finish, str):
            self.finish_reason = finish
        delta = choice.get("delta")
        if delta is None:
            return False
        if not isinstance(delta, dict):
            self.problem = "a stream chunk has a malformed delta"
            return True
        self._on_delta(delta)
        return self.problem is not None

    def _on_delta(self, delta: dict[str, JsonValue]) -> None:
        content = delta.get("content")
        if isinstance(content, str):
            self._text.append(content)
        refusal = delta.get("refusal")
        if isinstance(refusal, str):
            self._refusal = [*(self._refusal or []), refusal]
        calls = delta.get("tool_calls")
        if calls is None:
            return
        if not isinstance(calls, list):
            self.problem = "a stream chunk has malformed tool_calls"
            return
        for item in calls:
            if not isinstance(item, dict):
                self.problem = "a stream chunk has a malformed tool call"
                return
            self._on_call_delta(item)

    def _on_call_delta(self, item: dict[str, JsonValue]) -> None:
        index = item.get("index")
        call_id = item.get("id")
        if not isinstance(index, int) or isinstance(index, bool):
            # Servers that omit `index`: a new id starts a new call, anything else continues the last.
            known = {c.id for c in self._calls.values()}
            starts_new = isinstance(call_id, str) and call_id not in known
            index = len(self._calls) if starts_new or not self._calls else max(self._calls)
        partial = self._calls.setdefault(index, _PartialCall())
        if isinstance(call_id, str) and call_id and not partial.id:
            partial.id = call_id
        function = item.get("function")
        if not isinstance(function, dict):
            return
        name = function.get("name")
        if isinstance(name, str) and name and not partial.name:
            partial.name = name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            partial.arguments.append(arguments)
        elif isinstance(arguments, dict):
            partial.arguments.append(json.dumps(arguments))

    @property
    def complete(self) -> bool:
        """Whether the stream ended properly: `[DONE]`, or at least a `finish_reason`."""
        return self.done or self.finish_reason is not None

    def reply(self) -> ModelReply:
        """The accumulated reply (malformed if a chunk could not be understood)."""
        if self.problem is not None:
            return ModelReply(malformed=self.problem)
        calls = []
        for index in sorted(self._calls):
            partial = self._calls[index]
            if not partial.name:
                return ModelReply(malformed="a streamed tool call has no function name")
            calls.append(
                decode_arguments(partial.id or self._new_id(), partial.name, "".join(partial.arguments))
            )
        refusal = "".join(self._refusal) if self._refusal is not None else None
        return ModelReply(
            text="".join(self._text),
            tool_calls=tuple(calls),
            refusal=refusal_of(refusal, self.finish_reason),
            usage=self._usage,
            finish_reason=self.finish_reason,
            model=self._model,
        )
