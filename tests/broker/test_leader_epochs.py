"""Leader epochs on the wire, against an in-process broker on a real 127.0.0.1 socket.

OffsetForLeaderEpoch (API 23), the ``current_leader_epoch`` checks of Fetch v9+ / ListOffsets
v4+ (Kafka's ``Partition.getLocalLog`` order: epoch first, then leadership), the epochs
ListOffsets v4+ reports, OFFSET_NOT_AVAILABLE while HW lags the epoch's start, and Metadata's
epoch. Epochs are changed through ``ReplicaManager.make_leader`` / ``make_follower``, the path
the cluster mode's ZooKeeper watcher will take; a follower that does not exist is made up (as in
``test_replica_manager.py``) to hold HW back or to take leadership away.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol.records import build_batch, iter_batches
from sluice.server.replication.partition import NO_LEADER
from sluice.server.replication.replica_manager import ReplicaManager
from sluice.server.server import Server
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.log_manager import LogManager
from tests.broker.test_server import create_topic, metadata, produce, start_server
from tests.broker_util import WireClient

FETCH, LIST_OFFSETS, DELETE_RECORDS = m.Fetch.key, m.ListOffsets.key, m.DeleteRecords.key
OFFSET_FOR_LEADER_EPOCH = m.OffsetForLeaderEpoch.key
NONE, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER = 0, 1, 3, 6
FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, OFFSET_NOT_AVAILABLE = 74, 75, 78
LOCAL, FOLLOWER = 0, 1  # this broker's node.id, and a made-up second replica
TS = 1_700_000_000_000


def replicas(server: Server) -> ReplicaManager:
    assert server.replica_manager is not None
    return server.replica_manager


def records(n: int, ts: int = TS) -> bytes:
    return build_batch([(ts + i, None, b"r%d" % i) for i in range(n)])


async def produce_ok(c: WireClient, topic: str, n: int, ts: int = TS) -> int:
    resp = await produce(c, topic, records(n, ts))
    assert resp.error_code == NONE
    return int(resp.base_offset)


async def epochs_end(
    c: WireClient,
    wanted: list[tuple[str, int, int, int]],
    version: int = 3,
    replica_id: int = -1,
) -> list[tuple[int, int, int]]:
    """OffsetForLeaderEpoch for (topic, partition, current_leader_epoch, leader_epoch) each;
    [(error_code, leader_epoch, end_offset)] in the same order."""
    req_cls = m.OffsetForLeaderEpochRequest
    topics: dict[str, list[m.OffsetForLeaderEpochRequest.OffsetForLeaderPartition]] = {}
    for topic, partition, current, epoch in wanted:
        topics.setdefault(topic, []).append(
            req_cls.OffsetForLeaderPartition(
                partition=partition, current_leader_epoch=current, leader_epoch=epoch
            )
        )
    req = req_cls(
        replica_id=replica_id,
        topics=[req_cls.OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in topics.items()],
    )
    resp = await c.request(OFFSET_FOR_LEADER_EPOCH, version, req)
    out = [(p.error_code, p.leader_epoch, p.end_offset) for t in resp.topics for p in t.partitions]
    assert [(t.topic, p.partition) for t in resp.topics for p in t.partitions] == [
        (t, p) for t, p, _, _ in wanted
    ]
    return out


async def fetch_at(
    c: WireClient,
    topic: str,
    offset: int,
    current_leader_epoch: int = -1,
    *,
    version: int = 11,
    partition: int = 0,
    max_wait_ms: int = 0,
    timeout: float = 30.0,
) -> Any:
    req = m.FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        topics=[m.FetchRequest.FetchTopic(topic=topic, partitions=[m.FetchRequest.FetchPartition(
            partition=partition, current_leader_epoch=current_leader_epoch, fetch_offset=offset,
            partition_max_bytes=1 << 20)])],
    )  # fmt: skip
    resp = await c.request(FETCH, version, req, timeout=timeout)
    return resp.responses[0].partitions[0]


async def list_offset(
    c: WireClient,
    topic: str,
    timestamp: int,
    current_leader_epoch: int = -1,
    *,
    version: int = 5,
    replica_id: int = -1,
) -> tuple[int, int, int, int]:
    """(error_code, offset, timestamp, leader_epoch) of ListOffsets for partition 0."""
    req = m.ListOffsetsRequest(
        replica_id=replica_id,
        topics=[m.ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            m.ListOffsetsRequest.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=current_leader_epoch, timestamp=timestamp)
        ])],
    )  # fmt: skip
    resp = await c.request(LIST_OFFSETS, version, req)
    p = resp.topics[0].partitions[0]
    return p.error_code, p.offset, p.timestamp, p.leader_epoch


async def three_epochs(server: Server, c: WireClient, topic: str) -> None:
    """``topic``-0 with epochs 0 (offsets 0-2), 1 (3-4) and 3 (5-6; epoch 2 never led)."""
    assert await create_topic(c, topic) == NONE
    rm = replicas(server)
    await produce_ok(c, topic, 3, TS)
    assert rm.make_leader(topic, 0, 1)
    await produce_ok(c, topic, 2, TS + 100)
    assert rm.make_leader(topic, 0, 3)
    await produce_ok(c, topic, 2, TS + 200)


# --- OffsetForLeaderEpoch ------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3])
async def test_offset_for_leader_epoch_answers_the_end_of_each_epoch(
    server: Server, client: WireClient, version: int
) -> None:
    await three_epochs(server, client, "oe")
    asked = [0, 1, 2, 3, 4, -1]
    got = await epochs_end(client, [("oe", 0, 3, e) for e in asked], version)
    # Kafka's LeaderEpochFileCache.endOffsetFor: the largest epoch <= the one asked, ending where
    # the next higher epoch starts; the latest ends at LEO; above all (or -1): undefined.
    expected = [(0, 3), (1, 5), (1, 5), (3, 7), (-1, -1), (-1, -1)]
    if version == 0:  # v0 has no leader_epoch in the response: it decodes as -1
        expected = [(-1, end) for _, end in expected]
    assert got == [(NONE, e, end) for e, end in expected]


async def test_offset_for_leader_epoch_after_becoming_leader_without_appends(
    server: Server, client: WireClient
) -> None:
    """KIP-279: the new epoch starts at LEO when the broker becomes leader, not at its first
    append, so the previous epoch's end is known at once."""
    assert await create_topic(client, "kip279") == NONE
    await produce_ok(client, "kip279", 4)
    assert replicas(server).make_leader("kip279", 0, 7)
    got = await epochs_end(client, [("kip279", 0, -1, 0), ("kip279", 0, -1, 7)])
    assert got == [(NONE, 0, 4), (NONE, 7, 4)]
    log_ = server.log_manager.get_log("kip279", 0)  # type: ignore[union-attr]
    assert log_ is not None and log_.latest_epoch == 7


