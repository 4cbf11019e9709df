"""The resource watcher: one supervised process per MCP server that has triggers (docs/design.md §2, §11).

`python -m subagent.watch` boots like a subagent (`boot.py`), reads one `ctrl/watch`
(`protocol.watch`), holds that server's MCP session and reports each resource change as
`ev/resource` (notify, then read: never a body). `targets.py` decides which URIs to subscribe
(pure), `outbox.py` bounds what waits for the supervisor, `session.py` opens the session and
judges the server's support, `run.py` drives both protocol eras. docs/watchers.md tells the story.
"""
