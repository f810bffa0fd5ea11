"""Topic ids on the wire, standalone broker: Metadata v10-12, Fetch v13 by id, DeleteTopics v6
by id, DescribeTopicPartitions (75) with its cursor, and the cluster id of meta.properties."""

from __future__ import annotations

import uuid
from pathlib import Path

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol.types import ZERO_UUID, random_uuid, uuid_to_str
from sluice.server.server import Server
from sluice.server.storage.meta_properties import read_meta_properties
from sluice.server.storage.partition_metadata import read_partition_metadata
from tests.broker.test_server import batch, create_topic, fetch_request, metadata, produce
from tests.broker_util import WireClient

METADATA, FETCH, DELETE_TOPICS = m.Metadata.key, m.Fetch.key, m.DeleteTopics.key
DESCRIBE_TOPIC_PARTITIONS = m.DescribeTopicPartitions.key


async def topic_id_of(c: WireClient, topic: str) -> uuid.UUID:
    resp = await metadata(c, [topic], version=12, auto=False)
    (t,) = resp.topics
    assert t.error_code == 0 and t.name == topic
    return t.topic_id


def by_id(topic_id: uuid.UUID) -> m.MetadataRequest:
    return m.MetadataRequest(
        topics=[m.MetadataRequest.MetadataRequestTopic(topic_id=topic_id, name=None)],
        allow_auto_topic_creation=False,
    )


async def test_metadata_v10_to_12_carry_the_topic_id(server: Server, client: WireClient) -> None:
    assert await create_topic(client, "ids", 2) == 0
    topic_id = await topic_id_of(client, "ids")
    assert topic_id != ZERO_UUID
    assert server.log_manager is not None and server.log_manager.topic_id("ids") == topic_id
    for version in (10, 11, 12):
        resp = await metadata(client, None, version=version)
        (t,) = [t for t in resp.topics if t.name == "ids"]
        assert t.topic_id == topic_id and len(t.partitions) == 2
    # A topic that does not exist has the zero id (Kafka: "Zero for non-existing topics").
    resp = await metadata(client, ["nope"], version=12, auto=False)
    assert resp.topics[0].error_code == errors.UnknownTopicOrPartition.code
    assert resp.topics[0].topic_id == ZERO_UUID
    # The cluster id is meta.properties', Kafka's 22-character form.
    meta = read_meta_properties(server.config.data_dir)
    assert meta is not None and resp.cluster_id == meta.cluster_id and len(meta.cluster_id) == 22


async def test_metadata_v12_by_id(server: Server, client: WireClient) -> None:
    assert await create_topic(client, "byid", 3) == 0
    topic_id = await topic_id_of(client, "byid")
    resp = await client.request(METADATA, 12, by_id(topic_id))
    (t,) = resp.topics
    assert (t.error_code, t.name, t.topic_id, len(t.partitions)) == (0, "byid", topic_id, 3)
    unknown = random_uuid()
    resp = await client.request(METADATA, 12, by_id(unknown))
    (t,) = resp.topics
    assert (t.error_code, t.name, t.topic_id) == (errors.UnknownTopicId.code, None, unknown)
    # Kafka: "Topic IDs are not supported in requests for version 11".
    req = m.MetadataRequest(
        topics=[m.MetadataRequest.MetadataRequestTopic(topic_id=topic_id, name="byid")],
    )
    resp = await client.request(METADATA, 11, req)
    assert resp.topics[0].error_code == errors.InvalidRequest.code


async def test_fetch_v13_by_topic_id(server: Server, client: WireClient) -> None:
    assert await create_topic(client, "f13", 1) == 0
    sent = batch(4)
    assert (await produce(client, "f13", sent)).error_code == 0
    topic_id = await topic_id_of(client, "f13")
    req = fetch_request("", 0)
    req.topics[0].topic_id = topic_id
    resp = await client.request(FETCH, 13, req)
    (t,) = resp.responses
    assert t.topic_id == topic_id
    (p,) = t.partitions
    assert p.error_code == 0 and p.high_watermark == 4 and len(bytes(p.records)) == len(sent)
    # v12 (flexible, by name) reads the same bytes.
    resp12 = await client.request(FETCH, 12, fetch_request("f13", 0))
    assert bytes(resp12.responses[0].partitions[0].records) == bytes(p.records)
    # An id nobody has: UNKNOWN_TOPIC_ID for the partition, the rest of the request served.
    unknown = random_uuid()
    req = fetch_request("", 0)
    req.topics[0].topic_id = topic_id
    req.topics.append(
        m.FetchRequest.FetchTopic(
            topic_id=unknown,
            partitions=[m.FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                      partition_max_bytes=1024)],
        )
    )  # fmt: skip
    resp = await client.request(FETCH, 13, req)
    answers = {t.topic_id: t.partitions[0].error_code for t in resp.responses}
    assert answers == {topic_id: 0, unknown: errors.UnknownTopicId.code}


async def test_fetch_v13_with_an_earlier_incarnations_id(
    server: Server, client: WireClient
) -> None:
    assert await create_topic(client, "again", 1) == 0
    first = await topic_id_of(client, "again")
    resp = await client.request(
        DELETE_TOPICS, 6,
        m.DeleteTopicsRequest(
            topics=[m.DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=first)],
            timeout_ms=5000,
        ),
    )  # fmt: skip
    (r,) = resp.responses
    assert (r.error_code, r.name, r.topic_id) == (0, "again", first)
    assert await create_topic(client, "again", 1) == 0
    second = await topic_id_of(client, "again")
    assert second != first
    req = fetch_request("", 0)
    req.topics[0].topic_id = first  # a client that has not seen the recreation yet
    resp = await client.request(FETCH, 13, req)
    assert resp.responses[0].partitions[0].error_code == errors.UnknownTopicId.code
    data_dir = server.config.data_dir
    assert read_partition_metadata(data_dir / "again-0") == second


