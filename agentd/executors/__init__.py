"""Executors beyond this host (docs/design.md §16): Temporal workflows run by `agentd worker` processes.

`remote.py` holds the pure contract both ends share (names, the workflow's input, what a
heartbeat and a result carry, how events are mirrored); the `temporal_*` modules import the
`temporalio` SDK (the `temporal` extra) and are imported only when `[executor] kind = "temporal"`.
"""
