"""In-process broker on a real 127.0.0.1 socket, driven by our protocol codec as the client."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvloop

from sluice.protocol import messages as m
from sluice.protocol.framing import ADVERTISED_VERSIONS
from sluice.protocol.records import build_batch, decode_batch, iter_batches
from sluice.server.config import Config
from sluice.server.server import Server
from tests.broker_util import WireClient

PRODUCE, FETCH, LIST_OFFSETS, METADATA = (m.Produce.key, m.Fetch.key, m.ListOffsets.key,
                                         m.Metadata.key)  # fmt: skip
API_VERSIONS, CREATE_TOPICS = m.ApiVersions.key, m.CreateTopics.key
DELETE_TOPICS, DELETE_RECORDS = m.DeleteTopics.key, m.DeleteRecords.key
INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH = m.InitProducerId.key, m.OffsetForLeaderEpoch.key
GROUP_APIS = {
    a.key
    for a in (
        m.OffsetCommit,
        m.OffsetFetch,
        m.FindCoordinator,
        m.JoinGroup,
        m.Heartbeat,
        m.LeaveGroup,
        m.SyncGroup,
        m.DescribeGroups,
        m.ListGroups,
        m.DeleteGroups,
        m.OffsetDelete,
    )
}  # sluice.server.group.coordinator
ADMIN_APIS = {m.DescribeConfigs.key, m.AlterConfigs.key, m.IncrementalAlterConfigs.key,
              m.DescribeCluster.key, m.CreatePartitions.key, m.DescribeLogDirs.key,
              m.DescribeClientQuotas.key, m.AlterClientQuotas.key}  # fmt: skip
#: sluice.server.api.security (the ACL APIs answer SECURITY_DISABLED without an authorizer)
SECURITY_APIS = {m.DescribeAcls.key, m.CreateAcls.key, m.DeleteAcls.key,
                 m.DescribeUserScramCredentials.key, m.AlterUserScramCredentials.key}  # fmt: skip
#: sluice.server.api.transactional (the partition and group side of transactions)
TXN_APIS = {m.WriteTxnMarkers.key, m.TxnOffsetCommit.key, m.DescribeProducers.key,
            m.AddPartitionsToTxn.key, m.AddOffsetsToTxn.key, m.EndTxn.key,
            m.DescribeTransactions.key, m.ListTransactions.key}  # fmt: skip
SERVED = {PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS,
          DELETE_RECORDS, INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH, *GROUP_APIS,
          *ADMIN_APIS, *SECURITY_APIS, m.SaslHandshake.key, m.SaslAuthenticate.key,
          *TXN_APIS, m.DescribeTopicPartitions.key}  # fmt: skip


async def start_server(tmp_path: Path, *overrides: str) -> Server:
    config = Config.load(
        None, ["listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={tmp_path / 'data'}", *overrides]
    )
    server = Server(config)
    await server.start()
    return server


@pytest.fixture(params=["zero_copy", "copy"])
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Server]:
    zc = "true" if request.param == "zero_copy" else "false"
    srv = await start_server(tmp_path, f"sluice.fetch.zero.copy={zc}")
    try:
        yield srv
    finally:
        await srv.shutdown()


# --- helpers -------------------------------------------------------------------------------------


def batch(n: int, start: int = 0, ts: int = 1_700_000_000_000, size: int = 10) -> bytes:
    return build_batch(
        [(ts + i, f"k{start + i}".encode(), bytes([65 + (start + i) % 26]) * size)
         for i in range(n)]
    )  # fmt: skip


async def create_topic(c: WireClient, name: str, partitions: int = 1, **kw: Any) -> int:
    req = m.CreateTopicsRequest(
        topics=[m.CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=kw.pop("rf", 1),
            configs=[m.CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                     for k, v in kw.pop("configs", {}).items()],
        )],
        timeout_ms=1000,
        validate_only=kw.pop("validate_only", False),
    )  # fmt: skip
    resp = await c.request(CREATE_TOPICS, 4, req)
    return int(resp.topics[0].error_code)


async def produce(
    c: WireClient, topic: str, records: bytes, partition: int = 0, acks: int = 1, version: int = 8
) -> Any:
    req = m.ProduceRequest(
        acks=acks,
        timeout_ms=1000,
        topic_data=[m.ProduceRequest.TopicProduceData(
            name=topic,
            partition_data=[m.ProduceRequest.PartitionProduceData(index=partition,
                                                                  records=records)],
        )],
    )  # fmt: skip
    if acks == 0:
        await c.send(PRODUCE, version, req)
        return None
    resp = await c.request(PRODUCE, version, req)
    return resp.responses[0].partition_responses[0]


def fetch_request(
    topic: str,
    offset: int,
    partition: int = 0,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int = 10 * 1024 * 1024,
) -> Any:
    return m.FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        topics=[m.FetchRequest.FetchTopic(
            topic=topic,
            partitions=[m.FetchRequest.FetchPartition(
                partition=partition, fetch_offset=offset, partition_max_bytes=partition_max_bytes
            )],
        )],
    )  # fmt: skip


async def fetch(c: WireClient, topic: str, offset: int, version: int = 11, **kw: Any) -> Any:
    resp = await c.request(FETCH, version, fetch_request(topic, offset, **kw))
    return resp.responses[0].partitions[0]


async def list_offset(c: WireClient, topic: str, timestamp: int, version: int = 5) -> Any:
    req = m.ListOffsetsRequest(
        replica_id=-1,
        topics=[m.ListOffsetsRequest.ListOffsetsTopic(
            name=topic,
            partitions=[m.ListOffsetsRequest.ListOffsetsPartition(partition_index=0,
                                                                  timestamp=timestamp)],
        )],
    )  # fmt: skip
    resp = await c.request(LIST_OFFSETS, version, req)
    return resp.topics[0].partitions[0]


async def metadata(
    c: WireClient, topics: list[str] | None, version: int = 8, auto: bool = True
) -> Any:
    req = m.MetadataRequest(
        topics=None if topics is None else [m.MetadataRequest.MetadataRequestTopic(name=t)
                                            for t in topics],
        allow_auto_topic_creation=auto,
    )  # fmt: skip
    return await c.request(METADATA, version, req)


def same_batch_content(sent: bytes, stored: bytes | memoryview, base_offset: int) -> None:
    """The stored batch is the sent one with baseOffset assigned (and leader epoch stamped)."""
    stored = bytes(stored)
    assert int.from_bytes(stored[:8], "big", signed=True) == base_offset
    assert stored[8:12] == sent[8:12]  # batchLength
    assert stored[16:] == sent[16:]  # magic, CRC and everything the CRC covers


# --- ApiVersions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3])
async def test_api_versions_advertises_exactly_the_served_apis(
    client: WireClient, version: int
) -> None:
    from sluice.protocol.framing import decode_response

    if version == 3:
        resp = await client.request(API_VERSIONS, version, m.ApiVersionsRequest(
            client_software_name="t", client_software_version="1"))  # fmt: skip
    else:
        # v0-2 have an empty body: header v1 only (written by hand, as old clients send it)
        header = struct.pack(">hhih", API_VERSIONS, version, 5, 4) + b"test"
        await client.send_raw(struct.pack(">i", len(header)) + header)
        raw = await client.read_frame()
        assert raw is not None
        correlation, resp = decode_response(API_VERSIONS, version, raw)
        assert correlation == 5
    assert resp.error_code == 0
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert got == {k: v for k, v in ADVERTISED_VERSIONS.items() if k in SERVED}


async def test_api_versions_unknown_version_gets_v0_error_35(
    server: Server, client: WireClient
) -> None:
    # A v9 request: the header layout is known (flexible), the version is not.
    from sluice.protocol.framing import encode_request

    frame = bytearray(encode_request(API_VERSIONS, 3, 77, "future", m.ApiVersionsRequest()))
    frame[6:8] = (9).to_bytes(2, "big")
    await client.send_raw(bytes(frame))
    raw = await client.read_frame()
    assert raw is not None
    from sluice.protocol.framing import decode_response

    correlation, body = decode_response(API_VERSIONS, 0, raw)
    assert correlation == 77
    assert body.error_code == 35
    assert {k.api_key for k in body.api_keys} == SERVED
    # the connection is still usable
    resp = await client.request(API_VERSIONS, 3, m.ApiVersionsRequest())
    assert resp.error_code == 0


# --- Metadata / topics ---------------------------------------------------------------------------


async def test_metadata_auto_creates_and_describes(server: Server, client: WireClient) -> None:
    resp = await metadata(client, ["auto"])
    assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [(0, "127.0.0.1", server.port)]
    assert resp.controller_id == 0
    (topic,) = resp.topics
    assert (topic.name, topic.error_code) == ("auto", 0)
    (p,) = topic.partitions
    assert (p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes) == (0, 0, [0], [0])
    assert server.log_manager is not None and server.log_manager.get_log("auto", 0) is not None
    # not allowed by the request -> unknown
    resp = await metadata(client, ["other"], auto=False)
    assert resp.topics[0].error_code == 3
    # null topics = all topics
    resp = await metadata(client, None)
    assert [t.name for t in resp.topics] == ["auto"]


async def test_metadata_invalid_name_and_auto_create_disabled(tmp_path: Path) -> None:
    srv = await start_server(tmp_path, "auto.create.topics.enable=false")
    c = await WireClient.connect("127.0.0.1", srv.port)
    try:
        resp = await metadata(c, ["nope"])
        assert resp.topics[0].error_code == 3
        assert srv.log_manager is not None and srv.log_manager.topics() == {}
    finally:
        await c.close()
        await srv.shutdown()
    srv = await start_server(tmp_path)
    c = await WireClient.connect("127.0.0.1", srv.port)
    try:
        resp = await metadata(c, ["bad/name"])
        assert resp.topics[0].error_code == 17
    finally:
        await c.close()
        await srv.shutdown()


async def test_create_topics_errors(server: Server, client: WireClient) -> None:
    assert await create_topic(client, "t1", 3) == 0
    assert server.log_manager is not None and server.log_manager.topics()["t1"] == 3
    assert await create_topic(client, "t1", 3) == 36
    assert await create_topic(client, "t2", 1, rf=3) == 38
    assert await create_topic(client, "t3", 0) == 37
    assert await create_topic(client, "t4", 1, configs={"segment.bytes": "x"}) == 40
    assert await create_topic(client, "t5", 1, validate_only=True) == 0
    assert await create_topic(client, "bad name!", 1) == 17
    assert await create_topic(client, "t6", -1, rf=-1) == 0  # broker defaults
    assert server.log_manager.topics() == {"t1": 3, "t6": 1}


async def test_create_topics_with_assignments_and_duplicates(
    server: Server, client: WireClient
) -> None:
    topic = m.CreateTopicsRequest.CreatableTopic
    assign = m.CreateTopicsRequest.CreatableReplicaAssignment
    req = m.CreateTopicsRequest(
        topics=[
            topic(name="as-ok", num_partitions=-1, replication_factor=-1,
                  assignments=[assign(partition_index=i, broker_ids=[0]) for i in range(3)]),
            topic(name="as-bad", num_partitions=-1, replication_factor=-1,
                  assignments=[assign(partition_index=0, broker_ids=[0, 1])]),
            topic(name="as-mixed", num_partitions=2, replication_factor=1,
                  assignments=[assign(partition_index=0, broker_ids=[0])]),
            topic(name="dup", num_partitions=1, replication_factor=1),
            topic(name="dup", num_partitions=1, replication_factor=1),
        ],
        timeout_ms=1000,
    )  # fmt: skip
    resp = await client.request(CREATE_TOPICS, 4, req)
    codes = [(t.name, t.error_code) for t in resp.topics]
    assert codes == [("as-ok", 0), ("as-bad", 39), ("as-mixed", 42), ("dup", 42), ("dup", 42)]
    assert all(t.error_message for t in resp.topics[1:])
    assert server.log_manager is not None and server.log_manager.topics() == {"as-ok": 3}


async def test_delete_topics(server: Server, client: WireClient) -> None:
    assert await create_topic(client, "gone") == 0
    resp = await client.request(DELETE_TOPICS, 3, m.DeleteTopicsRequest(
        topic_names=["gone", "never"], timeout_ms=1000))  # fmt: skip
    assert [(r.name, r.error_code) for r in resp.responses] == [("gone", 0), ("never", 3)]
    resp = await metadata(client, ["gone"], auto=False)
    assert resp.topics[0].error_code == 3


async def test_init_producer_id(client: WireClient) -> None:
    req = m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)
    a = await client.request(INIT_PRODUCER_ID, 1, req)
    b = await client.request(INIT_PRODUCER_ID, 0, req)
    assert (a.error_code, a.producer_epoch, b.error_code) == (0, 0, 0)
    assert b.producer_id > a.producer_id >= 0
    # a transactional id: NOT_COORDINATOR until FindCoordinator created __transaction_state
    req = m.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60000)
    assert (await client.request(INIT_PRODUCER_ID, 1, req)).error_code == 16
    find = m.FindCoordinatorRequest(key="tx", key_type=1)
    assert (await client.request(m.FindCoordinator.key, 2, find)).error_code == 0
    first = await client.request(INIT_PRODUCER_ID, 1, req)
    again = await client.request(INIT_PRODUCER_ID, 1, req)
    assert (first.error_code, first.producer_epoch) == (0, 0)
    assert (again.error_code, again.producer_id, again.producer_epoch) == (0, first.producer_id, 1)
    too_long = m.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=900_001)
    assert (await client.request(INIT_PRODUCER_ID, 1, too_long)).error_code == 50


# --- Produce / Fetch -----------------------------------------------------------------------------


@pytest.mark.parametrize("produce_version, fetch_version", [(3, 4), (8, 11), (5, 7)])
async def test_produce_then_fetch_returns_the_same_bytes(
    client: WireClient, produce_version: int, fetch_version: int
) -> None:
    assert await create_topic(client, "pf") == 0
    b1, b2 = batch(3), batch(5, start=3)
    r1 = await produce(client, "pf", b1, version=produce_version)
    r2 = await produce(client, "pf", b2, version=produce_version)
    assert (r1.error_code, r1.base_offset) == (0, 0)
    assert (r2.error_code, r2.base_offset) == (0, 3)
    p = await fetch(client, "pf", 0, version=fetch_version)
    assert p.error_code == 0 and p.high_watermark == 8
    stored = [bytes(b) for _, _, b in iter_batches(bytes(p.records))]
    assert len(stored) == 2
    same_batch_content(b1, stored[0], 0)
    same_batch_content(b2, stored[1], 3)
    values = [r.value for s in stored for r in decode_batch(s).records]
    assert values == [bytes([65 + i]) * 10 for i in range(8)]
    # from the middle of the second batch: whole batches are returned
    p = await fetch(client, "pf", 5, version=fetch_version)
    assert [h.base_offset for _, h, _ in iter_batches(bytes(p.records))] == [3]
    # caught up: empty, no error
    p = await fetch(client, "pf", 8, version=fetch_version)
    assert (p.error_code, len(p.records or b"")) == (0, 0)
    # beyond the end
    p = await fetch(client, "pf", 9, version=fetch_version)
    assert p.error_code == 1


async def test_produce_errors(server: Server, client: WireClient) -> None:
    assert await create_topic(client, "pe") == 0
    r = await produce(client, "missing", batch(1))
    assert r.error_code == 3
    r = await produce(client, "pe", batch(1), partition=5)
    assert r.error_code == 3
    r = await produce(client, "pe", batch(1), acks=2)
    assert r.error_code == 21
    corrupt = bytearray(batch(2))
    corrupt[-1] ^= 0xFF  # CRC mismatch
    r = await produce(client, "pe", bytes(corrupt))
    assert r.error_code == 2
    assert server.log_manager is not None
    assert server.log_manager.get_log("pe", 0).log_end_offset == 0  # type: ignore[union-attr]
    r = await produce(client, "pe", batch(2), acks=-1)
    assert (r.error_code, r.base_offset) == (0, 0)


async def test_acks_zero_sends_no_response(server: Server, client: WireClient) -> None:
    assert await create_topic(client, "a0") == 0
    await produce(client, "a0", batch(2), acks=0)
    await produce(client, "a0", batch(2, start=2), acks=0)
    # The next response on the connection is the Metadata one (correlation checked).
    resp = await metadata(client, ["a0"])
    assert resp.topics[0].error_code == 0
    p = await fetch(client, "a0", 0)
    assert p.high_watermark == 4
    # an error with acks=0 closes the connection (Kafka's only way to tell such a client)
    await produce(client, "missing", batch(1), acks=0)
    assert await client.read_frame(timeout=10) is None
    assert server.metrics.get("connections.closed.acks0_error") == 1


async def test_fetch_limits_and_min_one_message(client: WireClient) -> None:
    assert await create_topic(client, "lim") == 0
    big = [batch(1, start=i, size=1000) for i in range(5)]
    for b in big:
        assert (await produce(client, "lim", b)).error_code == 0
    # partition_max_bytes smaller than one batch: still one whole batch (first partition)
    p = await fetch(client, "lim", 0, partition_max_bytes=10)
    assert len(list(iter_batches(bytes(p.records)))) == 1
    # limit of ~2.5 batches: two whole batches (and, like Kafka, possibly a cut-off tail)
    limit = len(big[0]) * 5 // 2
    p = await fetch(client, "lim", 0, partition_max_bytes=limit)
    assert len(p.records) <= limit
    assert len(list(iter_batches(bytes(p.records), allow_partial_tail=True))) == 2


async def test_fetch_two_partitions_response_max_bytes(client: WireClient) -> None:
    assert await create_topic(client, "two", 2) == 0
    b = batch(1, size=2000)
    for part in (0, 1):
        assert (await produce(client, "two", b, partition=part)).error_code == 0
    req = m.FetchRequest(
        max_wait_ms=0, min_bytes=1, max_bytes=100, isolation_level=0,
        topics=[m.FetchRequest.FetchTopic(topic="two", partitions=[
            m.FetchRequest.FetchPartition(partition=i, fetch_offset=0, partition_max_bytes=10**6)
            for i in (0, 1)])],
    )  # fmt: skip
    resp = await client.request(FETCH, 11, req)
    sizes = [len(p.records or b"") for p in resp.responses[0].partitions]
    # the first partition gets one whole batch despite max_bytes; the second nothing
    assert sizes == [len(b), 0]


async def test_long_poll_is_woken_by_produce(server: Server, client: WireClient) -> None:
    assert await create_topic(client, "lp") == 0
    fetch_task = asyncio.create_task(fetch(client, "lp", 0, max_wait_ms=60_000))
    assert server.replica_manager is not None
    for _ in range(2000):  # bounded: until the fetch is parked on the partition
        if server.replica_manager.fetch_purgatory.watched():
            break
        await asyncio.sleep(0.005)
    assert server.replica_manager.fetch_purgatory.watched() == 1
    assert not fetch_task.done()  # it is waiting, not answering empty
    other = await WireClient.connect("127.0.0.1", server.port)
    try:
        b = batch(2)
        r = await produce(other, "lp", b)
        assert r.error_code == 0
    finally:
        await other.close()
    p = await asyncio.wait_for(fetch_task, 30)  # far below max_wait: woken, not timed out
    same_batch_content(b, bytes(p.records), 0)
    assert server.metrics.get("fetch.woken") >= 1


async def test_long_poll_times_out_empty(client: WireClient) -> None:
    assert await create_topic(client, "idle") == 0
    p = await fetch(client, "idle", 0, max_wait_ms=50)
    assert (p.error_code, len(p.records or b"")) == (0, 0)


async def test_list_offsets(client: WireClient) -> None:
    assert await create_topic(client, "lo") == 0
    ts = 1_700_000_000_000
    for i in range(3):
        b = build_batch([(ts + 10 * i, None, b"x"), (ts + 10 * i + 5, None, b"y")])
        assert (await produce(client, "lo", b)).error_code == 0
    assert (await list_offset(client, "lo", -2)).offset == 0
    assert (await list_offset(client, "lo", -1)).offset == 6
    found = await list_offset(client, "lo", ts + 12)
    assert (found.offset, found.timestamp) == (3, ts + 15)
    assert (await list_offset(client, "lo", ts + 1000)).offset == -1
    assert (await list_offset(client, "lo", -1, version=1)).offset == 6
    assert (await list_offset(client, "nope", -1)).error_code == 3


async def test_list_offsets_v7_to_v9_special_timestamps(client: WireClient) -> None:
    """ListOffsets v7 (-3, max timestamp: the first record holding it, mid-batch), v8 (-4,
    earliest local: the log start offset without tiered storage) and v9 (-5, latest tiered:
    nothing is tiered, so offset -1, epoch -1, no error), Kafka 3.9's answers."""
    assert await create_topic(client, "lo-max") == 0
    ts = 1_700_000_000_000
    for stamps in ([ts, ts + 50, ts + 7], [ts + 9, ts + 99, ts + 2, ts + 99]):
        b = build_batch([(t, None, b"x") for t in stamps])
        assert (await produce(client, "lo-max", b)).error_code == 0
    for version in (7, 8, 9):
        found = await list_offset(client, "lo-max", -3, version=version)
        assert (found.error_code, found.offset, found.timestamp) == (0, 4, ts + 99)
        assert found.leader_epoch == 0
    local = await list_offset(client, "lo-max", -4, version=8)
    assert (local.error_code, local.offset, local.timestamp) == (0, 0, -1)
    tiered = await list_offset(client, "lo-max", -5, version=9)
    assert (tiered.error_code, tiered.offset, tiered.timestamp, tiered.leader_epoch) == (
        0, -1, -1, -1,
    )  # fmt: skip


