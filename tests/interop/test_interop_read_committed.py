"""read_committed consumers nobody here wrote (issue 26): librdkafka (confluent-kafka's
``Consumer`` defaults to read_committed), kafka-python and aiokafka with
``isolation_level="read_committed"`` -- and Sluice's own consumer beside them --, against an
in-process broker whose partitions hold committed, aborted and open transactions across two
partitions.

The transactional data goes in through the broker-internal leader append (as Produce will once
the transaction coordinator serves producers); the markers through WriteTxnMarkers over the wire.
Each client must see the committed records, never an aborted one, stop at the last stable
offset while a transaction is open (the plain record after it is not readable yet), and read
past it once the marker is written.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition

from sluice.client import Consumer as SluiceConsumer
from sluice.server.server import Server
from tests.broker.test_server import create_topic, start_server
from tests.broker.test_txn_partitions import append, marker, plain_batch, txn_batch, write_markers
from tests.broker_util import WireClient
from tests.interop_helpers import DEADLINE_S

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka

pytestmark = pytest.mark.interop

TOPIC = "rc"
#: What a read_committed reader sees per partition before the open transaction is committed
#: (in offset order), and after.
BEFORE = {0: [b"p0", b"c0-a", b"c0-b", b"late0"], 1: [b"c1-a", b"plain1"]}
AFTER = {0: [*BEFORE[0], b"open0", b"after-open0"], 1: BEFORE[1]}
ABORTED = {b"x0", b"x1", b"x0-2"}


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    srv = await start_server(tmp_path)
    try:
        await fill(srv)
        yield srv
    finally:
        await srv.shutdown()


async def fill(srv: Server) -> None:
    """The topic of the module docstring, written into ``srv``."""
    c = await WireClient.connect("127.0.0.1", srv.port)
    try:
        assert await create_topic(c, TOPIC, 2) == 0
        both = {TOPIC: [0, 1]}
        append(srv, TOPIC, plain_batch([b"p0"]), 0)
        append(srv, TOPIC, txn_batch(100, 0, [b"c0-a", b"c0-b"]), 0)  # committed, 2 partitions
        append(srv, TOPIC, txn_batch(100, 0, [b"c1-a"]), 1)
        append(srv, TOPIC, txn_batch(200, 0, [b"x0"]), 0)  # aborted, 2 partitions, interleaved
        append(srv, TOPIC, txn_batch(200, 0, [b"x1"]), 1)
        append(srv, TOPIC, txn_batch(200, 1, [b"x0-2"]), 0)
        assert set((await write_markers(c, marker(100, True, both))).values()) == {0}
        assert set((await write_markers(c, marker(200, False, both))).values()) == {0}
        append(srv, TOPIC, plain_batch([b"late0"]), 0)
        append(srv, TOPIC, plain_batch([b"plain1"]), 1)
        append(srv, TOPIC, txn_batch(300, 0, [b"open0"]), 0)  # left open
        append(srv, TOPIC, plain_batch([b"after-open0"]), 0)  # above the LSO
    finally:
        await c.close()


async def commit_open(srv: Server) -> None:
    c = await WireClient.connect("127.0.0.1", srv.port)
    try:
        assert await write_markers(c, marker(300, True, {TOPIC: [0]})) == {(300, TOPIC, 0): 0}
    finally:
        await c.close()


async def _read_until(
    getmany: Callable[..., Awaitable[dict[Any, list[Any]]]],
    want: dict[int, list[bytes]],
    got: dict[int, list[bytes]],
    settle_s: float,
    check_aborted: bool = True,
) -> None:
    """:func:`_poll_until` for an asyncio consumer's ``getmany``."""
    deadline = time.monotonic() + DEADLINE_S
    done_at: float | None = None
    while time.monotonic() < deadline:
        for tp, records in (await getmany(timeout_ms=200)).items():
            for r in records:
                assert r.value is not None
                assert not check_aborted or r.value not in ABORTED, r.value
                got.setdefault(tp.partition, []).append(r.value)
        if got == want:
            done_at = done_at or time.monotonic()
            if time.monotonic() - done_at >= settle_s:
                return
        elif done_at is not None:
            return
    raise AssertionError(f"read {got}, wanted {want}")


def _ck_poll(consumer: Consumer, never: set[bytes]) -> Callable[[], list[tuple[int, bytes]]]:
    """A :func:`_poll_until` poll of a librdkafka consumer that fails on a value of ``never``."""

    def poll() -> list[tuple[int, bytes]]:
        msg = consumer.poll(0.2)
        if msg is None or msg.error() is not None:
            return []
        value = msg.value()
        assert value is not None and value not in never, value
        return [(msg.partition(), value)]

    return poll


