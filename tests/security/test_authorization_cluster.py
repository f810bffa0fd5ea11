"""ACLs in a 3-broker cluster (issue 24): kept in ZooKeeper under Kafka's ``/kafka-acl*`` layout
and followed through the change notices, so an ACL created through one broker is enforced by
the broker that leads the partition, and its removal too.

The cluster runs with ``allow.everyone.if.no.acl.found=true`` so that what has no ACL (the
cluster resource: replica fetches, controlled shutdown; the offsets topic) stays open to
``User:ANONYMOUS``, the principal of every PLAINTEXT connection, brokers' own included.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.client.admin import AclBinding, AclBindingFilter, Admin
from sluice.protocol.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from sluice.testing.cluster import EmbeddedCluster

pytestmark = [pytest.mark.slow, pytest.mark.interop]

AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
ANONYMOUS = "User:ANONYMOUS"
DEADLINE_S = 30.0


def produce_one(bootstrap: str, topic: str) -> KafkaError | None:
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 15000})
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: outcome.append(err))
    deadline = time.monotonic() + DEADLINE_S
    while not outcome and time.monotonic() < deadline:
        producer.poll(0.2)
    assert outcome, "no delivery report"
    return outcome[0]


def at_broker(cluster: EmbeddedCluster, broker_id: int) -> Admin:
    """An admin client whose first requests go to that broker (its only bootstrap server)."""
    return Admin(f"127.0.0.1:{cluster.broker(broker_id).port}")


def binding(topic: str, operation: AclOperation, permission: AclPermissionType) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC, topic, PatternType.LITERAL, ANONYMOUS, "*", operation, permission
    )


async def create(cluster: EmbeddedCluster, broker_id: int, *bindings: AclBinding) -> None:
    async with at_broker(cluster, broker_id) as admin:
        assert await admin.create_acls(bindings) == [None] * len(bindings)


async def described(cluster: EmbeddedCluster, broker_id: int, topic: str) -> set[AclBinding]:
    async with at_broker(cluster, broker_id) as admin:
        return set(await admin.describe_acls(AclBindingFilter(ResourceType.TOPIC, topic)))


def test_an_acl_created_through_one_broker_is_enforced_by_another() -> None:
    props = {"authorizer.class.name": AUTHORIZER, "allow.everyone.if.no.acl.found": "true"}
    with EmbeddedCluster(3, properties=props) as cluster:
        topic = f"zk-acl-{uuid.uuid4().hex[:8]}"
        client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        client.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=DEADLINE_S)
        leader = cluster.wait_for_leader(topic)
        assert produce_one(cluster.bootstrap_servers, topic) is None

        creator = next(b for b in cluster.ids if b != leader)
        acls = {
            binding(topic, AclOperation.DESCRIBE, AclPermissionType.ALLOW),
            binding(topic, AclOperation.WRITE, AclPermissionType.DENY),
        }
        asyncio.run(create(cluster, creator, *acls))
        cluster.wait_for(
            lambda: all(asyncio.run(described(cluster, b, topic)) == acls for b in cluster.ids),
            "every broker to know the ACLs",
        )
        err = produce_one(cluster.bootstrap_servers, topic)  # the leader refuses
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

        async def remove_all() -> list[list[AclBinding]]:
            async with at_broker(cluster, creator) as admin:
                filter_ = AclBindingFilter(ResourceType.TOPIC, topic, PatternType.LITERAL)
                return await admin.delete_acls([filter_])

        # No ACL left on the topic: allow.everyone.if.no.acl.found opens it again.
        assert [set(found) for found in asyncio.run(remove_all())] == [acls]
        cluster.wait_for(
            lambda: not asyncio.run(described(cluster, leader, topic)),
            "the leader to forget the ACLs",
        )
        assert produce_one(cluster.bootstrap_servers, topic) is None
