"""The broker core: config, server lifecycle, connections, request routing, replica manager."""
