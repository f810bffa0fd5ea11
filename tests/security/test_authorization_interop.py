"""Authorization end to end (issue 24): a broker process with ``authorizer.class.name`` set,
real clients (confluent-kafka, kafka-python) as ``User:ANONYMOUS`` -- Kafka's principal on a
PLAINTEXT listener.

The broker starts with one ACL seeded in its file store: ANONYMOUS may Alter and Describe the
cluster, i.e. manage ACLs (CreateAcls / DeleteAcls / DescribeAcls) and SCRAM credentials, and
nothing else. Each test then shows, for an API family, the refusal with Kafka's code, grants the
ACL through CreateAcls, and shows the success; ACLs are taken away again at the end of each test
(``acls`` fixture) so tests do not see each other's grants.

One broker per module; every wait bounded.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from sluice.net.connection import Connection
from sluice.protocol import messages as m
from sluice.server.security import acl as sacl
from sluice.server.security.authorizer import FileAclStore
from tests.broker_util import BrokerProcess, start_broker

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import admin as kp
    from kafka.errors import SecurityDisabledError

pytestmark = pytest.mark.interop

ANONYMOUS = "User:ANONYMOUS"
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
DEADLINE_S = 30.0
ACL_FILE = "sluice-acls.json"


def seed_acls(
    data_dir: Path, *entries: tuple[sacl.ResourcePattern, sacl.AccessControlEntry]
) -> None:
    """Write ACLs into a standalone broker's file store before it starts."""
    data_dir.mkdir(parents=True, exist_ok=True)
    store = FileAclStore(data_dir / ACL_FILE)
    for pattern, entry in entries:
        asyncio.run(store.update(pattern, lambda current, e=entry: current | {e}))


Binding = tuple[sacl.ResourcePattern, sacl.AccessControlEntry]


def cluster_acl(operation: sacl.AclOperation) -> Binding:
    return (
        sacl.ResourcePattern(sacl.ResourceType.CLUSTER, sacl.CLUSTER_NAME),
        sacl.AccessControlEntry(ANONYMOUS, "*", operation, sacl.AclPermissionType.ALLOW),
    )


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("authz") / "data"
    seed_acls(
        data_dir, cluster_acl(sacl.AclOperation.ALTER), cluster_acl(sacl.AclOperation.DESCRIBE)
    )
    proc = start_broker(
        data_dir,
        overrides=(
            f"authorizer.class.name={AUTHORIZER}",
            "group.initial.rebalance.delay.ms=0",
            "group.min.session.timeout.ms=500",
        ),
    )
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log_text()[-3000:]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def allow(
    resource_type: ResourceType,
    name: str,
    operation: AclOperation,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, ANONYMOUS, "*", operation, permission)


def deny(resource_type: ResourceType, name: str, operation: AclOperation, **kw: Any) -> AclBinding:
    return allow(resource_type, name, operation, permission=AclPermissionType.DENY, **kw)


