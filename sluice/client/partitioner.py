"""Key-hash partitioning compatible with Kafka's default partitioner.

Kafka's Java producer (``BuiltInPartitioner.partitionForKey``), librdkafka's ``murmur2`` /
``murmur2_random`` partitioners and kafka-python's ``DefaultPartitioner`` all put a keyed record
on partition ``toPositive(murmur2(key)) % numPartitions``, where ``murmur2`` is Kafka's variant
of MurmurHash2 (seed 0x9747b28c, little-endian 4-byte words) and ``toPositive`` clears the sign
bit (``& 0x7fffffff``, not ``abs``: ``abs(INT32_MIN)`` would stay negative). Matching this
exactly is what lets a Python producer and a Java or librdkafka producer agree on where a key
lives -- the property per-key ordering depends on. ``tests/client/test_client_partitioner.py``
checks it against confluent-kafka (``partitioner=murmur2_random``) on a real broker.

Records without a key are not hashed: the producer spreads them with a *sticky* choice (KIP-480):
one random partition per topic until the batch it fills is sent, then another. That keeps
batches large (one partition collects records for a linger period) while spreading load.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

__all__ = ["Partitioner", "StickyPartitioner", "default_partition", "murmur2"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF
_WORDS = struct.Struct("<I")

#: ``partitioner(key_bytes, num_partitions) -> partition`` for keyed records.
Partitioner = Callable[[bytes, int], int]


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit hash of ``data``.

    Transcribed from the Java (``h`` and ``k`` are Java ints, hence the 32-bit masks; Java's
    ``>>>`` is a logical shift, which on a masked non-negative int is Python's ``>>``).
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    end = length & ~3
    for (k,) in _WORDS.iter_unpack(memoryview(data)[:end]):
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = length & 3
    if tail:
        # Java's switch falls through: 3 -> 2 -> 1, then the multiply.
        if tail == 3:
            h ^= data[end + 2] << 16
        if tail >= 2:
            h ^= data[end + 1] << 8
        h ^= data[end]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def default_partition(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null ``key``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class StickyPartitioner:
    """Partition choice for records without a key (KIP-480 sticky partitioning).

    ``partition(topic, n)`` returns the current sticky partition of ``topic``; the producer calls
    ``next(topic, n)`` when the batch on that partition was closed (sent or full), which picks a
    different random partition. Owned by one producer; not thread-safe (asyncio only).
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._current: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int) -> int:
        current = self._current.get(topic)
        if current is None or current >= num_partitions:
            current = self._rng.randrange(num_partitions)
            self._current[topic] = current
        return current

    def next(self, topic: str, num_partitions: int) -> int:
        """Move ``topic`` to another partition (a different one when there are several)."""
        old = self._current.get(topic)
        choice = self._rng.randrange(num_partitions)
        if num_partitions > 1 and choice == old:
            choice = (choice + 1 + self._rng.randrange(num_partitions - 1)) % num_partitions
        self._current[topic] = choice
        return choice
