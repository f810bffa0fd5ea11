"""Sluice broker: storage (log, segments, indexes) and the network server.

``Server`` and ``Config`` are importable from here; they are loaded lazily so that importing a
storage module (``server.log``) does not pull in the network stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from server.config import Config
    from server.server import Server

from .embedded import EmbeddedBroker  # stdlib-only at import: the network stack stays lazy

__all__ = ["Config", "EmbeddedBroker", "Server"]


def __getattr__(name: str) -> Any:
    if name == "Server":
        from server.server import Server

        return Server
    if name == "Config":
        from server.config import Config

        return Config
    raise AttributeError(f"module 'server' has no attribute {name!r}")