async def test_delete_records(client: WireClient) -> None:
    assert await create_topic(client, "dr") == 0
    for i in range(3):
        assert (await produce(client, "dr", batch(2, start=2 * i))).error_code == 0
    req = m.DeleteRecordsRequest(
        topics=[m.DeleteRecordsRequest.DeleteRecordsTopic(name="dr", partitions=[
            m.DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=4)])],
        timeout_ms=1000,
    )  # fmt: skip
    resp = await client.request(DELETE_RECORDS, 1, req)
    part = resp.topics[0].partitions[0]
    assert (part.error_code, part.low_watermark) == (0, 4)
    assert (await list_offset(client, "dr", -2)).offset == 4
    p = await fetch(client, "dr", 0)
    assert p.error_code == 1
    p = await fetch(client, "dr", 4)
    assert p.error_code == 0 and p.log_start_offset == 4
    req.topics[0].partitions[0].offset = 100
    resp = await client.request(DELETE_RECORDS, 1, req)
    assert resp.topics[0].partitions[0].error_code == 1


async def test_large_fetch_through_a_slow_reader(server: Server, client: WireClient) -> None:
    """Several MiB in one response: exercises sendfile's EAGAIN path (or the copy path)."""
    assert await create_topic(client, "big") == 0
    sent = []
    for i in range(12):
        b = batch(1, start=i, size=500_000)
        sent.append(b)
        assert (await produce(client, "big", b)).error_code == 0
    correlation = await client.send(FETCH, 11, fetch_request("big", 0, partition_max_bytes=10**8))
    await asyncio.sleep(0.2)  # let the kernel buffers fill before we read
    resp = await client.receive(FETCH, 11, correlation)
    records = bytes(resp.responses[0].partitions[0].records)
    stored = [bytes(b) for _, _, b in iter_batches(records)]
    assert len(stored) == len(sent)
    for i, (s, st) in enumerate(zip(sent, stored, strict=True)):
        same_batch_content(s, st, i)
    # the connection is still in sync afterwards
    assert (await metadata(client, ["big"])).topics[0].error_code == 0
    if server.config.fetch_zero_copy:
        assert server.metrics.get("fetch.sendfile_bytes") >= sum(map(len, sent))


