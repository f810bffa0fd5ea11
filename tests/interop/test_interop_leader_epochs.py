"""Interop: real consumers across a leader epoch change (KIP-320 position validation).

A consumer that tracks leader epochs (librdkafka via confluent-kafka, kafka-python 3) consumes
a partition, the broker's partition epoch is bumped while it polls
(``EmbeddedBroker.set_leader_epoch``: the path a controller's election takes), more records are
produced, and the consumer carries on. On the way it sees FENCED_LEADER_EPOCH on its parked
Fetch (it sends the old epoch), refreshes Metadata (which now reports the new epoch) and
validates its position with OffsetForLeaderEpoch before fetching again. Asserted: every record
exactly once and in order, no error surfaced to the application (error callbacks, message
errors, ERROR log records), no connection closed by the broker, and the broker served
OffsetForLeaderEpoch requests (counted by API key: a client that skipped validation fails the
test). aiokafka 0.14 does not implement KIP-320 (it never sends API 23), so it has nothing to
show here; its own suite covers Fetch v9+/ListOffsets v4+ with ``current_leader_epoch`` -1.
kcat (Debian's librdkafka 2.0.2, older than KIP-320 support in librdkafka 2.1) does not
validate either; a long-running ``kcat -C`` across the same bumps must still read every record
exactly once, in order, and exit 0.

The broker runs in-process in a thread (the ``with EmbeddedBroker()`` form) so that the test
can change its state; the clients are the real libraries over 127.0.0.1 sockets.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from sluice.protocol import messages as m
from sluice.testing import EmbeddedBroker
from tests.interop_helpers import DEADLINE_S

with warnings.catch_warnings():  # kafka-python's legacy importlib.resources use (3.11)
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KpTP

pytestmark = pytest.mark.interop

OFFSET_FOR_LEADER_EPOCH = f"requests.{m.OffsetForLeaderEpoch.name}"
ROUNDS = 3  # epoch bumps per test (each followed by more records)
PER_ROUND = 25


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b
        closed = {k: v for k, v in b.metrics().items() if k.startswith("connections.closed.")}
        assert not closed, f"the broker closed client connections: {closed}"


def values(round_: int) -> list[bytes]:
    return [b"round-%d-record-%03d" % (round_, i) for i in range(PER_ROUND)]


def served(broker: EmbeddedBroker) -> int:
    return broker.metrics().get(OFFSET_FOR_LEADER_EPOCH, 0)


# --- confluent-kafka (librdkafka) ----------------------------------------------------------------


def confluent_produce(broker: EmbeddedBroker, topic: str, batch: list[bytes]) -> None:
    failures: list[Any] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    for v in batch:
        producer.produce(
            topic, value=v, partition=0, on_delivery=lambda e, _m: failures.append(e) if e else None
        )
    assert producer.flush(DEADLINE_S) == 0
    assert failures == []


def confluent_consume(consumer: Consumer, count: int, errors: list[Any]) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error() is not None:
            errors.append(msg.error())
            continue
        got.append((msg.offset(), msg.value()))
    return got


def test_confluent_consumer_validates_its_position_after_an_epoch_bump(
    broker: EmbeddedBroker,
) -> None:
    topic = "epochs-confluent"
    errors: list[Any] = []
    confluent_produce(broker, topic, values(0))
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "epochs-confluent",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "topic.metadata.refresh.interval.ms": 500,
            "fetch.wait.max.ms": 200,
            "error_cb": errors.append,
        }
    )
    consumed: list[tuple[int, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        consumed += confluent_consume(consumer, PER_ROUND, errors)
        for round_ in range(1, ROUNDS + 1):
            before = served(broker)
            assert broker.set_leader_epoch(topic) == round_
            confluent_produce(broker, topic, values(round_))
            consumed += confluent_consume(consumer, PER_ROUND, errors)
            assert served(broker) > before, f"round {round_}: no OffsetForLeaderEpoch"
        # Nothing more arrives (no record twice).
        consumed += confluent_consume_for(consumer, 1.0, errors)
    finally:
        consumer.close()
    expected = [v for r in range(ROUNDS + 1) for v in values(r)]
    assert [v for _, v in consumed] == expected
    assert [o for o, _ in consumed] == list(range(len(expected)))
    assert errors == []


def confluent_consume_for(consumer: Consumer, seconds: float, errors: list[Any]) -> list[Any]:
    got = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is not None:
            if msg.error() is not None:
                errors.append(msg.error())
            else:
                got.append((msg.offset(), msg.value()))
    return got


# --- kafka-python --------------------------------------------------------------------------------


def kafka_python_produce(broker: EmbeddedBroker, topic: str, batch: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, linger_ms=5)
    try:
        futures = [producer.send(topic, v, partition=0) for v in batch]
        for f in futures:
            f.get(timeout=DEADLINE_S)
    finally:
        producer.close(timeout=5)


def kafka_python_consume(consumer: KafkaConsumer, count: int) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got += [(r.offset, r.value) for r in records]
    return got


def test_kafka_python_consumer_validates_its_position_after_an_epoch_bump(
    broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture
) -> None:
    topic = "epochs-kafka-python"
    caplog.set_level(logging.WARNING, logger="kafka")
    kafka_python_produce(broker, topic, values(0))
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap_servers,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        metadata_max_age_ms=500,
        fetch_max_wait_ms=200,
    )
    consumed: list[tuple[int, bytes]] = []
    try:
        consumer.assign([KpTP(topic, 0)])
        consumer.seek_to_beginning()
        consumed += kafka_python_consume(consumer, PER_ROUND)
        for round_ in range(1, ROUNDS + 1):
            before = served(broker)
            assert broker.set_leader_epoch(topic) == round_
            kafka_python_produce(broker, topic, values(round_))
            consumed += kafka_python_consume(consumer, PER_ROUND)
            assert served(broker) > before, f"round {round_}: no OffsetForLeaderEpoch"
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # nothing more arrives (no record twice)
            for records in consumer.poll(timeout_ms=100).values():
                consumed += [(r.offset, r.value) for r in records]
        # Only what happened while consuming: close() cancels a Metadata refresh that happens
        # to be in flight and kafka-python logs that at ERROR, epochs or not.
        logged = list(caplog.records)
    finally:
        consumer.close()
    expected = [v for r in range(ROUNDS + 1) for v in values(r)]
    assert [v for _, v in consumed] == expected
    assert [o for o, _ in consumed] == list(range(len(expected)))
    errors = [r for r in logged if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


# --- kcat ----------------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not on PATH")
def test_kcat_consumer_reads_across_epoch_bumps(broker: EmbeddedBroker) -> None:
    topic = "epochs-kcat"
    total = PER_ROUND * (ROUNDS + 1)
    confluent_produce(broker, topic, values(0))
    kcat = shutil.which("kcat")
    assert kcat is not None
    proc = subprocess.Popen(
        [kcat, "-b", broker.bootstrap_servers, "-u", "-C", "-t", topic, "-p", "0",
         "-o", "beginning", "-c", str(total), "-f", "%o %s\\n",
         "-X", "topic.metadata.refresh.interval.ms=500", "-X", "fetch.wait.max.ms=200"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while len(lines) < count and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert len(lines) >= count, f"kcat printed {len(lines)} of {count} records"

    try:
        wait_for(PER_ROUND)
        for round_ in range(1, ROUNDS + 1):
            assert broker.set_leader_epoch(topic) == round_
            confluent_produce(broker, topic, values(round_))
            wait_for(PER_ROUND * (round_ + 1))
        code = proc.wait(DEADLINE_S)  # -c: exits after ``total`` records
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        reader.join(DEADLINE_S)
        stderr = proc.stderr.read() if proc.stderr else ""
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    assert code == 0, stderr
    expected = [f"{o} {v.decode()}\n" for o, v in enumerate(v for r in range(ROUNDS + 1)
                                                           for v in values(r))]  # fmt: skip
    assert lines == expected
