"""The Sluice broker, one room per subsystem (Kafka's split):

* :mod:`sluice.server.storage` -- the storage engine: segments, indexes, ``Log``, ``LogManager``,
  recovery, checkpoints, producer state. Imports only :mod:`sluice.protocol` and itself.
* :mod:`sluice.server.group` -- the group coordinator and the ``__consumer_offsets`` store.
* :mod:`sluice.server.network` -- connections, framing, quotas, per-connection state.
* :mod:`sluice.server.api` -- the request handlers (Kafka's ``KafkaApis``).
* :mod:`sluice.server.replication` -- ``Partition``, the purgatory, ``ReplicaManager``, the
  replica fetcher.
* :mod:`sluice.server.metadata` -- cluster metadata: brokers, topics, leaders, producer ids.
* :mod:`sluice.server.zk` and :mod:`sluice.server.controller` -- ZooKeeper and the controller.
* :mod:`sluice.server.metrics` -- broker metrics and the Prometheus endpoint.
* :mod:`sluice.server.config` (``Config``, every broker setting) and :mod:`sluice.server.server`
  (``Server``: start-up and shutdown order).

``Server`` and ``Config`` are importable from here; they are loaded lazily so that importing a
storage module (``sluice.server.storage.log``) does not pull in the network stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.server.config import Config
    from sluice.server.server import Server

__all__ = ["Config", "Server"]


def __getattr__(name: str) -> Any:
    if name == "Server":
        from sluice.server.server import Server

        return Server
    if name == "Config":
        from sluice.server.config import Config

        return Config
    raise AttributeError(f"module 'sluice.server' has no attribute {name!r}")
