"""`subscriptions/listen` (the 2026-07-28 era): one request is one stream of the changes its
filter names, with the same news a 2025-11-25 subscription gets.

The stream acknowledges what it will deliver first: the resource URIs that are the caller's tasks
(or `agentd://approvals`) and, when asked, `resources/list_changed`; a URI that is not one of ours
or not the caller's is left out of the acknowledgment rather than refused, as the protocol has
it. Its watchers run in the request's own task group, so they end when the client closes the
stream or goes away.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import (
    SUBSCRIPTION_ID_META_KEY,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    event_to_notification,
)

from agentd.api.async_port import DaemonPort
from mcp_serve.subscriptions import Changes, Pulse
from mcp_serve.task_watch import TaskWatch


class ListenSink:
    """One listen stream: each frame stamped with its subscription id, none before the ack."""

    def __init__(self, session: ServerSession, subscription_id: types.RequestId) -> None:
        self._session = session
        self._id = subscription_id
        self.meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
        self.acknowledged = anyio.Event()

    async def acknowledge(self, honored: types.SubscriptionFilter) -> None:
        params = types.SubscriptionsAcknowledgedNotificationParams(notifications=honored, _meta=self.meta)
        await self._session.send_notification(
            types.SubscriptionsAcknowledgedNotification(params=params), related_request_id=self._id
        )
        self.acknowledged.set()

    async def updated(self, uri: str) -> None:
        await self._send(ResourceUpdated(uri=uri))

    async def list_changed(self) -> None:
        await self._send(ResourcesListChanged())

    async def _send(self, event: ServerEvent) -> None:
        await self.acknowledged.wait()
        notification = event_to_notification(event, self.meta)
        await self._session.send_notification(notification, related_request_id=self._id)


async def serve_listen(
    ctx: ServerRequestContext[Any, Any],
    params: types.SubscriptionsListenRequestParams,
    port: DaemonPort,
    pulse: Pulse,
    watch: TaskWatch,
) -> types.SubscriptionsListenResult:
    """Serve one listen stream until the client ends it."""
    if ctx.request_id is None:
        raise MCPError(types.INVALID_REQUEST, "subscriptions/listen needs a request id")
    wanted = params.notifications
    sink = ListenSink(ctx.session, ctx.request_id)
    async with anyio.create_task_group() as group:
        changes = Changes(port, group, pulse, watch)
        changes.attach(sink, list_changes=bool(wanted.resources_list_changed))
        accepted = []
        for uri in wanted.resource_subscriptions or ():
            try:
                await changes.subscribe(uri)
            except MCPError:
                continue  # not ours, or not the caller's: not honored
            accepted.append(uri)
        honored = types.SubscriptionFilter(
            resources_list_changed=True if wanted.resources_list_changed else None,
            resource_subscriptions=accepted or None,
        )
        await sink.acknowledge(honored)
        await anyio.sleep_forever()  # until the client closes the stream (a cancellation)
    return types.SubscriptionsListenResult(_meta=sink.meta)
