"""Admin APIs against a real 3-broker cluster (subprocesses, a real ZooKeeper, the real
controller), through confluent-kafka's AdminClient: CreatePartitions writes the grown assignment
to ZooKeeper, the controller elects the new partitions' leaders, and clients produce to them."""

from __future__ import annotations

import pytest

from sluice.testing.cluster import EmbeddedCluster

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0


def test_create_partitions_in_a_cluster(sluice_cluster: EmbeddedCluster) -> None:
    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    cluster = sluice_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("grow", 2, 2)], operation_timeout=30)["grow"].result(DEADLINE_S)

    def described() -> dict[int, tuple[int, list[int]]]:
        meta = admin.list_topics("grow", timeout=DEADLINE_S).topics["grow"]
        return {p: (m.leader, list(m.replicas)) for p, m in meta.partitions.items()}

    before = described()
    admin.create_partitions([NewPartitions("grow", 3)], validate_only=True)["grow"].result(
        DEADLINE_S
    )
    future = admin.create_partitions([NewPartitions("grow", 4)], operation_timeout=30)["grow"]
    future.result(DEADLINE_S)  # answered once every new partition has a leader
    after = described()
    assert sorted(after) == [0, 1, 2, 3]
    assert {p: after[p] for p in before} == before  # the old partitions untouched
    for p in (2, 3):
        leader, replicas = after[p]
        assert len(replicas) == 2 and len(set(replicas)) == 2  # the topic's RF
        assert set(replicas) <= {1, 2, 3} and leader in replicas
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    producer.produce("grow", b"new partition", partition=3)
    assert producer.flush(DEADLINE_S) == 0
    # Kafka's refusals, before anything is written
    for count, replicas, code in (
        (4, None, KafkaError.INVALID_PARTITIONS),
        (2, None, KafkaError.INVALID_PARTITIONS),
        (5, [[1, 9]], KafkaError.INVALID_REPLICA_ASSIGNMENT),  # broker 9 does not exist
        (5, [[1]], KafkaError.INVALID_REPLICA_ASSIGNMENT),  # RF 1 for an RF 2 topic
    ):
        new = NewPartitions("grow", count, **({"replica_assignment": replicas} if replicas else {}))
        with pytest.raises(KafkaException) as info:
            admin.create_partitions([new])["grow"].result(DEADLINE_S)
        assert info.value.args[0].code() == code, (count, replicas, info.value)
    explicit = NewPartitions("grow", 5, replica_assignment=[[3, 1]])
    admin.create_partitions([explicit], operation_timeout=30)["grow"].result(DEADLINE_S)
    assert described()[4][1] == [3, 1]


def test_internal_topic_is_protected_in_a_cluster(sluice_cluster: EmbeddedCluster) -> None:
    """DeleteTopics, CreatePartitions and DeleteRecords on ``__consumer_offsets`` are refused
    by whichever broker is asked (Kafka's codes; ``tests/broker/test_internal_topics.py``),
    nothing is asked of the controller, and the group's commit survives."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    cluster = sluice_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("kept", 1, 3)], operation_timeout=30)["kept"].result(DEADLINE_S)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "g"})
    try:
        consumer.commit(offsets=[TopicPartition("kept", 0, 3)], asynchronous=False)
    finally:
        consumer.close()
    internal = "__consumer_offsets"
    partitions = len(admin.list_topics(internal, timeout=DEADLINE_S).topics[internal].partitions)
    for call, code in (
        (lambda: admin.delete_topics([internal], operation_timeout=30)[internal],
         KafkaError.TOPIC_AUTHORIZATION_FAILED),
        (lambda: admin.create_partitions([NewPartitions(internal, partitions + 1)])[internal],
         KafkaError.INVALID_REQUEST),
        (lambda: next(iter(admin.delete_records([TopicPartition(internal, 0, 1)]).values())),
         KafkaError.TOPIC_EXCEPTION),
    ):  # fmt: skip
        with pytest.raises(KafkaException) as info:
            call().result(DEADLINE_S)
        assert info.value.args[0].code() == code, info.value
    meta = admin.list_topics(internal, timeout=DEADLINE_S).topics[internal]
    assert meta.error is None and len(meta.partitions) == partitions
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "g"})
    try:
        (tp,) = consumer.committed([TopicPartition("kept", 0)], timeout=DEADLINE_S)
        assert tp.offset == 3
    finally:
        consumer.close()


@pytest.mark.sluice_cluster(
    size=1, properties={"sluice.max.topics": "2", "sluice.max.partitions.per.topic": "4"}
)
def test_topic_bounds_in_a_cluster(sluice_cluster: EmbeddedCluster) -> None:
    """The bounds hold in cluster mode too, counted over the cluster's topics, and within one
    CreateTopics (whose topics the cache learns of only once ZooKeeper has them)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": sluice_cluster.bootstrap_servers})
    futures = admin.create_topics(
        [NewTopic(n, 1, 1) for n in ("a", "b", "c")], operation_timeout=30
    )
    futures["a"].result(DEADLINE_S)
    futures["b"].result(DEADLINE_S)
    with pytest.raises(KafkaException) as info:
        futures["c"].result(DEADLINE_S)
    assert info.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert "sluice.max.topics" in info.value.args[0].str()
    with pytest.raises(KafkaException) as info:
        admin.create_partitions([NewPartitions("a", 5)])["a"].result(DEADLINE_S)
    assert info.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    assert sorted(t for t in admin.list_topics(timeout=DEADLINE_S).topics) == ["a", "b"]
