"""Sluice for application tests: a real broker in-process or as a subprocess, no JVM, no Docker.

* :class:`EmbeddedBroker` -- start/stop a broker on a free 127.0.0.1 port with a temporary
  data directory (``with EmbeddedBroker() as broker: broker.bootstrap_servers``).
* :class:`sluice.testing.zookeeper.ZooKeeperServer` -- a real standalone ZooKeeper (Debian's
  package, one JVM) on a free 127.0.0.1 port, for cluster tests; pause/resume/restart for
  fault tests.
* :mod:`sluice.testing.pytest_plugin` -- the ``sluice_broker`` fixture and the ZooKeeper
  fixtures (``sluice_zookeeper``, ``sluice_zookeeper_connect``, ``sluice_zookeeper_factory``),
  registered by the ``pytest11`` entry point, so installing Sluice is all a project needs.
"""

from .embedded import EmbeddedBroker  # stdlib-only at import: the broker is loaded on start

__all__ = ["EmbeddedBroker"]
