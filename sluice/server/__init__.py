"""The Sluice broker, one room per subsystem (Kafka's split; the arrows between them are the
README's *Architecture* table and ``tests/project/test_layering.py``):

* :mod:`sluice.server.config_def` -- how a setting is declared (Kafka's ``ConfigDef``), and
  :mod:`sluice.server.config` -- ``Config``, every broker setting, collected from each room's
  declarations.
* :mod:`sluice.server.storage` -- the storage engine: segments, indexes, ``Log``, ``LogManager``,
  recovery, checkpoints, producer state, the log cleaner. No network code.
* :mod:`sluice.server.group` and :mod:`sluice.server.transaction` -- the group and transaction
  coordinators and their internal topics.
* :mod:`sluice.server.replication` -- ``Partition``, the purgatory, ``ReplicaManager``, the
  replica fetcher, the replication throttles.
* :mod:`sluice.server.metadata` -- what this broker knows of the cluster (one view, standalone
  a one-broker cluster): brokers, topics, leaders, producer ids.
* :mod:`sluice.server.zk` and :mod:`sluice.server.controller` -- ZooKeeper and the controller.
* :mod:`sluice.server.security` -- TLS, SASL, SCRAM credentials, ACLs and the authorizer.
* :mod:`sluice.server.network` -- connections, framing, quotas, per-connection state.
* :mod:`sluice.server.api` -- the request handlers (Kafka's ``KafkaApis``).
* :mod:`sluice.server.metrics` -- broker metrics and the Prometheus endpoint.
* :mod:`sluice.server.server` -- ``Server``: start-up and shutdown order, wiring the rooms.

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
