"""Interop: topic ids and the cluster id seen by librdkafka (confluent-kafka) and kafka-python.

librdkafka asks Metadata v12 (and Fetch v13+ when a broker advertises it), keeps each topic's
id, and lowers a topic's partition count only when its id changes (KIP-516): a topic deleted
and created again with fewer partitions stranded a producer's messages for the vanished
partitions while the broker had no ids (librdkafka's test 0107_topic_recreate idea).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.protocol.types import uuid_to_str
from sluice.server.storage.meta_properties import read_meta_properties
from sluice.server.storage.partition_metadata import read_partition_metadata
from tests.broker_util import BrokerProcess
from tests.interop_helpers import DEADLINE_S, broker_fixture

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from broker_fixture(tmp_path_factory, "topic-ids")


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create(admin: AdminClient, name: str, partitions: int) -> None:
    futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=DEADLINE_S)
    futures[name].result(DEADLINE_S)


def delete(admin: AdminClient, name: str) -> None:
    admin.delete_topics([name], operation_timeout=DEADLINE_S)[name].result(DEADLINE_S)


def topic_id_on_disk(broker: BrokerProcess, topic: str) -> str:
    found = read_partition_metadata(broker.data_dir / f"{topic}-0")
    assert found is not None
    return uuid_to_str(found)


def test_describe_topics_and_cluster_show_the_ids(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    create(admin, "described", 3)
    (future,) = admin.describe_topics(TopicCollection(["described"])).values()
    description = future.result(DEADLINE_S)
    # librdkafka prints ids in standard base64 ('+', '/'), Kafka in URL-safe: compare the bits.
    msb = description.topic_id.get_most_significant_bits() & (2**64 - 1)
    lsb = description.topic_id.get_least_significant_bits() & (2**64 - 1)
    assert uuid_to_str(uuid.UUID(int=msb << 64 | lsb)) == topic_id_on_disk(broker, "described")
    assert len(description.partitions) == 3
    cluster = admin.describe_cluster().result(DEADLINE_S)
    meta = read_meta_properties(broker.data_dir)
    assert meta is not None and cluster.cluster_id == meta.cluster_id
    assert len(cluster.cluster_id) == 22


def test_librdkafka_fetches_at_the_advertised_version(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    create(admin, "fetched", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce("fetched", value=b"v%d" % i)
    assert producer.flush(DEADLINE_S) == 0
    logs: list[str] = []
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "debug": "protocol",
            "logger": _Collect(logs),
        }
    )
    try:
        consumer.assign([TopicPartition("fetched", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < 10 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert got == [b"v%d" % i for i in range(10)]
    finally:
        consumer.close()
    # librdkafka names the versions it sends in its protocol debug lines.
    fetches = [line for line in logs if "Sent FetchRequest" in line]
    # Fetch v13: the topic by its id, no name (what it got back is checked above).
    assert fetches and all("(v13" in line for line in fetches), fetches[:3]
    assert any("Sent MetadataRequest (v12" in line for line in logs)


class _Collect:
    """A ``logging.Logger`` stand-in for librdkafka's ``logger`` (it calls ``log``)."""

    def __init__(self, into: list[str]) -> None:
        self.into = into

    def log(self, level: int, fmt: str, *args: Any) -> None:
        self.into.append(fmt % args if args else fmt)


def test_a_producer_follows_a_topic_recreated_with_fewer_partitions(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    """librdkafka 0107_topic_recreate's idea: the same producer, the topic deleted and created
    again with fewer partitions; every message produced after that is delivered."""
    create(admin, "recreated", 4)
    first_id = topic_id_on_disk(broker, "recreated")
    delivered: list[tuple[int, Any]] = []
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "topic.metadata.refresh.interval.ms": 500,
            "message.timeout.ms": 20_000,
            "linger.ms": 5,
        }
    )

    def on_delivery(err: Any, msg: Any) -> None:
        delivered.append((msg.partition(), err))

    for i in range(40):
        producer.produce("recreated", key=b"k%d" % i, value=b"before", on_delivery=on_delivery)
    assert producer.flush(DEADLINE_S) == 0
    assert {p for p, _ in delivered} == {0, 1, 2, 3} and all(e is None for _, e in delivered)
    delete(admin, "recreated")
    create(admin, "recreated", 2)
    assert topic_id_on_disk(broker, "recreated") != first_id
    # Wait until the producer's metadata shows the new topic (its periodic refresh).
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        topic = producer.list_topics("recreated", timeout=5).topics["recreated"]
        if topic.error is None and len(topic.partitions) == 2:
            break
        time.sleep(0.2)
    delivered.clear()
    for i in range(40):
        producer.produce("recreated", key=b"k%d" % i, value=b"after", on_delivery=on_delivery)
    assert producer.flush(30) == 0, "messages stranded after the topic was recreated"
    assert len(delivered) == 40
    assert all(e is None for _, e in delivered), [e for _, e in delivered if e][:3]
    assert {p for p, _ in delivered} <= {0, 1}
