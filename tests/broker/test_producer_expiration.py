"""Producer id expiration on a running broker, with real clients (confluent-kafka producers,
kafka-python's DescribeProducers, confluent-kafka's IncrementalAlterConfigs).

No waiting for the expiration itself: the records carry CreateTime timestamps two minutes old,
and a producer's age is its last batch's timestamp (Kafka's ``isProducerExpired``), so a
dynamic ``producer.id.expiration.ms`` of one minute expires them at the next check (every 50 ms
here); the test waits, bounded, for DescribeProducers to show it."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from sluice.server.storage.producer_state import decode_snapshot, snapshot_files
from tests.broker_util import BrokerProcess, start_broker, wait_for
from tests.interop_helpers import DEADLINE_S, now_ms

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    from kafka.admin import KafkaAdminClient

pytestmark = pytest.mark.interop

TOPIC = "pidexp"
OLD_MS = 120_000  # how old the old records' timestamps are


def active_producers(broker: BrokerProcess) -> dict[int, Any]:
    """DescribeProducers of partition 0: producer id -> its state."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="pidexp")
    try:
        tp = kafka.TopicPartition(TOPIC, 0)
        return {p.producer_id: p for p in admin.describe_producers([tp])[tp].active_producers}
    finally:
        admin.close()


def produce(producer: Producer, value: bytes, timestamp: int) -> None:
    """Send one record and wait for its acknowledgement; fail on a delivery error."""
    errors: list[Any] = []
    producer.produce(
        TOPIC, value, partition=0, timestamp=timestamp, on_delivery=lambda e, _m: errors.append(e)
    )
    assert producer.flush(DEADLINE_S) == 0
    assert errors == [None]


def idempotent(broker: BrokerProcess) -> Producer:
    return Producer(
        {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0}
    )


def test_idle_producers_expire_but_not_an_open_transactions(tmp_path: Path) -> None:
    broker = start_broker(
        tmp_path / "data", overrides=["producer.id.expiration.check.interval.ms=50"]
    )
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(DEADLINE_S)
        old = now_ms() - OLD_MS
        # Each producer's last timestamp tells it apart in DescribeProducers.
        comes_back = idempotent(broker)
        for i in range(3):
            produce(comes_back, b"a%d" % i, old + i)
        gone = idempotent(broker)
        produce(gone, b"c", old + 10)
        gone.flush(DEADLINE_S)
        in_txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "pidexp"})
        in_txn.init_transactions(DEADLINE_S)
        in_txn.begin_transaction()
        produce(in_txn, b"t", old + 20)  # its transaction stays open
        recent = idempotent(broker)
        produce(recent, b"b", now_ms())
        by_ts = {p.last_timestamp: pid for pid, p in active_producers(broker).items()}
        assert sorted(by_ts)[:3] == [old + 2, old + 10, old + 20] and len(by_ts) == 4
        pid_a, pid_c, pid_t = by_ts[old + 2], by_ts[old + 10], by_ts[old + 20]

        # The check interval is read-only (Kafka's, an internal key): refused.
        fixed = ConfigEntry(
            "producer.id.expiration.check.interval.ms", "1000",
            incremental_operation=AlterConfigOpType.SET,
        )  # fmt: skip
        refused = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[fixed])
        with pytest.raises(KafkaException, match="Cannot update these configs dynamically"):
            admin.incremental_alter_configs([refused])[refused].result(DEADLINE_S)
        # Two minutes idle is far from the default day. A dynamic change makes it one minute.
        entry = ConfigEntry(
            "producer.id.expiration.ms", "60000", incremental_operation=AlterConfigOpType.SET
        )
        resource = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[entry])
        admin.incremental_alter_configs([resource])[resource].result(DEADLINE_S)

        def without_a() -> dict[int, Any] | None:
            producers = active_producers(broker)
            return producers if pid_a not in producers else None

        left = wait_for(without_a, "the idle producers to expire")
        # The open transaction's producer stays however old; so does the recent one.
        assert pid_c not in left and pid_t in left and len(left) == 2
        assert left[pid_t].current_transaction_start_offset == 4

        # The expired producer's next batch (sequence 3) is an unknown producer's: accepted,
        # and the client sees a plain success (Kafka 3.x).
        produce(comes_back, b"a3", now_ms())
        assert pid_a in active_producers(broker)
        in_txn.commit_transaction(DEADLINE_S)
        for p in (comes_back, recent, in_txn):
            p.flush(DEADLINE_S)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": TOPIC})
        try:
            consumer.assign([TopicPartition(TOPIC, 0, 0)])
            values: list[bytes] = []
            for _ in range(150):  # bounded: ~30 s
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    values.append(msg.value())
                if len(values) >= 7:
                    break
        finally:
            consumer.close()
        # Each record once: nothing the expiration made the broker take twice or refuse.
        assert values == [b"a0", b"a1", b"a2", b"c", b"t", b"b", b"a3"]
    finally:
        assert broker.stop() == 0
    # The clean shutdown's snapshot (at the log end) leaves the expired producer out.
    newest = snapshot_files(broker.data_dir / f"{TOPIC}-0")[-1][1]
    assert set(decode_snapshot(newest.read_bytes()).producers) >= {pid_a, pid_t}
    assert pid_c not in decode_snapshot(newest.read_bytes()).producers
