"""The Sluice broker, one room per subsystem (Kafka's split):

* :mod:`sluice.server.storage` -- the storage engine: segments, indexes, ``Log``, ``LogManager``,
  recovery, checkpoints, producer state. Imports only :mod:`sluice.protocol` and itself.
* :mod:`sluice.server.group` -- the group coordinator and the ``__consumer_offsets`` store.
* :mod:`sluice.server.core` -- the broker core: ``Config``, ``Server`` (lifecycle), connections,
  request routing (``Handlers``), the ``ReplicaManager`` between handlers and the logs, metrics.

``Server`` and ``Config`` are importable from here; they are loaded lazily so that importing a
storage module (``sluice.server.storage.log``) does not pull in the network stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.server.core.config import Config
    from sluice.server.core.server import Server

__all__ = ["Config", "Server"]


def __getattr__(name: str) -> Any:
    if name == "Server":
        from sluice.server.core.server import Server

        return Server
    if name == "Config":
        from sluice.server.core.config import Config

        return Config
    raise AttributeError(f"module 'sluice.server' has no attribute {name!r}")
