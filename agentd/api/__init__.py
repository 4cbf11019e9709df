"""The daemon API: the socket listener, connections, the server, its backend, peer credentials,
and the client."""
