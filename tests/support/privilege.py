"""Tests that need root, marked in one place: for a contributor who is not root they skip, naming
what they need, instead of failing (docs/testing.md, "Running as a user who is not root")."""

from __future__ import annotations

import os

import pytest


def needs_root(why: str) -> pytest.MarkDecorator:
    """Skip unless this process is root; `why` says what root is needed for."""
    return pytest.mark.skipif(os.geteuid() != 0, reason=f"needs root: {why}")


AS_ANOTHER_USER = needs_root("forks a client that drops to the `nobody` uid (setuid) and chgrps the socket")
