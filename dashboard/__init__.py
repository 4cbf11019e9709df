"""`agentd web`: a local dashboard of the daemon, in a browser (docs/web.md).

A program of its own, run by the `agentd` CLI as `python -m dashboard`: an HTTP server on loopback
that talks to the daemon's socket API as the user who started it, through agentd's API client, so
a page shows exactly what `agentd list` shows that user. The pages are plain files shipped in the
package (`dashboard/static/`): no build step, nothing fetched from elsewhere. agentd's own code
never imports it (nor starlette or uvicorn): docs/architecture.md.
"""