async def pipelined_mixed_responses(srv: Server, c: WireClient, topic: str) -> None:
    """Small responses that pile up in the transport's buffer while the client does not read,
    then big fetches: their file slices must wait for that buffer to drain, in order."""
    assert await create_topic(c, topic) == 0
    for i in range(30):  # padding topics make each Metadata response ~2 KB
        assert await create_topic(c, f"{topic}-pad-{i:02}") == 0
    sent = [batch(1, start=i, size=400_000) for i in range(24)]  # ~10 MB
    for b in sent:
        assert (await produce(c, topic, b)).error_code == 0
    big = fetch_request(topic, 0, partition_max_bytes=10**8)
    meta = (METADATA, m.MetadataRequest(topics=None))
    n_meta = 1500  # ~3 MB of responses: more than the socket buffers hold, less than 4 MiB
    plan = [meta] * n_meta + [(FETCH, big)] + [meta] * 10 + [(FETCH, big)]
    before = srv.metrics.get("requests.Metadata")
    ids = [await c.send(k, 11 if k == FETCH else 8, body) for k, body in plan]
    for _ in range(3000):  # bounded: until the broker answered the first metadata requests
        if srv.metrics.get("requests.Metadata") - before >= n_meta:
            break
        await asyncio.sleep(0.005)
    if srv.config.fetch_zero_copy:
        for _ in range(3000):  # ... and the first fetch waits for the buffer to drain
            if srv.metrics.get("fetch.sendfile_waits"):
                break
            await asyncio.sleep(0.005)
    for cid, (k, _) in zip(ids, plan, strict=True):
        resp = await c.receive(k, 11 if k == FETCH else 8, cid)
        if k == FETCH:
            records = bytes(resp.responses[0].partitions[0].records)
            stored = [bytes(b) for _, _, b in iter_batches(records)]
            for i, (s, st) in enumerate(zip(sent, stored, strict=True)):
                same_batch_content(s, st, i)
        else:
            assert topic in {t.name for t in resp.topics}