def _poll_until(
    poll: Callable[[], list[tuple[int, bytes]]],
    want: dict[int, list[bytes]],
    got: dict[int, list[bytes]],
    settle_s: float,
) -> None:
    """Poll (a blocking client) until ``got`` holds ``want`` and nothing more arrives for
    ``settle_s`` (so that a record past the LSO would show up), bounded by DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    done_at: float | None = None
    while time.monotonic() < deadline:
        for part, value in poll():
            got.setdefault(part, []).append(value)
        if got == want:
            done_at = done_at or time.monotonic()
            if time.monotonic() - done_at >= settle_s:
                return
        elif done_at is not None:
            return  # something more arrived: the caller's assertion shows what
    raise AssertionError(f"read {got}, wanted {want}")


async def test_librdkafka_default_consumer_reads_committed_only(server: Server) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{server.port}",
            "group.id": "rc-ck",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )  # fmt: skip  (no isolation.level: librdkafka's default is read_committed)
    got: dict[int, list[bytes]] = {}

    poll = _ck_poll(consumer, ABORTED)
    try:
        consumer.assign([CkTopicPartition(TOPIC, p, 0) for p in (0, 1)])
        await asyncio.to_thread(_poll_until, poll, BEFORE, got, 1.0)
        assert got == BEFORE
        await commit_open(server)
        await asyncio.to_thread(_poll_until, poll, AFTER, got, 0.5)
        assert got == AFTER
    finally:
        await asyncio.to_thread(consumer.close)


async def test_kafka_python_read_committed(server: Server) -> None:
    def start() -> kafka.KafkaConsumer:  # (blocking: off the loop the broker runs on)
        c = kafka.KafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{server.port}", isolation_level="read_committed",
            enable_auto_commit=False, auto_offset_reset="earliest",
        )  # fmt: skip
        c.assign([kafka.TopicPartition(TOPIC, p) for p in (0, 1)])
        c.seek_to_beginning()
        return c

    consumer = await asyncio.to_thread(start)
    got: dict[int, list[bytes]] = {}

    def poll() -> list[tuple[int, bytes]]:
        out = []
        for tp, records in consumer.poll(timeout_ms=200).items():
            for r in records:
                assert r.value not in ABORTED, r.value
                out.append((tp.partition, r.value))
        return out

    try:
        await asyncio.to_thread(_poll_until, poll, BEFORE, got, 1.0)
        assert got == BEFORE
        await commit_open(server)
        await asyncio.to_thread(_poll_until, poll, AFTER, got, 0.5)
        assert got == AFTER
    finally:
        await asyncio.to_thread(consumer.close)


async def test_aiokafka_read_committed(server: Server) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{server.port}", isolation_level="read_committed",
        enable_auto_commit=False, auto_offset_reset="earliest",
    )  # fmt: skip
    await consumer.start()
    got: dict[int, list[bytes]] = {}

    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in (0, 1)])
        await consumer.seek_to_beginning()
        await _read_until(consumer.getmany, BEFORE, got, 1.0)
        assert got == BEFORE
        # read_committed end offsets are the last stable offsets (ListOffsets isolation 1):
        # partition 0's open transaction starts at 8 (p0, 2 committed, 2 aborted, 2 markers,
        # late0); HW is 10.
        assert await consumer.end_offsets([TopicPartition(TOPIC, 0)]) == {
            TopicPartition(TOPIC, 0): 8
        }
        await commit_open(server)
        await _read_until(consumer.getmany, AFTER, got, 0.5)
        assert got == AFTER
    finally:
        await consumer.stop()


async def test_sluice_consumer_read_committed(server: Server) -> None:
    """Our consumer: read_uncommitted by default (Java's default), read_committed on request."""
    async with SluiceConsumer(f"127.0.0.1:{server.port}", auto_offset_reset="earliest") as plain:
        plain.assign([(TOPIC, 0)])
        seen: dict[int, list[bytes]] = {}
        everything = {0: [b"p0", b"c0-a", b"c0-b", b"x0", b"x0-2", b"late0", b"open0",
                          b"after-open0"]}  # fmt: skip
        await _read_until(plain.getmany, everything, seen, 0.2, check_aborted=False)
        assert seen == everything
    consumer = SluiceConsumer(
        f"127.0.0.1:{server.port}", auto_offset_reset="earliest", isolation_level="read_committed"
    )
    got: dict[int, list[bytes]] = {}
    async with consumer:
        consumer.assign([(TOPIC, 0), (TOPIC, 1)])
        await _read_until(consumer.getmany, BEFORE, got, 1.0)
        assert got == BEFORE
        await commit_open(server)
        await _read_until(consumer.getmany, AFTER, got, 0.5)
        assert got == AFTER


async def test_spark_source_read_committed(server: Server) -> None:
    """``format("sluice")``'s planning and reading without Spark: with
    ``kafka.isolation.level=read_committed`` latest is the LSO and the range holds no aborted
    record; the default (read_uncommitted) reads every data record below HW."""
    from sluice.pipeline.offsets import OffsetRange
    from sluice.pipeline.options import parse
    from sluice.pipeline.source import read_range
    from sluice.pipeline.wire import SyncClient
    from sluice.protocol.structs import TopicPartition as PipelineTopicPartition

    def values(level: str | None, until: int) -> list[bytes]:
        opts = {"kafka.bootstrap.servers": f"127.0.0.1:{server.port}", "subscribe": TOPIC}
        if level is not None:
            opts["kafka.isolation.level"] = level
        options = parse(opts, streaming=False)
        out: list[bytes] = []
        for batch in read_range(OffsetRange(TOPIC, 0, 0, until), options):
            out += batch.column("value").to_pylist()
        return out

    def latest(level: int) -> int:
        tp = PipelineTopicPartition(TOPIC, 0)
        with SyncClient(f"127.0.0.1:{server.port}", timeout=10, isolation_level=level) as c:
            return c.list_offsets({tp: -1})[tp]

    assert await asyncio.to_thread(latest, 1) == 8  # the open transaction's first offset
    assert await asyncio.to_thread(latest, 0) == 10
    assert await asyncio.to_thread(values, "read_committed", 8) == BEFORE[0]
    assert await asyncio.to_thread(values, None, 10) == [
        b"p0", b"c0-a", b"c0-b", b"x0", b"x0-2", b"late0", b"open0", b"after-open0",
    ]  # fmt: skip


def segments_values(data: Path, level: str | None) -> dict[int, list[bytes]]:
    """``format("sluice-segments")``'s planning and reading without Spark: each partition's
    values."""
    from sluice.pipeline.options import parse
    from sluice.pipeline.segments import plan_segments, read_segment

    opts = {"subscribe": TOPIC, "path": str(data)}
    if level is not None:
        opts["kafka.isolation.level"] = level
    options = parse(opts, streaming=False, segments=True)
    out: dict[int, list[bytes]] = {}
    for seg in plan_segments(data, options):
        for batch in read_segment(seg, include_headers=False):
            out.setdefault(seg.partition, []).extend(batch.column("value").to_pylist())
    return out


EVERYTHING = {
    0: [b"p0", b"c0-a", b"c0-b", b"x0", b"x0-2", b"late0", b"open0", b"after-open0"],
    1: [b"c1-a", b"x1", b"plain1"],
}


async def test_spark_segments_read_committed(server: Server) -> None:
    """``format("sluice-segments")`` from the files of the running broker (no snapshot yet: the
    LSO from the headers) and after its shutdown (the open transaction then comes from the
    producer snapshot): read_committed stops at the open transaction and skips the aborted
    records, read_uncommitted reads every data record; once the open transaction commits
    (files of a restarted broker), it and what follows appear."""
    data = server.config.data_dir
    assert await asyncio.to_thread(segments_values, data, "read_committed") == BEFORE
    assert await asyncio.to_thread(segments_values, data, None) == EVERYTHING
    await server.shutdown()
    assert list(data.glob(f"{TOPIC}-0/*.snapshot")), "a clean shutdown writes the snapshot"
    assert await asyncio.to_thread(segments_values, data, "read_committed") == BEFORE
    restarted = await start_server(data.parent)
    try:
        await commit_open(restarted)
        assert await asyncio.to_thread(segments_values, data, "read_committed") == AFTER
    finally:
        await restarted.shutdown()
    assert await asyncio.to_thread(segments_values, data, "read_committed") == AFTER


async def test_spark_segments_read_committed_across_segments(tmp_path: Path) -> None:
    """The same with a segment per batch: the aborted transaction's data and its marker (and
    so its ``.txnindex`` entry) lie in different segments, and the open transaction's
    segment and the ones after it are not read at all."""
    srv = await start_server(tmp_path, "log.segment.bytes=100")
    try:
        await fill(srv)
        data = srv.config.data_dir
        assert len(list(data.glob(f"{TOPIC}-0/*.log"))) >= 8
        assert len(list(data.glob(f"{TOPIC}-0/*.txnindex"))) == 1
        assert await asyncio.to_thread(segments_values, data, "read_committed") == BEFORE
        assert await asyncio.to_thread(segments_values, data, None) == EVERYTHING
    finally:
        await srv.shutdown()


async def test_kafka_python_admin_describes_producers_and_aborts_a_hanging_transaction(
    server: Server,
) -> None:
    """KIP-664's tooling (``kafka-transactions describe-producers`` / ``abort``) through
    kafka-python's admin client: DescribeProducers finds the open transaction's start offset,
    and its admin abort (WriteTxnMarkers to the partition leader, ABORT, coordinator epoch -1)
    ends it: the LSO moves on and read_committed readers skip its record."""
    from kafka.admin import AbortTransactionSpec, KafkaAdminClient

    tp = kafka.TopicPartition(TOPIC, 0)

    def admin_work() -> dict[int, Any]:
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{server.port}")
        try:
            before = admin.describe_producers([tp])[tp].active_producers
            admin.abort_transaction(AbortTransactionSpec(tp, 300, 0, -1))
            return {p.producer_id: p for p in before}
        finally:
            admin.close()

    producers = await asyncio.to_thread(admin_work)
    assert producers[300].current_transaction_start_offset == 8
    assert (producers[100].current_transaction_start_offset, producers[100].coordinator_epoch) == (
        -1,
        0,
    )
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{server.port}", "group.id": "rc-ab",
                         "enable.auto.commit": False})  # fmt: skip
    got: dict[int, list[bytes]] = {}

    poll = _ck_poll(consumer, {b"open0"})
    try:
        consumer.assign([CkTopicPartition(TOPIC, 0, 0)])
        want = {0: [*BEFORE[0], b"after-open0"]}
        await asyncio.to_thread(_poll_until, poll, want, got, 1.0)
        assert got == want
    finally:
        await asyncio.to_thread(consumer.close)


