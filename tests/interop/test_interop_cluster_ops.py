"""Interop: operating a 3-broker cluster with clients nobody here wrote (issue 27's must-show).

One cluster (subprocesses, the session's ZooKeeper in a chroot of this module) serves every
test here, each on its own topic or entity:

* confluent-kafka 2.16: ``incremental_alter_configs`` on *another* broker's BROKER resource
  (librdkafka sends it to that broker), seen by ``describe_configs`` there as
  DYNAMIC_BROKER_CONFIG and not on the others; ``describe_topics`` topic ids and
  ``describe_cluster``'s cluster id the same through every broker and equal to ZooKeeper's;
  ``list_offsets`` with ``OffsetSpec.max_timestamp()`` at a leader that is not the bootstrap.
* kafka-python 3.0: ``alter_partition_reassignments`` reordering a partition's replicas, then
  ``elect_leaders`` (preferred) moving leadership to the new first replica;
  AlterClientQuotas / DescribeClientQuotas (its protocol classes: 3.0 has no admin method)
  through one broker, seen through the others; ``describe_producers`` with each producer's last
  timestamp, also after the partition's leader restarted (the producer snapshot keeps it).

(confluent-kafka 2.16 has no reassignment call and no quota call; the standalone interop tests
cover the rest of each client's calls.)
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sluice.testing.cluster import EmbeddedCluster
from sluice.testing.zookeeper import ZooKeeperServer
from tests.cluster.test_cluster_entity_configs import zk_config
from tests.interop_helpers import DEADLINE_S

pytestmark = [pytest.mark.interop, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(sluice_zookeeper: ZooKeeperServer) -> Iterator[EmbeddedCluster]:
    from sluice.testing.pytest_plugin import TEST_CHROOT_ROOT

    chroot = f"{TEST_CHROOT_ROOT}/{uuid.uuid4().hex}"
    with EmbeddedCluster(
        3,
        zookeeper_connect=sluice_zookeeper.connect_string(chroot),
        properties={"default.replication.factor": "3", "min.insync.replicas": "2"},
    ) as running:
        yield running
    sluice_zookeeper.delete_tree(chroot)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting: {what}")
        time.sleep(0.05)


def bootstrap(cluster: EmbeddedCluster, broker_id: int) -> str:
    return cluster.bootstrap_servers.split(",")[broker_id - 1]


def create(cluster: EmbeddedCluster, topic: str, replicas: list[int] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    new = (
        NewTopic(topic, 1, replica_assignment=[replicas])
        if replicas is not None
        else NewTopic(topic, 1, 3)
    )
    admin.create_topics([new], operation_timeout=30)[topic].result(DEADLINE_S)
    cluster.wait_for_leader(topic)


def kafka_python_admin(servers: str) -> Any:
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=servers, client_id="interop-ops")


# ------------------------------------------------------------------------- confluent-kafka


def test_confluent_alters_another_brokers_config_and_each_broker_describes_its_own(
    cluster: EmbeddedCluster,
) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap(cluster, 1)})  # broker 1 only
    entry = ConfigEntry("log.retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.BROKER, "2", incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(DEADLINE_S)
    assert zk_config(cluster, "/config/brokers/2")["config"] == {"log.retention.ms": "3600000"}

    def described(broker_id: int) -> Any:
        res = ConfigResource(ResourceType.BROKER, str(broker_id))
        return admin.describe_configs([res])[res].result(DEADLINE_S)["log.retention.ms"]

    def applied() -> bool:
        mine = described(2)
        return (mine.value, mine.source) == (
            "3600000",
            ConfigSource.DYNAMIC_BROKER_CONFIG.value,
        )

    wait_until(applied, "broker 2 describes its dynamic log.retention.ms")
    for other in (1, 3):
        assert described(other).source == ConfigSource.DEFAULT_CONFIG.value
    delete = ConfigEntry("log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)
    resource = ConfigResource(ResourceType.BROKER, "2", incremental_configs=[delete])
    admin.incremental_alter_configs([resource])[resource].result(DEADLINE_S)
    wait_until(
        lambda: described(2).source == ConfigSource.DEFAULT_CONFIG.value, "deleted on broker 2"
    )


def test_confluent_sees_one_topic_id_and_cluster_id_through_every_broker(
    cluster: EmbeddedCluster,
) -> None:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    create(cluster, "ids")
    in_zk = zk_config(cluster, "/brokers/topics/ids")["topic_id"]
    cluster_id = zk_config(cluster, "/cluster/id")["id"]
    for broker_id in (1, 2, 3):
        admin = AdminClient({"bootstrap.servers": bootstrap(cluster, broker_id)})
        (future,) = admin.describe_topics(TopicCollection(["ids"])).values()
        topic_id = future.result(DEADLINE_S).topic_id
        msb = topic_id.get_most_significant_bits() & (2**64 - 1)
        lsb = topic_id.get_least_significant_bits() & (2**64 - 1)
        from sluice.protocol.types import uuid_to_str

        assert uuid_to_str(uuid.UUID(int=msb << 64 | lsb)) == in_zk, broker_id
        described = admin.describe_cluster().result(DEADLINE_S)
        assert described.cluster_id == cluster_id, broker_id
        assert sorted(n.id for n in described.nodes) == [1, 2, 3]


def test_confluent_max_timestamp_lookup_at_a_leader_that_is_not_the_bootstrap(
    cluster: EmbeddedCluster,
) -> None:
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    create(cluster, "maxts", [3, 1, 2])
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    now = int(time.time() * 1000)
    stamps = [now - 5000, now - 1000, now - 3000, now - 1000, now - 4000]  # max first at 1
    for ts in stamps:
        producer.produce("maxts", b"v", partition=0, timestamp=ts)
    assert producer.flush(DEADLINE_S) == 0
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster, 1)})
    tp = TopicPartition("maxts", 0)
    found = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(DEADLINE_S)
    assert (found.offset, found.timestamp) == (1, now - 1000)


# ---------------------------------------------------------------------------- kafka-python


def test_kafka_python_reorders_replicas_then_elects_the_preferred_leader(
    cluster: EmbeddedCluster,
) -> None:
    from kafka import TopicPartition

    create(cluster, "reorder", [1, 2, 3])
    assert cluster.leader_of("reorder") == 1
    admin = kafka_python_admin(bootstrap(cluster, 3))
    try:
        tp = TopicPartition("reorder", 0)
        assert admin.alter_partition_reassignments({tp: [2, 3, 1]}) == {tp: None}
        wait_until(lambda: admin.list_partition_reassignments([tp]) == {}, "reassigned")

        def replicas() -> list[int]:
            (t,) = cluster.metadata(["reorder"]).topics
            return list(t.partitions[0].replica_nodes)

        wait_until(lambda: replicas() == [2, 3, 1], "the new replica order in metadata")
        assert cluster.leader_of("reorder") == 1  # still in the set: it keeps leading
        result = admin.elect_leaders(0, {"reorder": [0]})  # 0: preferred
        errors = [p.error_code for r in result.replica_election_results for p in
                  r.partition_result]  # fmt: skip
        assert errors == [0]
        wait_until(lambda: cluster.leader_of("reorder") == 2, "broker 2 leads")
        again = admin.elect_leaders(0, {"reorder": [0]}, raise_errors=False)
        codes = [p.error_code for r in again.replica_election_results for p in
                 r.partition_result]  # fmt: skip
        assert codes == [84]  # ELECTION_NOT_NEEDED
    finally:
        admin.close()


def test_kafka_python_quotas_through_one_broker_are_seen_through_the_others(
    cluster: EmbeddedCluster,
) -> None:
    from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

    def send(broker_id: int, request: Any) -> Any:
        admin = kafka_python_admin(bootstrap(cluster, broker_id))
        try:

            async def call() -> Any:
                return await admin._manager.send(request)

            return admin._manager.run(call)
        finally:
            admin.close()

    altered = send(1, AlterClientQuotasRequest(
        entries=[([("user", "ops-user"), ("client-id", "ops-app")],
                  [("producer_byte_rate", 4096.0, False), ("request_percentage", 50.0, False)])],
        validate_only=False,
    ))  # fmt: skip
    assert [e.error_code for e in altered.entries] == [0]
    assert zk_config(cluster, "/config/users/ops-user/clients/ops-app")["config"] == {
        "producer_byte_rate": "4096",
        "request_percentage": "50.0",
    }

    def described(broker_id: int) -> list[Any]:
        resp = send(broker_id, DescribeClientQuotasRequest(
            components=[("user", 0, "ops-user")], strict=False
        ))  # fmt: skip
        assert resp.error_code == 0
        return sorted(
            ([(e.entity_type, e.entity_name) for e in entry.entity],
             sorted((v.key, v.value) for v in entry.values))
            for entry in resp.entries
        )  # fmt: skip

    wanted = [
        (
            [("user", "ops-user"), ("client-id", "ops-app")],
            [("producer_byte_rate", 4096.0), ("request_percentage", 50.0)],
        )
    ]
    for broker_id in (2, 3):
        wait_until(lambda b=broker_id: described(b) == wanted, f"broker {broker_id} sees it")


def test_kafka_python_describes_producers_last_timestamps_across_a_leader_restart(
    cluster: EmbeddedCluster,
) -> None:
    from kafka import KafkaProducer, TopicPartition

    create(cluster, "producers", [2, 3, 1])
    now = int(time.time() * 1000)
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap_servers, enable_idempotence=True, acks="all"
    )
    try:
        for i in range(5):
            producer.send("producers", b"v", partition=0, timestamp_ms=now - 10_000 + i)
        producer.flush(DEADLINE_S)
    finally:
        producer.close(DEADLINE_S)
    tp = TopicPartition("producers", 0)

    def last_timestamps(via: int) -> list[int]:
        admin = kafka_python_admin(bootstrap(cluster, via))
        try:
            state = admin.describe_producers([tp])[tp]
            return [p.last_timestamp for p in state.active_producers]
        finally:
            admin.close()

    assert last_timestamps(1) == [now - 10_000 + 4]  # the last batch's, not the broker's clock
    # The leader's clean restart: it loads the producer state from its snapshot, and leads
    # again once the controller's preferred-leader check gives the partition back.
    cluster.restart(2)
    wait_until(lambda: cluster.leader_of("producers") == 2, "broker 2 leads again", 60)
    wait_until(lambda: last_timestamps(1) == [now - 10_000 + 4], "after the restart")
