"""Interop: aiokafka (asyncio; its own protocol code) against a broker process.

aiokafka negotiates versions through ApiVersions (``api_version="auto"`` by default). Covered:
AIOKafkaAdminClient (CreateTopics, Metadata), AIOKafkaProducer (Produce with every codec: aiokafka
has all four through cramjam), AIOKafkaConsumer with ``assign()`` only and ``group_id=None`` (no
group API), ``offsets_for_times``, ``beginning_offsets``, ``end_offsets``. Every await is bounded
by ``asyncio.wait_for``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from sluice.protocol import messages as m
from sluice.protocol.framing import ADVERTISED_VERSIONS
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

_TIMEOUT_MS = int(DEADLINE_S * 1000)
API_PRODUCE, API_FETCH, API_LIST_OFFSETS = m.Produce.key, m.Fetch.key, m.ListOffsets.key
API_METADATA, API_FIND_COORDINATOR = m.Metadata.key, m.FindCoordinator.key


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from broker_fixture(tmp_path_factory, "aiokafka")


@pytest.fixture
async def admin(broker: BrokerProcess) -> AsyncIterator[AIOKafkaAdminClient]:
    client = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=_TIMEOUT_MS)
    await asyncio.wait_for(client.start(), DEADLINE_S)
    try:
        yield client
    finally:
        await asyncio.wait_for(client.close(), DEADLINE_S)


async def create_topic(
    admin: AIOKafkaAdminClient, name: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    response = await asyncio.wait_for(
        admin.create_topics(
            [NewTopic(name, partitions, 1, topic_configs=config or {})], timeout_ms=_TIMEOUT_MS
        ),
        DEADLINE_S,
    )
    errors = [(t[0], t[1]) for t in response.topic_errors]
    assert errors == [(name, 0)], errors


async def produce(broker: BrokerProcess, topic: str, samples: list[Sample], **conf: Any) -> None:
    """Send in four flushes (several batches); offsets come back consecutive from 0."""
    producer = AIOKafkaProducer(
        **{"bootstrap_servers": broker.bootstrap, "acks": 1, "linger_ms": 5, **conf}
    )
    await asyncio.wait_for(producer.start(), DEADLINE_S)
    try:
        futures = []
        chunk = max(1, len(samples) // 4)
        for start in range(0, len(samples), chunk):
            for s in samples[start : start + chunk]:
                futures.append(
                    await producer.send(
                        topic,
                        key=s.key,
                        value=s.value,
                        headers=list(s.headers),
                        timestamp_ms=s.timestamp,
                        partition=0,
                    )
                )
            await asyncio.wait_for(producer.flush(), DEADLINE_S)
        metadata = await asyncio.wait_for(asyncio.gather(*futures), DEADLINE_S)
        assert [m.offset for m in metadata] == list(range(len(samples)))
    finally:
        await asyncio.wait_for(producer.stop(), DEADLINE_S)


async def consumer(broker: BrokerProcess) -> AIOKafkaConsumer:
    c = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,  # assign() only: no coordinator, nothing committed
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=_TIMEOUT_MS + 5000,
        fetch_max_wait_ms=100,
    )
    await asyncio.wait_for(c.start(), DEADLINE_S)
    return c


async def consume(c: AIOKafkaConsumer, tp: TopicPartition, count: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count and time.monotonic() < deadline:
        batch = await asyncio.wait_for(c.getmany(tp, timeout_ms=200), DEADLINE_S)
        got.extend(batch.get(tp, []))
    assert len(got) == count, f"got {len(got)} of {count} records within {DEADLINE_S}s"
    return got


def assert_same(got: list[Any], samples: list[Sample], first_offset: int = 0) -> None:
    for i, (rec, s) in enumerate(zip(got, samples, strict=True)):
        assert rec.offset == first_offset + i
        assert rec.key == s.key
        assert rec.value == s.value
        assert tuple(rec.headers) == s.headers
        assert (rec.timestamp_type, rec.timestamp) == (0, s.timestamp)  # 0 = CreateTime


@pytest.mark.parametrize("codec", CODECS)
async def test_produce_consume_every_codec_and_offset_lookups(
    broker: BrokerProcess, admin: AIOKafkaAdminClient, codec: str
) -> None:
    topic = f"aio-{codec}"
    await create_topic(admin, topic)
    samples = sample_records(40, topic)
    await produce(broker, topic, samples, compression_type=None if codec == "none" else codec)

    tp = TopicPartition(topic, 0)
    c = await consumer(broker)
    try:
        assert await asyncio.wait_for(c.beginning_offsets([tp]), DEADLINE_S) == {tp: 0}
        assert await asyncio.wait_for(c.end_offsets([tp]), DEADLINE_S) == {tp: len(samples)}
        found = {}
        for name, ts in {
            "first": samples[0].timestamp,
            "exact": samples[17].timestamp,
            "between": samples[17].timestamp + 1,
            "after": samples[-1].timestamp + 1,
        }.items():
            found[name] = (await asyncio.wait_for(c.offsets_for_times({tp: ts}), DEADLINE_S))[tp]
        assert found["first"] is not None and found["first"].offset == 0
        assert found["exact"] is not None and found["exact"].offset == 17
        assert found["exact"].timestamp == samples[17].timestamp
        assert found["between"] is not None and found["between"].offset == 18
        assert found["after"] is None

        c.assign([tp])
        await asyncio.wait_for(c.seek_to_beginning(tp), DEADLINE_S)
        assert_same(await consume(c, tp, len(samples)), samples)
        c.seek(tp, 25)  # inside a batch: the client drops the records before 25 itself
        assert_same(await consume(c, tp, 15), samples[25:], first_offset=25)
    finally:
        await asyncio.wait_for(c.stop(), DEADLINE_S)


async def test_version_negotiation_and_metadata(
    broker: BrokerProcess, admin: AIOKafkaAdminClient
) -> None:
    await create_topic(admin, "aio-meta", partitions=3)
    c = await consumer(broker)
    try:
        assert await asyncio.wait_for(c.topics(), DEADLINE_S) >= {"aio-meta"}
        # aiokafka (>= 0.13) picks each request's version from the ApiVersions ranges its
        # connection recorded (a private attribute: there is no public accessor). They must be
        # exactly what the broker advertises (the group APIs included).
        conns = list(c._client._conns.values())
        assert conns
        for conn in conns:
            versions = conn._versions
            for key in (API_PRODUCE, API_FETCH, API_LIST_OFFSETS, API_METADATA):
                assert versions[key] == ADVERTISED_VERSIONS[key], key
            assert versions[API_FIND_COORDINATOR] == ADVERTISED_VERSIONS[API_FIND_COORDINATOR]
    finally:
        await asyncio.wait_for(c.stop(), DEADLINE_S)
    described = await asyncio.wait_for(admin.describe_topics(["aio-meta"]), DEADLINE_S)
    (topic,) = (t for t in described if t["topic"] == "aio-meta")
    assert topic["error_code"] == 0
    parts = sorted(topic["partitions"], key=lambda p: p["partition"])
    assert [(p["partition"], p["leader"], p["replicas"], p["isr"]) for p in parts] == [
        (i, 0, [0], [0]) for i in range(3)
    ]


async def test_small_segment_bytes_rolls_segments_on_disk(
    broker: BrokerProcess, admin: AIOKafkaAdminClient
) -> None:
    topic = "aio-roll"
    await create_topic(admin, topic, config={"segment.bytes": str(SEGMENT_BYTES)})
    samples = sample_records(60, topic)
    await produce(broker, topic, samples, max_batch_size=256, linger_ms=0)
    files = log_files(broker, topic)
    assert len(files) >= 4, files
    assert all(f.stat().st_size <= SEGMENT_BYTES for f in files)

    tp = TopicPartition(topic, 0)
    c = await consumer(broker)
    try:
        found = (await asyncio.wait_for(c.offsets_for_times({tp: samples[50].timestamp}), 15))[tp]
        assert found is not None and found.offset == 50
        c.assign([tp])
        await asyncio.wait_for(c.seek_to_beginning(tp), DEADLINE_S)
        assert_same(await consume(c, tp, len(samples)), samples)
    finally:
        await asyncio.wait_for(c.stop(), DEADLINE_S)
