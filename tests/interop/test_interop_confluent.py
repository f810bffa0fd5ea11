"""Interop: confluent-kafka (the librdkafka wheel, a current librdkafka) against a broker process.

librdkafka opens every connection with ApiVersions v3 (flexible, header v2) and picks each API's
version from our answer; the Producer/AdminClient/Consumer below then exercise CreateTopics,
Metadata, Produce (every codec), Fetch, and ListOffsets (timestamps, earliest, latest). The
consumer uses ``assign()`` only (no group APIs are served yet; librdkafka requires a
``group.id`` but, with ``enable.auto.commit=false`` and no ``subscribe()``/``commit()``, it never
sends FindCoordinator because ApiVersions does not advertise it). The module fixture fails if the
broker had to close any client connection (e.g. for an API it does not serve).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from tests.broker_util import BrokerProcess
from tests.interop_helpers import (
    CODECS,
    DEADLINE_S,
    SEGMENT_BYTES,
    Sample,
    broker_fixture,
    log_files,
    sample_records,
)

pytestmark = pytest.mark.interop

TIMESTAMP_CREATE_TIME = 1  # confluent_kafka.TIMESTAMP_CREATE_TIME


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from broker_fixture(tmp_path_factory, "confluent")


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create_topic(
    admin: AdminClient, name: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    futures = admin.create_topics(
        [NewTopic(name, partitions, 1, config=config or {})], operation_timeout=DEADLINE_S
    )
    futures[name].result(DEADLINE_S)  # raises KafkaException on a topic error


def produce(broker: BrokerProcess, topic: str, samples: list[Sample], **conf: Any) -> None:
    """Produce in four flushes (so the partition holds several batches); every delivery is OK."""
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": 1, **conf})
    chunk = max(1, len(samples) // 4)
    for start in range(0, len(samples), chunk):
        for s in samples[start : start + chunk]:
            producer.produce(
                topic,
                key=s.key,
                value=s.value,
                headers=list(s.headers),
                timestamp=s.timestamp,
                on_delivery=lambda err, _msg: errors.append(err) if err else None,
            )
        assert producer.flush(DEADLINE_S) == 0, "messages still queued after the deadline"
    assert errors == []


def consumer(broker: BrokerProcess, **conf: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "interop-assign-only",  # required by librdkafka; no group API is used
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            **conf,
        }
    )


def consume(c: Consumer, count: int) -> list[Any]:
    """Poll until ``count`` messages arrived (bounded); fail on any error message."""
    got: list[Any] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append(msg)
    assert len(got) == count, f"got {len(got)} of {count} messages within {DEADLINE_S}s"
    return got


def assert_same(topic: str, got: list[Any], samples: list[Sample], first_offset: int = 0) -> None:
    for i, (msg, s) in enumerate(zip(got, samples, strict=True)):
        assert msg.topic() == topic and msg.partition() == 0
        assert msg.offset() == first_offset + i
        assert msg.key() == s.key
        assert msg.value() == s.value
        assert tuple(msg.headers() or ()) == s.headers
        assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, s.timestamp)


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec_and_offset_lookups(
    broker: BrokerProcess, admin: AdminClient, codec: str
) -> None:
    topic = f"cf-{codec}"
    create_topic(admin, topic)
    samples = sample_records(40, topic)
    produce(broker, topic, samples, **{"compression.type": codec})

    # Offset lookups first, from a consumer with nothing assigned: an assigned one keeps a
    # long-polling Fetch on the connection, and (as in Kafka) responses go out in request order,
    # so each lookup would wait for fetch.wait.max.ms.
    c = consumer(broker)
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S)
        assert (low, high) == (0, len(samples))
        # ListOffsets by timestamp: exact hit, between two records (-> the next), after all (-> -1).
        queries = [
            samples[0].timestamp,
            samples[17].timestamp,
            samples[17].timestamp + 1,
            samples[-1].timestamp + 1,
        ]
        found = [
            c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=DEADLINE_S)[0]
            for ts in queries
        ]
        assert [tp.error for tp in found] == [None] * 4
        assert [tp.offset for tp in found] == [0, 17, 18, -1]

        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        assert_same(topic, consume(c, len(samples)), samples)

        # Re-assign in the middle: the fetch starts inside a (possibly compressed) batch and the
        # client skips the records before the requested offset itself.
        c.assign([TopicPartition(topic, 0, 25)])
        assert_same(topic, consume(c, 15), samples[25:], first_offset=25)
    finally:
        c.close()


def test_list_offsets_max_timestamp(broker: BrokerProcess, admin: AdminClient) -> None:
    """AdminClient.list_offsets with OffsetSpec.max_timestamp() (ListOffsets v7, KIP-734; the
    client picks the highest version both support, so a broker capped at v5 answers at v5): the
    offset of the record with the largest timestamp, inside a batch of several (not the batch's
    last offset), and the earliest/latest specs on the same (flexible) versions."""
    topic = "cf-max-timestamp"
    create_topic(admin, topic)
    base = 1_700_000_000_000
    # Three batches (one flush each); the max timestamp is record 4, mid-batch, and a later
    # record repeats it (the first one counts).
    timestamps = [[base, base + 10, base + 5], [base + 7, base + 90, base + 3, base + 90], [base]]
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "acks": 1})
    errors: list[Any] = []
    for batch in timestamps:
        for ts in batch:
            producer.produce(
                topic,
                value=b"v",
                timestamp=ts,
                on_delivery=lambda err, _msg: errors.append(err) if err else None,
            )
        assert producer.flush(DEADLINE_S) == 0
    assert errors == []

    handler = _Lines()
    logger = logging.getLogger(f"{__name__}.librdkafka-list-offsets")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    tp = TopicPartition(topic, 0)
    answers = {}
    try:
        debug_admin = AdminClient(
            {"bootstrap.servers": broker.bootstrap, "debug": "protocol"}, logger=logger
        )
        for name, spec in (
            ("max", OffsetSpec.max_timestamp()),
            ("earliest", OffsetSpec.earliest()),
            ("latest", OffsetSpec.latest()),
        ):
            futures = debug_admin.list_offsets({tp: spec}, request_timeout=DEADLINE_S)
            answers[name] = futures[tp].result(DEADLINE_S)
        debug_admin.poll(0)  # deliver queued log lines
    finally:
        logger.removeHandler(handler)
    sent = sorted(
        {
            line.split("(v")[1].split(",")[0]
            for line in handler.lines
            if "Sent ListOffsetsRequest (v" in line
        }
    )
    assert sent and all(int(v) >= 7 for v in sent), sent
    assert (answers["max"].offset, answers["max"].timestamp) == (4, base + 90)
    assert answers["earliest"].offset == 0
    assert answers["latest"].offset == 8


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_api_versions_v3_handshake_and_metadata(broker: BrokerProcess, admin: AdminClient) -> None:
    """librdkafka's own debug log shows its ApiVersions v3 request answered at v3 (no fallback),
    the MsgVer2 feature (RecordBatch v2) enabled, and the group features enabled (the broker
    serves the group APIs: tests/interop/test_interop_groups.py); Metadata lists the topic with its
    partitions."""
    handler = _Lines()
    logger = logging.getLogger(f"{__name__}.librdkafka")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        debug_admin = AdminClient(
            {"bootstrap.servers": broker.bootstrap, "debug": "protocol,feature"}, logger=logger
        )
        create_topic(debug_admin, "cf-meta", partitions=3)
        md = debug_admin.list_topics(timeout=DEADLINE_S)
        debug_admin.poll(0)  # deliver queued log lines
    finally:
        logger.removeHandler(handler)
    log = "\n".join(handler.lines)
    assert "Sent ApiVersionRequest (v3" in log
    assert "Received ApiVersionResponse (v3" in log
    assert "Enabling feature MsgVer2" in log
    assert "Enabling feature BrokerGroupCoordinator" in log

    assert set(md.brokers) == {0}
    assert (md.brokers[0].host, md.brokers[0].port) == (broker.host, broker.port)
    topic = md.topics["cf-meta"]
    assert topic.error is None
    assert sorted(topic.partitions) == [0, 1, 2]
    for p in topic.partitions.values():
        assert (p.leader, p.replicas, p.isrs) == (0, [0], [0])

    with pytest.raises(KafkaException) as exc_info:
        create_topic(admin, "cf-meta")
    assert exc_info.value.args[0].code() == 36  # TOPIC_ALREADY_EXISTS


def test_small_segment_bytes_rolls_segments_on_disk(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    topic = "cf-roll"
    create_topic(admin, topic, config={"segment.bytes": str(SEGMENT_BYTES)})
    samples = sample_records(60, topic)  # ~270 bytes per record uncompressed
    # One record per batch (linger 0, batch size 1): ~60 batches, ~16 KiB -> at least 4 segments.
    produce(broker, topic, samples, **{"linger.ms": 0, "batch.num.messages": 1})
    files = log_files(broker, topic)
    assert len(files) >= 4, files
    assert all(f.stat().st_size <= SEGMENT_BYTES for f in files)
    assert files[0].name == "00000000000000000000.log"

    c = consumer(broker)
    try:
        # A timestamp lookup that lands in a later segment.
        (tp,) = c.offsets_for_times([TopicPartition(topic, 0, samples[50].timestamp)], DEADLINE_S)
        assert tp.offset == 50
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        assert_same(topic, consume(c, len(samples)), samples)
    finally:
        c.close()