async def test_delete_topics_v6(server: Server, client: WireClient) -> None:
    assert await create_topic(client, "d1", 1) == 0
    d1 = await topic_id_of(client, "d1")
    unknown = random_uuid()
    state = m.DeleteTopicsRequest.DeleteTopicState
    req = m.DeleteTopicsRequest(
        topics=[
            state(name="d1", topic_id=ZERO_UUID),
            state(name=None, topic_id=unknown),
            state(name="d1", topic_id=d1),  # both: INVALID_REQUEST
        ],
        timeout_ms=5000,
    )
    resp = await client.request(DELETE_TOPICS, 6, req)
    assert [(r.name, r.topic_id, r.error_code) for r in resp.responses] == [
        ("d1", d1, 0),
        (None, unknown, errors.UnknownTopicId.code),
        ("d1", d1, errors.InvalidRequest.code),
    ]
    resp = await metadata(client, ["d1"], version=12, auto=False)
    assert resp.topics[0].error_code == errors.UnknownTopicOrPartition.code


async def test_describe_topic_partitions_pages_with_a_cursor(
    server: Server, client: WireClient
) -> None:
    assert await create_topic(client, "a", 3) == 0
    assert await create_topic(client, "b", 2) == 0
    ids = {t: await topic_id_of(client, t) for t in ("a", "b")}
    req_cls = m.DescribeTopicPartitionsRequest
    seen: list[tuple[str, int]] = []
    cursor = None
    for _ in range(10):  # 5 partitions, 2 per page: 3 pages
        req = req_cls(
            topics=[req_cls.TopicRequest(name="a"), req_cls.TopicRequest(name="b")],
            response_partition_limit=2,
            cursor=cursor,
        )
        resp = await client.request(DESCRIBE_TOPIC_PARTITIONS, 0, req)
        for t in resp.topics:
            assert t.error_code == 0 and t.topic_id == ids[t.name]
            seen.extend((t.name, p.partition_index) for p in t.partitions)
            assert all(p.leader_id == server.config.node_id for p in t.partitions)
        if resp.next_cursor is None:
            break
        cursor = req_cls.Cursor(
            topic_name=resp.next_cursor.topic_name,
            partition_index=resp.next_cursor.partition_index,
        )
    assert seen == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
    # Every topic (none named), an unknown one named, and a cursor outside the list.
    resp = await client.request(DESCRIBE_TOPIC_PARTITIONS, 0, req_cls(topics=[]))
    assert {t.name for t in resp.topics} >= {"a", "b"} and resp.next_cursor is None
    resp = await client.request(
        DESCRIBE_TOPIC_PARTITIONS, 0, req_cls(topics=[req_cls.TopicRequest(name="zz")])
    )
    assert [(t.name, t.error_code, t.topic_id) for t in resp.topics] == [
        ("zz", errors.UnknownTopicOrPartition.code, ZERO_UUID)
    ]
    bad = req_cls(
        topics=[req_cls.TopicRequest(name="a")],
        cursor=req_cls.Cursor(topic_name="b", partition_index=0),
    )
    resp = await client.request(DESCRIBE_TOPIC_PARTITIONS, 0, bad)
    assert [t.error_code for t in resp.topics] == [errors.InvalidRequest.code]


async def test_topic_ids_and_cluster_id_survive_a_restart(tmp_path: Path) -> None:
    from tests.broker.test_server import start_server

    server = await start_server(tmp_path)
    try:
        c = await WireClient.connect("127.0.0.1", server.port)
        try:
            assert await create_topic(c, "kept", 2) == 0
            topic_id = await topic_id_of(c, "kept")
            cluster_id = (await metadata(c, None, version=12)).cluster_id
        finally:
            await c.close()
    finally:
        await server.shutdown()
    server = await start_server(tmp_path)
    try:
        c = await WireClient.connect("127.0.0.1", server.port)
        try:
            assert await topic_id_of(c, "kept") == topic_id
            assert (await metadata(c, None, version=12)).cluster_id == cluster_id
        finally:
            await c.close()
    finally:
        await server.shutdown()
    assert (
        uuid_to_str(topic_id) in (tmp_path / "data" / "kept-1" / "partition.metadata").read_text()
    )


async def test_a_data_dir_of_an_older_sluice_gets_topic_ids_and_keeps_its_cluster_id(
    tmp_path: Path,
) -> None:
    import json

    from tests.broker.test_server import start_server

    server = await start_server(tmp_path)
    try:
        c = await WireClient.connect("127.0.0.1", server.port)
        try:
            assert await create_topic(c, "old", 2) == 0
        finally:
            await c.close()
    finally:
        await server.shutdown()
    data = tmp_path / "data"  # as an older Sluice left it: no ids, no meta.properties
    topics_file = data / "sluice-topics.json"
    document = json.loads(topics_file.read_bytes())
    del document["topics"]["old"]["topic_id"]
    topics_file.write_text(json.dumps(document))
    for p in (0, 1):
        (data / f"old-{p}" / "partition.metadata").unlink()
    (data / "meta.properties").unlink()
    server = await start_server(tmp_path)
    try:
        c = await WireClient.connect("127.0.0.1", server.port)
        try:
            topic_id = await topic_id_of(c, "old")
            assert topic_id != ZERO_UUID
            resp = await metadata(c, None, version=12)
            assert resp.cluster_id == "sluice-single-node"  # the id it reported before
        finally:
            await c.close()
    finally:
        await server.shutdown()
    assert all(read_partition_metadata(data / f"old-{p}") == topic_id for p in (0, 1))