@pytest.mark.parametrize("zero_copy", ["true", "false"])
async def test_sendfile_after_buffered_responses(tmp_path: Path, zero_copy: str) -> None:
    # Small socket buffers on both ends, so the small responses overflow into the transport's
    # buffer while the client is not reading.
    # (only for sendfile: the copy path's big writes crawl through a small buffer on loopback)
    sndbuf = "131072" if zero_copy == "true" else "-1"
    srv = await start_server(
        tmp_path, f"sluice.fetch.zero.copy={zero_copy}", f"socket.send.buffer.bytes={sndbuf}"
    )
    try:
        c = await WireClient.connect("127.0.0.1", srv.port)
        try:
            await pipelined_mixed_responses(srv, c, "mixed")
        finally:
            await c.close()
        if zero_copy == "true":
            assert srv.metrics.get("fetch.sendfile_waits") >= 1
    finally:
        await srv.shutdown()


async def test_pipelined_requests_are_answered_in_order(client: WireClient) -> None:
    assert await create_topic(client, "pipe") == 0
    ids = []
    for i in range(20):
        ids.append(await client.send(PRODUCE, 8, m.ProduceRequest(
            acks=1, timeout_ms=1000, topic_data=[m.ProduceRequest.TopicProduceData(
                name="pipe", partition_data=[m.ProduceRequest.PartitionProduceData(
                    index=0, records=batch(1, start=i))])])))  # fmt: skip
    offsets = []
    for cid in ids:
        resp = await client.receive(PRODUCE, 8, cid)
        offsets.append(resp.responses[0].partition_responses[0].base_offset)
    assert offsets == list(range(20))


