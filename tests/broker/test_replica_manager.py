"""ReplicaManager / Partition / purgatories against a real LogManager in tmp_path.

Replication does not exist yet, so a second replica is made up: the partition is made leader
with ISR [0, 1] and follower 1's LEO is fed by hand (what the follower fetch path will do).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.protocol import errors
from sluice.protocol.records import build_batch, decode_batch
from sluice.server.metadata.producer_id_manager import ProducerIdManager
from sluice.server.replication.delayed import DelayedProduce
from sluice.server.replication.replica_manager import ReplicaManager
from sluice.server.storage.layout import LEADER_EPOCH_CHECKPOINT
from sluice.server.storage.log import Isolation
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.log_manager import LogManager
from sluice.server.storage.vfs import OSVFS
from tests.broker.test_server import batch as wire_batch
from tests.broker.test_server import create_topic, list_offset, metadata, produce, start_server
from tests.broker_util import WireClient

LOCAL, FOLLOWER = 0, 1
WAIT_S = 10.0  # bound of every wait that must complete


def batch(n: int) -> bytes:
    return build_batch([(1_700_000_000_000 + i, None, b"v%d" % i) for i in range(n)])


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[LogManager]:
    logs = LogManager(tmp_path, LogConfig.from_properties({}))
    logs.open()
    logs.create_topic("t", 2)
    yield logs
    logs.close()


@pytest.fixture
def rm(manager: LogManager) -> ReplicaManager:
    replicas = ReplicaManager(manager, LOCAL)
    replicas.startup()
    return replicas


def with_follower(rm: ReplicaManager, epoch: int = 1) -> None:
    """t-0 led here at ``epoch`` with a second (made-up) replica in the ISR."""
    partition = rm.get_partition("t", 0)
    assert partition is not None
    assert partition.make_leader(epoch, [LOCAL, FOLLOWER], [LOCAL, FOLLOWER])


def test_standalone_leads_every_partition_at_epoch_0(rm: ReplicaManager) -> None:
    partition = rm.get_partition("t", 1)
    assert partition is not None
    assert (partition.leader_id, partition.leader_epoch) == (LOCAL, 0)
    assert (partition.replicas, partition.isr) == ((LOCAL,), (LOCAL,))
    assert rm.get_partition("t", 2) is None
    assert rm.leader_epoch("t", 2) == -1


class _EpochWriteVFS(OSVFS):
    """Records the thread of every atomic rename (each checkpoint write ends with one)."""

    def __init__(self) -> None:
        self.renames: list[tuple[str, str]] = []

    def rename(self, src: Path, dst: Path) -> None:
        self.renames.append((Path(dst).name, threading.current_thread().name))
        super().rename(src, dst)


def test_never_led_logs_get_their_first_epoch_in_parallel_and_once(tmp_path: Path) -> None:
    """Issue 27: a standalone restart of thousands of never-led partitions was bound by one
    durable leader-epoch write after the other. ``lead`` writes them on a thread pool;
    CreateTopics leads at once (as Kafka's controller elects a new partition's leader), so a
    later restart writes none."""
    vfs = _EpochWriteVFS()
    logs = LogManager(tmp_path, LogConfig.from_properties({}), vfs=vfs)
    logs.open()
    logs.create_topic("old", 6)  # as a data dir created before leading at creation
    logs.close()

    logs = LogManager(tmp_path, LogConfig.from_properties({}), vfs=vfs)
    logs.open()
    vfs.renames.clear()
    ReplicaManager(logs, LOCAL).startup()
    epoch_writes = [t for name, t in vfs.renames if name == LEADER_EPOCH_CHECKPOINT]
    assert len(epoch_writes) == 6
    assert all(t.startswith("first-epoch") for t in epoch_writes)
    for p in range(6):
        lines = (tmp_path / f"old-{p}" / LEADER_EPOCH_CHECKPOINT).read_text().split("\n")
        assert lines[:3] == ["0", "1", "0 0"]

    replicas = ReplicaManager(logs, LOCAL)
    made = logs.create_topic("new", 3)
    replicas.lead([(log_.topic, log_.partition) for log_ in made])
    assert all((tmp_path / f"new-{p}" / LEADER_EPOCH_CHECKPOINT).exists() for p in range(3))
    logs.close()

    logs = LogManager(tmp_path, LogConfig.from_properties({}), vfs=vfs)
    logs.open()
    vfs.renames.clear()
    restarted = ReplicaManager(logs, LOCAL)
    restarted.startup()
    assert [name for name, _ in vfs.renames if name == LEADER_EPOCH_CHECKPOINT] == []
    assert all(restarted.leader_epoch("new", p) == 0 for p in range(3))
    logs.close()


class _FailingEpochVFS(_EpochWriteVFS):
    """Fails the epoch checkpoint write of partition ``bad-1`` (a disk error)."""

    def rename(self, src: Path, dst: Path) -> None:
        if Path(dst).parent.name == "bad-1" and Path(dst).name == LEADER_EPOCH_CHECKPOINT:
            raise OSError(5, "Input/output error")
        super().rename(src, dst)


def test_a_failed_first_epoch_write_leaves_that_partition_to_its_first_request(
    tmp_path: Path,
) -> None:
    logs = LogManager(tmp_path, LogConfig.from_properties({}), vfs=_FailingEpochVFS())
    logs.open()
    made = logs.create_topic("bad", 3)
    replicas = ReplicaManager(logs, LOCAL)
    replicas.lead([(log_.topic, log_.partition) for log_ in made])  # does not raise
    assert [replicas.leader_epoch("bad", p) for p in (0, 2)] == [0, 0]
    with pytest.raises(OSError):
        replicas.get_partition("bad", 1)  # the error surfaces where it did before
    logs.close()


def test_append_moves_hw_to_leo_when_isr_is_the_leader(rm: ReplicaManager) -> None:
    results, delayed = rm.append_records([("t", 0, batch(3)), ("t", 0, batch(2))], -1, 1000)
    assert delayed is None  # acks=-1 completes at once: HW is already past the records
    offsets = [(r.error, r.info.first_offset if r.info else None) for r in results]
    assert offsets == [(0, 0), (0, 3)]
    log_ = rm.logs.get_log("t", 0)
    assert log_ is not None
    assert (log_.high_watermark, log_.log_end_offset) == (5, 5)


def test_append_errors_become_codes(rm: ReplicaManager) -> None:
    results, _ = rm.append_records([("t", 7, batch(1)), ("t", 0, b"")], 1, 1000)
    assert [r.error for r in results] == [
        errors.UnknownTopicOrPartition.code,
        errors.InvalidRecord.code,
    ]
    results, _ = rm.append_records([("t", 0, batch(1))], 2, 1000)
    assert [r.error for r in results] == [errors.InvalidRequiredAcks.code]
    assert rm.logs.get_log("t", 0).log_end_offset == 0  # type: ignore[union-attr]


def test_hw_is_min_leo_over_isr_and_reads_respect_isolation(rm: ReplicaManager) -> None:
    with_follower(rm)
    rm.append_records([("t", 0, batch(4))], 1, 1000)
    partition = rm.get_partition("t", 0)
    assert partition is not None
    log_ = partition.log
    assert (log_.high_watermark, log_.log_end_offset) == (0, 4)  # follower not heard from
    assert partition.read(0, 1 << 20, Isolation.HIGH_WATERMARK, True).slice is None
    assert partition.read(0, 1 << 20, Isolation.LOG_END, True).slice is not None
    assert rm.update_follower_end_offset("t", 0, FOLLOWER, 4)
    assert log_.high_watermark == 4
    consumer = partition.read(0, 1 << 20, Isolation.HIGH_WATERMARK, True)
    assert consumer.slice is not None and consumer.high_watermark == 4
    assert not rm.update_follower_end_offset("t", 0, FOLLOWER, 4)  # HW only moves forward


def test_leader_epoch_is_versioned_and_stamped(rm: ReplicaManager) -> None:
    with_follower(rm, epoch=3)
    partition = rm.get_partition("t", 0)
    assert partition is not None
    assert rm.leader_epoch("t", 0) == 3
    assert not partition.make_leader(2, [LOCAL], [LOCAL])  # stale state: fenced
    assert not partition.make_leader(3, [LOCAL], [LOCAL])  # not newer either
    assert (rm.leader_epoch("t", 0), partition.isr) == (3, (LOCAL, FOLLOWER))
    rm.append_records([("t", 0, batch(1))], 1, 1000)
    data = partition.read(0, 1 << 20, Isolation.LOG_END, True).slice
    assert data is not None
    assert decode_batch(data.read_bytes()).header.partition_leader_epoch == 3


async def test_parked_fetch_is_woken_by_an_append_to_its_partition(rm: ReplicaManager) -> None:
    delayed = rm.delayed_fetch([("t", 0)], Isolation.HIGH_WATERMARK)
    other = rm.delayed_fetch([("t", 1)], Isolation.HIGH_WATERMARK)
    assert rm.fetch_purgatory.watched() == 2
    assert not delayed.completed
    rm.append_records([("t", 0, batch(1))], 1, 1000)
    assert await rm.fetch_purgatory.wait(delayed, WAIT_S)
    assert not other.completed
    assert not await rm.fetch_purgatory.wait(other, 0.01)  # expires
    assert rm.fetch_purgatory.watched() == 0


async def test_parked_fetch_waits_for_its_bound_not_for_any_append(rm: ReplicaManager) -> None:
    with_follower(rm)
    consumer = rm.delayed_fetch([("t", 0)], Isolation.HIGH_WATERMARK)
    follower = rm.delayed_fetch([("t", 0)], Isolation.LOG_END)
    rm.append_records([("t", 0, batch(2))], 1, 1000)
    assert follower.completed  # LEO moved
    assert not consumer.completed  # HW did not
    rm.update_follower_end_offset("t", 0, FOLLOWER, 2)
    assert await rm.fetch_purgatory.wait(consumer, WAIT_S)


async def test_parked_fetch_answers_when_its_topic_is_deleted(rm: ReplicaManager) -> None:
    delayed = rm.delayed_fetch([("t", 1)], Isolation.HIGH_WATERMARK)
    rm.delete_topic("t")
    assert await rm.fetch_purgatory.wait(delayed, WAIT_S)


async def test_acks_all_waits_until_hw_passes_the_records(rm: ReplicaManager) -> None:
    with_follower(rm)
    results, delayed = rm.append_records([("t", 0, batch(3)), ("t", 1, batch(1))], -1, 1000)
    assert delayed is not None
    assert rm.produce_purgatory.watched() == 1  # t-1 (ISR = leader) needed no wait
    rm.update_follower_end_offset("t", 0, FOLLOWER, 2)  # HW 2: short of offset 3
    assert not delayed.completed
    rm.update_follower_end_offset("t", 0, FOLLOWER, 3)
    assert await rm.produce_purgatory.wait(delayed, WAIT_S)
    assert [r.error for r in delayed.results] == [0, 0]
    assert delayed.results is results
    assert rm.produce_purgatory.watched() == 0


async def test_parked_produces_are_checked_when_hw_moves_not_on_every_append(
    rm: ReplicaManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Kafka's rule: an append that leaves HW where it was only wakes fetches (each parked
    # produce re-checked per append made the leader's cost grow with the parked count).
    with_follower(rm)
    checks = []
    original = DelayedProduce.try_complete

    def counting(self: DelayedProduce) -> bool:
        checks.append(self)
        return original(self)

    monkeypatch.setattr(DelayedProduce, "try_complete", counting)
    _, first = rm.append_records([("t", 0, batch(2))], -1, 1000)
    assert first is not None and checks == [first]  # the check before parking
    follower = rm.delayed_fetch([("t", 0)], Isolation.LOG_END)
    _, second = rm.append_records([("t", 0, batch(1))], -1, 1000)
    assert second is not None
    assert follower.completed  # the append woke the follower's fetch...
    assert checks == [first, second]  # ...and did not re-check the parked produce
    rm.update_follower_end_offset("t", 0, FOLLOWER, 2)  # HW 2: the first one only
    assert first.completed and not second.completed
    rm.update_follower_end_offset("t", 0, FOLLOWER, 3)
    assert await rm.produce_purgatory.wait(second, WAIT_S)
    assert [r.error for r in first.results + second.results] == [0, 0]


async def test_a_cancelled_wait_unwatches_its_operation(rm: ReplicaManager) -> None:
    with_follower(rm)
    _, delayed = rm.append_records([("t", 0, batch(1))], -1, 60_000)
    assert delayed is not None
    waiter = asyncio.get_running_loop().create_task(rm.produce_purgatory.wait(delayed, 60))
    await asyncio.sleep(0)  # the task is parked on the operation
    assert rm.produce_purgatory.watched() == 1
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert rm.produce_purgatory.watched() == 0
    assert not rm.update_follower_end_offset("t", 0, FOLLOWER, 0)  # HW stays; nothing breaks
    assert rm.update_follower_end_offset("t", 0, FOLLOWER, 1)


async def test_acks_one_does_not_wait_for_the_isr(rm: ReplicaManager) -> None:
    with_follower(rm)
    results, delayed = rm.append_records([("t", 0, batch(1))], 1, 1000)
    assert delayed is None
    assert results[0].error == 0


async def test_acks_all_times_out(rm: ReplicaManager) -> None:
    with_follower(rm)
    _, delayed = rm.append_records([("t", 0, batch(1))], -1, 10)
    assert delayed is not None
    assert not await rm.produce_purgatory.wait(delayed, 0.01)
    assert delayed.results[0].error == errors.RequestTimedOut.code
    assert delayed.results[0].info is not None  # written, just not acknowledged in time
    assert rm.produce_purgatory.watched() == 0


async def test_acks_all_fails_when_the_partition_goes_away(rm: ReplicaManager) -> None:
    with_follower(rm)
    _, delayed = rm.append_records([("t", 0, batch(1))], -1, 1000)
    assert delayed is not None
    rm.delete_topic("t")
    assert await rm.produce_purgatory.wait(delayed, WAIT_S)
    assert delayed.results[0].error == errors.NotLeaderOrFollower.code


async def test_shutdown_completes_parked_requests(rm: ReplicaManager) -> None:
    with_follower(rm)
    _, produce = rm.append_records([("t", 0, batch(1))], -1, 60_000)
    fetch = rm.delayed_fetch([("t", 1)], Isolation.HIGH_WATERMARK)
    assert produce is not None
    rm.shutdown()
    assert fetch.completed and produce.completed
    assert produce.results[0].error == errors.RequestTimedOut.code
    assert (rm.fetch_purgatory.watched(), rm.produce_purgatory.watched()) == (0, 0)


def test_producer_ids_are_unique_and_increasing() -> None:
    ids = ProducerIdManager(clock_ms=lambda: 1_000)
    assert [ids.generate() for _ in range(3)] == [1_000, 1_001, 1_002]


@pytest.mark.parametrize(
    ("cls", "code", "retriable"),
    [
        (errors.NotLeaderOrFollower, 6, True),
        (errors.RequestTimedOut, 7, True),
        (errors.OffsetMetadataTooLarge, 12, False),
        (errors.CoordinatorNotAvailable, 15, True),
        (errors.NotEnoughReplicas, 19, True),
        (errors.NotEnoughReplicasAfterAppend, 20, True),
        (errors.InvalidRequiredAcks, 21, False),
        (errors.InvalidReplicaAssignment, 39, False),
        (errors.TopicDeletionDisabled, 73, False),
        (errors.FencedLeaderEpoch, 74, True),
        (errors.UnknownLeaderEpoch, 75, True),
        (errors.OffsetNotAvailable, 78, True),
        (errors.FencedInstanceId, 82, False),
    ],
)
def test_kafka_error_registry_has_the_replication_codes(
    cls: type[errors.KafkaError], code: int, retriable: bool
) -> None:
    assert (cls.code, cls.retriable) == (code, retriable)
    assert errors.for_code(code) is cls


async def test_metadata_and_list_offsets_report_the_partition_state(tmp_path: Path) -> None:
    server = await start_server(tmp_path)
    try:
        client = await WireClient.connect("127.0.0.1", server.port)
        try:
            assert await create_topic(client, "e") == 0
            assert (await produce(client, "e", wire_batch(2))).error_code == 0
            assert server.replica_manager is not None
            partition = server.replica_manager.get_partition("e", 0)
            assert partition is not None
            assert partition.make_leader(5, [LOCAL], [LOCAL])  # as a new term would
            md = await metadata(client, ["e"])
            p = md.topics[0].partitions[0]
            assert (p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes) == (
                LOCAL, 5, [LOCAL], [LOCAL]
            )  # fmt: skip
            latest = await list_offset(client, "e", -1)
            assert (latest.offset, latest.leader_epoch) == (2, 5)
            # every failed partition counts, unknown ones included
            missing = await produce(client, "e", wire_batch(1), partition=9)
            assert missing.error_code == errors.UnknownTopicOrPartition.code
            assert server.metrics.get("produce.errors") == 1
        finally:
            await client.close()
    finally:
        await server.shutdown()
