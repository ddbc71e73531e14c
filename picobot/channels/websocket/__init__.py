"""WebSocket chat channel: the server, one connection, the wire protocol."""
