"""Transactions in a 3-broker cluster: ``__transaction_state`` replicated (RF 3), the
coordinator of a transactional id the leader of its partition, markers sent to the partition
leaders over WriteTxnMarkers, and a coordinator killed (kill -9) in the middle of a transaction:
the new leader of the partition loads the transaction and the producer commits it there."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.server.group.offsets_store import partition_for
from sluice.testing.cluster import EmbeddedCluster

pytestmark = pytest.mark.interop

WAIT = 60.0
TXN_PARTITIONS = 3


def _read_committed(bootstrap: str, topic: str, partitions: int, expect: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"rc-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: list[bytes] = []
        deadline = time.monotonic() + WAIT
        while len(got) < expect and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        # nothing more shows up (no aborted or duplicated value)
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        return got
    finally:
        consumer.close()


@pytest.mark.sluice_cluster(
    properties={
        "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
    }
)
def test_commit_across_a_coordinator_failover(sluice_cluster: EmbeddedCluster) -> None:
    cluster = sluice_cluster
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("eos", 3, 3)])["eos"].result(WAIT)
    txn_id = "tx-failover"
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "acks": "all"})
    producer.init_transactions(WAIT)
    producer.begin_transaction()
    for i in range(30):
        producer.produce("eos", value=b"first-%02d" % i, partition=i % 3)
    producer.commit_transaction(WAIT)

    txn_partition = partition_for(txn_id, TXN_PARTITIONS)
    coordinator = cluster.leader_of("__transaction_state", txn_partition)
    assert coordinator > 0
    producer.begin_transaction()
    for i in range(30):
        producer.produce("eos", value=b"second-%02d" % i, partition=i % 3)
    producer.flush(WAIT)
    cluster.kill(coordinator)  # the transaction is Ongoing in __transaction_state
    survivor = next(b for b in cluster.ids if b != coordinator)
    cluster.wait_for(
        lambda: (
            cluster.leader_of("__transaction_state", txn_partition, via=survivor)
            not in (-1, coordinator)
        ),
        "a new transaction coordinator",
    )
    producer.commit_transaction(WAIT)
    values = _read_committed(bootstrap, "eos", 3, 60)
    assert sorted(values) == sorted(
        [b"first-%02d" % i for i in range(30)] + [b"second-%02d" % i for i in range(30)]
    )


@pytest.mark.sluice_cluster(
    properties={
        "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
    }
)
def test_abort_and_commit_across_a_partition_leader_failover(
    sluice_cluster: EmbeddedCluster,
) -> None:
    """The leader of a partition of the transaction dies between its records and EndTxn (not
    the coordinator): the markers go to the new leader (retried until it is known), and a
    read_committed consumer sees the committed transaction whole and the aborted one not."""
    cluster = sluice_cluster
    bootstrap = cluster.bootstrap_servers
    txn_id = "tx-leader-moves"
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(WAIT)
    coordinator = cluster.leader_of("__transaction_state", partition_for(txn_id, TXN_PARTITIONS))
    # both partitions led by another broker than the coordinator (the first replica leads)
    victim = next(b for b in cluster.ids if b != coordinator)
    replicas = [victim] + [b for b in cluster.ids if b != victim]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic("moved", 2, replica_assignment=[replicas, replicas])
    admin.create_topics([topic])["moved"].result(WAIT)
    cluster.wait_for(lambda: cluster.leader_of("moved", 1) == victim, "the leaders")
    producer.begin_transaction()
    for i in range(20):
        producer.produce("moved", value=b"aborted-%02d" % i, partition=i % 2)
    producer.flush(WAIT)
    cluster.kill(victim)
    producer.abort_transaction(WAIT)
    producer.begin_transaction()
    for i in range(20):
        producer.produce("moved", value=b"kept-%02d" % i, partition=i % 2)
    producer.commit_transaction(WAIT)
    values = _read_committed(bootstrap, "moved", 2, 20)
    assert sorted(values) == sorted(b"kept-%02d" % i for i in range(20))
