"""The daemon API: the socket listener, the server and its connections, request frames, the
`Backend` contract and the daemon's backend, client limits, peer credentials, and the client.
The wire contract itself is `protocol.api`."""
