"""Interop: the admin APIs operators' tools call (issue 15), with confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient, each succeeding and failing.

* ListGroups v4/v5 (KIP-518 states, KIP-848 types): ``list_consumer_groups`` /
  ``list_groups`` show each group's real state, and a states filter keeps only the groups in
  those states; DescribeGroups gives each member's client host (``/127.0.0.1``, Kafka's form).
* CreatePartitions: ``create_partitions`` grows a topic (``validate_only`` first); Kafka's
  refusals (no growth, shrink, unknown topic, a replica on an unknown broker).
* DescribeLogDirs: ``describe_log_dirs`` gives the log dir and each partition's size on disk.
* DeleteRecords / DeleteTopics: the low watermark moves; an offset past the end and a topic
  already deleted are refused.

* DescribeConfigs / AlterConfigs / IncrementalAlterConfigs: topic and broker configs with their
  sources; Kafka's refusals (an unknown topic, an invalid value, an unknown key, a read-only
  broker key), after which nothing of the request is applied.

(What topic configs do to the log, and DescribeCluster: ``test_interop_conformance.py``;
confluent-kafka has no ``describe_log_dirs``.)

One broker process per module (``group.initial.rebalance.delay.ms=0``); every wait bounded.
"""

from __future__ import annotations

import time
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupType, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_util import BrokerProcess
from tests.interop_helpers import DEADLINE_S, broker_fixture

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import KafkaAdminClient

pytestmark = pytest.mark.interop

OVERRIDES = ("group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=500")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from broker_fixture(tmp_path_factory, "admin", OVERRIDES)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create_topic(broker: BrokerProcess, name: str, partitions: int) -> None:
    client = admin(broker)  # (kept referenced: a collected client fails its futures)
    client.create_topics([NewTopic(name, partitions, 1)])[name].result(DEADLINE_S)


# --------------------------------------------------------------- ListGroups / DescribeGroups


@pytest.fixture(scope="module")
def two_groups(broker: BrokerProcess) -> Iterator[tuple[str, str]]:
    """``(stable, empty)``: a group with a member that owns its partition, and one whose only
    member committed and left."""
    from confluent_kafka import Consumer

    topic, stable, empty = unique("lg"), unique("stable"), unique("empty")
    create_topic(broker, topic, 1)

    def member(group: str) -> Consumer:
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                      "enable.auto.commit": False, "session.timeout.ms": 6000,
                      "heartbeat.interval.ms": 100})  # fmt: skip
        c.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while not c.assignment():
            assert time.monotonic() < deadline, f"{group}: no assignment"
            c.poll(0.05)
        return c

    leaver = member(empty)
    leaver.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    leaver.close()
    owner = member(stable)
    try:
        yield stable, empty
    finally:
        owner.close()


def test_confluent_lists_groups_with_their_states(
    broker: BrokerProcess, two_groups: tuple[str, str]
) -> None:
    stable, empty = two_groups
    client = admin(broker)
    listed = client.list_consumer_groups().result(DEADLINE_S)
    assert not listed.errors
    states = {g.group_id: g.state for g in listed.valid}
    assert states[stable] == ConsumerGroupState.STABLE
    assert states[empty] == ConsumerGroupState.EMPTY
    assert {g.type for g in listed.valid if g.group_id in two_groups} == {ConsumerGroupType.CLASSIC}
    only_empty = client.list_consumer_groups(states={ConsumerGroupState.EMPTY})
    ids = {g.group_id for g in only_empty.result(DEADLINE_S).valid}
    assert empty in ids and stable not in ids
    both = {ConsumerGroupState.EMPTY, ConsumerGroupState.STABLE}
    ids = {g.group_id for g in client.list_consumer_groups(states=both).result(DEADLINE_S).valid}
    assert {stable, empty} <= ids
    dead = client.list_consumer_groups(states={ConsumerGroupState.DEAD}).result(DEADLINE_S)
    assert not {g.group_id for g in dead.valid} & {stable, empty}
    by_type = client.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(DEADLINE_S)
    assert {stable, empty} <= {g.group_id for g in by_type.valid}
    consumer_type = client.list_consumer_groups(types={ConsumerGroupType.CONSUMER})
    assert not {g.group_id for g in consumer_type.result(DEADLINE_S).valid} & {stable, empty}


