"""Interop: compacted topics (cleanup.policy=compact) with clients nobody here wrote.

confluent-kafka, kafka-python and aiokafka create a compacted topic, write keyed updates and
tombstones across many small segments; the broker's log cleaner (``log.cleaner.backoff.ms``
short here) compacts it; the clients then read the compacted partition from the beginning,
across the offset gaps cleaning leaves, and see the latest value of every key (tombstones as
null values: ``delete.retention.ms`` keeps them). A record without a key is refused with
INVALID_RECORD.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_util import BrokerProcess
from tests.interop_helpers import DEADLINE_S, broker_fixture

pytestmark = pytest.mark.interop

KEYS = [b"key-%d" % i for i in range(8)]
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "2048",
    "min.cleanable.dirty.ratio": "0.01",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from broker_fixture(tmp_path_factory, "compaction", ["log.cleaner.backoff.ms=100"])


def updates(rounds: int) -> list[tuple[bytes, bytes | None]]:
    """Every key updated ``rounds`` times, then the first two deleted (tombstones)."""
    out: list[tuple[bytes, bytes | None]] = [
        (key, b"%s=%d" % (key, r)) for r in range(rounds) for key in KEYS
    ]
    return [*out, (KEYS[0], None), (KEYS[1], None)]


def expected_latest(writes: list[tuple[bytes, bytes | None]]) -> dict[bytes, bytes | None]:
    return dict(writes)


def wait_cleaned(broker: BrokerProcess, topic: str) -> dict[str, object]:
    """The broker's "cleaned log" line for ``topic`` (bounded wait)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        for line in broker.log_text().splitlines():
            if '"cleaned log"' in line and f'"topic": "{topic}"' in line:
                entry: dict[str, object] = json.loads(line)
                return entry
        time.sleep(0.05)
    raise AssertionError(f"{topic} was not cleaned within {DEADLINE_S}s")


def read_all_confluent(broker: BrokerProcess, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "compaction-reader",
            "enable.auto.commit": False,
        }
    )
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + DEADLINE_S
        while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.offset(), msg.key(), msg.value()))
        assert out and out[-1][0] == high - 1, (out[-3:], high)
        return out
    finally:
        consumer.close()


def test_confluent_compacted_topic_reads_the_latest_value_per_key(broker: BrokerProcess) -> None:
    topic = "compacted-confluent"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(topic, 1, 1, config=COMPACTED)])
    futures[topic].result(DEADLINE_S)
    writes = updates(rounds=20)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": "all"})
    errors: list[object] = []
    for i, (key, value) in enumerate(writes):
        producer.produce(
            topic, key=key, value=value, on_delivery=lambda e, _m: e and errors.append(e)
        )
        if i % len(KEYS) == len(KEYS) - 1:  # a batch per round: many small segments
            assert producer.flush(DEADLINE_S) == 0
    assert producer.flush(DEADLINE_S) == 0 and errors == []
    # A record without a key: refused, as Kafka refuses it.
    refused: list[KafkaError] = []
    producer.produce(topic, value=b"no key", on_delivery=lambda e, _m: refused.append(e))
    assert producer.flush(DEADLINE_S) == 0
    assert refused and refused[0] is not None and refused[0].code() == KafkaError.INVALID_RECORD
    line = wait_cleaned(broker, topic)
    assert "dirty_ratio" in line and "size_reduction_pct" in line
    got = read_all_confluent(broker, topic)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets)) and len(got) < len(writes), "compacted, with gaps"
    seen: dict[bytes, bytes | None] = {}
    for _offset, key, value in got:
        seen[key] = value
    assert seen == expected_latest(writes)
    # ListOffsets across the compacted log: earliest is still 0, latest the log end.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S)
    finally:
        consumer.close()
    assert (low, high) == (0, len(writes))


def test_kafka_python_writes_and_reads_a_compacted_topic(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic

    topic = "compacted-kafka-python"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([KNewTopic(topic, 1, 1, topic_configs=COMPACTED)])
    finally:
        admin.close()
    writes = updates(rounds=15)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=0)
    try:
        for key, value in writes:
            producer.send(topic, key=key, value=value).get(timeout=DEADLINE_S)
    finally:
        producer.close()
    wait_cleaned(broker, topic)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    try:
        tp = KTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        got: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + DEADLINE_S
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend((r.offset, r.key, r.value) for r in records)
    finally:
        consumer.close()
    assert end == len(writes) and len(got) < len(writes)
    assert [o for o, _, _ in got] == sorted({o for o, _, _ in got})
    assert dict((k, v) for _, k, v in got) == expected_latest(writes)


async def test_aiokafka_writes_and_reads_a_compacted_topic(broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATopicPartition

    topic = "compacted-aiokafka"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=COMPACTED)])[topic].result(DEADLINE_S)
    writes = updates(rounds=15)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    await producer.start()
    try:
        for key, value in writes:
            await producer.send_and_wait(topic, key=key, value=value)
    finally:
        await producer.stop()
    wait_cleaned(broker, topic)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = ATopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        got: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + DEADLINE_S
        while await consumer.position(tp) < end and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                got.extend((r.offset, r.key, r.value) for r in records)
    finally:
        await consumer.stop()
    assert end == len(writes) and len(got) < len(writes)
    assert [o for o, _, _ in got] == sorted({o for o, _, _ in got})
    assert {k: v for _, k, v in got} == expected_latest(writes)