async def test_many_connections_append_concurrently(server: Server) -> None:
    async def one(i: int) -> list[int]:
        c = await WireClient.connect("127.0.0.1", server.port)
        try:
            offsets = []
            for j in range(15):
                r = await produce(c, "conc", batch(2, start=100 * i + j))
                assert r.error_code == 0
                offsets.append(r.base_offset)
            return offsets
        finally:
            await c.close()

    setup = await WireClient.connect("127.0.0.1", server.port)
    assert await create_topic(setup, "conc") == 0
    results = await asyncio.gather(*(one(i) for i in range(8)))
    got = sorted(o for offsets in results for o in offsets)
    assert got == list(range(0, 8 * 15 * 2, 2))  # every batch got its own, gapless range
    for offsets in results:
        assert offsets == sorted(offsets)  # per connection, in request order
    p = await fetch(setup, "conc", 0)
    assert p.high_watermark == 240
    await setup.close()


# --- the same on uvloop (the entrypoint's loop; pytest-asyncio runs the tests above on asyncio) --


@pytest.mark.parametrize("zero_copy", ["true", "false"])
def test_on_uvloop_produce_fetch_long_poll_and_large_fetch(tmp_path: Path, zero_copy: str) -> None:
    async def scenario() -> None:
        sndbuf = "131072" if zero_copy == "true" else "-1"
        srv = await start_server(
            tmp_path, f"sluice.fetch.zero.copy={zero_copy}", f"socket.send.buffer.bytes={sndbuf}"
        )
        try:
            c = await WireClient.connect("127.0.0.1", srv.port)
            other = await WireClient.connect("127.0.0.1", srv.port)
            try:
                assert await create_topic(c, "uv") == 0
                # long-poll woken by a produce on another connection
                task = asyncio.create_task(fetch(c, "uv", 0, max_wait_ms=60_000))
                assert srv.replica_manager is not None
                for _ in range(2000):
                    if srv.replica_manager.fetch_purgatory.watched():
                        break
                    await asyncio.sleep(0.005)
                assert not task.done()
                first = batch(3)
                assert (await produce(other, "uv", first)).error_code == 0
                p = await asyncio.wait_for(task, 30)
                same_batch_content(first, bytes(p.records), 0)
                # several MiB through a reader that starts late
                sent = [batch(1, start=i, size=400_000) for i in range(10)]
                for b in sent:
                    assert (await produce(other, "uv", b)).error_code == 0
                cid = await c.send(FETCH, 11, fetch_request("uv", 3, partition_max_bytes=10**8))
                await asyncio.sleep(0.2)
                resp = await c.receive(FETCH, 11, cid)
                records = bytes(resp.responses[0].partitions[0].records)
                stored = [bytes(b) for _, _, b in iter_batches(records)]
                for i, (s, st) in enumerate(zip(sent, stored, strict=True)):
                    same_batch_content(s, st, 3 + i)
                assert (await metadata(c, ["uv"])).topics[0].error_code == 0
                await pipelined_mixed_responses(srv, c, "uv-mixed")
                if zero_copy == "true":
                    assert srv.metrics.get("fetch.sendfile_bytes") >= sum(map(len, sent))
                    assert srv.metrics.get("fetch.sendfile_waits") >= 1
                else:
                    assert srv.metrics.get("fetch.sendfile_bytes") == 0
            finally:
                await c.close()
                await other.close()
        finally:
            await srv.shutdown()

    uvloop.run(scenario())


