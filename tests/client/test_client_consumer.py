"""Consumer against a real broker: seeks (offset, beginning, end, timestamp), offset-reset
policies, compressed batches fetched mid-batch, iteration, small buffers (fetch pipelining keeps
every record in order), and the group API that must refuse loudly until issue 5. Records are
written by aiokafka (a client nobody here wrote) as well as by our producer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaProducer

from sluice.client import (
    Admin,
    Consumer,
    GroupsNotSupportedError,
    NoOffsetForPartitionError,
    Producer,
    TopicPartition,
)
from sluice.client.errors import ConsumerStoppedError
from sluice.testing.embedded import EmbeddedBroker

BOUND = 20.0
T0 = 1_700_000_000_000
TP = TopicPartition("events", 0)


@pytest.fixture
async def broker() -> AsyncIterator[EmbeddedBroker]:
    async with EmbeddedBroker() as b:
        yield b


async def produce(bootstrap: str, n: int, topic: str = "events", **kw: object) -> None:
    """``n`` records value b"v<i>", timestamp T0 + 10*i, partition 0, one per batch run."""
    async with Producer(bootstrap, **kw) as p:  # type: ignore[arg-type]
        futs = [
            await p.send(topic, b"v%d" % i, partition=0, timestamp_ms=T0 + 10 * i) for i in range(n)
        ]
        await asyncio.gather(*futs)


async def take(consumer: Consumer, n: int) -> list:
    out: list = []
    async with asyncio.timeout(BOUND):
        async for record in consumer:
            out.append(record)
            if len(out) == n:
                break
    return out


async def test_seeks(broker: EmbeddedBroker) -> None:
    await produce(broker.bootstrap_servers, 100)
    async with Consumer(broker.bootstrap_servers, fetch_max_wait_ms=50) as c:
        c.assign([TP])
        await c.seek_to_beginning()
        assert [r.offset for r in await take(c, 3)] == [0, 1, 2]
        assert c.position(TP) == 3
        c.seek(TP, 42)
        record = (await take(c, 1))[0]
        assert (record.offset, record.value, record.timestamp) == (42, b"v42", T0 + 420)
        await c.seek_to_timestamp(T0 + 505)  # first record at/after it: offset 51
        assert (await take(c, 1))[0].offset == 51
        await c.seek_to_timestamp(T0 + 10_000)  # after every record: the end
        assert c.position(TP) == 100
        await c.seek_to_end()
        assert c.position(TP) == 100
        assert await c.getmany(timeout_ms=100) == {}
        await produce(broker.bootstrap_servers, 1)
        assert (await take(c, 1))[0].offset == 100
        assert c.highwater(TP) == 101
        assert await c.beginning_offsets([TP]) == {TP: 0}
        assert await c.end_offsets([TP]) == {TP: 101}
        found = await c.offsets_for_times({TP: T0 + 15})
        assert found[TP] is not None and found[TP].offset == 2


async def test_latest_is_default_and_earliest_reads_all(broker: EmbeddedBroker) -> None:
    await produce(broker.bootstrap_servers, 5)
    async with (
        Consumer(broker.bootstrap_servers) as latest,
        Consumer(broker.bootstrap_servers, auto_offset_reset="earliest") as earliest,
    ):
        latest.assign([TP])
        earliest.assign([TP])
        assert [r.offset for r in await take(earliest, 5)] == [0, 1, 2, 3, 4]
        assert await latest.getmany(timeout_ms=200) == {}
        await produce(broker.bootstrap_servers, 1)
        assert [r.offset for r in await take(latest, 1)] == [5]


async def test_reset_none_requires_a_seek(broker: EmbeddedBroker) -> None:
    await produce(broker.bootstrap_servers, 3)
    async with Consumer(broker.bootstrap_servers, auto_offset_reset="none") as c:
        c.assign([TP])
        with pytest.raises(NoOffsetForPartitionError):
            await c.getmany(timeout_ms=2_000)
        c.seek(TP, 1)
        assert [r.offset for r in await take(c, 2)] == [1, 2]


async def test_out_of_range_resets_to_earliest_after_delete_records(broker: EmbeddedBroker) -> None:
    await produce(broker.bootstrap_servers, 10, linger_ms=0)
    async with Admin(broker.bootstrap_servers) as admin:
        assert await admin.delete_records({TP: 4}) == {TP: 4}
    async with Consumer(broker.bootstrap_servers, auto_offset_reset="earliest") as c:
        c.assign([TP])
        c.seek(TP, 1)  # below the log start offset now
        assert (await take(c, 1))[0].offset == 4
        c.seek(TP, 1_000)  # beyond the end
        await produce(broker.bootstrap_servers, 1)
        got = await take(c, 7)
        assert [r.offset for r in got] == list(range(4, 11))


@pytest.mark.interop
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_reads_aiokafka_compressed_batches_from_mid_batch(
    broker: EmbeddedBroker, codec: str
) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap_servers, compression_type=codec, linger_ms=100
    )
    await producer.start()
    try:
        futs = [
            await producer.send("events", b"v%d" % i, key=b"k", partition=0,
                                headers=[("i", b"%d" % i)])
            for i in range(10)
        ]  # fmt: skip
        await asyncio.gather(*futs)
    finally:
        await producer.stop()
    async with Consumer(broker.bootstrap_servers) as c:
        c.assign([TP])
        c.seek(TP, 6)  # the broker returns the whole compressed batch from offset 0
        got = await take(c, 4)
    assert [(r.offset, r.value, r.key) for r in got] == [
        (i, b"v%d" % i, b"k") for i in range(6, 10)
    ]
    assert got[0].headers == (("i", b"6"),)


async def test_small_buffers_keep_order_across_partitions(broker: EmbeddedBroker) -> None:
    async with Admin(broker.bootstrap_servers) as admin:
        await admin.create_topic("wide", 4)
    async with Producer(broker.bootstrap_servers, batch_size=2_000) as p:
        futs = [await p.send("wide", b"%d" % i, partition=i % 4) for i in range(2_000)]
        await asyncio.gather(*futs)
    tps = [TopicPartition("wide", i) for i in range(4)]
    async with Consumer(
        broker.bootstrap_servers, auto_offset_reset="earliest", max_buffered_records=7,
        max_partition_fetch_bytes=1_000,
    ) as c:  # fmt: skip
        c.assign(tps)
        got = await take(c, 2_000)
    for tp in tps:
        values = [int(r.value) for r in got if r.partition == tp.partition]
        assert values == list(range(tp.partition, 2_000, 4))


async def test_groups_need_a_group_id(broker: EmbeddedBroker) -> None:
    """Group features without ``group_id`` refuse loudly (tests/client/test_groups_client.py has
    the group behaviour itself)."""
    async with Consumer(broker.bootstrap_servers) as c:
        with pytest.raises(NotImplementedError, match="group_id"):
            c.subscribe(["events"])
        with pytest.raises(GroupsNotSupportedError):
            await c.commit()
        with pytest.raises(GroupsNotSupportedError):
            await c.committed(TP)


async def test_stop_ends_iteration_and_getmany(broker: EmbeddedBroker) -> None:
    c = Consumer(broker.bootstrap_servers)
    await c.start()
    c.assign([TP])

    async def drain() -> int:
        return len([r async for r in c])

    task = asyncio.create_task(drain())
    await asyncio.sleep(0.1)
    await c.stop()
    assert await asyncio.wait_for(task, BOUND) == 0
    with pytest.raises(ConsumerStoppedError):
        await c.getmany()


async def test_seek_on_unassigned_partition_is_an_error(broker: EmbeddedBroker) -> None:
    async with Consumer(broker.bootstrap_servers) as c:
        with pytest.raises(ValueError, match="not assigned"):
            c.seek(TP, 0)
