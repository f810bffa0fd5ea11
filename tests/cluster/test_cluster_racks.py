"""``broker.rack`` on a real 3-broker cluster (real ZooKeeper): the rack is registered in
``/brokers/ids/<id>`` and shown to clients (Metadata, DescribeCluster through confluent-kafka's
AdminClient), and a new topic's replicas, and partitions added to it, are spread over the racks
(Kafka's rack-aware assignment, :mod:`sluice.server.controller.assignment`)."""

from __future__ import annotations

import pytest

from sluice.testing.cluster import EmbeddedCluster
from sluice.testing.embedded import EmbeddedBroker

RACKS = {1: "rack-a", 2: "rack-a", 3: "rack-b"}
DEADLINE_S = 30


@pytest.mark.slow
@pytest.mark.sluice_cluster(
    broker_properties={b: {"broker.rack": rack} for b, rack in RACKS.items()}
)
def test_replicas_spread_over_racks_and_clients_see_them(sluice_cluster: EmbeddedCluster) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    cluster = sluice_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    described = admin.describe_cluster().result(DEADLINE_S)
    assert {node.id: node.rack for node in described.nodes} == RACKS
    assert {b.node_id: b.rack for b in cluster.metadata().brokers} == RACKS

    admin.create_topics([NewTopic("spread", 6, 2)])["spread"].result(DEADLINE_S)
    cluster.wait_for_leader("spread")
    admin.create_partitions([NewPartitions("spread", 9)])["spread"].result(DEADLINE_S)
    cluster.wait_for_leader("spread", 8)

    def layout() -> dict[int, list[int]]:
        (topic,) = cluster.metadata(["spread"]).topics
        return {p.partition_index: list(p.replica_nodes) for p in topic.partitions}

    cluster.wait_for(lambda: len(layout()) == 9, "nine partitions listed")
    replicas = layout()
    for partition, nodes in replicas.items():
        # Two racks, two replicas: one in each (rack-b has only broker 3).
        assert sorted({RACKS[b] for b in nodes}) == ["rack-a", "rack-b"], (partition, nodes)


@pytest.mark.sluice_broker(properties={"broker.rack": "us-east-1d"})
def test_a_standalone_broker_shows_its_rack(sluice_broker: EmbeddedBroker) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": sluice_broker.bootstrap_servers})
    (node,) = admin.describe_cluster().result(DEADLINE_S).nodes
    assert node.rack == "us-east-1d"
