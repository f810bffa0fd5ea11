"""The partition side of transactions over the wire (issue 26): WriteTxnMarkers, Fetch v4+ with
read_committed (LSO bound, ``aborted_transactions``, ``last_stable_offset``, long poll),
ListOffsets with read_committed, DescribeProducers.

Transactional data is written through the broker-internal leader append
(``ReplicaManager.append_records``, as a Produce would once the transaction coordinator lets
Produce accept transactional batches); the markers through WriteTxnMarkers, over the wire,
as a transaction coordinator sends them.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol.records import build_batch, iter_records
from sluice.server.server import Server
from tests.broker.test_server import create_topic, fetch_request, start_server
from tests.broker_util import WireClient

TS = int(time.time() * 1000)  # now: an old timestamp would roll the segment (segment.ms)


def txn_batch(pid: int, seq: int, values: list[bytes], epoch: int = 0) -> bytes:
    return build_batch(
        [(TS + i, None, v) for i, v in enumerate(values)],
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True,
    )  # fmt: skip


def plain_batch(values: list[bytes]) -> bytes:
    return build_batch([(TS + i, None, v) for i, v in enumerate(values)])


def append(server: Server, topic: str, data: bytes, partition: int = 0) -> int:
    """A leader append through the replica manager; returns the first offset."""
    results, delayed = server.replica_manager.append_records([(topic, partition, data)], -1, 1000)
    assert delayed is None and results[0].error == 0, results
    info = results[0].info
    assert info is not None
    return int(info.first_offset)


def marker(
    pid: int,
    commit: bool,
    partitions: dict[str, list[int]],
    epoch: int = 0,
    coordinator_epoch: int = 0,
) -> Any:
    cls = m.WriteTxnMarkersRequest.WritableTxnMarker
    return cls(
        producer_id=pid,
        producer_epoch=epoch,
        transaction_result=commit,
        topics=[cls.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                for t, ps in partitions.items()],
        coordinator_epoch=coordinator_epoch,
    )  # fmt: skip


async def write_markers(c: WireClient, *markers: Any, version: int = 1) -> dict[Any, int]:
    """{(producer id, topic, partition): error code}"""
    resp = await c.request(
        m.WriteTxnMarkers.key, version, m.WriteTxnMarkersRequest(markers=list(markers))
    )
    return {
        (r.producer_id, t.name, p.partition_index): p.error_code
        for r in resp.markers
        for t in r.topics
        for p in t.partitions
    }


async def fetch_committed(c: WireClient, topic: str, offset: int, **kw: Any) -> Any:
    req = fetch_request(topic, offset, **kw)
    req.isolation_level = 1
    resp = await c.request(m.Fetch.key, 11, req)
    return resp.responses[0].partitions[0]


def values_of(records: Any) -> list[tuple[int, bytes | None, bool]]:
    """(offset, value, is control) of every record."""
    out = []
    for header, record in iter_records(bytes(records)):
        out.append((record.offset, record.value, header.is_control))
    return out


def visible(part: Any) -> list[bytes]:
    """What a read_committed client keeps of a fetch answer: the data records, minus those of
    the aborted transactions it lists (from each first offset on, per producer, until that
    producer's ABORT marker): the client algorithm of Kafka's ``CompletedFetch``."""
    aborted = {(a.producer_id, a.first_offset) for a in part.aborted_transactions or []}
    dropping: set[int] = set()
    out = []
    for header, record in iter_records(bytes(part.records)):
        pid = header.producer_id
        if any(p == pid and first <= header.base_offset for p, first in aborted):
            starts = [(p, f) for p, f in aborted if p == pid and f <= header.base_offset]
            for s in starts:
                aborted.discard(s)
            dropping.add(pid)
        if header.is_control:
            dropping.discard(pid)
            continue
        if pid in dropping and header.is_transactional:
            continue
        assert record.value is not None
        out.append(record.value)
    return out


async def test_markers_commit_and_abort_and_read_committed_fetch(
    server: Server, client: WireClient
) -> None:
    assert await create_topic(client, "t") == 0
    append(server, "t", plain_batch([b"before"]))  # 0
    append(server, "t", txn_batch(1000, 0, [b"a1", b"a2"]))  # 1-2 (aborted later)
    append(server, "t", txn_batch(2000, 0, [b"c1"]))  # 3 (committed later)
    append(server, "t", plain_batch([b"plain"]))  # 4

    # Both transactions open: read_committed stops at the first one's start.
    part = await fetch_committed(client, "t", 0)
    assert part.error_code == 0 and part.high_watermark == 5 and part.last_stable_offset == 1
    assert [v for _, v, _ in values_of(part.records)] == [b"before"]
    assert part.aborted_transactions == []
    # read_uncommitted: everything below HW, and the true LSO.
    resp = await client.request(m.Fetch.key, 11, fetch_request("t", 0))
    unc = resp.responses[0].partitions[0]
    assert len(values_of(unc.records)) == 5 and unc.last_stable_offset == 1
    assert unc.aborted_transactions is None

    codes = await write_markers(
        client, marker(1000, False, {"t": [0]}), marker(2000, True, {"t": [0]})
    )
    assert codes == {(1000, "t", 0): 0, (2000, "t", 0): 0}
    part = await fetch_committed(client, "t", 0)
    assert part.high_watermark == part.last_stable_offset == 7
    got = values_of(part.records)
    assert [(o, ctl) for o, _, ctl in got if ctl] == [(5, True), (6, True)]  # the markers
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(1000, 1)]
    assert visible(part) == [b"before", b"c1", b"plain"]
    # A fetch starting after the aborted transaction gets no aborted transactions.
    part = await fetch_committed(client, "t", 6)
    assert part.aborted_transactions == [] and len(values_of(part.records)) == 1

    # ListOffsets latest: read_committed answers the LSO, read_uncommitted HW.
    append(server, "t", txn_batch(3000, 0, [b"open"]))  # 7, left open
    for level, expected in ((1, 7), (0, 8)):
        req = m.ListOffsetsRequest(
            replica_id=-1, isolation_level=level,
            topics=[m.ListOffsetsRequest.ListOffsetsTopic(name="t", partitions=[
                m.ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])],
        )  # fmt: skip
        resp = await client.request(m.ListOffsets.key, 5, req)
        assert resp.topics[0].partitions[0].offset == expected, level


async def test_marker_errors_per_partition(server: Server, client: WireClient) -> None:
    assert await create_topic(client, "e", 2) == 0
    append(server, "e", txn_batch(7, 0, [b"x"], epoch=3))
    codes = await write_markers(
        client,
        marker(7, True, {"e": [0, 5], "nope": [0]}, epoch=3, coordinator_epoch=4),
    )
    assert codes == {
        (7, "e", 0): 0,
        (7, "e", 5): errors.UnknownTopicOrPartition.code,
        (7, "nope", 0): errors.UnknownTopicOrPartition.code,
    }
    # An older producer epoch is a zombie producer; an older coordinator epoch a zombie
    # coordinator: nothing is written for either.
    end = server.replica_manager.get_partition("e", 0)
    assert end is not None
    leo = end.log.log_end_offset
    codes = await write_markers(
        client,
        marker(7, False, {"e": [0]}, epoch=2, coordinator_epoch=4),
        version=0,
    )
    assert codes == {(7, "e", 0): errors.InvalidProducerEpoch.code}
    codes = await write_markers(client, marker(7, False, {"e": [0]}, epoch=3, coordinator_epoch=3))
    assert codes == {(7, "e", 0): errors.TransactionCoordinatorFenced.code}
    assert end.log.log_end_offset == leo
    # A marker for a producer without a transaction here is written (a retried marker).
    codes = await write_markers(client, marker(7, True, {"e": [1]}, epoch=3, coordinator_epoch=4))
    assert codes == {(7, "e", 1): 0}


async def test_read_committed_long_poll_wakes_on_the_marker(
    server: Server, client: WireClient
) -> None:
    """A parked read_committed fetch waits for the LSO, not HW: the transaction's data does
    not wake it; its COMMIT marker does."""
    assert await create_topic(client, "w") == 0
    append(server, "w", txn_batch(11, 0, [b"t1"]))
    started = time.monotonic()
    poll = asyncio.ensure_future(fetch_committed(client, "w", 0, max_wait_ms=20_000))
    await asyncio.sleep(0.3)  # (give the fetch time to park: it must not answer meanwhile)
    assert not poll.done()
    append(server, "w", txn_batch(11, 1, [b"t2"]))  # HW moves, the LSO does not
    await asyncio.sleep(0.3)
    assert not poll.done()
    other = await WireClient.connect("127.0.0.1", server.port)
    try:
        assert await write_markers(other, marker(11, True, {"w": [0]})) == {(11, "w", 0): 0}
    finally:
        await other.close()
    part = await asyncio.wait_for(poll, 10)
    assert time.monotonic() - started < 15
    assert server.metrics.get("fetch.woken") == 1  # by the marker only, not by the data
    assert part.last_stable_offset == 3 and visible(part) == [b"t1", b"t2"]


async def test_describe_producers(server: Server, client: WireClient) -> None:
    assert await create_topic(client, "d") == 0
    append(server, "d", plain_batch([b"p"]))
    append(server, "d", txn_batch(21, 0, [b"a", b"b"], epoch=2))
    idem = build_batch([(TS, None, b"i")], producer_id=22, producer_epoch=0, base_sequence=0)
    append(server, "d", idem)
    req = m.DescribeProducersRequest(topics=[
        m.DescribeProducersRequest.TopicRequest(name="d", partition_indexes=[0, 3]),
        m.DescribeProducersRequest.TopicRequest(name="missing", partition_indexes=[0]),
    ])  # fmt: skip
    resp = await client.request(m.DescribeProducers.key, 0, req)
    by = {(t.name, p.partition_index): p for t in resp.topics for p in t.partitions}
    assert by[("d", 3)].error_code == errors.UnknownTopicOrPartition.code
    assert by[("missing", 0)].error_code == errors.UnknownTopicOrPartition.code
    states = {
        s.producer_id: (s.producer_epoch, s.last_sequence, s.coordinator_epoch,
                        s.current_txn_start_offset, s.last_timestamp)
        for s in by[("d", 0)].active_producers
    }  # fmt: skip
    assert states == {21: (2, 1, -1, 1, TS + 1), 22: (0, 0, -1, -1, TS)}
    await write_markers(client, marker(21, True, {"d": [0]}, epoch=2, coordinator_epoch=5))
    resp = await client.request(m.DescribeProducers.key, 0, req)
    after = {s.producer_id: s for s in resp.topics[0].partitions[0].active_producers}
    assert after[21].current_txn_start_offset == -1 and after[21].coordinator_epoch == 5


# --- TxnOffsetCommit and the group coordinator's pending offsets ---------------------------------


async def txn_commit(
    c: WireClient,
    group: str,
    pid: int,
    offsets: dict[tuple[str, int], int],
    version: int = 3,
    **kw: Any,
) -> dict[tuple[str, int], int]:
    cls = m.TxnOffsetCommitRequest
    topic_cls = cls.TxnOffsetCommitRequestTopic
    by_topic: dict[str, list[Any]] = {}
    for (topic, part), offset in offsets.items():
        by_topic.setdefault(topic, []).append(topic_cls.TxnOffsetCommitRequestPartition(
            partition_index=part, committed_offset=offset, committed_metadata="m"))  # fmt: skip
    req = cls(
        transactional_id="tx", group_id=group, producer_id=pid,
        topics=[topic_cls(name=t, partitions=ps) for t, ps in by_topic.items()],
        **{"producer_epoch": 0, **kw},
    )  # fmt: skip
    resp = await c.request(m.TxnOffsetCommit.key, version, req)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


async def committed(c: WireClient, group: str, topic: str, part: int = 0) -> int:
    cls = m.OffsetFetchRequest
    req = cls(
        group_id=group, topics=[cls.OffsetFetchRequestTopic(name=topic, partition_indexes=[part])]
    )
    resp = await c.request(m.OffsetFetch.key, 5, req)
    p = resp.topics[0].partitions[0]
    assert p.error_code == 0 and resp.error_code == 0
    return int(p.committed_offset)


async def test_txn_offsets_pending_until_the_marker(server: Server, client: WireClient) -> None:
    assert await create_topic(client, "in", 2) == 0
    assert await txn_commit(client, "g1", 500, {("in", 0): 10, ("in", 1): 20}) == {
        ("in", 0): 0, ("in", 1): 0,
    }  # fmt: skip
    assert await committed(client, "g1", "in", 0) == -1  # pending: invisible
    offsets_partition = server.group_coordinator.store.partition_for("g1")
    end = {"__consumer_offsets": [offsets_partition]}
    assert await write_markers(client, marker(500, True, end)) == {
        (500, "__consumer_offsets", offsets_partition): 0
    }
    assert await committed(client, "g1", "in", 0) == 10
    assert await committed(client, "g1", "in", 1) == 20

    # An aborted transaction's offsets are dropped.
    assert await txn_commit(client, "g1", 501, {("in", 0): 99}, version=0) == {("in", 0): 0}
    await write_markers(client, marker(501, False, end))
    assert await committed(client, "g1", "in", 0) == 10

    # A plain commit written after a transaction's offsets wins over them at its commit.
    assert await txn_commit(client, "g1", 502, {("in", 1): 30}) == {("in", 1): 0}
    cls = m.OffsetCommitRequest
    plain = cls(group_id="g1", generation_id_or_member_epoch=-1, member_id="", topics=[
        cls.OffsetCommitRequestTopic(name="in", partitions=[
            cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=1, committed_offset=40, committed_metadata=None)])])  # fmt: skip
    resp = await client.request(m.OffsetCommit.key, 7, plain)
    assert resp.topics[0].partitions[0].error_code == 0
    await write_markers(client, marker(502, True, end))
    assert await committed(client, "g1", "in", 1) == 40

    # KIP-447 (v3): a named member must be one of the group's.
    codes = await txn_commit(client, "g1", 503, {("in", 0): 1}, generation_id=4, member_id="m-1")
    assert codes == {("in", 0): errors.UnknownMemberId.code}
    # Unknown partitions are refused one by one.
    assert await txn_commit(client, "g1", 503, {("nope", 0): 1}) == {
        ("nope", 0): errors.UnknownTopicOrPartition.code
    }


async def test_pending_txn_offsets_survive_a_restart(tmp_path: Path) -> None:
    """The coordinator's load keeps a transaction's offsets pending until a marker in the log
    decides them (Kafka's loader); a marker written after the load completes them too."""
    srv = await start_server(tmp_path)
    try:
        c = await WireClient.connect("127.0.0.1", srv.port)
        assert await create_topic(c, "in") == 0
        assert await txn_commit(c, "g2", 600, {("in", 0): 5}) == {("in", 0): 0}  # committed
        assert await txn_commit(c, "g2", 601, {("in", 0): 6}) == {("in", 0): 0}  # aborted
        assert await txn_commit(c, "g3", 602, {("in", 0): 7}) == {("in", 0): 0}  # stays open
        end = {"__consumer_offsets": [0]}
        assert await write_markers(c, marker(600, True, end), marker(601, False, end)) == {
            (600, "__consumer_offsets", 0): 0, (601, "__consumer_offsets", 0): 0,
        }  # fmt: skip
        await c.close()
    finally:
        await srv.shutdown()
    srv = await start_server(tmp_path)
    try:
        c = await WireClient.connect("127.0.0.1", srv.port)
        assert await committed(c, "g2", "in") == 5
        assert await committed(c, "g3", "in") == -1
        assert await write_markers(c, marker(602, True, {"__consumer_offsets": [0]})) == {
            (602, "__consumer_offsets", 0): 0
        }
        assert await committed(c, "g3", "in") == 7
        await c.close()
    finally:
        await srv.shutdown()


# --- authorization (Kafka's: ClusterAction/Alter on the cluster for markers; Write on the
# transactional id, Read on the group and each topic for TxnOffsetCommit; Read on the topic for
# DescribeProducers) --------------------------------------------------------------------------


async def test_authorization(tmp_path: Path) -> None:
    from sluice.server.security import acl as sacl
    from tests.security.test_authorization_interop import (
        ACL_FILE,
        ANONYMOUS,
        AUTHORIZER,
        seed_acls,
    )

    def allow(rtype: sacl.ResourceType, name: str, op: sacl.AclOperation) -> Any:
        return (
            sacl.ResourcePattern(rtype, name),
            sacl.AccessControlEntry(ANONYMOUS, "*", op, sacl.AclPermissionType.ALLOW),
        )

    async def markers_code(srv: Server) -> int:
        c = await WireClient.connect("127.0.0.1", srv.port)
        try:
            codes = await write_markers(c, marker(1, True, {"t": [0]}))
        finally:
            await c.close()
        assert list(codes) == [(1, "t", 0)]
        return codes[(1, "t", 0)]

    # Nothing allowed: markers are refused whole.
    srv = await start_server(tmp_path / "a", f"authorizer.class.name={AUTHORIZER}")
    try:
        srv.replica_manager.logs.create_topic("t", 1)
        assert await markers_code(srv) == errors.ClusterAuthorizationFailed.code
    finally:
        await srv.shutdown()

    data = tmp_path / "b" / "data"
    await asyncio.to_thread(  # (it runs the store's coroutines on a loop of its own)
        seed_acls,
        data,
        allow(sacl.ResourceType.CLUSTER, sacl.CLUSTER_NAME, sacl.AclOperation.CLUSTER_ACTION),
        allow(sacl.ResourceType.TRANSACTIONAL_ID, "tx", sacl.AclOperation.WRITE),
        allow(sacl.ResourceType.GROUP, "g", sacl.AclOperation.READ),
    )
    assert (data / ACL_FILE).is_file()
    srv = await start_server(tmp_path / "b", f"authorizer.class.name={AUTHORIZER}")
    try:
        srv.replica_manager.logs.create_topic("t", 1)
        assert await markers_code(srv) == 0
        c = await WireClient.connect("127.0.0.1", srv.port)
        try:
            # (txn_commit always names transactional id "tx")
            assert await txn_commit(c, "h", 9, {("t", 0): 1}) == {
                ("t", 0): errors.GroupAuthorizationFailed.code
            }
            assert await txn_commit(c, "g", 9, {("t", 0): 1}) == {
                ("t", 0): errors.TopicAuthorizationFailed.code
            }
            req = m.DescribeProducersRequest(
                topics=[m.DescribeProducersRequest.TopicRequest(name="t", partition_indexes=[0])]
            )
            resp = await c.request(m.DescribeProducers.key, 0, req)
            assert resp.topics[0].partitions[0].error_code == errors.TopicAuthorizationFailed.code
            other = m.TxnOffsetCommitRequest(
                transactional_id="other", group_id="g", producer_id=9, producer_epoch=0,
                topics=[m.TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name="t", partitions=[
                    m.TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.
                    TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                    committed_metadata=None)])])  # fmt: skip
            resp = await c.request(m.TxnOffsetCommit.key, 3, other)
            code = resp.topics[0].partitions[0].error_code
            assert code == errors.TransactionalIdAuthorizationFailed.code
        finally:
            await c.close()
    finally:
        await srv.shutdown()


