"""Kafka's znode JSON (``ZkData.scala``): our encoders write it, our decoders read what Kafka
writes (key order, optional fields, older versions) and refuse malformed content clearly."""

from __future__ import annotations

import contextlib
import json
import uuid
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.protocol.structs import TopicPartition
from sluice.server.zk.data import (
    PERSISTENT_PATHS,
    BrokerInfo,
    ControllerInfo,
    EndPoint,
    LogDirEvent,
    PartitionState,
    ProducerIdBlock,
    ReplicaAssignment,
    TopicAssignment,
    TopicConfig,
    broker_path,
    decode_controller_epoch,
    decode_log_dir_event,
    decode_topic_id,
    delete_topic_path,
    encode_controller_epoch,
    encode_log_dir_event,
    encode_topic_id,
    partition_state_path,
    topic_config_path,
    topic_path,
)
from sluice.server.zk.errors import ZkDataError, ZkError


def test_a_log_dir_event_is_kafkas_notification_with_the_offline_partitions() -> None:
    """Kafka's ``LogDirEventNotificationSequenceZNode.encode`` bytes, plus the partitions
    Sluice's controller needs (it cannot ask the broker); Kafka's form means every replica."""
    kafkas = b'{"version":1,"broker":3,"event":1}'
    assert encode_log_dir_event(LogDirEvent(3)) == kafkas
    assert decode_log_dir_event(kafkas) == LogDirEvent(3, None)
    event = LogDirEvent(3, (TopicPartition("t", 0), TopicPartition("u", 2)))
    encoded = encode_log_dir_event(event)
    assert encoded == (b'{"version":1,"broker":3,"event":1,"partitions":'
                       b'[{"topic":"t","partition":0},{"topic":"u","partition":2}]}')  # fmt: skip
    assert decode_log_dir_event(encoded) == event
    assert "/log_dir_event_notification" in PERSISTENT_PATHS
    with pytest.raises(ZkDataError):
        decode_log_dir_event(b'{"version":1,"event":1}')


def test_paths_are_kafkas() -> None:
    tp = TopicPartition("orders", 3)
    assert broker_path(7) == "/brokers/ids/7"
    assert topic_path("orders") == "/brokers/topics/orders"
    assert partition_state_path(tp) == "/brokers/topics/orders/partitions/3/state"
    assert topic_config_path("orders") == "/config/topics/orders"
    assert delete_topic_path("orders") == "/admin/delete_topics/orders"
    for bad in ("", ".", "..", "a/b"):
        with pytest.raises(ValueError, match="znode path"):
            topic_path(bad)


def test_broker_info_v5_as_kafka_writes_it() -> None:
    info = BrokerInfo(
        broker_id=1,
        endpoints=(EndPoint("PLAINTEXT", "127.0.0.1", 9092),),
        timestamp_ms=1700000000000,
    )
    assert json.loads(info.encode()) == {
        "version": 5,
        "host": "127.0.0.1",
        "port": 9092,
        "endpoints": ["PLAINTEXT://127.0.0.1:9092"],
        "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
        "jmx_port": -1,
        "timestamp": "1700000000000",
        "features": {},
    }
    assert b" " not in info.encode()  # compact, like Jackson
    assert BrokerInfo.decode(1, info.encode(), epoch=42) == BrokerInfo(
        1, info.endpoints, timestamp_ms=1700000000000, epoch=42
    )


def test_broker_info_says_a_power_loss_only_when_there_was_one() -> None:
    endpoints = (EndPoint("PLAINTEXT", "127.0.0.1", 9092),)
    lost = BrokerInfo(1, endpoints, timestamp_ms=1, may_have_lost_unflushed=True)
    assert json.loads(lost.encode())["may_have_lost_unflushed"] is True
    assert BrokerInfo.decode(1, lost.encode()).may_have_lost_unflushed
    kept = BrokerInfo(1, endpoints, timestamp_ms=1)
    assert "may_have_lost_unflushed" not in json.loads(kept.encode())  # Kafka's JSON exactly
    assert not BrokerInfo.decode(1, kept.encode()).may_have_lost_unflushed
    bad = kept.encode().replace(b'"features":{}', b'"features":{},"may_have_lost_unflushed":1')
    with pytest.raises(ZkDataError, match="boolean"):
        BrokerInfo.decode(1, bad)