def test_confluent_describes_members_with_their_host(
    broker: BrokerProcess, two_groups: tuple[str, str]
) -> None:
    stable, empty = two_groups
    client = admin(broker)
    futures = client.describe_consumer_groups([stable, empty])
    described = futures[stable].result(DEADLINE_S)
    assert described.state == ConsumerGroupState.STABLE
    (member,) = described.members
    assert member.host == "/127.0.0.1"
    assert futures[empty].result(DEADLINE_S).members == []


def test_kafka_python_lists_groups_with_their_states(
    broker: BrokerProcess, two_groups: tuple[str, str]
) -> None:
    stable, empty = two_groups
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        listed = {g["group_id"]: g for g in client.list_groups()}
        assert listed[stable]["group_state"] == "Stable"
        assert listed[empty]["group_state"] == "Empty"
        assert listed[stable]["protocol_type"] == "consumer"
        filtered = {g["group_id"] for g in client.list_groups(states_filter=["Stable"])}
        assert stable in filtered and empty not in filtered
        # Kafka compares the states case-insensitively
        lower = {g["group_id"] for g in client.list_groups(states_filter=["empty"])}
        assert empty in lower and stable not in lower
        classic = client.list_groups(types_filter=["classic"])
        assert {stable, empty} <= {g["group_id"] for g in classic}
        assert {g["group_type"] for g in classic} == {"classic"}
        described = client.describe_groups([stable])[stable]
        (member,) = described["members"]
        assert member["client_host"] == "/127.0.0.1"
    finally:
        client.close()


# ------------------------------------------------------------------------------ CreatePartitions


def partition_count(broker: BrokerProcess, topic: str) -> int:
    client = admin(broker)
    return len(client.list_topics(topic, timeout=DEADLINE_S).topics[topic].partitions)


