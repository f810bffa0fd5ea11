"""Interop: confluent-kafka's transactional producer against a broker process (issue 26).

init_transactions / begin / produce / commit and abort, fencing by a second producer with the
same ``transactional.id``, ``send_offsets_to_transaction``'s AddOffsetsToTxn, the transaction
coordinator's state in ``__transaction_state`` and DescribeTransactions / ListTransactions. What
a partition holds afterwards is read from its segment files (the markers the coordinator wrote,
their COMMIT/ABORT type, producer id and epoch), so the test does not depend on
``read_committed`` Fetch; consumers with both isolation levels read the outcome too.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.protocol import messages as m
from sluice.protocol.records import end_txn_marker_of, iter_batches
from sluice.server.transaction.state_log import decode_key, decode_value
from tests.broker_util import BrokerProcess, WireClient, wait_for
from tests.interop_helpers import DEADLINE_S, broker_fixture

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from broker_fixture(
        tmp_path_factory,
        "transactions",
        ["transaction.state.log.num.partitions=5",
         "transaction.abort.timed.out.transaction.cleanup.interval.ms=200"],
    )  # fmt: skip


def _topic(admin_broker: BrokerProcess, partitions: int = 2) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": admin_broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(DEADLINE_S)
    return name


def _producer(broker: BrokerProcess, txn_id: str, **conf: object) -> Producer:
    return Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id, **conf}  # type: ignore[dict-item]
    )


def _batches(data_dir: Path, topic: str, partition: int) -> list[tuple[bool, int, int, object]]:
    """``(is_control, producer_id, producer_epoch, marker or record count)`` of every batch."""
    out: list[tuple[bool, int, int, object]] = []
    for segment in sorted((data_dir / f"{topic}-{partition}").glob("*.log")):
        for _pos, header, view in iter_batches(segment.read_bytes(), allow_partial_tail=True):
            control = bool(header.attributes & 0x20)
            what = end_txn_marker_of(view) if control else header.record_count
            out.append((control, header.producer_id, header.producer_epoch, what))
    return out


def _wait_for(condition, what: str, timeout: float = DEADLINE_S):  # type: ignore[no-untyped-def]
    return wait_for(condition, what, timeout)


def _markers(broker: BrokerProcess, topic: str, partition: int) -> list[tuple[int, int, bool]]:
    return [
        (pid, epoch, marker.commit)  # type: ignore[attr-defined]
        for control, pid, epoch, marker in _batches(broker.data_dir, topic, partition)
        if control and marker is not None
    ]


def _state_records(broker: BrokerProcess, txn_id: str) -> list[object]:
    """Every value written for ``txn_id`` in ``__transaction_state``, in order."""
    values = []
    for part_dir in sorted(broker.data_dir.glob("__transaction_state-*")):
        for segment in sorted(part_dir.glob("*.log")):
            from sluice.protocol.records import iter_records

            for _header, record in iter_records(segment.read_bytes()):
                if record.key is not None and decode_key(record.key) == txn_id:
                    values.append(decode_value(record.value))
    return values


def test_commit_writes_commit_markers_to_every_partition(broker: BrokerProcess) -> None:
    topic = _topic(broker)
    txn_id = f"tx-{uuid.uuid4().hex[:6]}"
    producer = _producer(broker, txn_id)
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    producer.commit_transaction(DEADLINE_S)

    for partition in (0, 1):
        batches = _batches(broker.data_dir, topic, partition)
        data = [b for b in batches if not b[0]]
        assert sum(int(b[3]) for b in data) == 5  # type: ignore[call-overload]
        pid, epoch = data[0][1], data[0][2]
        assert pid >= 0 and epoch == 0
        markers = _wait_for(lambda p=partition: _markers(broker, topic, p), "the COMMIT markers")
        assert markers == [(pid, epoch, True)]
    # PrepareCommit then CompleteCommit in __transaction_state (Kafka's state ids 2 and 4)
    states = [v.state_id for v in _state_records(broker, txn_id)]  # type: ignore[attr-defined]
    assert states[:2] == [0, 1] and 2 in states
    _wait_for(lambda: 4 in [v.state_id for v in _state_records(broker, txn_id)],  # type: ignore[attr-defined]
              "CompleteCommit")  # fmt: skip


def test_abort_then_commit(broker: BrokerProcess) -> None:
    topic = _topic(broker, 1)
    producer = _producer(broker, f"tx-{uuid.uuid4().hex[:6]}")
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"aborted")
    producer.flush(DEADLINE_S)
    producer.abort_transaction(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed")
    producer.commit_transaction(DEADLINE_S)
    markers = _wait_for(
        lambda: len(_markers(broker, topic, 0)) == 2 and _markers(broker, topic, 0), "2 markers"
    )
    assert [commit for _pid, _epoch, commit in markers] == [False, True]


def test_a_second_producer_fences_the_first_and_aborts_its_transaction(
    broker: BrokerProcess,
) -> None:
    topic = _topic(broker, 1)
    txn_id = f"tx-{uuid.uuid4().hex[:6]}"
    first = _producer(broker, txn_id)
    first.init_transactions(DEADLINE_S)
    first.begin_transaction()
    first.produce(topic, value=b"from the first")
    first.flush(DEADLINE_S)

    second = _producer(broker, txn_id)
    second.init_transactions(DEADLINE_S)  # aborts the first's transaction, epoch bumped
    markers = _wait_for(lambda: _markers(broker, topic, 0), "the ABORT marker")
    pid = markers[0][0]
    assert markers == [(pid, 1, False)]

    with pytest.raises(KafkaException) as excinfo:
        first.produce(topic, value=b"late")
        first.commit_transaction(DEADLINE_S)
    assert excinfo.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)

    second.begin_transaction()
    second.produce(topic, value=b"from the second")
    second.commit_transaction(DEADLINE_S)
    _wait_for(lambda: len(_markers(broker, topic, 0)) == 2, "the COMMIT marker")
    assert _markers(broker, topic, 0)[1] == (pid, 2, True)


def test_timed_out_transaction_is_aborted_by_the_coordinator(broker: BrokerProcess) -> None:
    topic = _topic(broker, 1)
    producer = _producer(broker, f"tx-{uuid.uuid4().hex[:6]}", **{"transaction.timeout.ms": 1000})
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"left open")
    producer.flush(DEADLINE_S)
    markers = _wait_for(lambda: _markers(broker, topic, 0), "the coordinator's ABORT marker")
    pid = markers[0][0]
    assert markers == [(pid, 1, False)]  # fenced: epoch bumped before the abort


def test_timeout_above_the_maximum_is_refused(broker: BrokerProcess) -> None:
    producer = _producer(
        broker, f"tx-{uuid.uuid4().hex[:6]}", **{"transaction.timeout.ms": 900_001}
    )
    with pytest.raises(KafkaException) as excinfo:
        producer.init_transactions(DEADLINE_S)
    assert excinfo.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT


def test_describe_and_list_transactions(broker: BrokerProcess) -> None:
    topic = _topic(broker, 1)
    txn_id = f"tx-{uuid.uuid4().hex[:6]}"
    producer = _producer(broker, txn_id)
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"x")
    producer.flush(DEADLINE_S)
    described = asyncio.run(
        _admin_request(broker, m.DescribeTransactions.key,
                       m.DescribeTransactionsRequest(transactional_ids=[txn_id, "nobody"]))
    )  # fmt: skip
    ours, nobody = described.transaction_states
    assert (ours.error_code, ours.transaction_state) == (0, "Ongoing")
    assert [(t.topic, list(t.partitions)) for t in ours.topics] == [(topic, [0])]
    assert ours.transaction_start_time_ms > 0
    assert nobody.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
    listed = asyncio.run(
        _admin_request(broker, m.ListTransactions.key,
                       m.ListTransactionsRequest(state_filters=["Ongoing"], producer_id_filters=[]))
    )  # fmt: skip
    assert txn_id in {t.transactional_id for t in listed.transaction_states}
    producer.commit_transaction(DEADLINE_S)


async def _admin_request(broker: BrokerProcess, key: int, body: object) -> Any:
    client = await WireClient.connect(broker.host, broker.port)
    try:
        return await client.request(key, 0, body)
    finally:
        await client.close()


def _read_all(broker: BrokerProcess, topic: str, isolation: str, expect: int) -> list[bytes]:
    """Every value a consumer with ``isolation.level`` reads from partition 0 (until ``expect``
    values, bounded)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"read-{uuid.uuid4().hex[:6]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < expect and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        return got
    finally:
        consumer.close()


