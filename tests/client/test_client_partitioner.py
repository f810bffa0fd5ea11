"""Key partitioning: Kafka's murmur2 and default partitioner, checked against implementations
nobody here wrote -- Kafka's own test vectors (``UtilsTest.testMurmur2``), kafka-python's
``murmur2``, and librdkafka: confluent-kafka with ``partitioner=murmur2_random`` (documented as
Java-producer compatible) producing to a real broker, whose chosen partitions must be ours."""

from __future__ import annotations

import asyncio
import random
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.client import Producer
from sluice.client.partitioner import StickyPartitioner, default_partition, murmur2
from sluice.testing.embedded import EmbeddedBroker

with warnings.catch_warnings():  # kafka-python's legacy importlib.resources use (3.11)
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2


# From Apache Kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), sorted(KAFKA_VECTORS.items()))
def test_murmur2_matches_kafka_test_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_python(data: bytes) -> None:
    # kafka-python returns the same 32 bits as an unsigned value.
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40), st.integers(min_value=1, max_value=1000))
def test_default_partition_in_range_and_uses_positive_hash(key: bytes, n: int) -> None:
    p = default_partition(key, n)
    assert 0 <= p < n
    assert p == (murmur2(key) & 0x7FFFFFFF) % n


def test_default_partition_rejects_no_partitions() -> None:
    with pytest.raises(ValueError):
        default_partition(b"k", 0)


def test_sticky_partitioner_moves_to_another_partition() -> None:
    sticky = StickyPartitioner(random.Random(7))
    first = sticky.partition("t", 5)
    assert sticky.partition("t", 5) == first  # sticks
    seen = {first}
    for _ in range(50):
        nxt = sticky.next("t", 5)
        assert nxt != first
        first = nxt
        seen.add(nxt)
    assert seen == set(range(5))
    assert sticky.next("one", 1) == 0


KEYS = [b"", b"a", b"user-1", b"\x00\xff", *(b"key-%d" % i for i in range(150))]
KEYS += [random.Random(3).randbytes(n) for n in range(1, 40)]


@pytest.mark.interop
def test_same_partitions_as_confluent_kafka_murmur2_random() -> None:
    from confluent_kafka import Producer as ConfluentProducer

    partitions = 7
    chosen: dict[bytes, int] = {}
    errors: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            chosen[msg.key()] = msg.partition()  # type: ignore[attr-defined]

    with EmbeddedBroker(properties={"num.partitions": str(partitions)}) as broker:
        producer = ConfluentProducer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "partitioner": "murmur2_random",
                "linger.ms": 5,
            }
        )
        for key in KEYS:
            producer.produce("keyed", value=b"v", key=key, on_delivery=on_delivery)
        assert producer.flush(20) == 0
        assert not errors
        assert len(chosen) == len(set(KEYS))

        async def ours() -> dict[bytes, int]:
            async with Producer(broker.bootstrap_servers) as p:
                futs = [await p.send("keyed", b"v", key=k) for k in KEYS]
                return {
                    k: m.partition for k, m in zip(KEYS, await asyncio.gather(*futs), strict=True)
                }

        ours_chosen = asyncio.run(ours())
    assert len(set(chosen.values())) == partitions  # the keys really spread
    for key in KEYS:
        assert default_partition(key, partitions) == chosen[key], key
        assert ours_chosen[key] == chosen[key], key
