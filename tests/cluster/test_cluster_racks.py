"""``broker.rack`` on a real 3-broker cluster (real ZooKeeper): the rack is registered in
``/brokers/ids/<id>`` and shown to clients (Metadata, DescribeCluster through confluent-kafka's
AdminClient), and a new topic's replicas, and partitions added to it, are spread over the racks
(Kafka's rack-aware assignment, :mod:`sluice.server.controller.assignment`)."""

from __future__ import annotations

import time

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


@pytest.mark.slow
def test_a_consumer_fetches_from_the_replica_in_its_rack() -> None:
    """KIP-392 with librdkafka: the leader (``replica.selector.class`` =
    RackAwareReplicaSelector) sends a consumer with ``client.rack`` to the follower in that
    rack, which serves every record (counted in its BytesOut, none in the leader's)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.broker.test_metrics import scrape, value
    from tests.broker_util import free_port

    racks = {1: "rack-1", 2: "rack-2", 3: "rack-3"}
    urls = {b: f"http://127.0.0.1:{free_port()}/metrics" for b in racks}
    per_broker = {b: {"broker.rack": racks[b], "sluice.metrics.listener": urls[b]} for b in racks}
    props = {
        "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
        "auto.leader.rebalance.enable": "false",
    }
    with EmbeddedCluster(3, properties=props, broker_properties=per_broker) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic("near", 1, 3)])["near"].result(DEADLINE_S)
        leader = cluster.wait_for_leader("near")
        follower = next(b for b in cluster.ids if b != leader)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
        for i in range(100):
            producer.produce("near", b"record-%d" % i)
        assert producer.flush(DEADLINE_S) == 0

        def bytes_out(broker: int) -> float:
            return value(scrape(urls[broker])[0], "kafka_server_brokertopicmetrics_bytesout_total",
                         topic="near")  # fmt: skip

        consumer = Consumer({
            "bootstrap.servers": cluster.bootstrap_servers, "group.id": "near",
            "client.rack": racks[follower], "enable.auto.commit": False,
        })  # fmt: skip
        try:
            consumer.assign([TopicPartition("near", 0, 0)])
            got: list[bytes] = []
            deadline = time.monotonic() + DEADLINE_S
            while len(got) < 100:
                assert time.monotonic() < deadline, f"read {len(got)} of 100"
                msg = consumer.poll(0.5)
                if msg is not None and not msg.error():
                    got.append(msg.value())
        finally:
            consumer.close()
        assert got == [b"record-%d" % i for i in range(100)]
        assert bytes_out(follower) > 0
        assert bytes_out(leader) == 0
