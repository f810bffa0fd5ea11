"""pytest plugin: a real Sluice broker per test, for any project that installs Sluice.

Registered through the ``pytest11`` entry point ``sluice`` (pyproject.toml), so installing
Sluice is all it takes::

    def test_roundtrip(sluice_broker):
        producer = KafkaProducer(bootstrap_servers=sluice_broker.bootstrap_servers)
        ...

    async def test_async(sluice_broker):              # works from async tests too
        async with Producer(sluice_broker.bootstrap_servers) as producer:
            ...

    @pytest.mark.sluice_broker(properties={"num.partitions": "3"}, mode="subprocess")
    def test_configured(sluice_broker): ...

``sluice_broker`` is function-scoped: a fresh :class:`sluice.testing.embedded.EmbeddedBroker` (own
port,
own temporary data dir, removed afterwards) started in a background thread, so synchronous
clients, asyncio clients and blocking Kafka libraries can all use it. Start-up takes a few
milliseconds once the server modules are imported (see ``python -m bench embedded``).

The marker ``sluice_broker(properties=..., mode=...)`` passes broker config keys
(server.properties names) and ``mode="subprocess"`` for a separate broker process. The broker
starts with ``group.initial.rebalance.delay.ms=0`` (consumer-group tests do not pay Kafka's 3 s
first-rebalance wait) unless the marker's properties set it.

ZooKeeper, for cluster tests (:mod:`sluice.testing.zookeeper`)::

    def test_cluster_thing(sluice_zookeeper_connect):   # "127.0.0.1:PORT/sluice-tests/<uuid>"
        ...

* ``sluice_zookeeper`` -- ONE real ZooKeeper for the whole test session, started the first time
  a test asks for it (about half a second), stopped at the end;
* ``sluice_zookeeper_connect`` -- a ``zookeeper.connect`` string with a chroot of its own per
  test, so tests share the server but never each other's znodes; the chroot is deleted after
  the test;
* ``sluice_cluster`` -- a real replicated cluster
  (:class:`~sluice.testing.cluster.EmbeddedCluster`: three broker processes on the session's
  ZooKeeper, in the test's chroot), with kill -9 / pause / restart for fault tests; SASL_SSL
  between its brokers with ``@pytest.mark.sluice_cluster(security="sasl_ssl")`` or, for every
  cluster of a run, ``SLUICE_TEST_CLUSTER_SECURITY=sasl_ssl``;
* ``sluice_zookeeper_factory`` -- ``factory(**kwargs)`` starts a private
  :class:`~sluice.testing.zookeeper.ZooKeeperServer` (for tests that pause, kill or restart it),
  stopped after the test.

Without Java or ZooKeeper these fixtures skip when the run is not root (nobody could have
installed them) and fail otherwise: as root, ``make setup`` installs Debian's ``zookeeper``, so
a missing one is a broken setup, not a reason to skip in CI.

Importing this module is cheap (pytest imports every plugin at start-up): the broker is
imported only when the fixture is used.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from sluice.testing.cluster import EmbeddedCluster
    from sluice.testing.embedded import EmbeddedBroker
    from sluice.testing.zookeeper import ZooKeeperServer

__all__ = [
    "sluice_broker",
    "sluice_cluster",
    "sluice_zookeeper",
    "sluice_zookeeper_connect",
    "sluice_zookeeper_factory",
]

#: Every test's chroot lives under this znode of the shared ZooKeeper.
TEST_CHROOT_ROOT = "/sluice-tests"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "sluice_broker(properties=None, mode='inprocess'): configure the sluice_broker fixture "
        "(broker config keys; 'subprocess' runs python -m sluice.server)",
    )
    config.addinivalue_line(
        "markers",
        "sluice_cluster(size=3, properties=None, broker_properties=None, mode='subprocess', "
        "security='plaintext'|'sasl_ssl'): "
        "configure the "
        "sluice_cluster fixture",
    )


@pytest.fixture
def sluice_broker(request: pytest.FixtureRequest) -> Iterator[EmbeddedBroker]:
    """A running Sluice broker; ``sluice_broker.bootstrap_servers`` is its ``host:port``."""
    from sluice.testing.embedded import EmbeddedBroker

    marker = request.node.get_closest_marker("sluice_broker")
    kwargs: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    broker = EmbeddedBroker(
        properties=kwargs.pop("properties", None), mode=kwargs.pop("mode", "inprocess")
    )
    if kwargs:
        raise pytest.UsageError(f"unknown sluice_broker marker arguments: {sorted(kwargs)}")
    with broker:
        yield broker


def _require_zookeeper() -> None:
    from sluice.testing.zookeeper import ZooKeeperNotFoundError, find_zookeeper

    try:
        find_zookeeper()
    except ZooKeeperNotFoundError as exc:
        if os.geteuid() != 0:
            pytest.skip(f"{exc} (not root: cannot install it)")
        pytest.fail(f"{exc}; `make setup` installs it", pytrace=False)


@pytest.fixture(scope="session")
def sluice_zookeeper() -> Iterator[ZooKeeperServer]:
    """The test session's ZooKeeper (started on first use); ``.hosts`` is ``127.0.0.1:PORT``."""
    _require_zookeeper()
    from sluice.testing.zookeeper import ZooKeeperServer

    with ZooKeeperServer() as server:
        yield server


