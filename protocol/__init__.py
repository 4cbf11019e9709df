"""Wire types and framing shared by the supervisor (`agentd`) and the subagent child.

Pure: nothing here performs I/O. `framing` turns bytes into typed messages (or typed errors),
`jsonrpc` holds the JSON-RPC envelope both channels share, `control` the control-channel methods,
`api` the daemon API's methods with their params and results, `spawn` the spawn payload, `result`
the terminal statuses, run result and exit-code mapping, and `events` the closed event vocabulary.
"""
