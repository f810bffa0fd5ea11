"""What the transaction crash tests compare a recovered partition against.

* :func:`log_batches` reads a partition's segment files (every batch: offsets, producer, whether
  it is transactional, COMMIT/ABORT for a marker);
* :func:`kafka_model` replays those batches with the rules of Kafka's ``ProducerStateManager``
  and ``UnifiedLog.append`` -- a transactional batch opens its producer's transaction at its
  base offset, a marker closes it; an ABORT adds the aborted-transaction entry ``(producer id,
  first offset, marker offset, last stable offset)`` whose last stable offset is the first
  offset of the earliest *other* open transaction, else the marker's offset + 1
  (``lastStableOffset(completedTxn)``); a marker without an open transaction (a second marker
  of the same transaction) completes nothing and adds no entry (``appendEndTxnMarker``: "only
  emit the CompletedTxn for non-empty transactions") -- and answers the ``.txnindex``
  entries and the LSO (the earliest open transaction's first offset, bounded by the high
  watermark) that the partition must have;
* :func:`read_txn_index` parses the ``.txnindex`` files themselves (Kafka's 34-byte entries:
  version int16, producer id, first offset, last offset, last stable offset, all int64), without
  Sluice's reader;
* :func:`offsets` asks a broker over the wire for the high watermark and the LSO (ListOffsets
  latest, read_uncommitted and read_committed) and Fetch v4+'s ``last_stable_offset``.

And the clients both crash tests drive (``tests/transaction/test_txn_crash_points.py``,
``tests/cluster/test_cluster_txn_crash.py``): :class:`Victim`, the transactional producer whose
transaction is crashed, and :func:`check_after_recovery`, what every client must see once the
transaction has ended.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from sluice.protocol import messages as m
from sluice.protocol.records import end_txn_marker_of, iter_batches
from tests import broker_util
from tests.broker_util import WireClient

TXN_ENTRY = struct.Struct(">hqqqq")
assert TXN_ENTRY.size == 34
WAIT = 60.0
RECORDS = 3  # the victim's records per partition
OFFSET = 7  # the group offset the victim's transaction commits
#: Every client here: reconnect to a restarted broker at once (librdkafka backs off up to 10 s).
CLIENT = {"reconnect.backoff.max.ms": 100, "retry.backoff.max.ms": 200}
T = TypeVar("T")


class Batch(NamedTuple):
    base: int
    last: int
    producer_id: int
    epoch: int
    transactional: bool
    #: None: data; True: a COMMIT marker; False: an ABORT marker.
    commit: bool | None


class TxnEntry(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def log_batches(partition_dir: Path) -> list[Batch]:
    out: list[Batch] = []
    for segment in sorted(partition_dir.glob("*.log")):
        for _pos, h, view in iter_batches(segment.read_bytes(), allow_partial_tail=True):
            control = bool(h.attributes & 0x20)
            marker = end_txn_marker_of(view) if control else None
            out.append(
                Batch(
                    h.base_offset,
                    h.base_offset + h.last_offset_delta,
                    h.producer_id,
                    h.producer_epoch,
                    bool(h.attributes & 0x10),
                    None if marker is None else marker.commit,
                )
            )
    return out


def kafka_model(batches: list[Batch], high_watermark: int) -> tuple[list[TxnEntry], int]:
    """``(.txnindex entries, LSO)`` by Kafka's rules (module docstring)."""
    ongoing: dict[int, int] = {}
    entries: list[TxnEntry] = []
    for b in batches:
        if b.base >= high_watermark:
            break
        if b.commit is None:
            if b.transactional:
                ongoing.setdefault(b.producer_id, b.base)
            continue
        first = ongoing.pop(b.producer_id, None)
        if first is not None and not b.commit:
            lso = min(ongoing.values(), default=b.base + 1)
            entries.append(TxnEntry(b.producer_id, first, b.base, lso))
    return entries, min([*ongoing.values(), high_watermark])


def read_txn_index(partition_dir: Path) -> list[TxnEntry]:
    out: list[TxnEntry] = []
    for path in sorted(partition_dir.glob("*.txnindex")):
        data = path.read_bytes()
        assert len(data) % TXN_ENTRY.size == 0, f"{path}: {len(data)} bytes"
        for i in range(0, len(data), TXN_ENTRY.size):
            version, *fields = TXN_ENTRY.unpack_from(data, i)
            assert version == 0, f"{path}: entry version {version}"
            out.append(TxnEntry(*fields))
    return out


class Offsets(NamedTuple):
    high_watermark: int
    lso: int
    #: Fetch v4+'s ``last_stable_offset`` (read_committed).
    fetch_lso: int