async def test_offset_for_leader_epoch_errors(server: Server, client: WireClient) -> None:
    await three_epochs(server, client, "err")
    assert await create_topic(client, "two", partitions=2) == NONE
    got = await epochs_end(
        client,
        [
            ("nope", 0, -1, 0),  # unknown topic
            ("err", 1, -1, 0),  # unknown partition
            ("err", 0, 1, 1),  # the client's epoch is older than the leader's 3
            ("err", 0, 4, 1),  # newer
            ("err", 0, 3, 1),  # the same: answered
            ("two", 1, 0, 0),
        ],
    )
    assert got == [
        (UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
        (UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
        (FENCED_LEADER_EPOCH, -1, -1),
        (UNKNOWN_LEADER_EPOCH, -1, -1),
        (NONE, 1, 5),
        (NONE, 0, 0),
    ]
    # v0/v1 carry no current_leader_epoch: no fencing.
    for version in (0, 1):
        (code, _, end), = await epochs_end(client, [("err", 0, 1, 1)], version)  # fmt: skip
        assert (code, end) == (NONE, 5)


@pytest.mark.parametrize("replica_id", [-1, -2, 1])
async def test_offset_for_leader_epoch_is_served_by_the_leader_only(
    server: Server, client: WireClient, replica_id: int
) -> None:
    """Kafka answers OffsetForLeaderEpoch only as leader, whoever asks: a consumer (-1), the
    debugging id (-2, also what v0-2 mean) and a broker alike. The epoch check comes first."""
    await three_epochs(server, client, "lead")
    rm = replicas(server)
    assert rm.make_follower("lead", 0, FOLLOWER, 5, [FOLLOWER, LOCAL], [FOLLOWER, LOCAL])
    got = await epochs_end(
        client, [("lead", 0, -1, 3), ("lead", 0, 5, 3), ("lead", 0, 4, 3)], replica_id=replica_id
    )
    assert got == [
        (NOT_LEADER_OR_FOLLOWER, -1, -1),
        (NOT_LEADER_OR_FOLLOWER, -1, -1),
        (FENCED_LEADER_EPOCH, -1, -1),  # epoch before leadership, as in Kafka's getLocalLog
    ]
    (code, _, _), = await epochs_end(client, [("lead", 0, -1, 3)], version=0)  # fmt: skip
    assert code == NOT_LEADER_OR_FOLLOWER
    # Leader again at a later epoch: answered.
    assert rm.make_leader("lead", 0, 6, [LOCAL], [LOCAL])
    assert await epochs_end(client, [("lead", 0, 6, 3)], replica_id=replica_id) == [(NONE, 3, 7)]


def test_offset_for_leader_epoch_for_a_partition_listed_but_not_open() -> None:
    """Kafka: a partition the cluster knows but this broker does not host ->
    NOT_LEADER_OR_FOLLOWER; one nobody knows -> UNKNOWN_TOPIC_OR_PARTITION."""

    class Unopened:  # a LogManager that lists topic t (2 partitions) but has no log open
        def get_log(self, topic: str, partition: int) -> None:
            return None

        def topics(self) -> dict[str, int]:
            return {"t": 2}

    rm = ReplicaManager(Unopened(), LOCAL)  # type: ignore[arg-type]
    assert [rm.last_offset_for_leader_epoch(t, p, -1, 0) for t, p in [("t", 1), ("t", 2),
                                                                       ("u", 0)]] == [
        (NOT_LEADER_OR_FOLLOWER, -1, -1),
        (UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
        (UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
    ]  # fmt: skip


# --- Fetch ---------------------------------------------------------------------------------------


async def test_fetch_checks_the_current_leader_epoch(server: Server, client: WireClient) -> None:
    assert await create_topic(client, "f") == NONE
    await produce_ok(client, "f", 2)
    assert replicas(server).make_leader("f", 0, 2)
    await produce_ok(client, "f", 1)
    p = await fetch_at(client, "f", 0, 2)
    headers = [h for _, h, _ in iter_batches(bytes(p.records))]
    assert p.error_code == NONE and [h.base_offset for h in headers] == [0, 2]
    # the batches carry the epochs they were written in
    assert [h.partition_leader_epoch for h in headers] == [0, 2]
    for current, code in ((1, FENCED_LEADER_EPOCH), (0, FENCED_LEADER_EPOCH),
                          (3, UNKNOWN_LEADER_EPOCH), (-1, NONE)):  # fmt: skip
        got = await fetch_at(client, "f", 0, current)
        assert got.error_code == code, current
        if code:
            assert len(got.records or b"") == 0
    # v4-8 have no current_leader_epoch: never fenced.
    assert (await fetch_at(client, "f", 0, 0, version=8)).error_code == NONE
    # A follower's partition: epoch check first, then NOT_LEADER_OR_FOLLOWER -- for v4-10;
    # from v11 on (the consumer's rack: KIP-392) a follower serves consumers too, as Kafka's.
    assert replicas(server).make_follower("f", 0, FOLLOWER, 3, [FOLLOWER, LOCAL], [FOLLOWER])
    assert (await fetch_at(client, "f", 0, 3, version=10)).error_code == NOT_LEADER_OR_FOLLOWER
    assert (await fetch_at(client, "f", 0, 3)).error_code == NONE
    assert (await fetch_at(client, "f", 0, -1, version=8)).error_code == NOT_LEADER_OR_FOLLOWER
    assert (await fetch_at(client, "f", 0, 2)).error_code == FENCED_LEADER_EPOCH
    assert (await fetch_at(client, "f", 0, 4)).error_code == UNKNOWN_LEADER_EPOCH


async def test_parked_fetch_completes_when_the_epoch_changes(
    server: Server, client: WireClient
) -> None:
    """A long poll parked with the current epoch answers FENCED_LEADER_EPOCH as soon as the
    epoch moves on (Kafka's DelayedFetch), not at the end of its max_wait_ms."""
    assert await create_topic(client, "park") == NONE
    await produce_ok(client, "park", 1)
    rm = replicas(server)
    waiting = asyncio.create_task(fetch_at(client, "park", 1, 0, max_wait_ms=60_000, timeout=20.0))
    async with asyncio.timeout(10):
        while not rm.fetch_purgatory.watched():
            await asyncio.sleep(0.005)
    assert not waiting.done()
    assert rm.make_leader("park", 0, 1)
    async with asyncio.timeout(10):  # far below the 60 s max wait
        p = await waiting
    assert p.error_code == FENCED_LEADER_EPOCH
    assert rm.fetch_purgatory.watched() == 0


# --- ListOffsets ---------------------------------------------------------------------------------


async def test_list_offsets_reports_the_epoch_of_the_offset(
    server: Server, client: WireClient
) -> None:
    await three_epochs(server, client, "lo")
    # latest: HW with the leader's epoch; earliest: the epoch of the log start offset; a
    # timestamp: the epoch of the batch holding the offset found.
    assert await list_offset(client, "lo", -1) == (NONE, 7, -1, 3)
    assert await list_offset(client, "lo", -2) == (NONE, 0, -1, 0)
    assert await list_offset(client, "lo", TS + 1) == (NONE, 1, TS + 1, 0)
    assert await list_offset(client, "lo", TS + 100) == (NONE, 3, TS + 100, 1)
    assert await list_offset(client, "lo", TS + 150) == (NONE, 5, TS + 200, 3)
    assert await list_offset(client, "lo", -3) == (NONE, 6, TS + 201, 3)
    assert await list_offset(client, "lo", TS + 999) == (NONE, -1, -1, -1)  # none that late
    # v1-3 carry no epoch (it decodes as -1).
    assert await list_offset(client, "lo", TS + 100, version=3) == (NONE, 3, TS + 100, -1)
    # Log start moved into epoch 1: earliest reports epoch 1.
    req = m.DeleteRecordsRequest(
        topics=[m.DeleteRecordsRequest.DeleteRecordsTopic(name="lo", partitions=[
            m.DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=4)])],
        timeout_ms=1000,
    )  # fmt: skip
    assert (await client.request(DELETE_RECORDS, 1, req)).topics[0].partitions[0].error_code == 0
    assert await list_offset(client, "lo", -2) == (NONE, 4, -1, 1)


async def test_list_offsets_checks_the_current_leader_epoch(
    server: Server, client: WireClient
) -> None:
    await three_epochs(server, client, "loe")
    assert (await list_offset(client, "loe", -1, 3))[0] == NONE
    assert (await list_offset(client, "loe", -1, 2))[0] == FENCED_LEADER_EPOCH
    assert (await list_offset(client, "loe", -2, 4))[0] == UNKNOWN_LEADER_EPOCH
    assert (await list_offset(client, "loe", TS, 0))[0] == FENCED_LEADER_EPOCH
    assert (await list_offset(client, "loe", -1, 0, version=3))[0] == NONE  # v1-3: no check
    assert (await list_offset(client, "nope", -1))[0] == UNKNOWN_TOPIC_OR_PARTITION
    rm = replicas(server)
    assert rm.make_follower("loe", 0, FOLLOWER, 4, [FOLLOWER, LOCAL], [FOLLOWER, LOCAL])
    assert (await list_offset(client, "loe", -1))[0] == NOT_LEADER_OR_FOLLOWER
    assert (await list_offset(client, "loe", -1, replica_id=FOLLOWER))[0] == NOT_LEADER_OR_FOLLOWER
    assert (await list_offset(client, "loe", -1, 3))[0] == FENCED_LEADER_EPOCH
    # Kafka's debugging replica id (-2) may read a follower, bounded by its LEO.
    assert await list_offset(client, "loe", -1, replica_id=-2) == (NONE, 7, -1, 4)
    assert (await list_offset(client, "loe", -1, 3, replica_id=-2))[0] == FENCED_LEADER_EPOCH


async def test_list_offsets_offset_not_available_while_hw_lags_the_epoch_start(
    server: Server, client: WireClient
) -> None:
    """Spec §4 / Kafka's Partition.fetchOffsetForTimestamp: a leader whose HW is below the
    start offset of its epoch answers a consumer's "latest" (and a timestamp it cannot find
    below HW) with OFFSET_NOT_AVAILABLE; earliest, offsets below HW, and brokers' or
    debugging requests (bounded by LEO) are answered."""
    assert await create_topic(client, "lag") == NONE
    rm = replicas(server)
    await produce_ok(client, "lag", 3, TS)  # HW 3
    assert rm.make_leader("lag", 0, 1, [LOCAL, FOLLOWER], [LOCAL, FOLLOWER])
    await produce_ok(client, "lag", 2, TS + 100)  # LEO 5, HW 3: the follower is not there
    assert await list_offset(client, "lag", -1) == (NONE, 3, -1, 1)  # epoch 1 starts at 3
    assert rm.make_leader("lag", 0, 2)  # epoch 2 starts at LEO 5 > HW 3
    assert (await list_offset(client, "lag", -1))[0] == OFFSET_NOT_AVAILABLE
    assert (await list_offset(client, "lag", TS + 100))[0] == OFFSET_NOT_AVAILABLE  # above HW
    assert await list_offset(client, "lag", TS + 1) == (NONE, 1, TS + 1, 0)
    assert await list_offset(client, "lag", -2) == (NONE, 0, -1, 0)
    assert await list_offset(client, "lag", -1, replica_id=-2) == (NONE, 5, -1, 2)
    assert await list_offset(client, "lag", -1, replica_id=FOLLOWER) == (NONE, 5, -1, 2)
    # The follower catches up: HW 5 reaches the epoch start.
    assert rm.update_follower_end_offset("lag", 0, FOLLOWER, 5)
    assert await list_offset(client, "lag", -1) == (NONE, 5, -1, 2)
    assert await list_offset(client, "lag", TS + 100) == (NONE, 3, TS + 100, 1)


# --- Metadata and restarts -----------------------------------------------------------------------


async def test_metadata_reports_the_leader_epoch_and_it_survives_a_restart(
    tmp_path: Path,
) -> None:
    srv = await start_server(tmp_path)
    try:
        c = await WireClient.connect("127.0.0.1", srv.port)
        assert await create_topic(c, "md", partitions=2) == NONE
        resp = await metadata(c, ["md"], version=9)
        assert [p.leader_epoch for p in resp.topics[0].partitions] == [0, 0]
        assert replicas(srv).make_leader("md", 1, 4)
        await produce_ok(c, "md", 1)
        resp = await metadata(c, ["md"], version=7)
        assert [p.leader_epoch for p in resp.topics[0].partitions] == [0, 4]
        resp = await metadata(c, ["md"], version=6)  # no leader_epoch before v7
        assert [p.leader_epoch for p in resp.topics[0].partitions] == [-1, -1]
        await c.close()
    finally:
        await srv.shutdown()
    # Standalone, the epoch comes back from the log's epoch cache: never backwards.
    srv = await start_server(tmp_path)
    try:
        c = await WireClient.connect("127.0.0.1", srv.port)
        resp = await metadata(c, ["md"], version=9)
        assert [p.leader_epoch for p in resp.topics[0].partitions] == [0, 4]
        assert await epochs_end(c, [("md", 1, 4, 4), ("md", 0, 0, 0)]) == [
            (NONE, 4, 0),
            (NONE, 0, 1),
        ]
        await c.close()
    finally:
        await srv.shutdown()


# --- Partition / ReplicaManager state ------------------------------------------------------------


@pytest.fixture
def rm(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager(tmp_path, LogConfig.from_properties({}))
    logs.open()
    logs.create_topic("t", 1)
    manager = ReplicaManager(logs, LOCAL)
    manager.startup()
    yield manager
    logs.close()


def test_leadership_changes_are_fenced_and_recorded(rm: ReplicaManager) -> None:
    partition = rm.get_partition("t", 0)
    assert partition is not None
    rm.append_records([("t", 0, records(3))], 1, 1000)
    assert rm.make_follower("t", 0, FOLLOWER, 2, [FOLLOWER, LOCAL], [FOLLOWER, LOCAL])
    assert (partition.leader_id, partition.leader_epoch, partition.is_leader) == (
        FOLLOWER,
        2,
        False,
    )
    assert partition.leader_epoch_start_offset == -1
    assert not rm.make_follower("t", 0, FOLLOWER, 1)  # stale: ignored
    assert not rm.make_leader("t", 0, 2)  # not newer
    with pytest.raises(ValueError, match="itself"):
        rm.make_follower("t", 0, LOCAL, 9)
    with pytest.raises(errors.UnknownTopicOrPartition):
        rm.make_leader("t", 1, 9)
    # The follower's log learns epochs from the leader's batches, not from make_follower.
    assert partition.log.latest_epoch == 0
    assert rm.make_leader("t", 0, 3, [LOCAL, FOLLOWER], [LOCAL])
    assert (partition.leader_id, partition.leader_epoch, partition.isr) == (LOCAL, 3, (LOCAL,))
    assert partition.leader_epoch_start_offset == 3
    assert partition.log.end_offset_for_epoch(0) == (0, 3)
    assert partition.log.end_offset_for_epoch(3) == (3, 3)


def test_local_log_checks_the_epoch_before_leadership(rm: ReplicaManager) -> None:
    partition = rm.get_partition("t", 0)
    assert partition is not None
    assert partition.local_log() is partition.log
    assert partition.local_log(0) is partition.log
    with pytest.raises(errors.UnknownLeaderEpoch):
        partition.local_log(1)
    assert rm.make_follower("t", 0, NO_LEADER, 4)  # offline
    with pytest.raises(errors.FencedLeaderEpoch):
        partition.local_log(3)
    with pytest.raises(errors.UnknownLeaderEpoch):
        partition.local_log(5)
    with pytest.raises(errors.NotLeaderOrFollower):
        partition.local_log(4)
    with pytest.raises(errors.NotLeaderOrFollower):
        partition.local_log(-1)
    assert partition.local_log(4, require_leader=False) is partition.log


async def test_parked_produce_answers_not_leader_when_leadership_moves(
    rm: ReplicaManager,
) -> None:
    assert rm.make_leader("t", 0, 1, [LOCAL, FOLLOWER], [LOCAL, FOLLOWER])
    _, delayed = rm.append_records([("t", 0, records(2))], -1, 30_000)
    assert delayed is not None and not delayed.completed  # waits for the follower
    assert rm.make_leader("t", 0, 2)  # a new term, still leader: keeps waiting
    assert not delayed.completed
    assert rm.make_follower("t", 0, FOLLOWER, 3)
    assert delayed.completed
    assert [r.error for r in delayed.results] == [NOT_LEADER_OR_FOLLOWER]
    assert len(rm.produce_purgatory) == 0


async def test_committed_offsets_are_stamped_with_the_offsets_partitions_epoch(
    server: Server, client: WireClient
) -> None:
    """The group coordinator writes ``__consumer_offsets`` through the partition's leader append:
    its batches carry the partition's current epoch (a fixed 0 would rewind the epoch cache to
    epoch 0 after an epoch change)."""
    coordinator = server.group_coordinator
    assert coordinator is not None
    assert await create_topic(client, "t") == 0
    store = coordinator.store
    store.ensure_topic()
    partition = store.partition_for("g")

    def commit(offset: int) -> None:
        codes = coordinator.commit_offsets(
            group_id="g", generation_id=-1, member_id="", group_instance_id=None,
            offsets=[("t", 0, offset, -1, "")],
        )  # fmt: skip
        assert codes == [0]

    server_log = store.log(partition)
    first = server_log.log_end_offset
    commit(1)
    assert replicas(server).make_leader("__consumer_offsets", partition, 3)
    second = server_log.log_end_offset
    commit(2)
    assert server_log.log_end_offset == second + 1
    assert server_log.latest_epoch == 3
    assert (server_log.epoch_for_offset(first), server_log.epoch_for_offset(second)) == (0, 3)
    assert server_log.end_offset_for_epoch(0) == (0, second)


# --- Fetch v12+'s last_fetched_epoch: diverging_epoch -------------------------------------------


async def fetch_after_epoch(
    c: WireClient,
    topic: str,
    offset: int,
    last_fetched_epoch: int,
    version: int = 12,
    max_wait_ms: int = 0,
    topic_id: Any = None,
) -> Any:
    """A consumer's Fetch of ``topic``-0 at ``offset`` whose last batch had
    ``last_fetched_epoch``; the partition's answer."""
    req = m.FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        topics=[m.FetchRequest.FetchTopic(
            topic=topic,
            topic_id=topic_id,
            partitions=[m.FetchRequest.FetchPartition(
                partition=0, fetch_offset=offset, last_fetched_epoch=last_fetched_epoch,
                partition_max_bytes=1 << 20,
            )],
        )],
        rack_id="",
    )  # fmt: skip
    resp = await c.request(FETCH, version, req)
    (p,) = resp.responses[0].partitions
    return p


def offsets_of(p: Any) -> list[int]:
    return [h.base_offset for _, h, _ in iter_batches(bytes(p.records))] if p.records else []


async def test_fetch_answers_a_diverging_epoch_to_a_fetcher_ahead_of_the_log(
    server: Server, client: WireClient
) -> None:
    """Kafka's ``Partition.readRecords``: the end of the fetcher's last epoch in this log (the
    largest epoch <= it) below the fetch offset, or an older epoch, is a divergence -- no
    records, ``diverging_epoch`` = that epoch and its end, answered at once; an epoch this log
    cannot place is OFFSET_OUT_OF_RANGE; -1 (what librdkafka and Kafka's consumer send) and
    v11 (no such field) read as before."""
    await three_epochs(server, client, "div")  # epochs 0: 0-2, 1: 3-4, 3: 5-6
    p = await fetch_after_epoch(client, "div", 5, 1)  # epoch 1 ends at 5: consistent
    assert (p.error_code, p.diverging_epoch.epoch, offsets_of(p)) == (NONE, -1, [5])
    p = await fetch_after_epoch(client, "div", 7, 3)  # the latest epoch ends at LEO
    assert (p.error_code, p.diverging_epoch.epoch, offsets_of(p)) == (NONE, -1, [])
    # It read epoch 1 past offset 5: records this log does not have (an unclean leader's).
    p = await fetch_after_epoch(client, "div", 6, 1)
    assert (p.error_code, p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (NONE, 1, 5)
    assert offsets_of(p) == [] and p.high_watermark == 7
    # It read an epoch 2 this log never had: epoch 1 (the largest below) ends at 5.
    p = await fetch_after_epoch(client, "div", 5, 2)
    assert (p.error_code, p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (NONE, 1, 5)
    # An epoch above every epoch here: undefined, OFFSET_OUT_OF_RANGE (Kafka's answer).
    p = await fetch_after_epoch(client, "div", 2, 4)
    assert (p.error_code, offsets_of(p)) == (OFFSET_OUT_OF_RANGE, [])
    # Without an epoch, or before v12, the same fetch is read as usual.
    p = await fetch_after_epoch(client, "div", 6, -1)
    assert (p.error_code, offsets_of(p)) == (NONE, [5])
    p = await fetch_after_epoch(client, "div", 6, 1, version=11)
    assert (p.error_code, offsets_of(p)) == (NONE, [5])
    # v13 (by topic id) the same; a long poll is answered at once.
    topic_id = (await metadata(client, ["div"], version=12, auto=False)).topics[0].topic_id
    loop = asyncio.get_running_loop()
    started = loop.time()
    p = await fetch_after_epoch(client, "", 6, 1, version=13, max_wait_ms=20_000, topic_id=topic_id)
    assert (p.error_code, p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (NONE, 1, 5)
    assert loop.time() - started < 10
