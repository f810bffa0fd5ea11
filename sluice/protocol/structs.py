"""Small value types every layer shares (Kafka's ``org.apache.kafka.common`` structs)."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A partition of a topic: the unit of assignment, ordering and offsets, and one log on disk.

    A NamedTuple, so it equals, hashes and unpacks like the plain ``(topic, partition)`` tuple.
    """

    topic: str
    partition: int