class Acls:
    """CreateAcls / DeleteAcls through confluent-kafka; what a test granted is revoked after."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.admin = admin(broker)
        self.granted: list[AclBinding] = []

    def grant(self, *bindings: AclBinding) -> None:
        for future in self.admin.create_acls(list(bindings), request_timeout=10).values():
            assert future.result(timeout=DEADLINE_S) is None
        self.granted.extend(bindings)

    def revoke(self, *bindings: AclBinding) -> list[AclBinding]:
        filters = [
            AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host,
                             b.operation, b.permission_type)
            for b in bindings
        ]  # fmt: skip
        deleted: list[AclBinding] = []
        for future in self.admin.delete_acls(filters, request_timeout=10).values():
            deleted.extend(future.result(timeout=DEADLINE_S))
        return deleted


@pytest.fixture
def acls(broker: BrokerProcess) -> Iterator[Acls]:
    acls = Acls(broker)
    yield acls
    if acls.granted:
        acls.revoke(*acls.granted)


def make_topic(acls: Acls, name: str, partitions: int = 1) -> None:
    """Create a topic (with Create on it granted for the purpose)."""
    acls.grant(allow(ResourceType.TOPIC, name, AclOperation.CREATE))
    futures = acls.admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=10)
    futures[name].result(timeout=DEADLINE_S)


def produce_one(broker: BrokerProcess, topic: str, **config: Any) -> KafkaError | None:
    """Produce one record; the delivery error (None: delivered)."""
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10000, **config}
    )
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: outcome.append(err))
    deadline = time.monotonic() + DEADLINE_S
    while not outcome and time.monotonic() < deadline:
        try:
            producer.poll(0.2)
        except KafkaException as exc:  # a fatal error (an idempotent producer's)
            return exc.args[0]  # type: ignore[no-any-return]
    assert outcome, "no delivery report"
    return outcome[0]


def code_of(exc: BaseException) -> int:
    assert isinstance(exc, KafkaException), exc
    return int(exc.args[0].code())


# --- the ACL admin APIs --------------------------------------------------------------------------


def test_acls_round_trip_through_confluent_kafka(acls: Acls) -> None:
    topic = unique("acl-rt")
    literal = allow(ResourceType.TOPIC, topic, AclOperation.READ)
    prefixed = allow(
        ResourceType.TOPIC, "acl-rt-", AclOperation.WRITE, ResourcePatternType.PREFIXED
    )
    acls.grant(literal, prefixed)
    match = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    described = acls.admin.describe_acls(match, request_timeout=10).result(timeout=DEADLINE_S)
    assert set(described) == {literal, prefixed}
    assert acls.revoke(prefixed) == [prefixed]
    described = acls.admin.describe_acls(match, request_timeout=10).result(timeout=DEADLINE_S)
    assert described == [literal]
    bad = AclBinding(ResourceType.BROKER, "not-the-cluster", ResourcePatternType.LITERAL,
                     ANONYMOUS, "*", AclOperation.ALTER, AclPermissionType.ALLOW)  # fmt: skip
    with pytest.raises(KafkaException) as err:
        acls.grant(bad)
    assert code_of(err.value) == KafkaError.INVALID_REQUEST


def test_acls_round_trip_through_kafka_python(broker: BrokerProcess, acls: Acls) -> None:
    topic = unique("kp-acl")
    client = kp.KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        pattern = kp.ResourcePattern(
            kp.ResourceType.TOPIC, topic, kp.ACLResourcePatternType.LITERAL
        )
        acl = kp.ACL(ANONYMOUS, "*", kp.ACLOperation.DESCRIBE, kp.ACLPermissionType.ALLOW, pattern)
        created = client.create_acls([acl])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        filter_ = kp.ACLFilter(ANONYMOUS, "*", kp.ACLOperation.ANY, kp.ACLPermissionType.ANY,
                            kp.ResourcePatternFilter(kp.ResourceType.TOPIC, topic,
                                                    kp.ACLResourcePatternType.LITERAL))  # fmt: skip
        found, error = client.describe_acls(filter_)
        assert error.errno == 0 and [a.operation for a in found] == [kp.ACLOperation.DESCRIBE]
        [(_f, deleted, error)] = client.delete_acls([filter_])
        assert error.errno == 0 and [a.resource_pattern.resource_name for a in deleted] == [topic]
        found, _ = client.describe_acls(filter_)
        assert found == []
    finally:
        client.close()


# --- produce, metadata, fetch, groups --------------------------------------------------------


def test_produce_needs_write_and_metadata_needs_describe(broker: BrokerProcess, acls: Acls) -> None:
    topic = unique("w")
    make_topic(acls, topic)
    # Metadata: no Describe -> TOPIC_AUTHORIZATION_FAILED, the record is not delivered.
    err = produce_one(broker, topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Describe but no Write: the Produce request itself is refused.
    acls.grant(allow(ResourceType.TOPIC, topic, AclOperation.DESCRIBE))
    err = produce_one(broker, topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls.grant(allow(ResourceType.TOPIC, topic, AclOperation.WRITE))
    assert produce_one(broker, topic) is None


def test_prefixed_allow_and_literal_deny(broker: BrokerProcess, acls: Acls) -> None:
    prefix = unique("pfx") + "-"
    open_topic, closed_topic = prefix + "open", prefix + "closed"
    make_topic(acls, open_topic)
    make_topic(acls, closed_topic)
    acls.grant(
        allow(ResourceType.TOPIC, prefix, AclOperation.ALL, ResourcePatternType.PREFIXED),
        deny(ResourceType.TOPIC, closed_topic, AclOperation.WRITE),
    )
    assert produce_one(broker, open_topic) is None
    err = produce_one(broker, closed_topic)  # deny wins over the prefixed ALL
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_metadata_lists_only_describable_topics(broker: BrokerProcess, acls: Acls) -> None:
    seen, hidden = unique("seen"), unique("hidden")
    make_topic(acls, seen)
    make_topic(acls, hidden)
    acls.grant(allow(ResourceType.TOPIC, seen, AclOperation.READ))  # Read implies Describe
    listed = acls.admin.list_topics(timeout=DEADLINE_S).topics
    assert seen in listed and hidden not in listed
    named = acls.admin.list_topics(topic=hidden, timeout=DEADLINE_S).topics[hidden]
    assert named.error is not None
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_auto_creation_needs_create(broker: BrokerProcess, acls: Acls) -> None:
    topic = unique("auto")
    acls.grant(allow(ResourceType.TOPIC, topic, AclOperation.WRITE))
    err = produce_one(broker, topic)  # Describe (from Write) but no Create: not created
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls.grant(allow(ResourceType.TOPIC, topic, AclOperation.CREATE))
    assert produce_one(broker, topic) is None


def poll_error_or_value(consumer: Consumer) -> KafkaError | bytes:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error() is not None:
            return msg.error()  # type: ignore[no-any-return]
        return msg.value()  # type: ignore[no-any-return]
    raise AssertionError("no message and no error within the deadline")


def consumer_for(broker: BrokerProcess, group: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
    })  # fmt: skip


def test_consuming_needs_read_on_group_and_topic(broker: BrokerProcess, acls: Acls) -> None:
    topic, group = unique("r"), unique("g")
    make_topic(acls, topic)
    acls.grant(allow(ResourceType.TOPIC, topic, AclOperation.WRITE))
    assert produce_one(broker, topic) is None
    acls.revoke(allow(ResourceType.TOPIC, topic, AclOperation.WRITE))
    acls.grant(allow(ResourceType.TOPIC, topic, AclOperation.DESCRIBE))

    consumer = consumer_for(broker, group)
    try:
        consumer.subscribe([topic])
        got = poll_error_or_value(consumer)
        assert isinstance(got, KafkaError) and got.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()

    acls.grant(allow(ResourceType.GROUP, group, AclOperation.READ))
    consumer = consumer_for(broker, group)
    try:
        consumer.subscribe([topic])
        got = poll_error_or_value(consumer)  # Fetch without Read on the topic
        assert isinstance(got, KafkaError) and got.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()

    acls.grant(allow(ResourceType.TOPIC, topic, AclOperation.READ))
    consumer = consumer_for(broker, group)
    try:
        consumer.subscribe([topic])
        assert poll_error_or_value(consumer) == b"v"
    finally:
        consumer.close()


def test_group_listing_and_authorized_operations(broker: BrokerProcess, acls: Acls) -> None:
    group = unique("desc")
    acls.grant(allow(ResourceType.GROUP, group, AclOperation.DESCRIBE))
    [future] = acls.admin.describe_consumer_groups(
        [group], include_authorized_operations=True, request_timeout=10
    ).values()
    described = future.result(timeout=DEADLINE_S)
    assert described.authorized_operations == [AclOperation.DESCRIBE]
    other = unique("nodesc")
    [future] = acls.admin.describe_consumer_groups([other], request_timeout=10).values()
    with pytest.raises(KafkaException) as err:
        future.result(timeout=DEADLINE_S)
    assert code_of(err.value) == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_describe_cluster_reports_the_principals_operations(acls: Acls) -> None:
    cluster = acls.admin.describe_cluster(include_authorized_operations=True, request_timeout=10)
    ops = cluster.result(timeout=DEADLINE_S).authorized_operations
    assert set(ops) == {AclOperation.ALTER, AclOperation.DESCRIBE}  # the seed


def test_describe_cluster_is_answered_without_describe_on_the_cluster(
    broker: BrokerProcess, acls: Acls
) -> None:
    """Kafka answers DescribeCluster to anyone (AuthHelper.computeDescribeClusterResponse):
    Describe on the cluster only decides the authorized operations asked for (0 without it).
    It was refused with CLUSTER_AUTHORIZATION_FAILED (found by a security review)."""
    acls.grant(deny(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE))
    asked = acls.admin.describe_cluster(include_authorized_operations=True, request_timeout=10)
    described = asked.result(timeout=DEADLINE_S)
    assert [n.port for n in described.nodes] == [int(broker.bootstrap.split(":")[1])]
    assert not described.authorized_operations
    answer = request(broker, m.DescribeCluster.key, m.DescribeClusterRequest(
        include_cluster_authorized_operations=True))  # fmt: skip
    assert (answer.error_code, answer.cluster_authorized_operations) == (0, 0)
    answer = request(broker, m.DescribeCluster.key, m.DescribeClusterRequest())
    assert (answer.error_code, answer.cluster_authorized_operations) == (0, -(2**31))
    assert answer.controller_id == answer.brokers[0].broker_id
    # Kafka's answers to the other endpoint types
    for endpoint_type, code in ((2, 114), (3, 115)):
        answer = request(broker, m.DescribeCluster.key, m.DescribeClusterRequest(
            endpoint_type=endpoint_type))  # fmt: skip
        assert (answer.error_code, answer.brokers) == (code, [])


def test_topic_admin_apis_are_refused_without_their_acl(acls: Acls) -> None:
    topic = unique("adm")
    futures = acls.admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=10)
    with pytest.raises(KafkaException) as err:
        futures[topic].result(timeout=DEADLINE_S)
    assert code_of(err.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    make_topic(acls, topic)
    futures = acls.admin.delete_topics([topic], request_timeout=10)
    with pytest.raises(KafkaException) as err:
        futures[topic].result(timeout=DEADLINE_S)
    assert code_of(err.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls.grant(allow(ResourceType.TOPIC, topic, AclOperation.DELETE))
    assert acls.admin.delete_topics([topic], request_timeout=10)[topic].result(timeout=30) is None


def test_idempotent_producer_needs_write_somewhere(broker: BrokerProcess, acls: Acls) -> None:
    """InitProducerId: IdempotentWrite on the cluster or, KIP-679, Write on some topic."""
    topic = unique("idem")
    make_topic(acls, topic)
    acls.grant(allow(ResourceType.TOPIC, topic, AclOperation.DESCRIBE))
    err = produce_one(broker, topic, **{"enable.idempotence": True})
    assert err is not None and err.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    acls.grant(allow(ResourceType.TOPIC, topic, AclOperation.WRITE))
    assert produce_one(broker, topic, **{"enable.idempotence": True}) is None


def test_transactional_producer_needs_write_on_its_transactional_id(
    broker: BrokerProcess, acls: Acls
) -> None:
    """FindCoordinator needs Describe on the TransactionalId, InitProducerId / AddPartitionsToTxn
    / EndTxn Write on it; AddPartitionsToTxn needs Write on each topic
    (TOPIC_AUTHORIZATION_FAILED), as Kafka's ``KafkaApis``."""
    topic, other = unique("txn-ok"), unique("txn-denied")
    make_topic(acls, topic)
    make_topic(acls, other)
    acls.grant(allow(ResourceType.TOPIC, topic, AclOperation.WRITE),
               allow(ResourceType.TOPIC, other, AclOperation.DESCRIBE))  # fmt: skip
    txn_id = unique("txn-id")

    def producer() -> Producer:
        return Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id})

    with pytest.raises(KafkaException) as excinfo:
        producer().init_transactions(DEADLINE_S)
    assert code_of(excinfo.value) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    acls.grant(allow(ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.DESCRIBE))
    with pytest.raises(KafkaException) as excinfo:
        producer().init_transactions(DEADLINE_S)
    assert code_of(excinfo.value) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    acls.grant(allow(ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE))
    p = producer()
    p.init_transactions(DEADLINE_S)
    p.begin_transaction()
    p.produce(topic, b"allowed")
    p.commit_transaction(DEADLINE_S)
    p.begin_transaction()
    p.produce(other, b"refused")
    with pytest.raises(KafkaException) as excinfo:
        p.commit_transaction(DEADLINE_S)
    assert code_of(excinfo.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # (an abort now gets INVALID_TXN_STATE, no partition having joined the transaction: Kafka's
    # answer too, librdkafka issue #4849)


# --- SCRAM credentials (KIP-554) ---------------------------------------------------------------


def test_scram_credentials_through_confluent_kafka(acls: Acls) -> None:
    user = unique("alice")
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    altered = acls.admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, info, b"alice-secret")], request_timeout=10
    )
    assert altered[user].result(timeout=DEADLINE_S) is None
    described = acls.admin.describe_user_scram_credentials([user], request_timeout=10)
    [(mech, iterations)] = [
        (i.mechanism, i.iterations)
        for i in described[user].result(timeout=DEADLINE_S).scram_credential_infos
    ]
    assert (mech, iterations) == (ScramMechanism.SCRAM_SHA_512, 8192)
    deleted = acls.admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)], request_timeout=10
    )
    assert deleted[user].result(timeout=DEADLINE_S) is None
    described = acls.admin.describe_user_scram_credentials([user], request_timeout=10)
    with pytest.raises(KafkaException) as err:
        described[user].result(timeout=DEADLINE_S)
    assert code_of(err.value) == KafkaError.RESOURCE_NOT_FOUND


