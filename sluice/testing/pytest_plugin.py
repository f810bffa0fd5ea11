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
(server.properties names) and ``mode="subprocess"`` for a separate broker process.

Importing this module is cheap (pytest imports every plugin at start-up): the broker is
imported only when the fixture is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from sluice.testing.embedded import EmbeddedBroker

__all__ = ["sluice_broker"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "sluice_broker(properties=None, mode='inprocess'): configure the sluice_broker fixture "
        "(broker config keys; 'subprocess' runs python -m sluice.server)",
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