def test_broker_info_names_its_offline_partitions_only_when_some() -> None:
    endpoints = (EndPoint("PLAINTEXT", "127.0.0.1", 9092),)
    offline = (TopicPartition("orders", 3), TopicPartition("a.b", 0))
    info = BrokerInfo(1, endpoints, timestamp_ms=1, offline_partitions=offline)
    assert json.loads(info.encode())["offline_partitions"] == [
        {"topic": "orders", "partition": 3},
        {"topic": "a.b", "partition": 0},
    ]
    assert BrokerInfo.decode(1, info.encode(), epoch=7) == replace(info, epoch=7)
    kept = BrokerInfo(1, endpoints, timestamp_ms=1)
    assert "offline_partitions" not in json.loads(kept.encode())  # Kafka's JSON exactly
    assert BrokerInfo.decode(1, kept.encode()).offline_partitions == ()
    for field, match in ((b"1", "list of objects"), (b'[{"topic":"t"}]', "partition")):
        bad = kept.encode().replace(
            b'"features":{}', b'"features":{},"offline_partitions":' + field
        )
        with pytest.raises(ZkDataError, match=match):
            BrokerInfo.decode(1, bad)


def test_broker_info_decodes_kafkas_documented_example() -> None:
    # The version 5 example of BrokerIdZNode.decode's doc comment, plus the protocol map a
    # Kafka broker with custom listener names writes.
    kafka = (
        b'{"version":5,"host":"localhost","port":9092,"jmx_port":9999,'
        b'"timestamp":"2233345666","endpoints":["CLIENT://host1:9092","REPLICATION://host1:9093"],'
        b'"listener_security_protocol_map":{"CLIENT":"SASL_SSL","REPLICATION":"PLAINTEXT"},'
        b'"rack":"dc1","features":{"feature":{"min_version":1,"max_version":3}}}'
    )
    info = BrokerInfo.decode(3, kafka)
    assert info.endpoints == (
        EndPoint("CLIENT", "host1", 9092, "SASL_SSL"),
        EndPoint("REPLICATION", "host1", 9093, "PLAINTEXT"),
    )
    assert (info.rack, info.jmx_port, info.timestamp_ms) == ("dc1", 9999, 2233345666)
    assert info.features == {"feature": {"min_version": 1, "max_version": 3}}
    # Re-encoded: the top-level host/port is the PLAINTEXT endpoint's.
    again = json.loads(info.encode())
    assert (again["host"], again["port"], again["rack"]) == ("host1", 9093, "dc1")


def test_broker_info_older_versions_and_ipv6() -> None:
    v1 = BrokerInfo.decode(1, b'{"version":1,"host":"h","port":9092,"jmx_port":-1}')
    assert v1.endpoints == (EndPoint("PLAINTEXT", "h", 9092),)
    v4 = BrokerInfo.decode(
        2, b'{"version":4,"jmx_port":-1,"endpoints":["SSL://[::1]:9093"],"host":null,"port":-1}'
    )
    assert v4.endpoints == (EndPoint("SSL", "::1", 9093, "SSL"),)
    assert v4.endpoints[0].connection_string == "SSL://[::1]:9093"
    no_plaintext = json.loads(BrokerInfo(2, v4.endpoints, timestamp_ms=1).encode())
    assert (no_plaintext["host"], no_plaintext["port"]) == (None, -1)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not json", "not JSON"),
        (b"[1]", "JSON object"),
        (b'{"version":6,"jmx_port":-1,"endpoints":[]}', "unsupported version 6"),
        (b'{"version":5,"endpoints":[]}', "missing field 'jmx_port'"),
        (b'{"version":5,"jmx_port":true,"endpoints":[]}', "'jmx_port' must be an integer"),
        (b'{"version":5,"jmx_port":-1,"endpoints":"x"}', "'endpoints' must be a list"),
        (b'{"version":5,"jmx_port":-1,"endpoints":["nonsense"]}', "LISTENER://host:port"),
        (b'{"version":5,"jmx_port":-1,"endpoints":["CUSTOM://h:1"]}', "no security protocol"),
        (b'{"version":5,"jmx_port":-1,"endpoints":[],"timestamp":"soon"}', "timestamp"),
    ],
)
def test_broker_info_rejects_malformed(data: bytes, message: str) -> None:
    with pytest.raises(ZkDataError, match=message) as err:
        BrokerInfo.decode(9, data)
    assert isinstance(err.value, ZkError) and isinstance(err.value, ValueError)


