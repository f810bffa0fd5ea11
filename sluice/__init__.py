"""Sluice: a Kafka-compatible message broker in Python that stores data exactly the way Kafka does.

One import package, like ``aiokafka`` or ``confluent_kafka``; its rooms are

* :mod:`sluice.protocol` -- the sans-I/O Kafka protocol: RecordBatch v2 and message schemas;
* :mod:`sluice.server` -- the broker: ``storage`` (segments, indexes, Log, LogManager),
  ``core`` (config, server lifecycle, connections, request routing, replica manager),
  ``group`` (group coordinator and the committed-offsets store);
* :mod:`sluice.client` -- the asyncio Producer / Consumer / Admin and the ``sluice`` CLI;
* :mod:`sluice.pipeline` -- PySpark data sources ``format("sluice")`` and ``"sluice-segments"``;
* :mod:`sluice.testing` -- the embedded broker and the ``sluice_broker`` pytest fixture.

The names applications use are importable from here::

    from sluice import Producer, Consumer, TopicPartition, EmbeddedBroker

They are loaded on first use, so ``import sluice`` (and every ``sluice.*`` subpackage import)
stays cheap and pulls in neither asyncio clients nor the broker.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.client import (
        Admin,
        Consumer,
        ConsumerRecord,
        KafkaError,
        Producer,
        RecordMetadata,
        TopicPartition,
    )
    from sluice.testing import EmbeddedBroker

_EXPORTS = {
    "Admin": "sluice.client",
    "Consumer": "sluice.client",
    "ConsumerRecord": "sluice.client",
    "KafkaError": "sluice.client",
    "Producer": "sluice.client",
    "RecordMetadata": "sluice.client",
    "TopicPartition": "sluice.client",
    "EmbeddedBroker": "sluice.testing",
}

__all__ = [
    "Admin",
    "Consumer",
    "ConsumerRecord",
    "EmbeddedBroker",
    "KafkaError",
    "Producer",
    "RecordMetadata",
    "TopicPartition",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sluice' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
