"""Fixtures the supervision tests share: the asyncio backend and a real journal in tmp_path."""

from tests.support.journal_fixture import anyio_backend, journal

__all__ = ["anyio_backend", "journal"]
