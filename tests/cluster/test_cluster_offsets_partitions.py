"""``offsets.topic.num.partitions`` left at the broker's default in a 3-broker cluster: Kafka's
50, so the group coordinators spread over the brokers (the other cluster tests run with 3, the
test cluster's setting, to keep them fast)."""

from __future__ import annotations

import pytest

from sluice.testing.cluster import EmbeddedCluster

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0
GROUPS = [f"group-{i}" for i in range(12)]


@pytest.mark.sluice_cluster(properties={"offsets.topic.num.partitions": None})
def test_the_offsets_topic_has_kafkas_50_partitions_and_groups_spread_over_brokers(
    sluice_cluster: EmbeddedCluster,
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    from sluice.protocol import messages as m
    from sluice.server.group.offsets_store import partition_for
    from tests.broker_util import WireClient

    cluster = sluice_cluster
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    producer.produce("data", b"x", partition=0)
    assert producer.flush(DEADLINE_S) == 0
    for group in GROUPS:
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                             "enable.auto.commit": False})  # fmt: skip
        try:
            consumer.commit(offsets=[TopicPartition("data", 0, 1)], asynchronous=False)
        finally:
            consumer.close()

    (offsets,) = cluster.metadata(["__consumer_offsets"]).topics
    assert len(offsets.partitions) == 50
    leaders = {p.partition_index: p.leader_id for p in offsets.partitions}
    assert all(len(p.replica_nodes) == 3 for p in offsets.partitions)
    assert set(leaders.values()) == {1, 2, 3}  # every broker coordinates some groups

    async def coordinators() -> dict[str, int]:
        host, port = cluster.bootstrap_servers.split(",")[0].split(":")
        client = await WireClient.connect(host, int(port))
        try:
            found = {}
            for group in GROUPS:
                resp = await client.request(
                    m.FindCoordinator.key, 2, m.FindCoordinatorRequest(key=group, key_type=0)
                )
                assert resp.error_code == 0, group
                found[group] = resp.node_id
            return found
        finally:
            await client.close()

    import asyncio

    found = asyncio.run(coordinators())
    # Each group's coordinator leads its partition, abs(hashCode) % 50 (Kafka's partitionFor).
    assert found == {g: leaders[partition_for(g, 50)] for g in GROUPS}
    assert len(set(found.values())) > 1
