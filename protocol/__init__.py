"""Wire types and framing shared by the supervisor (`agentd`) and the subagent child.

Pure: nothing here performs I/O. `framing` turns bytes into typed messages (or typed errors),
`jsonrpc` holds the JSON-RPC envelope both channels share, `control` the control-channel methods,
`api` the daemon API's methods with their params and results, `spawn` the spawn payload, `result`
the terminal statuses, run result and exit-code mapping, `events` the closed event vocabulary,
`zygote` the messages between the supervisor and its zygote, `environment` the names of the
environment variables the supervisor sets for a child, and `contract` the output-contract check
(which alone imports a third-party validator, `jsonschema`, and only when called).
"""