async def test_cli_consume_isolation_level(server: Server) -> None:
    """``sluice consume --isolation-level read_committed`` (kafka-console-consumer's flag)."""
    import subprocess

    from tests.client.test_cli import COMMAND

    def consume(*extra: str) -> list[str]:
        result = subprocess.run(
            [*COMMAND, "consume", "--bootstrap-server", f"127.0.0.1:{server.port}",
             "--topic", TOPIC, "--partition", "0", "--offset", "earliest",
             "--timeout-ms", "1500", *extra],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    committed = await asyncio.to_thread(consume, "--isolation-level", "read_committed")
    assert committed == [v.decode() for v in BEFORE[0]]
    everything = await asyncio.to_thread(consume)
    assert "x0" in everything and everything[-1] == "after-open0"


async def test_librdkafka_waits_for_stable_committed_offsets(server: Server) -> None:
    """A read_committed librdkafka consumer asks OffsetFetch v7 for stable offsets only; while
    a transaction's offset for its group is pending it gets UNSTABLE_OFFSET_COMMIT and retries,
    and starts at that offset once the transaction's marker makes it the committed one."""
    from tests.broker.test_txn_partitions import txn_commit

    c = await WireClient.connect("127.0.0.1", server.port)
    try:
        assert await txn_commit(c, "gstable", 400, {(TOPIC, 1): 4}) == {(TOPIC, 1): 0}
    finally:
        await c.close()
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{server.port}", "group.id": "gstable",
                         "enable.auto.commit": False, "auto.offset.reset": "latest"})  # fmt: skip
    got: dict[int, list[bytes]] = {}
    try:
        consumer.assign([CkTopicPartition(TOPIC, 1)])  # the group's committed offset
        poll = _ck_poll(consumer, ABORTED)
        await asyncio.to_thread(lambda: [poll() for _ in range(5)])  # ~1 s: it must wait
        assert got == {}
        offsets_partition = server.group_coordinator.store.partition_for("gstable")
        c = await WireClient.connect("127.0.0.1", server.port)
        try:
            end = {"__consumer_offsets": [offsets_partition]}
            assert set((await write_markers(c, marker(400, True, end))).values()) == {0}
        finally:
            await c.close()
        await asyncio.to_thread(_poll_until, poll, {1: [b"plain1"]}, got, 0.5)
        assert got == {1: [b"plain1"]}
    finally:
        await asyncio.to_thread(consumer.close)
