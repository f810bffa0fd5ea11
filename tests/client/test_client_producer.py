"""Producer against a real broker: batching (size, linger), partitioning of keyless records,
compression, acks, error handling and retries across a broker restart. What the producer wrote
is read back by aiokafka (a client nobody here wrote) and from the segment files on disk."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTP

from sluice.client import Admin, Producer, ProducerClosedError, RecordMetadata
from sluice.client.errors import KafkaTimeoutError
from sluice.protocol import errors
from sluice.protocol.records import iter_batches
from sluice.testing.embedded import EmbeddedBroker
from tests.broker_util import free_port, start_broker

BOUND = 20.0  # seconds: upper bound of any wait below


@pytest.fixture
async def broker() -> AsyncIterator[EmbeddedBroker]:
    async with EmbeddedBroker(properties={"num.partitions": "3"}) as b:
        yield b


def batches_on_disk(broker: EmbeddedBroker, topic: str, partition: int) -> list[int]:
    """Record counts of the batches in a partition's segment files, in order."""
    counts = []
    for path in sorted((broker.data_dir / f"{topic}-{partition}").glob("*.log")):
        counts += [h.record_count for _, h, _ in iter_batches(path.read_bytes())]
    return counts


async def read_with_aiokafka(bootstrap: str, topic: str, partition: int, n: int) -> list:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tp = AioTP(topic, partition)
        consumer.assign([tp])
        out: list = []
        async with asyncio.timeout(BOUND):
            while len(out) < n:
                got = await consumer.getmany(tp, timeout_ms=500)
                out += got.get(tp, [])
        return out
    finally:
        await consumer.stop()


@pytest.mark.interop
@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
async def test_roundtrip_read_by_aiokafka(broker: EmbeddedBroker, codec: str | None) -> None:
    async with Producer(broker.bootstrap_servers, compression=codec, linger_ms=20) as p:
        futs = [
            await p.send(
                "rt",
                b"value-%d " % i * 20,
                key=None if i == 3 else b"k%d" % i,
                partition=1,
                timestamp_ms=1_700_000_000_000 + i,
                headers=[("h", b"x"), ("n", None)],
            )
            for i in range(50)
        ]
        metas = await asyncio.gather(*futs)
    assert [m.offset for m in metas] == list(range(50))
    assert all(m.partition == 1 and m.topic == "rt" for m in metas)
    assert metas[7] == RecordMetadata("rt", 1, 7, 1_700_000_000_007, 2, 160)
    records = await read_with_aiokafka(broker.bootstrap_servers, "rt", 1, 50)
    assert [r.offset for r in records] == list(range(50))
    assert [r.value for r in records] == [b"value-%d " % i * 20 for i in range(50)]
    assert records[3].key is None and records[4].key == b"k4"
    assert records[9].timestamp == 1_700_000_000_009
    assert list(records[0].headers) == [("h", b"x"), ("n", None)]


async def test_linger_collects_records_into_one_batch(broker: EmbeddedBroker) -> None:
    async with Producer(broker.bootstrap_servers, linger_ms=200) as p:
        futs = [await p.send("linger", b"v%d" % i, partition=0) for i in range(20)]
        await asyncio.wait_for(asyncio.gather(*futs), BOUND)
    assert batches_on_disk(broker, "linger", 0) == [20]


async def test_batch_size_splits_batches(broker: EmbeddedBroker) -> None:
    async with Producer(broker.bootstrap_servers, linger_ms=200, batch_size=1_000) as p:
        futs = [await p.send("sized", b"x" * 90, partition=0) for i in range(50)]
        await asyncio.wait_for(asyncio.gather(*futs), BOUND)
    counts = batches_on_disk(broker, "sized", 0)
    assert sum(counts) == 50
    assert len(counts) >= 5  # ~100 bytes a record, 1000-byte batches
    assert max(counts) <= 10


