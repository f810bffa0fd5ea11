"""Admin APIs against a real 3-broker cluster (subprocesses, a real ZooKeeper, the real
controller), through confluent-kafka's AdminClient: CreatePartitions writes the grown assignment
to ZooKeeper, the controller elects the new partitions' leaders, and clients produce to them;
topic configs altered through any broker live in ZooKeeper (``/config/topics/<t>``) and reach
every broker."""

from __future__ import annotations

import json
from typing import Any

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


def zookeeper_json(cluster: EmbeddedCluster, path: str) -> Any:
    """The JSON of a znode in the cluster's chroot, read directly from ZooKeeper."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=cluster.zookeeper_connect)
    client.start(timeout=10)
    try:
        data, _stat = client.get(path)
        return json.loads(data)
    finally:
        client.stop()
        client.close()


def described_by(cluster: EmbeddedCluster, broker_id: int, topic: str) -> dict[str, str]:
    """The topic's configs set on it (DYNAMIC_TOPIC_CONFIG) as broker ``broker_id`` answers
    DescribeConfigs, asked of that broker alone."""
    from sluice.protocol import messages as m
    from sluice.protocol.config_resources import ConfigSource, ResourceType
    from sluice.testing.cluster import _request, _run

    body = m.DescribeConfigsRequest(
        resources=[m.DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=ResourceType.TOPIC, resource_name=topic, configuration_keys=None)],
        include_synonyms=False,
    )  # fmt: skip
    port = cluster.broker(broker_id).port
    response = _run(lambda: _request(port, m.DescribeConfigs.key, body), 15.0)
    (result,) = response.results
    assert result.error_code == 0, result
    return {
        c.name: c.value
        for c in result.configs
        if c.config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG and c.value is not None
    }


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_topic_configs_altered_live_in_zookeeper_and_reach_every_broker(
    sluice_cluster: EmbeddedCluster,
) -> None:
    """AlterConfigs (confluent-kafka's legacy call, through one broker) and IncrementalAlterConfigs
    (kafka-python, through another) write ``/config/topics/<t>`` in Kafka's JSON; every broker
    answers DescribeConfigs with the new set, the leader enforces it, and so does the next
    leader after the first one stops. A refused value writes nothing."""
    import warnings

    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import ConfigResource as KpConfigResource
        from kafka.admin import ConfigResourceType, KafkaAdminClient

    cluster = sluice_cluster
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.broker(1).port}"})
    admin.create_topics([NewTopic("cfg", 1, 3, config={"retention.ms": "600000"})],
                        operation_timeout=30)["cfg"].result(DEADLINE_S)  # fmt: skip
    assert zookeeper_json(cluster, "/config/topics/cfg") == {
        "version": 1, "config": {"retention.ms": "600000"},
    }  # fmt: skip
    wanted = {"max.message.bytes": "2000", "segment.ms": "3600000"}
    legacy = ConfigResource(ResourceType.TOPIC, "cfg", set_config=wanted)
    admin.alter_configs([legacy])[legacy].result(DEADLINE_S)
    # AlterConfigs replaces the set: retention.ms is gone
    assert zookeeper_json(cluster, "/config/topics/cfg") == {"version": 1, "config": wanted}
    cluster.wait_for(lambda: all(described_by(cluster, b, "cfg") == wanted for b in cluster.ids),
                     "every broker describes the new configs")  # fmt: skip
    kp = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{cluster.broker(3).port}")
    try:
        change = KpConfigResource(ConfigResourceType.TOPIC, "cfg",
                                  configs={"retention.ms": "120000"})  # fmt: skip
        assert kp.alter_configs([change]) == {"topic": {"cfg": "OK"}}
        refused = KpConfigResource(ConfigResourceType.TOPIC, "cfg",
                                   configs={"max.message.bytes": "huge"})  # fmt: skip
        assert "InvalidConfiguration" in str(kp.alter_configs([refused])["topic"]["cfg"])
    finally:
        kp.close()
    wanted = {**wanted, "retention.ms": "120000"}
    assert zookeeper_json(cluster, "/config/topics/cfg") == {"version": 1, "config": wanted}
    cluster.wait_for(lambda: all(described_by(cluster, b, "cfg") == wanted for b in cluster.ids),
                     "every broker describes the incremental change")  # fmt: skip

    def too_large_refused() -> None:
        failures: list[Any] = []
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "retries": 0,
                             "acks": "all"})  # fmt: skip
        producer.produce("cfg", b"x" * 3000, partition=0,
                         on_delivery=lambda err, _msg: failures.append(err))  # fmt: skip
        assert producer.flush(DEADLINE_S) == 0  # (its own batch)
        producer.produce("cfg", b"small", partition=0,
                         on_delivery=lambda err, _msg: failures.append(err))  # fmt: skip
        assert producer.flush(DEADLINE_S) == 0
        codes = [None if e is None else e.code() for e in failures]
        assert codes == [KafkaError.MSG_SIZE_TOO_LARGE, None], failures

    leader = cluster.wait_for_leader("cfg")
    too_large_refused()
    cluster.stop_broker(leader)  # a follower that applied the configs from ZooKeeper leads
    assert cluster.wait_for_leader("cfg") != leader
    too_large_refused()
    with pytest.raises(KafkaException) as info:
        missing = ConfigResource(ResourceType.TOPIC, "missing", set_config={"retention.ms": "1"})
        admin.alter_configs([missing])[missing].result(DEADLINE_S)
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