# --- brokers configured otherwise ----------------------------------------------------------------


def with_broker(tmp_path: Path, *overrides: str, check: Callable[[BrokerProcess], None]) -> None:
    proc = start_broker(tmp_path / "data", overrides=overrides)
    try:
        check(proc)
    finally:
        assert proc.stop() == 0


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(tmp_path: Path) -> None:
    def check(proc: BrokerProcess) -> None:
        with pytest.raises(KafkaException) as err:
            Acls(proc).grant(allow(ResourceType.TOPIC, "t", AclOperation.READ))
        assert code_of(err.value) == KafkaError.SECURITY_DISABLED
        client = kp.KafkaAdminClient(bootstrap_servers=proc.bootstrap, request_timeout_ms=10000)
        try:
            any_pattern = kp.ResourcePatternFilter(kp.ResourceType.ANY, None,
                                                  kp.ACLResourcePatternType.ANY)  # fmt: skip
            with pytest.raises(SecurityDisabledError):
                client.describe_acls(
                    kp.ACLFilter(
                        None, None, kp.ACLOperation.ANY, kp.ACLPermissionType.ANY, any_pattern
                    )
                )
        finally:
            client.close()
        assert produce_one(proc, unique("open")) is None  # nothing else changes

    with_broker(tmp_path, check=check)