def test_confluent_create_partitions(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import NewPartitions

    topic = unique("grow")
    create_topic(broker, topic, 2)
    client = admin(broker)
    # validate_only: checked, nothing added
    client.create_partitions([NewPartitions(topic, 3)], validate_only=True)[topic].result(
        DEADLINE_S
    )
    assert partition_count(broker, topic) == 2
    client.create_partitions([NewPartitions(topic, 5)])[topic].result(DEADLINE_S)
    assert partition_count(broker, topic) == 5
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b"on a new partition", partition=4)
    assert producer.flush(DEADLINE_S) == 0
    failures = {
        (topic, 5): KafkaError.INVALID_PARTITIONS,  # no growth
        (topic, 3): KafkaError.INVALID_PARTITIONS,  # a shrink
        (unique("missing"), 3): KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
    for (name, count), code in failures.items():
        future = client.create_partitions([NewPartitions(name, count)])[name]
        with pytest.raises(KafkaException) as info:
            future.result(DEADLINE_S)
        assert info.value.args[0].code() == code, (name, count, info.value)
    # an assignment for a broker that does not exist
    bad = NewPartitions(topic, 6, replica_assignment=[[7]])
    with pytest.raises(KafkaException) as info:
        client.create_partitions([bad])[topic].result(DEADLINE_S)
    assert info.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    good = NewPartitions(topic, 6, replica_assignment=[[0]])
    client.create_partitions([good])[topic].result(DEADLINE_S)
    assert partition_count(broker, topic) == 6


def test_kafka_python_create_partitions(broker: BrokerProcess) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import NewPartitions
        from kafka.errors import (
            InvalidPartitionsError,
            InvalidRequestError,
            UnknownTopicOrPartitionError,
        )

    topic = unique("kp-grow")
    create_topic(broker, topic, 1)
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        client.create_partitions({topic: NewPartitions(total_count=3)}, validate_only=True)
        assert partition_count(broker, topic) == 1
        client.create_partitions({topic: NewPartitions(total_count=3)})
        assert partition_count(broker, topic) == 3
        with pytest.raises(InvalidPartitionsError):
            client.create_partitions({topic: NewPartitions(total_count=2)})
        with pytest.raises(UnknownTopicOrPartitionError):
            client.create_partitions({unique("missing"): NewPartitions(total_count=2)})
        with pytest.raises(InvalidRequestError):  # groups are placed by its partition count
            client.create_partitions({"__consumer_offsets": NewPartitions(total_count=99)})
    finally:
        client.close()


# ------------------------------------------------------------------------------ DescribeLogDirs


def test_kafka_python_describe_log_dirs(broker: BrokerProcess) -> None:
    from confluent_kafka import Producer

    from tests.interop_helpers import log_files

    topic = unique("dirs")
    create_topic(broker, topic, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        producer.produce(topic, b"x" * 100 + b"%d" % i, partition=0)
    assert producer.flush(DEADLINE_S) == 0
    on_disk = sum(f.stat().st_size for f in log_files(broker, topic, 0))
    assert on_disk > 2000
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        (answer,) = client.describe_log_dirs({topic: [0, 1, 7]})  # one broker
        (log_dir,) = answer["log_dirs"]
        assert log_dir["error_code"] == 0
        assert log_dir["log_dir"] == str(broker.data_dir.resolve())
        assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0  # v4: the volume
        (described,) = log_dir["topics"]
        assert described["name"] == topic
        sizes = {p["partition_index"]: p["partition_size"] for p in described["partitions"]}
        assert sizes == {0: on_disk, 1: 0}  # partition 7 does not exist: left out, as Kafka
        assert all(p["offset_lag"] == 0 for p in described["partitions"])
        assert not any(p["is_future_key"] for p in described["partitions"])
        # No topics given: kafka-python names every topic it knows (the null request, every
        # partition here, is tests/broker/test_server.py's)
        (answer,) = client.describe_log_dirs()
        assert topic in {t["name"] for t in answer["log_dirs"][0]["topics"]}
        # An unknown topic: kafka-python asks for it by name and the broker has nothing
        (answer,) = client.describe_log_dirs({unique("missing"): [0]})
        assert answer["log_dirs"][0]["topics"] == []
    finally:
        client.close()


# ------------------------------------------------------------------ DeleteRecords / DeleteTopics


def test_confluent_delete_records_and_topics(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaError, KafkaException, Producer

    topic = unique("del")
    create_topic(broker, topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce(topic, b"%d" % i, partition=0)
    assert producer.flush(DEADLINE_S) == 0
    client = admin(broker)
    (future,) = client.delete_records([TopicPartition(topic, 0, 4)]).values()
    assert future.result(DEADLINE_S).low_watermark == 4
    (future,) = client.delete_records([TopicPartition(topic, 0, 99)]).values()
    with pytest.raises(KafkaException) as info:
        future.result(DEADLINE_S)
    assert info.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    client.delete_topics([topic], operation_timeout=10)[topic].result(DEADLINE_S)
    with pytest.raises(KafkaException) as info:
        client.delete_topics([topic])[topic].result(DEADLINE_S)
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_kafka_python_delete_records_and_topics(broker: BrokerProcess) -> None:
    from confluent_kafka import Producer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.errors import UnknownTopicOrPartitionError
        from kafka.structs import TopicPartition as KpTopicPartition

    topic = unique("kp-del")
    create_topic(broker, topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce(topic, b"%d" % i, partition=0)
    assert producer.flush(DEADLINE_S) == 0
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        done = client.delete_records({KpTopicPartition(topic, 0): 6})
        assert done[KpTopicPartition(topic, 0)]["low_watermark"] == 6
        client.delete_topics([topic])
        with pytest.raises(UnknownTopicOrPartitionError):
            client.delete_topics([topic])
    finally:
        client.close()


# ------------------------------------------------------------------ internal topics (issue 13)


def committed_group(broker: BrokerProcess) -> tuple[str, str]:
    """``(group, topic)``: a group that committed offset 3 on ``topic``-0 (so
    ``__consumer_offsets`` exists and holds something to lose)."""
    from confluent_kafka import Consumer

    group, topic = unique("keep"), unique("kept")
    create_topic(broker, topic, 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    finally:
        c.close()
    return group, topic


def committed_offset(broker: BrokerProcess, group: str, topic: str) -> int:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=DEADLINE_S)
        return int(tp.offset)
    finally:
        c.close()


def test_confluent_internal_topic_is_protected(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import NewPartitions

    group, topic = committed_group(broker)
    client = admin(broker)
    internal = "__consumer_offsets"
    for call, code in (
        (lambda: client.delete_topics([internal])[internal],
         KafkaError.TOPIC_AUTHORIZATION_FAILED),
        (lambda: client.create_partitions([NewPartitions(internal, 9)])[internal],
         KafkaError.INVALID_REQUEST),
        (lambda: next(iter(client.delete_records([TopicPartition(internal, 0, 1)]).values())),
         KafkaError.TOPIC_EXCEPTION),
    ):  # fmt: skip
        with pytest.raises(KafkaException) as info:
            call().result(DEADLINE_S)
        assert info.value.args[0].code() == code, info.value
    failures: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})
    producer.produce(internal, b"garbage", partition=0,
                     on_delivery=lambda err, _msg: failures.append(err))  # fmt: skip
    assert producer.flush(DEADLINE_S) == 0
    assert [e.code() for e in failures] == [KafkaError.TOPIC_EXCEPTION]
    assert committed_offset(broker, group, topic) == 3


def test_kafka_python_internal_topic_is_protected(broker: BrokerProcess) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.errors import InvalidTopicError, TopicAuthorizationFailedError
        from kafka.structs import TopicPartition as KpTopicPartition

    group, topic = committed_group(broker)
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            client.delete_topics(["__consumer_offsets"])
        with pytest.raises(InvalidTopicError):
            client.delete_records({KpTopicPartition("__consumer_offsets", 0): 1})
    finally:
        client.close()
    assert committed_offset(broker, group, topic) == 3


# ------------------------------------------------------------------ configs: success and refusal


def config_values(client: AdminClient, topic: str) -> dict[str, tuple[str, int]]:
    """``{key: (value, source)}`` of a topic as confluent-kafka describes it."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC, topic)
    found = client.describe_configs([resource])[resource].result(DEADLINE_S)
    return {k: (e.value, e.source) for k, e in found.items()}


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_confluent_configs_succeed_and_refuse(broker: BrokerProcess) -> None:
    """describe_configs (topic and broker, with sources), alter_configs (the legacy API: the
    given set replaces the topic's overrides), incremental_alter_configs -- and Kafka's refusals:
    an unknown topic, an invalid value, an unknown key, a read-only broker key; a refused
    request changes nothing."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        ResourceType,
    )

    topic = unique("cfg")
    create_topic(broker, topic, 1)
    client = admin(broker)
    dynamic, default = ConfigSource.DYNAMIC_TOPIC_CONFIG.value, ConfigSource.DEFAULT_CONFIG.value
    assert config_values(client, topic)["retention.ms"] == ("604800000", default)
    two = {"retention.ms": "60000", "segment.ms": "3600000"}
    legacy = ConfigResource(ResourceType.TOPIC, topic, set_config=two)
    client.alter_configs([legacy])[legacy].result(DEADLINE_S)
    values = config_values(client, topic)
    assert values["retention.ms"] == ("60000", dynamic)
    assert values["segment.ms"] == ("3600000", dynamic)
    replaced = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "70000"})
    client.alter_configs([replaced])[replaced].result(DEADLINE_S)
    values = config_values(client, topic)
    assert values["retention.ms"] == ("70000", dynamic)
    assert values["segment.ms"] == ("604800000", default)  # not in the set: back to default

    def incremental(name: str, *entries: tuple[str, str | None, AlterConfigOpType]) -> Any:
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=op) for k, v, op in entries
        ])  # fmt: skip
        return client.incremental_alter_configs([resource])[resource]

    SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
    incremental(topic, ("max.message.bytes", "5000", SET), ("retention.ms", None, DELETE)).result(
        DEADLINE_S
    )
    values = config_values(client, topic)
    assert values["max.message.bytes"] == ("5000", dynamic)
    assert values["retention.ms"] == ("604800000", default)
    missing = unique("missing")
    refusals = [
        (lambda: client.describe_configs([ConfigResource(ResourceType.TOPIC, missing)]),
         KafkaError.UNKNOWN_TOPIC_OR_PART),
        (lambda: client.alter_configs([ConfigResource(ResourceType.TOPIC, missing,
                                                      set_config={"retention.ms": "1"})]),
         KafkaError.UNKNOWN_TOPIC_OR_PART),
        (lambda: {0: incremental(missing, ("retention.ms", "1", SET))},
         KafkaError.UNKNOWN_TOPIC_OR_PART),
        # an invalid value: nothing of the request is applied, the valid key neither
        (lambda: {0: incremental(topic, ("retention.ms", "soon", SET),
                                 ("segment.ms", "1000", SET))},
         KafkaError.INVALID_CONFIG),
        (lambda: {0: incremental(topic, ("no.such.key", "1", SET))}, KafkaError.INVALID_CONFIG),
        (lambda: client.alter_configs([ConfigResource(ResourceType.TOPIC, topic,
                                                      set_config={"retention.ms": "-7"})]),
         KafkaError.INVALID_CONFIG),
        # static broker keys (Kafka's ConfigException, wrapped as INVALID_CONFIG)
        (lambda: client.incremental_alter_configs([ConfigResource(
            ResourceType.BROKER, "0", incremental_configs=[
                ConfigEntry("log.retention.hours", "1", incremental_operation=SET)])]),
         KafkaError.INVALID_CONFIG),
        (lambda: client.alter_configs([ConfigResource(
            ResourceType.BROKER, "0", set_config={"num.partitions": "3"})]),
         KafkaError.INVALID_CONFIG),
    ]  # fmt: skip
    for call, code in refusals:
        (future,) = call().values()
        with pytest.raises(KafkaException) as info:
            future.result(DEADLINE_S)
        assert info.value.args[0].code() == code, info.value
    values = config_values(client, topic)
    assert values["max.message.bytes"] == ("5000", dynamic)
    assert values["retention.ms"][1] == values["segment.ms"][1] == default
    # The broker's own configs: read-only, the server's overrides as STATIC_BROKER_CONFIG
    resource = ConfigResource(ResourceType.BROKER, "0")
    found = client.describe_configs([resource])[resource].result(DEADLINE_S)
    delay = found["group.initial.rebalance.delay.ms"]
    assert (delay.value, delay.source) == ("0", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert delay.is_read_only
    assert found["num.partitions"].source == default


def test_kafka_python_configs_succeed_and_refuse(broker: BrokerProcess) -> None:
    """kafka-python reports a refused alter in its result dict (the error's text), checks keys
    against DescribeConfigs first unless ``raise_on_unknown=False``, and leaves an error code of
    DescribeConfigs unchecked (an unknown topic describes as no configs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import ConfigResource, ConfigResourceType

    topic = unique("kp-cfg")
    create_topic(broker, topic, 1)
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)

    def described(name: str, **kw: Any) -> dict[str, Any]:
        got = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)], **kw)
        return dict(got["topic"][name])

    def alter(resource_type: Any, name: str, configs: dict[str, str], **kw: Any) -> str:
        result = client.alter_configs([ConfigResource(resource_type, name, configs=configs)],
                                      raise_on_unknown=False, **kw)  # fmt: skip
        return str(result[resource_type.name.lower()][name])

    try:
        assert described(topic) == {}  # nothing modified yet
        assert alter(ConfigResourceType.TOPIC, topic, {"retention.ms": "60000"}) == "OK"
        assert alter(ConfigResourceType.TOPIC, topic, {"segment.ms": "1000"},
                     incremental=False) == "OK"  # fmt: skip
        # (kafka-python's AlterConfigs sends the other modified keys too: the set replaces)
        modified = described(topic, include_synonyms=True)
        assert {k: v["value"] for k, v in modified.items()} == {
            "retention.ms": "60000", "segment.ms": "1000",
        }  # fmt: skip
        assert modified["segment.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert modified["segment.ms"]["synonyms"][0]["source"] == "DYNAMIC_TOPIC_CONFIG"
        every = described(topic, config_filter="all")
        assert every["flush.ms"]["value"] == "9223372036854775807"
        assert every["flush.ms"]["config_source"] == "DEFAULT_CONFIG"
        missing = unique("missing")
        assert "UnknownTopicOrPartition" in alter(ConfigResourceType.TOPIC, missing,
                                                  {"retention.ms": "1"})  # fmt: skip
        assert described(missing) == {}
        for bad in ({"retention.ms": "soon", "flush.ms": "10"}, {"no.such.key": "1"}):
            assert "InvalidConfiguration" in alter(ConfigResourceType.TOPIC, topic, bad), bad
            assert "InvalidConfiguration" in alter(ConfigResourceType.TOPIC, topic, bad,
                                                   incremental=False), bad  # fmt: skip
        assert set(described(topic)) == {"retention.ms", "segment.ms"}  # nothing applied
        # raise_on_unknown (its default) checks keys against what DescribeConfigs calls
        # dynamic: broker keys are read-only, so it refuses before sending anything
        with pytest.raises(ValueError, match="Unrecognized configs"):
            client.alter_configs([ConfigResource(ConfigResourceType.BROKER, "0",
                                                 configs={"num.partitions": "3"})])  # fmt: skip
        refused = alter(ConfigResourceType.BROKER, "0", {"num.partitions": "3"})
        assert "InvalidConfiguration" in refused
        assert "Cannot update these configs dynamically: Set(num.partitions)" in refused
        broker_configs = client.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all"
        )["broker"]["0"]
        assert broker_configs["group.initial.rebalance.delay.ms"]["value"] == "0"
        assert broker_configs["group.initial.rebalance.delay.ms"]["read_only"]
    finally:
        client.close()


def test_confluent_creates_a_topic_with_an_old_message_format_version(
    broker: BrokerProcess,
) -> None:
    """librdkafka's test 0092 creates its topic with ``message.format.version=0.10.0.0``: Kafka
    3.9 accepts every name ``MetadataVersion.fromVersionString`` knows (``0.10.0.0`` is
    ``0.10.0``) and ignores the setting (batches stay v2); the topic works as any other, and
    DescribeConfigs shows the value as given. A name Kafka does not know is INVALID_CONFIG with
    Kafka's message, and nothing is created."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    client = admin(broker)
    topic = unique("mfv")
    new = NewTopic(topic, 1, 1, config={"message.format.version": "0.10.0.0"})
    client.create_topics([new])[topic].result(DEADLINE_S)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entry = client.describe_configs([resource])[resource].result(DEADLINE_S)[
        "message.format.version"
    ]
    assert (entry.value, entry.source) == ("0.10.0.0", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3):
        producer.produce(topic, key=b"k", value=f"v{i}".encode(), headers=[("h", b"1")])
    assert producer.flush(DEADLINE_S) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("mfv"),
                         "auto.offset.reset": "earliest"})  # fmt: skip
    try:
        consumer.subscribe([topic])
        got: list[Any] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg)
    finally:
        consumer.close()
    assert [m.value() for m in got] == [b"v0", b"v1", b"v2"]
    assert all(m.headers() == [("h", b"1")] for m in got)  # record format v2: headers kept

    bad = unique("mfv-bad")
    refused = NewTopic(bad, 1, 1, config={"message.format.version": "0.10.x"})
    with pytest.raises(KafkaException) as info:
        client.create_topics([refused])[bad].result(DEADLINE_S)
    error = info.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "Version 0.10.x is not a valid version" in error.str()
    assert bad not in client.list_topics(timeout=DEADLINE_S).topics