async def test_fetch_with_data_answers_without_a_coroutine(
    server: Server, client: WireClient
) -> None:
    """The usual Fetch (data there) is answered by a plain call; only a long poll that has to
    wait is a coroutine (awaited by Handlers.handle), and it still answers at its deadline."""
    assert await create_topic(client, "sync") == 0
    assert (await produce(client, "sync", batch(3))).error_code == 0
    handlers = server.handlers
    assert handlers is not None
    header = m.RequestHeader(api_key=FETCH, api_version=11, correlation_id=1, client_id=None)
    body = fetch_request("sync", 0, max_wait_ms=60_000)
    response = handlers.fetch(header, body)
    assert not asyncio.iscoroutine(response)
    # The connection's per-request call: no coroutine either, and the request is counted.
    before = server.metrics.get("requests.Fetch")
    dispatched = handlers.dispatch(header, body)
    assert not asyncio.iscoroutine(dispatched)
    assert server.metrics.get("requests.Fetch") == before + 1
    assert response.responses[0].partitions[0].records.size > 0
    waiting = handlers.fetch(header, fetch_request("sync", 3, max_wait_ms=20))
    assert asyncio.iscoroutine(waiting)
    empty = await asyncio.wait_for(waiting, 30)
    assert empty.responses[0].partitions[0].records == b""


async def test_a_connection_made_during_shutdown_is_closed_too(tmp_path: Path) -> None:
    """asyncio makes an accepted connection's protocol, then its transport, and calls
    ``connection_made`` (where the connection registers) an iteration later: one accepted just
    before shutdown closed the listener registers after shutdown closed every connection it
    knew. Shutdown closes it too (it was left open, its socket never closed: a ResourceWarning
    when the event loop's garbage went, in whichever test that was)."""
    srv = await start_server(tmp_path)
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    try:
        protocol = srv._make_connection(srv.config.listener.name)  # as the accept loop does
        shutdown = asyncio.create_task(srv.shutdown())
        async with asyncio.timeout(10):
            while srv._server is not None and srv._server.is_serving():
                await asyncio.sleep(0)  # (then its known connections are closed: no await)
        await loop.connect_accepted_socket(lambda: protocol, ours)
        await asyncio.wait_for(shutdown, 30)
        theirs.settimeout(10)
        assert await asyncio.to_thread(theirs.recv, 1) == b""  # closed by the broker
    finally:
        theirs.close()
        ours.close()