async def test_txn_offset_commit_of_a_fenced_producer_epoch(
    server: Server, client: WireClient
) -> None:
    """A zombie producer (an epoch older than the one the offsets partition saw) cannot commit
    offsets into a transaction: INVALID_PRODUCER_EPOCH, nothing pending."""
    assert await create_topic(client, "in") == 0
    assert await txn_commit(client, "gz", 800, {("in", 0): 1}, producer_epoch=3) == {("in", 0): 0}
    assert await txn_commit(client, "gz", 800, {("in", 0): 2}, producer_epoch=2) == {
        ("in", 0): errors.InvalidProducerEpoch.code
    }
    await write_markers(client, marker(800, True, {"__consumer_offsets": [0]}, epoch=3))
    assert await committed(client, "gz", "in") == 1


async def test_offset_fetch_require_stable(server: Server, client: WireClient) -> None:
    """OffsetFetch v7 with ``require_stable`` (KIP-447, what a read_committed consumer sends):
    a partition with transactional offsets pending answers UNSTABLE_OFFSET_COMMIT until the
    marker; without the flag (or before v7) the last committed offset is answered."""
    assert await create_topic(client, "in", 2) == 0
    cls = m.OffsetCommitRequest
    plain = cls(group_id="gs", generation_id_or_member_epoch=-1, member_id="", topics=[
        cls.OffsetCommitRequestTopic(name="in", partitions=[
            cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=3, committed_metadata=None)
            for p in (0, 1)])])  # fmt: skip
    assert (await client.request(m.OffsetCommit.key, 7, plain)).topics[0].partitions[
        0
    ].error_code == 0
    assert await txn_commit(client, "gs", 900, {("in", 0): 8}) == {("in", 0): 0}

    async def fetch(version: int, stable: bool) -> dict[int, tuple[int, int]]:
        req = m.OffsetFetchRequest(
            group_id="gs",
            require_stable=stable,
            topics=[
                m.OffsetFetchRequest.OffsetFetchRequestTopic(name="in", partition_indexes=[0, 1])
            ],
        )
        resp = await client.request(m.OffsetFetch.key, version, req)
        assert resp.error_code == 0
        return {p.partition_index: (p.error_code, p.committed_offset)
                for p in resp.topics[0].partitions}  # fmt: skip

    unstable = errors.UnstableOffsetCommit.code
    assert await fetch(7, True) == {0: (unstable, -1), 1: (0, 3)}
    assert await fetch(7, False) == {0: (0, 3), 1: (0, 3)}
    assert await fetch(5, False) == {0: (0, 3), 1: (0, 3)}
    await write_markers(client, marker(900, True, {"__consumer_offsets": [0]}))
    assert await fetch(7, True) == {0: (0, 8), 1: (0, 3)}
