"""`route = "continue"` at the trigger side (agentd/triggers/warm.py): a session that cannot be
built marks its trigger failed (not retried per delivery) until an operator's restart; a reload
that removes the trigger forgets it. The session itself, with real processes, is exercised by
tests/daemon/test_triggers_real.py and tests/warm/."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
import structlog

from agentd.journal.records import TaskRecord
from agentd.journal.store import Journal
from agentd.supervision.ports import RunPorts
from agentd.supervision.task_payloads import PayloadError
from agentd.triggers.manager import TriggerConfig
from agentd.triggers.plan import Delivery, GovernorPolicy
from agentd.triggers.warm import WarmRoute
from protocol.spawn import SpawnPayload
from tests.support.trigger_config import trigger

pytestmark = [pytest.mark.anyio]


class _Registry:
    def adopt(self, task_id: str, cancel: object, pids: object) -> None:
        raise AssertionError("no session may start")

    def release(self, task_id: str) -> None:
        raise AssertionError("no session may start")


@asynccontextmanager
async def _route(journal: Journal, built: list[str]) -> AsyncIterator[WarmRoute]:
    def payload(config: TriggerConfig, record: TaskRecord) -> SpawnPayload:
        built.append(config.name)
        raise PayloadError(f"server {config.server!r} is not configured")

    def ports() -> RunPorts:
        raise AssertionError("no session may start")

    route = WarmRoute(
        journal,
        ports=ports,
        payload=payload,
        registry=_Registry(),
        owner_uid=0,
        governor=GovernorPolicy,
        log=structlog.get_logger(),
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(route.serve)
        await anyio.wait_all_tasks_blocked()
        try:
            yield route
        finally:
            route.stop()
            tg.cancel_scope.cancel()


async def test_a_session_that_cannot_be_built_fails_its_trigger_until_restarted(journal: Journal) -> None:
    built: list[str] = []
    feed = trigger("feed", uri="feed://x", route="continue")
    async with _route(journal, built) as route:
        route.configure([feed])
        await route.deliver(feed, Delivery("feed://x", None, synthetic=True))
        assert built == ["feed"]
        assert route.failed("feed") == "the session cannot start: server 'files' is not configured"
        await route.deliver(feed, Delivery("feed://x", "e2"))  # not retried per delivery
        assert built == ["feed"] and route.pids() == set()
        route.reset("feed")  # `agentd triggers restart feed`
        assert route.failed("feed") is None
        await route.deliver(feed, Delivery("feed://x", "e3"))
        assert built == ["feed", "feed"] and route.failed("feed") is not None
        route.configure([])  # a reload removed it
        assert route.failed("feed") is None