def test_read_committed_consumer_never_sees_aborted_records(broker: BrokerProcess) -> None:
    topic = _topic(broker, 1)
    producer = _producer(broker, f"tx-{uuid.uuid4().hex[:6]}")
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"aborted-1", partition=0)
    producer.produce(topic, value=b"aborted-2", partition=0)
    producer.flush(DEADLINE_S)
    producer.abort_transaction(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed", partition=0)
    producer.commit_transaction(DEADLINE_S)
    assert _read_all(broker, topic, "read_committed", 1) == [b"committed"]
    uncommitted = _read_all(broker, topic, "read_uncommitted", 3)
    assert uncommitted == [b"aborted-1", b"aborted-2", b"committed"]


def test_send_offsets_to_transaction_commits_with_the_transaction(broker: BrokerProcess) -> None:
    """Consume-transform-produce: the group's offsets become visible with the COMMIT and are
    dropped with an ABORT (AddOffsetsToTxn here, TxnOffsetCommit at the group coordinator)."""
    source = _topic(broker, 1)
    sink = _topic(broker, 1)
    feeder = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(4):
        feeder.produce(source, value=f"in-{i}".encode(), partition=0)
    feeder.flush(DEADLINE_S)
    group = f"eos-{uuid.uuid4().hex[:6]}"
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    producer = _producer(broker, f"tx-{uuid.uuid4().hex[:6]}")
    producer.init_transactions(DEADLINE_S)
    try:
        consumer.assign([TopicPartition(source, 0, OFFSET_BEGINNING)])
        seen: list[Any] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(seen) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(msg)
        # an aborted transaction leaves no committed offset
        producer.begin_transaction()
        producer.produce(sink, value=b"out-aborted", partition=0)
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, 2)], consumer.consumer_group_metadata(), DEADLINE_S
        )
        producer.abort_transaction(DEADLINE_S)
        committed = consumer.committed([TopicPartition(source, 0)], DEADLINE_S)
        assert committed[0].offset < 0
        # a committed one commits the offset with the output
        producer.begin_transaction()
        producer.produce(sink, value=b"out", partition=0)
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, 2)], consumer.consumer_group_metadata(), DEADLINE_S
        )
        producer.commit_transaction(DEADLINE_S)
        offsets = _wait_for(
            lambda: [
                tp.offset
                for tp in consumer.committed([TopicPartition(source, 0)], DEADLINE_S)
                if tp.offset == 2
            ],
            "the committed offset",
        )
        assert offsets == [2]
    finally:
        consumer.close()
    assert _read_all(broker, sink, "read_committed", 1) == [b"out"]