async def test_keyed_records_keep_their_partition_and_keyless_stick(broker: EmbeddedBroker) -> None:
    async with Producer(broker.bootstrap_servers, linger_ms=50) as p:
        keyed = await asyncio.gather(*[await p.send("parts", b"v", key=b"same") for _ in range(5)])
        assert len({m.partition for m in keyed}) == 1
        first = await asyncio.gather(*[await p.send("parts", b"v") for _ in range(10)])
        second = await asyncio.gather(*[await p.send("parts", b"v") for _ in range(10)])
    p1 = {m.partition for m in first}
    p2 = {m.partition for m in second}
    assert len(p1) == 1 and len(p2) == 1  # one batch each: sticky
    assert p1 != p2  # the next batch moved on


async def test_acks_zero_resolves_without_offsets(broker: EmbeddedBroker) -> None:
    async with Producer(broker.bootstrap_servers, acks=0) as p:
        metas = await asyncio.gather(*[await p.send("acks0", b"v%d" % i, partition=2)
                                       for i in range(5)])  # fmt: skip
    assert [m.offset for m in metas] == [-1] * 5
    records = await read_with_aiokafka(broker.bootstrap_servers, "acks0", 2, 5)
    assert [r.value for r in records] == [b"v%d" % i for i in range(5)]


async def test_non_retriable_error_fails_the_future(broker: EmbeddedBroker) -> None:
    async with Admin(broker.bootstrap_servers) as admin:
        await admin.create_topic("small", 1, {"max.message.bytes": "200"})
    async with Producer(broker.bootstrap_servers) as p:
        ok = await p.send_and_wait("small", b"tiny")
        with pytest.raises(errors.KafkaError) as info:
            await asyncio.wait_for(await p.send("small", b"x" * 1000), BOUND)
    assert ok.offset == 0
    assert not info.value.retriable
    assert isinstance(info.value, errors.MessageTooLarge | errors.RecordListTooLarge)


async def test_unknown_topic_without_auto_create_times_out() -> None:
    props = {"auto.create.topics.enable": "false"}
    async with (
        EmbeddedBroker(properties=props) as b,
        Producer(b.bootstrap_servers, max_block_ms=300) as p,
    ):
        with pytest.raises(KafkaTimeoutError, match="not ready"):
            await p.send("missing", b"v")


async def test_send_after_stop_raises(broker: EmbeddedBroker) -> None:
    p = Producer(broker.bootstrap_servers)
    with pytest.raises(ProducerClosedError):
        await p.send("t", b"v")  # not started
    async with p:
        await p.send_and_wait("t", b"v")
    with pytest.raises(ProducerClosedError):
        await p.send("t", b"v")


async def test_retries_across_broker_restart(tmp_path: Path) -> None:
    port = free_port()
    data = tmp_path / "data"
    proc = start_broker(data, port=port)
    try:
        async with Producer(f"127.0.0.1:{port}", retry_backoff_ms=50, linger_ms=0) as p:
            first = await p.send_and_wait("restart", b"before", partition=0)
            await asyncio.to_thread(proc.stop)
            pending = await p.send("restart", b"during", partition=0)
            await asyncio.sleep(0.3)  # the send fails and is retried while the broker is down
            assert not pending.done()
            proc = await asyncio.to_thread(start_broker, data, port=port)
            meta = await asyncio.wait_for(pending, BOUND)
    finally:
        proc.stop()
    assert (first.offset, meta.offset) == (0, 1)


async def test_send_waits_when_partition_queue_is_full_then_times_out() -> None:
    broker = await EmbeddedBroker().start()
    p = Producer(
        broker.bootstrap_servers, batch_size=100, max_queued_batches_per_partition=2,
        max_block_ms=300, retry_backoff_ms=20,
    )  # fmt: skip
    await p.start()
    try:
        await p.send_and_wait("bp", b"warm-up", partition=0)
        await broker.stop()  # nothing drains any more: batches pile up
        queued = [await p.send("bp", b"x" * 80, partition=0) for _ in range(3)]
        with pytest.raises(KafkaTimeoutError, match="batches queued"):
            for _ in range(5):
                queued.append(await p.send("bp", b"x" * 80, partition=0))
    finally:
        await p.stop(timeout=0.5)
    for fut in queued:
        assert isinstance(fut.exception(), ProducerClosedError | KafkaTimeoutError)
