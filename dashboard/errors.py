"""The dashboard's errors.

ValueError
 ├── AccessError   a flag's value that cannot be served (`--listen`); the message names the flag
 └── BadInput      a request's query or body the dashboard cannot use (answered 400, naming the field)

The daemon's own refusals arrive as agentd's `ApiClientError` and are answered as JSON errors
(dashboard/app.py); they are not re-raised as errors of this package.
"""

from __future__ import annotations


class AccessError(ValueError):
    """A flag's value that cannot be served; the message names the flag."""


class BadInput(ValueError):
    """A request's query or body the dashboard cannot use (answered 400, naming the field)."""