def test_cli_transactions_list_and_describe(broker: BrokerProcess) -> None:
    from click.testing import CliRunner

    from sluice.cli.main import cli

    def run(*args: str) -> str:
        result = CliRunner().invoke(
            cli, [*args, "--bootstrap-server", broker.bootstrap], catch_exceptions=False
        )
        assert result.exit_code == 0, result.output
        return result.output

    topic = _topic(broker, 1)
    txn_id = f"cli-{uuid.uuid4().hex[:6]}"
    producer = _producer(broker, txn_id)
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"x", partition=0)
    producer.flush(DEADLINE_S)
    listed = run("transactions", "list", "--state", "Ongoing")
    row = next(line for line in listed.splitlines() if txn_id in line)
    assert "Ongoing" in row
    described = run("transactions", "describe", "--transactional-id", txn_id)
    assert txn_id in described and "Ongoing" in described and f"{topic}-0" in described
    producer.commit_transaction(DEADLINE_S)
    _wait_for(
        lambda: "CompleteCommit" in run("transactions", "describe", "--transactional-id", txn_id),
        "CompleteCommit",
    )
    assert txn_id not in run("transactions", "list", "--state", "Ongoing")
    result = CliRunner().invoke(
        cli, ["transactions", "describe", "--transactional-id", "nobody-here",
              "--bootstrap-server", broker.bootstrap],
    )  # fmt: skip
    assert result.exit_code == 1 and "TransactionalIdNotFound" in result.output


def test_transactional_state_survives_a_restart(tmp_path: Path) -> None:
    """A restart reloads every transactional id from ``__transaction_state``: the next producer
    instance gets the same producer id at the next epoch, not a new id at epoch 0."""
    from tests.broker_util import start_broker

    data = tmp_path / "data"
    overrides = ["transaction.state.log.num.partitions=3"]
    broker = start_broker(data, overrides=overrides)
    try:
        topic = _topic(broker, 1)
        producer = _producer(broker, "restart-me")
        producer.init_transactions(DEADLINE_S)
        producer.begin_transaction()
        producer.produce(topic, value=b"before", partition=0)
        producer.commit_transaction(DEADLINE_S)
        pid = _wait_for(lambda: _markers(broker, topic, 0), "the COMMIT marker")[0][0]
        del producer
    finally:
        assert broker.stop() == 0
    broker = start_broker(data, overrides=overrides, port=broker.port)
    try:
        again = _producer(broker, "restart-me")
        again.init_transactions(DEADLINE_S)
        again.begin_transaction()
        again.produce(topic, value=b"after", partition=0)
        again.commit_transaction(DEADLINE_S)
        markers = _wait_for(lambda: len(_markers(broker, topic, 0)) == 2 and _markers(
            broker, topic, 0), "the second COMMIT marker")  # fmt: skip
        assert markers == [(pid, 0, True), (pid, 1, True)]  # epoch 1: the state was reloaded
        assert _read_all(broker, topic, "read_committed", 2) == [b"before", b"after"]
    finally:
        assert broker.stop() == 0
