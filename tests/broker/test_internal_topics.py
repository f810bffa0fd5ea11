"""``__consumer_offsets`` is protected from clients (issue 13), on the wire with our codec: a
DeleteTopics, CreatePartitions, DeleteRecords or Produce on it is refused with Kafka's error and
changes nothing; committed offsets survive. (The same through confluent-kafka's and
kafka-python's admin clients: ``tests/interop/test_interop_admin.py``; in a cluster:
``tests/cluster/test_cluster_admin.py``.)"""

from __future__ import annotations

from pathlib import Path

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.server.group.offsets_store import OFFSETS_TOPIC
from sluice.server.server import Server
from tests.broker.test_admin_apis import create_partitions
from tests.broker.test_server import batch, create_topic, list_offset, start_server
from tests.broker_util import WireClient


async def commit(client: WireClient, group: str, topic: str, offset: int) -> None:
    """FindCoordinator (creates the offsets topic), then a simple-consumer commit."""
    found = await client.request(
        m.FindCoordinator.key, 2, m.FindCoordinatorRequest(key=group, key_type=0)
    )
    assert found.error_code == 0
    req = m.OffsetCommitRequest
    body = req(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        retention_time_ms=-1,
        topics=[req.OffsetCommitRequestTopic(name=topic, partitions=[
            req.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                             committed_metadata="")])],
    )  # fmt: skip
    resp = await client.request(m.OffsetCommit.key, 2, body)
    assert resp.topics[0].partitions[0].error_code == 0


async def committed(client: WireClient, group: str, topic: str) -> int:
    req = m.OffsetFetchRequest
    body = req(
        group_id=group, topics=[req.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]
    )
    resp = await client.request(m.OffsetFetch.key, 1, body)
    return int(resp.topics[0].partitions[0].committed_offset)


def produce_request(topic: str) -> m.ProduceRequest:
    return m.ProduceRequest(
        acks=1,
        timeout_ms=1000,
        topic_data=[m.ProduceRequest.TopicProduceData(name=topic, partition_data=[
            m.ProduceRequest.PartitionProduceData(index=0, records=batch(1))])],
    )  # fmt: skip


async def test_offsets_topic_cannot_be_deleted_grown_or_truncated(
    server: Server, client: WireClient
) -> None:
    assert await create_topic(client, "t") == 0
    await commit(client, "g", "t", 5)
    logs = server.log_manager
    assert logs is not None
    end_before = logs.get_log(OFFSETS_TOPIC, 0).log_end_offset
    assert end_before > 0

    for version in (1, 3):
        resp = await client.request(
            m.DeleteTopics.key,
            version,
            m.DeleteTopicsRequest(topic_names=[OFFSETS_TOPIC, "t"], timeout_ms=1000),
        )
        assert [(r.name, r.error_code) for r in resp.responses] == [
            (OFFSETS_TOPIC, errors.TopicAuthorizationFailed.code),
            ("t", 0),  # the rest of the request is served
        ]
        assert await create_topic(client, "t") == 0

    assert await create_partitions(client, (OFFSETS_TOPIC, 5, None)) == [
        (OFFSETS_TOPIC, errors.InvalidRequest.code)
    ]

    req = m.DeleteRecordsRequest
    body = req(
        topics=[req.DeleteRecordsTopic(name=OFFSETS_TOPIC, partitions=[
            req.DeleteRecordsPartition(partition_index=0, offset=end_before)])],
        timeout_ms=1000,
    )  # fmt: skip
    resp = await client.request(m.DeleteRecords.key, 1, body)
    part = resp.topics[0].partitions[0]
    assert (part.error_code, part.low_watermark) == (errors.InvalidTopic.code, -1)

    resp = await client.request(m.Produce.key, 8, produce_request(OFFSETS_TOPIC))
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == errors.InvalidTopic.code
    assert part.error_message == f"Cannot append to internal topic {OFFSETS_TOPIC}"

    assert logs.topics()[OFFSETS_TOPIC] == 1
    offsets_log = logs.get_log(OFFSETS_TOPIC, 0)
    assert (offsets_log.log_start_offset, offsets_log.log_end_offset) == (0, end_before)
    assert (await list_offset(client, OFFSETS_TOPIC, -2)).offset == 0
    assert await committed(client, "g", "t") == 5


async def test_offsets_survive_a_refused_delete_across_a_restart(tmp_path: Path) -> None:
    srv = await start_server(tmp_path)
    try:
        c = await WireClient.connect("127.0.0.1", srv.port)
        await create_topic(c, "t")
        await commit(c, "g", "t", 7)
        resp = await c.request(
            m.DeleteTopics.key, 3, m.DeleteTopicsRequest(topic_names=[OFFSETS_TOPIC], timeout_ms=0)
        )
        assert resp.responses[0].error_code == errors.TopicAuthorizationFailed.code
        await c.close()
    finally:
        await srv.shutdown()
    srv = await start_server(tmp_path)
    try:
        c = await WireClient.connect("127.0.0.1", srv.port)
        assert await committed(c, "g", "t") == 7
        await c.close()
    finally:
        await srv.shutdown()


async def test_the_admin_client_id_may_append_to_the_offsets_topic(
    server: Server, client: WireClient
) -> None:
    """Kafka's one exception (``AdminUtils.AdminClientId``): an operator's repair tool."""
    assert await create_topic(client, "t") == 0
    await commit(client, "g", "t", 1)
    correlation = await client.send(
        m.Produce.key, 8, produce_request(OFFSETS_TOPIC), client_id="__admin_client"
    )
    resp = await client.receive(m.Produce.key, 8, correlation)
    assert resp.responses[0].partition_responses[0].error_code == 0