def test_controller_and_epoch() -> None:
    info = ControllerInfo(2, timestamp_ms=1234)
    assert info.encode() == (
        b'{"version":2,"brokerid":2,"timestamp":"1234","kraftControllerEpoch":-1}'
    )
    assert ControllerInfo.decode(info.encode(), zk_version=0) == ControllerInfo(2, 1234, -1, 0)
    # Kafka 2.x wrote version 1 without the KRaft field.
    assert ControllerInfo.decode(b'{"version":1,"brokerid":5,"timestamp":"9"}').broker_id == 5
    with pytest.raises(ZkDataError, match="brokerid"):
        ControllerInfo.decode(b'{"version":2,"timestamp":"9"}')
    assert encode_controller_epoch(17) == b"17"
    assert decode_controller_epoch(b"17") == 17
    with pytest.raises(ZkDataError, match="decimal"):
        decode_controller_epoch(b'{"epoch":1}')


def test_topic_id_is_kafkas_base64() -> None:
    # Kafka's Uuid.ZERO_UUID and Uuid.METADATA_TOPIC_ID (0, 1) print as these.
    assert encode_topic_id(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert encode_topic_id(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    some = uuid.uuid4()
    assert len(encode_topic_id(some)) == 22
    assert decode_topic_id(encode_topic_id(some)) == some
    assert decode_topic_id(encode_topic_id(some) + "==") == some  # padded is accepted too
    for bad in ("AAAA", "!!!!!!!!!!!!!!!!!!!!!!", "A" * 30):
        with pytest.raises(ZkDataError, match="topic id"):
            decode_topic_id(bad)


def test_topic_assignment_v3() -> None:
    tid = uuid.UUID(int=0x0123456789ABCDEF0123456789ABCDEF)
    assignment = TopicAssignment(
        "orders",
        tid,
        {1: ReplicaAssignment((2, 3, 1)), 0: ReplicaAssignment((1, 2, 3), adding=(4,))},
    )
    encoded = json.loads(assignment.encode())
    assert encoded == {
        "version": 3,
        "topic_id": encode_topic_id(tid),
        "partitions": {"0": [1, 2, 3], "1": [2, 3, 1]},
        "adding_replicas": {"0": [4]},
        "removing_replicas": {},
    }
    decoded = TopicAssignment.decode("orders", assignment.encode(), zk_version=4)
    assert decoded.topic_id == tid and decoded.zk_version == 4
    assert list(decoded.partitions) == [0, 1]
    assert decoded.partitions[0] == ReplicaAssignment((1, 2, 3), (4,), ())
    assert decoded.replicas(1) == (2, 3, 1)
    # Kafka 2.x topics: version 1/2, no topic id, no adding/removing maps.
    old = TopicAssignment.decode("t", b'{"version":1,"partitions":{"0":[1]}}')
    assert old.topic_id is None and old.partitions == {0: ReplicaAssignment((1,))}
    with pytest.raises(ZkDataError, match="not a partition number"):
        TopicAssignment.decode("t", b'{"version":3,"partitions":{"x":[1]}}')
    with pytest.raises(ZkDataError, match="list of integers"):
        TopicAssignment.decode("t", b'{"version":3,"partitions":{"0":[1,"2"]}}')


def test_partition_state_v1() -> None:
    # Kafka's documented form (docs: "Broker Topic Registry"), keys in another order.
    kafka = b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2]}'
    state = PartitionState.decode(kafka, zk_version=3)
    assert state == PartitionState(
        leader=1, leader_epoch=0, isr=(1, 2), controller_epoch=1, zk_version=3
    )
    assert state.encode() == (
        b'{"version":1,"leader":1,"leader_epoch":0,"controller_epoch":1,"isr":[1,2]}'
    )
    assert state.same_data(PartitionState.decode(kafka, zk_version=9))
    assert not state.same_data(PartitionState(1, 1, (1, 2), 1))
    offline = PartitionState(PartitionState.NO_LEADER, 5, (3,), 2, leader_recovery_state=1)
    assert json.loads(offline.encode())["leader_recovery_state"] == 1
    assert PartitionState.decode(offline.encode()).leader_recovery_state == 1
    # KIP-966's eligible leader replicas: written only when there are some (Kafka's own
    # brokers read the fields they know); the state without them encodes exactly as Kafka's.
    eligible = PartitionState(1, 4, (1,), 2, eligible_leader_replicas=(3, 2))
    assert json.loads(eligible.encode())["eligible_leader_replicas"] == [3, 2]
    assert PartitionState.decode(eligible.encode()).eligible_leader_replicas == (3, 2)
    assert "eligible" not in PartitionState(1, 4, (1,), 2).encode().decode()
    with pytest.raises(ZkDataError, match="eligible_leader_replicas"):
        PartitionState.decode(
            b'{"version":1,"leader":1,"leader_epoch":0,"controller_epoch":1,"isr":[1],'
            b'"eligible_leader_replicas":"x"}'
        )
    with pytest.raises(ZkDataError, match="missing field 'isr'"):
        PartitionState.decode(b'{"version":1,"leader":1,"leader_epoch":0,"controller_epoch":1}')
    with pytest.raises(ZkDataError, match="unsupported version 2"):
        PartitionState.decode(b'{"version":2}')


