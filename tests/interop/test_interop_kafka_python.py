"""Interop: kafka-python (pure Python; its own protocol code) against a broker process.

kafka-python probes the broker's version (``api_version=None``): it sends ApiVersions at its
newest version, steps down on UNSUPPORTED_VERSION, and infers a broker version from the ranges we
advertise; every request after that uses versions picked from them. Covered: KafkaAdminClient
(CreateTopics, Metadata), KafkaProducer (Produce, every codec whose library is installed here:
kafka-python needs python-snappy / lz4 / zstandard for the others, which Sluice does not depend
on — those cases skip and say so), KafkaConsumer with ``assign()`` only (no group API;
``group_id=None``), ``offsets_for_times``, ``beginning_offsets``, ``end_offsets``.
"""

from __future__ import annotations

import socket
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from tests.broker_util import BrokerProcess, free_port
from tests.interop_helpers import (
    CODECS,
    DEADLINE_S,
    SEGMENT_BYTES,
    Sample,
    broker_fixture,
    log_files,
    sample_records,
)

with warnings.catch_warnings():  # kafka-python's legacy importlib.resources use (3.11)
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.codec
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

pytestmark = pytest.mark.interop

_CODEC_AVAILABLE = {
    "none": True,
    "gzip": kafka.codec.has_gzip(),
    "snappy": kafka.codec.has_snappy(),
    "lz4": kafka.codec.has_lz4(),
    "zstd": kafka.codec.has_zstd(),
}
_CODEC_LIBRARY = {"gzip": "zlib", "snappy": "python-snappy", "lz4": "lz4", "zstd": "zstandard"}
_TIMEOUT_MS = int(DEADLINE_S * 1000)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from broker_fixture(tmp_path_factory, "kafka-python")


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=_TIMEOUT_MS)
    try:
        yield client
    finally:
        client.close()


