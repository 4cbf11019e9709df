"""Fixtures of the trigger tests: the asyncio backend and a real journal per test."""

from tests.support.journal_fixture import anyio_backend, journal

__all__ = ["anyio_backend", "journal"]
