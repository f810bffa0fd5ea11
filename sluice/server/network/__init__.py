"""The network layer: connections, request framing, quotas and the per-connection state (client
address, later the authenticated principal) that handlers receive as a request context."""