def test_super_users_and_allow_everyone(tmp_path: Path) -> None:
    """A super user may do anything without ACLs; so may everyone on resources without ACLs
    when allow.everyone.if.no.acl.found is true, until an ACL names the resource."""

    def super_user(proc: BrokerProcess) -> None:
        assert produce_one(proc, unique("su")) is None

    with_broker(tmp_path / "su", f"authorizer.class.name={AUTHORIZER}",
                f"super.users=User:admin;{ANONYMOUS}", check=super_user)  # fmt: skip

    def everyone(proc: BrokerProcess) -> None:
        topic = unique("open")
        assert produce_one(proc, topic) is None
        Acls(proc).grant(deny(ResourceType.TOPIC, topic, AclOperation.WRITE))
        err = produce_one(proc, topic)
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    standard = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    with_broker(tmp_path / "all", f"authorizer.class.name={standard}",
                "allow.everyone.if.no.acl.found=true", check=everyone)  # fmt: skip


def test_an_unknown_authorizer_refuses_to_start(tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"authorizer\.class\.name"):
        start_broker(tmp_path / "data", overrides=("authorizer.class.name=com.example.Custom",))


def test_configs_need_describe_configs_and_alter_configs(acls: Acls) -> None:
    topic = unique("cfg")
    make_topic(acls, topic)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    [future] = acls.admin.describe_configs([resource], request_timeout=10).values()
    with pytest.raises(KafkaException) as err:
        future.result(timeout=DEADLINE_S)
    assert code_of(err.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls.grant(allow(ResourceType.TOPIC, topic, AclOperation.DESCRIBE_CONFIGS))
    [future] = acls.admin.describe_configs([resource], request_timeout=10).values()
    assert "retention.ms" in future.result(timeout=DEADLINE_S)
    change = ConfigResource(
        ConfigResource.Type.TOPIC, topic,
        incremental_configs=[ConfigEntry("retention.ms", "60000",
                                         incremental_operation=AlterConfigOpType.SET)],
    )  # fmt: skip
    [future] = acls.admin.incremental_alter_configs([change], request_timeout=10).values()
    with pytest.raises(KafkaException) as err:
        future.result(timeout=DEADLINE_S)
    assert code_of(err.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls.grant(allow(ResourceType.TOPIC, topic, AclOperation.ALTER_CONFIGS))
    [future] = acls.admin.incremental_alter_configs([change], request_timeout=10).values()
    assert future.result(timeout=DEADLINE_S) is None
    [future] = acls.admin.describe_configs([resource], request_timeout=10).values()
    assert future.result(timeout=DEADLINE_S)["retention.ms"].value == "60000"
    broker_configs = ConfigResource(ConfigResource.Type.BROKER, "0")
    [future] = acls.admin.describe_configs([broker_configs], request_timeout=10).values()
    with pytest.raises(KafkaException) as err:
        future.result(timeout=DEADLINE_S)
    assert code_of(err.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def request(broker: BrokerProcess, api_key: int, body: Any) -> Any:
    """One request straight to the broker (librdkafka asks Metadata first, which a topic
    without Describe fails before the request itself is sent)."""
    host, port = broker.bootstrap.split(":")

    async def ask() -> Any:
        conn = await Connection.open(host, int(port))
        try:
            return await conn.request(api_key, body)
        finally:
            conn.close()

    return asyncio.run(ask())


def list_offsets_code(broker: BrokerProcess, topic: str) -> int:
    req = m.ListOffsetsRequest
    latest = req.ListOffsetsPartition(partition_index=0, timestamp=-1)
    topics = [req.ListOffsetsTopic(name=topic, partitions=[latest])]
    body = req(replica_id=-1, isolation_level=0, topics=topics)
    return int(request(broker, m.ListOffsets.key, body).topics[0].partitions[0].error_code)


def test_offset_commit_is_refused_per_topic_and_for_the_group(
    broker: BrokerProcess, acls: Acls
) -> None:
    readable, closed, group = unique("oc-r"), unique("oc-c"), unique("oc-g")
    make_topic(acls, readable)
    make_topic(acls, closed)
    acls.grant(allow(ResourceType.TOPIC, readable, AclOperation.READ))
    req = m.OffsetCommitRequest
    body = req(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        req.OffsetCommitRequestTopic(name=t, partitions=[req.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=0, committed_metadata="")])
        for t in (readable, closed)
    ])  # fmt: skip

    def codes() -> dict[str, int]:
        response = request(broker, m.OffsetCommit.key, body)
        return {t.name: t.partitions[0].error_code for t in response.topics}

    denied = KafkaError.GROUP_AUTHORIZATION_FAILED
    assert codes() == {readable: denied, closed: denied}
    acls.grant(allow(ResourceType.GROUP, group, AclOperation.READ))
    assert codes() == {readable: 0, closed: KafkaError.TOPIC_AUTHORIZATION_FAILED}


def test_list_offsets_and_delete_groups_are_refused_without_their_acl(
    broker: BrokerProcess, acls: Acls
) -> None:
    topic, group = unique("lo"), unique("dg")
    make_topic(acls, topic)
    assert list_offsets_code(broker, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls.grant(allow(ResourceType.TOPIC, topic, AclOperation.DESCRIBE))
    assert list_offsets_code(broker, topic) == 0
    [future] = acls.admin.delete_consumer_groups([group], request_timeout=10).values()
    with pytest.raises(KafkaException) as err:
        future.result(timeout=DEADLINE_S)
    assert code_of(err.value) == KafkaError.GROUP_AUTHORIZATION_FAILED