async def _offsets(port: int, topic: str, partitions: list[int]) -> dict[int, Offsets] | None:
    client = await WireClient.connect("127.0.0.1", port)
    try:
        latest: dict[int, list[int]] = {}
        for isolation in (0, 1):
            req = m.ListOffsetsRequest(
                replica_id=-1,
                isolation_level=isolation,
                topics=[m.ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                    m.ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=-1)
                    for p in partitions])],
            )  # fmt: skip
            resp = await client.request(m.ListOffsets.key, 5, req)
            for part in resp.topics[0].partitions:
                if part.error_code:
                    return None  # not the leader (yet), or its HW not caught up: ask again
                latest.setdefault(part.partition_index, []).append(part.offset)
        fetch = m.FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=1,
            topics=[m.FetchRequest.FetchTopic(topic=topic, partitions=[
                m.FetchRequest.FetchPartition(
                    partition=p, fetch_offset=0, partition_max_bytes=1)
                for p in partitions])],
        )  # fmt: skip
        fresp = await client.request(m.Fetch.key, 4, fetch)
        out: dict[int, Offsets] = {}
        for part in fresp.responses[0].partitions:
            if part.error_code:
                return None
            hw, lso = latest[part.partition_index]
            out[part.partition_index] = Offsets(hw, lso, part.last_stable_offset)
        return out
    finally:
        await client.close()


async def _txn_state(port: int, txn_id: str) -> str | None:
    client = await WireClient.connect("127.0.0.1", port)
    try:
        req = m.DescribeTransactionsRequest(transactional_ids=[txn_id])
        resp = await client.request(m.DescribeTransactions.key, 0, req)
        state = resp.transaction_states[0]
        return None if state.error_code else str(state.transaction_state)
    finally:
        await client.close()


def txn_state(port: int, txn_id: str) -> str | None:
    """The state of ``txn_id`` at the broker at ``port`` (None: not its coordinator, or not
    answering)."""
    try:
        return asyncio.run(_txn_state(port, txn_id))
    except (OSError, ConnectionError, TimeoutError):
        return None


def offsets(port: int, topic: str, partitions: list[int]) -> dict[int, Offsets] | None:
    """HW and LSO of each partition from the broker at ``port`` (None: it cannot answer for
    every partition yet -- not the leader, or still loading)."""
    try:
        return asyncio.run(_offsets(port, topic, partitions))
    except (OSError, ConnectionError, TimeoutError):
        return None


def wait_for(condition: Callable[[], T | None], what: str, timeout: float = WAIT) -> T:
    return broker_util.wait_for(condition, what, timeout)


def markers_of(batches: list[Batch], producer_id: int) -> list[Batch]:
    return [b for b in batches if b.commit is not None and b.producer_id == producer_id]


class Names(NamedTuple):
    """One crash test's transactional ids, topic and group, and its armed point."""

    txn_id: str
    bystander: str
    topic: str
    group: str
    point: str
    scope: str

    @classmethod
    def of(cls, case: str, point: str, scope_kind: str, commit: bool) -> Names:
        """``point`` may say ``{end}``: Commit or Abort; ``scope_kind``: txn, topic or group."""
        txn_id, topic, group = f"victim-{case}", f"crash-{case}", f"group-{case}"
        scope = {"txn": txn_id, "topic": topic, "group": group}[scope_kind]
        end = "Commit" if commit else "Abort"
        return cls(txn_id, f"bystander-{case}", topic, group, point.format(end=end), scope)

    @property
    def armed(self) -> str:
        return f"{self.point}@{self.scope}"

    @property
    def crash_line(self) -> str:
        return f'"event": "crash point", "point": "{self.point}", "scope": "{self.scope}"'


class Victim:
    """The transactional producer whose transaction is crashed, driven on a thread: RECORDS
    records on each partition, ``send_offsets_to_transaction`` (OFFSET on partition 0 for the
    group), then commit or abort."""

    def __init__(
        self, bootstrap: str, names: Names, partitions: list[int], group: Any, commit: bool
    ) -> None:
        self.names = names
        self.partitions = partitions
        self.producer = Producer(
            {**CLIENT, "bootstrap.servers": bootstrap, "transactional.id": names.txn_id}
        )
        self.producer.init_transactions(WAIT)
        self.group_metadata = group
        self.commit = commit
        self.delivered: dict[int, list[int]] = {p: [] for p in partitions}
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered[msg.partition()].append(msg.offset())

    def _run(self) -> None:
        p, topic = self.producer, self.names.topic
        try:
            p.begin_transaction()
            for partition in self.partitions:
                for i in range(RECORDS):
                    value = b"victim-%d-%d" % (partition, i)
                    p.produce(topic, value=value, partition=partition, on_delivery=self._delivered)
            p.flush(WAIT)
            p.send_offsets_to_transaction(
                [TopicPartition(topic, 0, OFFSET)], self.group_metadata, WAIT
            )
            if self.commit:
                p.commit_transaction(WAIT)
            else:
                p.abort_transaction(WAIT)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def finished(self) -> None:
        """The producer's commit/abort returned, and succeeded, every record delivered once."""
        self.thread.join(WAIT)
        assert not self.thread.is_alive()
        assert self.error is None, f"{self.names.point}: {self.error!r}"
        assert {p: len(o) for p, o in self.delivered.items()} == {
            p: RECORDS for p in self.partitions
        }


