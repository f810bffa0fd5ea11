"""The cluster figures of the Prometheus endpoint, scraped over HTTP from three broker processes:
under-replicated partitions at the leader go to 1 when a follower is killed (-9) and back to 0
once it is restarted and caught up, with the ISR shrink and expansion counted; exactly one broker
reports itself the active controller; leaders and replicas add up across brokers."""

from __future__ import annotations

import pytest

from sluice.testing.cluster import EmbeddedCluster
from tests.broker.test_metrics import scrape, value
from tests.broker_util import free_port

pytestmark = pytest.mark.slow

URP = "kafka_server_replicamanager_underreplicatedpartitions"
ACTIVE = "kafka_controller_kafkacontroller_activecontrollercount"


def test_under_replicated_partitions_and_active_controller() -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    urls = {b: f"http://127.0.0.1:{free_port()}/metrics" for b in (1, 2, 3)}
    per_broker = {b: {"sluice.metrics.listener": url} for b, url in urls.items()}
    props = {"auto.leader.rebalance.enable": "false"}
    with EmbeddedCluster(3, properties=props, broker_properties=per_broker) as cluster:

        def figure(broker: int, name: str) -> float:
            return value(scrape(urls[broker])[0], name)

        def total(name: str, brokers: tuple[int, ...] = (1, 2, 3)) -> float:
            return sum(figure(b, name) for b in brokers)

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic("replicated", 2, 3)], operation_timeout=30)[
            "replicated"
        ].result(30)
        leader = cluster.wait_for_leader("replicated", 0)
        follower = next(b for b in cluster.ids if b != leader)
        cluster.wait_for(lambda: total(ACTIVE) == 1, "one active controller")
        cluster.wait_for(
            lambda: total("kafka_server_replicamanager_leadercount") == 2, "both partitions led"
        )
        assert total("kafka_server_replicamanager_partitioncount") == 6  # 2 partitions x RF 3
        cluster.wait_for(lambda: figure(leader, URP) == 0, "a fully replicated partition")
        shrinks = figure(leader, "kafka_server_replicamanager_isrshrinks_total")
        expands = figure(leader, "kafka_server_replicamanager_isrexpands_total")

        cluster.kill(follower)
        alive = tuple(b for b in cluster.ids if b != follower)
        # Both partitions have a replica on the dead follower: each leader reports its own.
        cluster.wait_for(lambda: total(URP, alive) == 2, "under-replicated after the kill")
        cluster.wait_for(lambda: total(ACTIVE, alive) == 1, "a controller among the living")
        assert cluster.leader_of("replicated", 0) == leader
        assert figure(leader, "kafka_server_replicamanager_isrshrinks_total") > shrinks
        assert total("kafka_controller_kafkacontroller_offlinepartitionscount", alive) == 0

        cluster.restart(follower)
        cluster.wait_for(lambda: figure(leader, URP) == 0, "fully replicated after the restart")
        cluster.wait_for(lambda: total(URP) == 0, "every partition fully replicated")
        assert figure(leader, "kafka_server_replicamanager_isrexpands_total") > expands
        assert total(ACTIVE) == 1
