"""The API's own event loop, in a thread of its own, and the bridge between it and the daemon's.

The daemon's loop handles every child's frames; under load a request waiting behind them would
wait for the whole backlog. So the socket API runs on a second loop in a second thread
(`serve_on_own_loop`) and answers reads there; anything that changes state or needs the
supervisor is handed to the daemon's loop through `LoopBridge.on_main`, and a stream handed there
writes its frames back through `LoopBridge.on_api` (docs/decisions.md, "API reads on a loop of
their own"). Stopping is bounded: the API loop is cancelled, then its thread joined.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeVar, TypeVarTuple

import anyio
import anyio.from_thread
import structlog
from anyio.from_thread import BlockingPortal

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

THREAD_NAME = "agentd-api"
# Bounds on the API loop's start and on its stop: both only start or cancel tasks.
START_S = 10.0
STOP_S = 10.0


@dataclass(frozen=True, slots=True)
class LoopBridge:
    """Calls from each loop into the other; cancelling the caller cancels the call."""

    main: BlockingPortal
    api: BlockingPortal
    api_thread: int  # the API loop's thread id

    async def on_main(self, fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
        """Run `fn(*args)` on the daemon's loop (called from the API's)."""
        return await self.main.call_async(fn, *args)

    async def on_api(self, fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
        """Run `fn(*args)` on the API's loop (called from the daemon's)."""
        return await self.api.call_async(fn, *args)

    async def relay(self, main_event: anyio.Event, api_event: anyio.Event) -> None:
        """Set `api_event` (the API loop's) once `main_event` (the daemon's loop's) is set."""
        await self.on_main(main_event.wait)
        api_event.set()

    @property
    def on_api_loop(self) -> bool:
        """Whether the calling code runs on the API's loop."""
        return threading.get_ident() == self.api_thread


async def serve_on_own_loop(
    serve: Callable[[LoopBridge], Awaitable[None]], *, name: str = THREAD_NAME
) -> None:
    """Run `serve(bridge)` on a new event loop in a new thread until it returns or this call is
    cancelled; cancelled, the loop is cancelled and its thread joined (within `STOP_S`).

    An exception `serve` raises is raised here.
    """
    async with BlockingPortal() as main:
        runner = _LoopThread(serve, main, name)
        runner.thread.start()
        try:
            await anyio.to_thread.run_sync(runner.started.result, START_S)
            await anyio.to_thread.run_sync(runner.thread.join, abandon_on_cancel=True)
        finally:
            with anyio.CancelScope(shield=True):
                await runner.stop()
    if runner.error is not None:
        raise runner.error


class _LoopThread:
    """The API loop's thread: its portal once started, and how it ended."""

    def __init__(
        self, serve: Callable[[LoopBridge], Awaitable[None]], main: BlockingPortal, name: str
    ) -> None:
        self._serve = serve
        self._main = main
        self.started: Future[BlockingPortal] = Future()
        self.error: BaseException | None = None
        self._stop: anyio.Event | None = None
        # A daemon thread: one that failed to stop within its bound must not hold the process's exit.
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        try:
            anyio.run(self._loop)
        except BaseException as exc:  # noqa: BLE001 - handed to the daemon's loop, which raises it
            self.error = self.error or exc
            if not self.started.done():
                self.started.set_exception(exc)

    async def _loop(self) -> None:
        async with BlockingPortal() as api:
            bridge = LoopBridge(self._main, api, threading.get_ident())
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._serve_then_stop, bridge, api)
                self.started.set_result(api)
                await api.sleep_until_stopped()
                tg.cancel_scope.cancel()

    async def _serve_then_stop(self, bridge: LoopBridge, api: BlockingPortal) -> None:
        try:
            await self._serve(bridge)
        except Exception as exc:  # noqa: BLE001 - handed over whole: `serve_on_own_loop` raises it
            self.error = exc
        finally:
            await api.stop()

    async def stop(self) -> None:
        """Cancel the loop (if it still runs) and join its thread, within `STOP_S`."""
        if self.started.done() and self.started.exception() is None:
            api = self.started.result()
            with anyio.move_on_after(STOP_S):
                try:
                    await api.call_async(api.stop)
                except RuntimeError:
                    pass  # it stopped already
        await anyio.to_thread.run_sync(self.thread.join, STOP_S)
        if self.thread.is_alive():
            structlog.get_logger("agentd.api").error(
                "api.error", comp="supervisor", err=f"the API loop did not stop within {STOP_S:g} s"
            )