def read_committed(
    bootstrap: str, topic: str, partitions: list[int], until: bytes
) -> dict[int, list[bytes]]:
    """Every value a read_committed consumer gets from each partition up to ``until`` (a
    non-transactional record the test wrote last to each)."""
    consumer = Consumer(
        {
            **CLIENT,
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        got: dict[int, list[bytes]] = {p: [] for p in partitions}
        deadline = time.monotonic() + WAIT
        while any(not v or v[-1] != until for v in got.values()):
            assert time.monotonic() < deadline, f"read_committed got only {got}"
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got[msg.partition()].append(msg.value())
        return got
    finally:
        consumer.close()


def check_log(
    batches: dict[int, list[Batch]], victim: Victim, markers: Callable[[int, int], bool]
) -> tuple[int, int]:
    """Every record of the victim in the log once, at the offset its delivery report gave, then
    only its markers, of the outcome it asked for (``markers(partition, count)``: whether that
    many is right there); its producer id and epoch."""
    p0 = victim.partitions[0]
    first = next(b for b in batches[p0] if b.base == min(victim.delivered[p0]))
    pid = first.producer_id
    for p in victim.partitions:
        where = f"partition {p}: {batches[p]}"
        data = sorted(
            o for b in batches[p] if b.commit is None and b.producer_id == pid
            for o in range(b.base, b.last + 1)
        )  # fmt: skip
        assert data == sorted(victim.delivered[p]), where
        mine = markers_of(batches[p], pid)
        assert markers(p, len(mine)), where
        assert all(b.commit == victim.commit for b in mine), where
        assert [b.base for b in mine] == [max(data) + 1 + i for i in range(len(mine))], where
    return pid, first.epoch


def check_after_recovery(
    bootstrap: str,
    victim: Victim,
    pid: int,
    epoch: int,
    group_consumer: Consumer,
    batches_of: Callable[[int], list[Batch]],
) -> None:
    """Once the victim's transaction ended and the bystander committed (its one record first on
    partition 0): producer state recovered (a new instance of the transactional id gets the
    same producer id at the next epoch and commits, the old one is fenced); a read_committed
    consumer sees the victim's records in every partition or in none; the group's offset is
    there after a commit and absent after an abort."""
    names, topic, partitions = victim.names, victim.names.topic, victim.partitions
    again = Producer({**CLIENT, "bootstrap.servers": bootstrap, "transactional.id": names.txn_id})
    again.init_transactions(WAIT)
    with pytest.raises(KafkaException) as fenced:
        victim.producer.begin_transaction()
        victim.producer.produce(topic, value=b"zombie", partition=partitions[-1])
        victim.producer.commit_transaction(WAIT)
    assert fenced.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)
    again.begin_transaction()
    again.produce(topic, value=b"after", partition=partitions[-1])
    again.commit_transaction(WAIT)
    after = [b for b in batches_of(partitions[-1]) if b.commit is None][-1]
    assert (after.producer_id, after.epoch) == (pid, epoch + 1)

    plain = Producer({**CLIENT, "bootstrap.servers": bootstrap, "acks": "all"})
    for p in partitions:
        plain.produce(topic, value=b"end", partition=p)
    plain.flush(WAIT)
    seen = read_committed(bootstrap, topic, partitions, b"end")
    expected = {
        p: [b"victim-%d-%d" % (p, i) for i in range(RECORDS)] if victim.commit else []
        for p in partitions
    }
    expected[0].insert(0, b"bystander")
    expected[partitions[-1]].append(b"after")
    assert seen == {p: [*expected[p], b"end"] for p in partitions}
    assert committed_offset(group_consumer, topic) == (OFFSET if victim.commit else -1001)


def committed_offset(consumer: Consumer, topic: str) -> int:
    """The group's committed offset of partition 0, retried while the group's coordinator
    moves (librdkafka hands NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS to the caller of
    ``committed`` after a failover, where a Java consumer retries them)."""
    deadline = time.monotonic() + WAIT
    while True:
        try:
            return int(consumer.committed([TopicPartition(topic, 0)], WAIT)[0].offset)
        except KafkaException as exc:
            error = exc.args[0]
            moving = error.code() in (
                KafkaError.NOT_COORDINATOR,
                KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                KafkaError.COORDINATOR_NOT_AVAILABLE,
            )  # not flagged retriable by librdkafka
            if not (moving or error.retriable()) or time.monotonic() > deadline:
                raise
        time.sleep(0.1)
