"""The cluster's safety promises under the faults that broke them elsewhere (spec §6), on three
real broker processes and a real ZooKeeper, driven over the wire:

* strict min ISR (Jepsen 2013 against Kafka 0.8): with both followers gone an acks=all produce is
  refused (NOT_ENOUGH_REPLICAS / ..._AFTER_APPEND / REQUEST_TIMED_OUT), never acknowledged, and
  nothing acknowledged is lost when they return and the leader is then killed;
* a zombie leader (paused past its ZooKeeper session, then resumed) never acknowledges an
  acks=all write after the cluster moved on, and its log converges to the new leader's.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol.records import build_batch
from sluice.testing.cluster import EmbeddedCluster
from tests.broker_util import WireClient, watermark_offsets

pytestmark = pytest.mark.slow

RF3 = {"min.insync.replicas": "2", "auto.leader.rebalance.enable": "false"}
REFUSED = {
    errors.NotEnoughReplicas.code,
    errors.NotEnoughReplicasAfterAppend.code,
    errors.RequestTimedOut.code,
    errors.NotLeaderOrFollower.code,
    errors.FencedLeaderEpoch.code,
}


def produce(cluster: EmbeddedCluster, broker_id: int, topic: str, value: bytes) -> tuple[int, int]:
    """One acks=all batch straight to ``broker_id``: (error code, base offset)."""
    port = cluster._ports[broker_id]
    body = m.ProduceRequest(
        acks=-1,
        timeout_ms=3000,
        topic_data=[m.ProduceRequest.TopicProduceData(
            name=topic,
            partition_data=[m.ProduceRequest.PartitionProduceData(
                index=0, records=build_batch([(int(time.time() * 1000), None, value)]))],
        )],
    )  # fmt: skip

    async def send() -> Any:
        client = await WireClient.connect("127.0.0.1", port)
        try:
            return await client.request(m.Produce.key, 8, body, timeout=15)
        finally:
            await client.close()

    result = asyncio.run(send()).responses[0].partition_responses[0]
    return int(result.error_code), int(result.base_offset)


def create(cluster: EmbeddedCluster, topic: str) -> int:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(cluster.client_config())
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    return cluster.wait_for_leader(topic)


def isr(cluster: EmbeddedCluster, topic: str, via: int | None = None) -> list[int]:
    return sorted(cluster.metadata([topic], via).topics[0].partitions[0].isr_nodes)


def values(cluster: EmbeddedCluster, topic: str) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**cluster.client_config(), "group.id": "check", "enable.auto.commit": False})
    try:
        _, high = watermark_offsets(c, topic, 0)
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(out) < high:
            assert time.monotonic() < deadline
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                out.append(msg.value())
        return out
    finally:
        c.close()


def segments(cluster: EmbeddedCluster, broker_id: int, topic: str) -> bytes:
    d = cluster.data_dir(broker_id) / f"{topic}-0"
    return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))


@pytest.mark.sluice_cluster(properties=RF3)
def test_isr_shrunk_to_the_leader_refuses_acks_all_and_loses_nothing(
    sluice_cluster: EmbeddedCluster,
) -> None:
    """(Followers leaving and rejoining the ISR over SASL_SSL: tests/jepsen/test_secured_harness.py;
    ``SLUICE_TEST_CLUSTER_SECURITY=sasl_ssl`` runs this one on it too.)"""
    cluster = sluice_cluster
    leader = create(cluster, "j13")
    acked = []
    for i in range(5):
        code, _ = produce(cluster, leader, "j13", b"a%d" % i)
        assert code == 0
        acked.append(b"a%d" % i)
    followers = [b for b in cluster.ids if b != leader]
    for b in followers:
        cluster.kill(b)
    # Until the ISR shrinks a write waits and fails; once it has, it is refused up front. Never
    # acknowledged either way.
    cluster.wait_for(lambda: isr(cluster, "j13", leader) == [leader], "ISR shrunk to the leader")
    for i in range(3):
        code, _ = produce(cluster, leader, "j13", b"refused-%d" % i)
        assert code == errors.NotEnoughReplicas.code, code
    for b in followers:
        cluster.restart(b)
    cluster.wait_for(lambda: isr(cluster, "j13", leader) == [1, 2, 3], "followers back in the ISR")
    code, _ = produce(cluster, leader, "j13", b"after")
    assert code == 0
    acked.append(b"after")
    cluster.kill(leader)
    cluster.wait_for_leader("j13")
    read = values(cluster, "j13")
    assert [v for v in read if not v.startswith(b"refused")] == acked  # nothing acked lost
    assert not [v for v in read if v.startswith(b"refused")]  # NOT_ENOUGH_REPLICAS wrote nothing


@pytest.mark.sluice_cluster(properties=RF3)
def test_a_paused_zombie_leader_never_acknowledges_and_converges(
    sluice_cluster: EmbeddedCluster,
) -> None:
    cluster = sluice_cluster
    old = create(cluster, "zombie")
    assert produce(cluster, old, "zombie", b"before")[0] == 0
    cluster.pause(old)  # past its 2 s ZooKeeper session: the controller elects another leader
    try:
        others = [b for b in cluster.ids if b != old]
        cluster.wait_for(
            lambda: cluster.leader_of("zombie", via=others[0]) in others, "a new leader", 30
        )
        new = cluster.leader_of("zombie", via=others[0])
        assert produce(cluster, new, "zombie", b"new-1")[0] == 0
    finally:
        cluster.resume(old)
    # The resumed zombie still believes it leads until it hears of its lost session: whatever it
    # answers, it is never an acknowledgement.
    code, _ = produce(cluster, old, "zombie", b"zombie-write")
    assert code in REFUSED, code
    assert produce(cluster, new, "zombie", b"new-2")[0] == 0
    cluster.wait_for(lambda: isr(cluster, "zombie", new) == [1, 2, 3], "the old leader rejoins")
    read = values(cluster, "zombie")
    assert read == [b"before", b"new-1", b"new-2"]
    assert segments(cluster, old, "zombie") == segments(cluster, new, "zombie")
