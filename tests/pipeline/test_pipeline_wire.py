"""sluice.pipeline.wire.SyncClient against a real broker process (no Spark): the four requests
the pipeline makes, their errors, and records produced by a client nobody here wrote."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sluice import EmbeddedBroker
from sluice.pipeline.offsets import TopicPartition
from sluice.pipeline.wire import SyncClient, WireError
from sluice.protocol.errors import UnknownTopicOrPartition
from sluice.protocol.records import RecordBatchBuilder, decode_batch_columns, iter_batches
from tests.broker_util import BrokerProcess, free_port, running_broker

TP = TopicPartition("blk", 1)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("wire") / "data"
    with running_broker(data, overrides=["auto.create.topics.enable=false"]) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("blk", 2, 1)])["blk"].result(30)
        producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
        for i in range(50):
            producer.produce("blk", b"v%d" % i, key=b"k%d" % i, partition=1, timestamp=1000 + i)
        assert producer.flush(30) == 0
        yield b


def test_metadata_and_offsets(broker: BrokerProcess) -> None:
    with SyncClient(broker.bootstrap, timeout=10) as client:
        assert client.partition_counts(["blk", "nope"]) == {"blk": 2}
        assert client.partition_counts(None)["blk"] == 2
        assert client.list_offsets({TP: -2, TopicPartition("blk", 0): -1}) == {
            TP: 0,
            TopicPartition("blk", 0): 0,
        }
        # by timestamp; after every record: the high watermark
        assert client.list_offsets({TP: 1010}) == {TP: 10}
        assert client.list_offsets({TP: 10**12}) == {TP: 50}


def test_fetch_then_produce(broker: BrokerProcess) -> None:
    with SyncClient(broker.bootstrap, timeout=10) as client:
        result = client.fetch(TP, 7, max_bytes=1 << 20)
        assert (result.error_code, result.high_watermark) == (0, 50)
        offsets: list[int] = []
        values: list[bytes | None] = []
        for _, _header, batch in iter_batches(result.records or b"", allow_partial_tail=True):
            columns = decode_batch_columns(batch)
            offsets += columns.offsets
            values += columns.values
        assert offsets[-1] == 49 and 7 in offsets
        assert values[offsets.index(7)] == b"v7"

        builder = RecordBatchBuilder()
        for i in range(3):
            builder.append(2000 + i, None, b"new%d" % i)
        assert client.produce({TP: builder.build()}, acks=-1) == {TP: 50}
        assert client.list_offsets({TP: -1}) == {TP: 53}


def test_errors(broker: BrokerProcess, tmp_path: Path) -> None:
    with SyncClient(broker.bootstrap, timeout=10) as client:
        unknown = client.fetch(TopicPartition("nope", 0), 0, max_bytes=1024)
        assert unknown.error_code == UnknownTopicOrPartition.code  # the caller decides
        result = client.fetch(TP, 10**6, max_bytes=1024)
        assert result.error_code == 1  # OFFSET_OUT_OF_RANGE: the caller decides
    with pytest.raises(WireError):
        SyncClient(f"127.0.0.1:{free_port()}", timeout=2)


def test_a_producer_creates_a_missing_topic_only_where_the_broker_allows_it(
    broker: BrokerProcess,
) -> None:
    with SyncClient(broker.bootstrap, timeout=10) as client:
        assert client.partitions_for_produce("blk") == 2
        with pytest.raises(UnknownTopicOrPartition, match=r"auto\.create\.topics\.enable=false"):
            client.partitions_for_produce("not-created")
        assert client.partition_counts(["not-created"]) == {}
    with (
        EmbeddedBroker(properties={"num.partitions": "3"}) as auto,
        SyncClient(auto.bootstrap_servers, timeout=10) as client,
    ):
        assert client.partition_counts(["fresh"]) == {}  # a reader never creates
        assert client.partitions_for_produce("fresh") == 3
        assert client.partition_counts(["fresh"]) == {"fresh": 3}