def test_topic_config_and_producer_id_block() -> None:
    config = TopicConfig({"cleanup.policy": "compact", "retention.ms": "1000"})
    assert json.loads(config.encode()) == {
        "version": 1,
        "config": {"cleanup.policy": "compact", "retention.ms": "1000"},
    }
    assert TopicConfig.decode(config.encode(), 2) == TopicConfig(config.config, 2)
    assert TopicConfig.decode(b"").config == {}
    with pytest.raises(ZkDataError, match="strings"):
        TopicConfig.decode(b'{"version":1,"config":{"retention.ms":1000}}')

    block = ProducerIdBlock(broker_id=1, first=1000, last=1999)
    assert json.loads(block.encode()) == {
        "version": 1,
        "broker": 1,
        "block_start": "1000",
        "block_end": "1999",
    }
    assert ProducerIdBlock.decode(block.encode()) == block and block.size == 1000
    with pytest.raises(ZkDataError, match="block_end"):
        ProducerIdBlock.decode(b'{"version":1,"broker":1,"block_start":"5","block_end":"4"}')


ints = st.integers(min_value=-1, max_value=2**31 - 1)
replica_lists = st.lists(st.integers(min_value=0, max_value=2**31 - 1), max_size=5).map(tuple)


@given(ints, ints, replica_lists, ints, st.integers(min_value=0, max_value=2))
def test_partition_state_round_trips(
    leader: int, epoch: int, isr: tuple[int, ...], controller_epoch: int, recovery: int
) -> None:
    state = PartitionState(leader, epoch, isr, controller_epoch, leader_recovery_state=recovery)
    assert PartitionState.decode(state.encode()) == state


@given(
    st.dictionaries(
        st.integers(min_value=0, max_value=1000),
        st.builds(ReplicaAssignment, replica_lists, replica_lists, replica_lists),
        max_size=8,
    ),
    st.none() | st.uuids(),
)
def test_topic_assignment_round_trips(
    partitions: dict[int, ReplicaAssignment], topic_id: uuid.UUID | None
) -> None:
    assignment = TopicAssignment("t", topic_id, dict(sorted(partitions.items())))
    assert TopicAssignment.decode("t", assignment.encode()) == assignment


FIELDS = [
    "version", "host", "port", "endpoints", "jmx_port", "timestamp", "rack", "features",
    "listener_security_protocol_map", "brokerid", "kraftControllerEpoch", "topic_id",
    "partitions", "adding_replicas", "removing_replicas", "leader", "leader_epoch",
    "controller_epoch", "isr", "leader_recovery_state", "config", "broker", "block_start",
    "block_end",
]  # fmt: skip
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 6)
    | st.sampled_from(["", "0", "x", "PLAINTEXT://h:1", "AAAAAAAAAAAAAAAAAAAAAA"])
)
json_values = (
    scalars
    | st.lists(scalars, max_size=3)
    | st.dictionaries(st.sampled_from(["0", "1", "x", "PLAINTEXT"]), scalars, max_size=2)
    | st.dictionaries(st.sampled_from(["0", "²"]), st.lists(scalars, max_size=2), max_size=2)
)
znode_json = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6).map(
    lambda obj: json.dumps(obj).encode()
)


@given(st.binary(max_size=200) | znode_json)
def test_decoders_raise_only_zk_data_errors(data: bytes) -> None:
    decoders = [
        lambda: BrokerInfo.decode(1, data),
        lambda: ControllerInfo.decode(data),
        lambda: TopicAssignment.decode("t", data),
        lambda: PartitionState.decode(data),
        lambda: TopicConfig.decode(data),
        lambda: ProducerIdBlock.decode(data),
        lambda: decode_controller_epoch(data),
        lambda: decode_log_dir_event(data),
    ]
    for decode in decoders:
        with contextlib.suppress(ZkDataError):
            decode()