def create_topic(
    admin: KafkaAdminClient, name: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    admin.create_topics(
        [NewTopic(name, partitions, 1, topic_configs=config or {})], timeout_ms=_TIMEOUT_MS
    )


def produce(broker: BrokerProcess, topic: str, samples: list[Sample], **conf: Any) -> None:
    """Send in four flushes (several batches); every future must resolve without error."""
    producer = KafkaProducer(
        **{"bootstrap_servers": broker.bootstrap, "acks": 1, "linger_ms": 5, **conf}
    )
    try:
        futures = []
        chunk = max(1, len(samples) // 4)
        for start in range(0, len(samples), chunk):
            for s in samples[start : start + chunk]:
                futures.append(
                    producer.send(
                        topic,
                        key=s.key,
                        value=s.value,
                        headers=list(s.headers),
                        timestamp_ms=s.timestamp,
                        partition=0,
                    )
                )
            producer.flush(timeout=DEADLINE_S)
        metadata = [f.get(timeout=DEADLINE_S) for f in futures]
        assert [m.offset for m in metadata] == list(range(metadata[0].offset, len(samples)))
    finally:
        producer.close(timeout=DEADLINE_S)


def consumer(broker: BrokerProcess) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,  # no group coordinator: assign() only, nothing committed
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=_TIMEOUT_MS + 5000,
        fetch_max_wait_ms=100,
    )


def consume(c: KafkaConsumer, tp: TopicPartition, count: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=200).values():
            got.extend(records)
    assert len(got) == count, f"got {len(got)} of {count} records within {DEADLINE_S}s"
    assert all(r.topic == tp.topic and r.partition == tp.partition for r in got)
    return got


def assert_same(got: list[Any], samples: list[Sample], first_offset: int = 0) -> None:
    for i, (rec, s) in enumerate(zip(got, samples, strict=True)):
        assert rec.offset == first_offset + i
        assert rec.key == s.key
        assert rec.value == s.value
        assert tuple(rec.headers) == s.headers
        assert (rec.timestamp_type, rec.timestamp) == (0, s.timestamp)  # 0 = CreateTime


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec_and_offset_lookups(
    broker: BrokerProcess, admin: KafkaAdminClient, codec: str
) -> None:
    if not _CODEC_AVAILABLE[codec]:
        pytest.skip(f"kafka-python needs {_CODEC_LIBRARY[codec]} for {codec} (not installed)")
    topic = f"kp-{codec}"
    create_topic(admin, topic)
    samples = sample_records(40, topic, null_header_values=False)
    produce(broker, topic, samples, compression_type=None if codec == "none" else codec)

    tp = TopicPartition(topic, 0)
    c = consumer(broker)
    try:
        assert c.beginning_offsets([tp], timeout_ms=_TIMEOUT_MS) == {tp: 0}
        assert c.end_offsets([tp], timeout_ms=_TIMEOUT_MS) == {tp: len(samples)}
        queries = {
            "first": samples[0].timestamp,
            "exact": samples[17].timestamp,
            "between": samples[17].timestamp + 1,
            "after": samples[-1].timestamp + 1,
        }
        found = {
            name: c.offsets_for_times({tp: ts}, timeout_ms=_TIMEOUT_MS)[tp]
            for name, ts in queries.items()
        }
        assert found["first"] is not None and found["first"].offset == 0
        assert found["exact"] is not None and found["exact"].offset == 17
        assert found["exact"].timestamp == samples[17].timestamp
        assert found["between"] is not None and found["between"].offset == 18
        assert found["after"] is None  # Kafka answers -1: no record that late

        c.assign([tp])
        c.seek_to_beginning(tp)
        assert_same(consume(c, tp, len(samples)), samples)
        c.seek(tp, 25)  # inside a batch: the client drops the records before 25 itself
        assert_same(consume(c, tp, 15), samples[25:], first_offset=25)
    finally:
        c.close()


def test_version_probe_and_metadata(broker: BrokerProcess, admin: KafkaAdminClient) -> None:
    """kafka-python stepped down from its newest ApiVersions and inferred a modern broker."""
    create_topic(admin, "kp-meta", partitions=3)
    c = consumer(broker)
    try:
        # The version inferred from our ranges: at least 2.1 (Fetch v10 / ListOffsets v4 era).
        version = c.config["api_version"]
        assert isinstance(version, tuple) and version >= (2, 1), version
        assert c.partitions_for_topic("kp-meta") == {0, 1, 2}
        assert "kp-meta" in c.topics()
    finally:
        c.close()
    described = admin.describe_topics(["kp-meta"])
    assert [(t["name"], t["error_code"]) for t in described] == [("kp-meta", 0)]
    parts = sorted(described[0]["partitions"], key=lambda p: p["partition_index"])
    assert [
        (p["error_code"], p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"])
        for p in parts
    ] == [(0, i, 0, [0], [0]) for i in range(3)]
    with pytest.raises(TopicAlreadyExistsError):
        create_topic(admin, "kp-meta")


def test_small_segment_bytes_rolls_segments_on_disk(
    broker: BrokerProcess, admin: KafkaAdminClient
) -> None:
    topic = "kp-roll"
    create_topic(admin, topic, config={"segment.bytes": str(SEGMENT_BYTES)})
    samples = sample_records(60, topic, null_header_values=False)
    # batch_size smaller than one record: every record is its own batch.
    produce(broker, topic, samples, batch_size=1, linger_ms=0)
    files = log_files(broker, topic)
    assert len(files) >= 4, files
    assert all(f.stat().st_size <= SEGMENT_BYTES for f in files)

    tp = TopicPartition(topic, 0)
    c = consumer(broker)
    try:
        found = c.offsets_for_times({tp: samples[50].timestamp}, timeout_ms=_TIMEOUT_MS)[tp]
        assert found is not None and found.offset == 50
        c.assign([tp])
        c.seek_to_beginning(tp)
        assert_same(consume(c, tp, len(samples)), samples)
    finally:
        c.close()


@pytest.mark.parametrize("client", [KafkaAdminClient, KafkaProducer, KafkaConsumer])
def test_a_failed_bootstrap_leaves_no_socket_open(
    monkeypatch: pytest.MonkeyPatch, client: Any
) -> None:
    """kafka-python 3.0.12 leaves the socket of a refused connect open, in a reference cycle
    its I/O thread keeps alive, and a client whose bootstrap fails leaves its wakeup socket
    pair open (and that thread running): a garbage collection in a later, unrelated test (or
    the session's end) then fails with a ResourceWarning (``unclosed <socket.socket ...
    laddr=('0.0.0.0', port)>``, ``unclosed <socket.socket ... family=1 ...>``).
    ``tests/conftest.py`` closes both (:func:`tests.conftest.close_what_kafka_python_leaks`);
    this fails without that."""
    from kafka.net.inet import KafkaNetSocket

    made: list[socket.socket] = []
    make = KafkaNetSocket.socket
    socketpair = socket.socketpair

    def recorded(self: KafkaNetSocket, *args: Any) -> socket.socket:
        made.append(make(self, *args))
        return made[-1]

    def recorded_pair(*args: Any) -> tuple[socket.socket, socket.socket]:
        pair = socketpair(*args)
        made.extend(pair)
        return pair

    monkeypatch.setattr(KafkaNetSocket, "socket", recorded)
    monkeypatch.setattr(socket, "socketpair", recorded_pair)
    with pytest.raises(KafkaError):
        client(bootstrap_servers=f"127.0.0.1:{free_port()}", bootstrap_timeout_ms=1000)
    assert any(s.family == socket.AF_UNIX for s in made), "no wakeup socket pair made"
    assert any(s.family == socket.AF_INET for s in made), "no connection tried"
    assert [s for s in made if s.fileno() != -1] == []
