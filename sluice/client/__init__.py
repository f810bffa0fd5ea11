"""Sluice's asyncio Kafka client: Producer, Consumer, Admin, and the ``sluice`` CLI.

Built on :mod:`protocol` (the same codecs the broker uses); works with any Kafka-compatible
broker that speaks the API versions in :data:`protocol.SUPPORTED_VERSIONS`::

    from sluice.client import Producer, Consumer, TopicPartition

    async with Producer("127.0.0.1:9092") as producer:
        meta = await producer.send_and_wait("events", b"hello", key=b"user-1")

    async with Consumer("127.0.0.1:9092", auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("events", meta.partition)])
        async for record in consumer:
            ...

Consumer groups: ``Consumer(group_id=...)`` with ``subscribe([...])`` joins the group
(:mod:`sluice.client.group`), ``commit()`` / ``committed()`` store and read its offsets. Without a
``group_id`` those raise :class:`GroupsNotSupportedError`.
"""

from sluice.net.security import ClientSecurity  # how to reach a secured listener

from .accumulator import RecordMetadata
from .admin import Admin, TopicDescription
from .cluster import BrokerInfo, PartitionInfo, TopicPartition
from .consumer import EARLIEST, LATEST, Consumer, ConsumerRecord, OffsetAndTimestamp
from .errors import (
    ClientError,
    GroupsNotSupportedError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NoOffsetForPartitionError,
    ProducerClosedError,
)
from .partitioner import default_partition, murmur2
from .producer import Producer

__all__ = [
    "EARLIEST",
    "LATEST",
    "Admin",
    "BrokerInfo",
    "ClientError",
    "ClientSecurity",
    "Consumer",
    "ConsumerRecord",
    "GroupsNotSupportedError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "NoOffsetForPartitionError",
    "OffsetAndTimestamp",
    "PartitionInfo",
    "Producer",
    "ProducerClosedError",
    "RecordMetadata",
    "TopicDescription",
    "TopicPartition",
    "default_partition",
    "murmur2",
]