@pytest.fixture
def sluice_zookeeper_connect(sluice_zookeeper: ZooKeeperServer) -> Iterator[str]:
    """``zookeeper.connect`` with a fresh chroot (``/sluice-tests/<uuid>``), removed afterwards."""
    chroot = f"{TEST_CHROOT_ROOT}/{uuid.uuid4().hex}"
    yield sluice_zookeeper.connect_string(chroot)
    if sluice_zookeeper.paused:  # a test that paused the shared server and failed
        sluice_zookeeper.resume()
    sluice_zookeeper.delete_tree(chroot)


@pytest.fixture
def sluice_zookeeper_factory() -> Iterator[Callable[..., ZooKeeperServer]]:
    """``factory(**ZooKeeperServer kwargs)``: a started private ZooKeeper, stopped after the
    test."""
    _require_zookeeper()
    from sluice.testing.zookeeper import ZooKeeperServer

    started: list[ZooKeeperServer] = []

    def factory(**kwargs: Any) -> ZooKeeperServer:
        server = ZooKeeperServer(**kwargs)
        started.append(server)
        return server.start()

    try:
        yield factory
    finally:
        for server in reversed(started):
            server.stop()


@pytest.fixture
def sluice_cluster(
    request: pytest.FixtureRequest, sluice_zookeeper_connect: str
) -> Iterator[EmbeddedCluster]:
    """A running replicated cluster (3 broker processes, ids 1-3) on the session's ZooKeeper,
    in a chroot of its own; ``sluice_cluster.bootstrap_servers`` lists every broker. Configure
    it with ``@pytest.mark.sluice_cluster(size=..., properties=..., broker_properties={id: {...}},
    mode=..., security=...)``; faults with
    ``sluice_cluster.kill(id)`` / ``pause`` / ``resume`` / ``restart``.

    ``security="sasl_ssl"`` (or ``SLUICE_TEST_CLUSTER_SECURITY=sasl_ssl`` in the environment,
    for every cluster of a run) puts the brokers' own traffic on SASL_SSL
    (:mod:`sluice.testing.security`); clients keep the PLAINTEXT listener of
    ``bootstrap_servers`` or take ``sluice_cluster.client_config()`` (SASL_SSL then).
    Parametrized indirectly, the parameter (a dict) overrides the marker's arguments."""
    from sluice.testing.cluster import EmbeddedCluster
    from sluice.testing.security import SECURITY, SaslSsl

    marker = request.node.get_closest_marker("sluice_cluster")
    kwargs: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    kwargs.update(getattr(request, "param", None) or {})
    security = kwargs.pop("security", None) or os.environ.get(
        "SLUICE_TEST_CLUSTER_SECURITY", "plaintext"
    )
    if security not in SECURITY:
        raise pytest.UsageError(f"sluice_cluster security {security!r}: one of {SECURITY}")
    secured = SaslSsl.create() if security == "sasl_ssl" else None
    try:
        cluster = EmbeddedCluster(
            kwargs.pop("size", 3),
            zookeeper_connect=sluice_zookeeper_connect,
            properties=kwargs.pop("properties", None),
            broker_properties=kwargs.pop("broker_properties", None),
            mode=kwargs.pop("mode", "subprocess"),
            secured=secured,
        )
        if kwargs:
            raise pytest.UsageError(f"unknown sluice_cluster marker arguments: {sorted(kwargs)}")
        with cluster:
            yield cluster
    finally:
        if secured is not None:
            secured.close()
