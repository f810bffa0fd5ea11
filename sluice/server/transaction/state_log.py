"""``__transaction_state``: the transaction coordinator's log, in Kafka's record formats.

**Format** (byte-compatible with Kafka's ``TransactionLog``, so ``kafka-dump-log
--transaction-log-decoder`` reads our data dirs): every key and value starts with an int16
*version*, followed by the struct of that version (transcribed from Kafka's
``transaction-coordinator/src/main/resources/common/message/TransactionLogKey.json`` and
``TransactionLogValue.json``):

* key v0 ``TransactionLogKey``: the transactional id;
* value v0 ``TransactionLogValue`` (v1 is its flexible form, with the KIP-890 tagged fields
  previous/next producer id and client transaction version): producer id and epoch, timeout,
  the state's id (:class:`~sluice.server.transaction.metadata.TxnState`), the partitions of the
  transaction (null in state Empty, one entry per topic), the last update and start times.
  Written as v0, as Kafka 3.9 does until ``transaction.version`` 2 is finalized; v0 and v1 are
  read.
* a null value is a tombstone: the transactional id expired.

**Placement**: transactional id ``t`` lives in partition ``abs(javaHashCode(t)) % n`` (Kafka's
``partitionFor``, the same hash the group coordinator places groups with:
:func:`sluice.server.group.offsets_store.partition_for`), ``n`` =
``transaction.state.log.num.partitions`` (the existing topic's count wins).

**Topic**: created on the first FindCoordinator for a transaction, as Kafka does, with
``cleanup.policy=compact`` (the latest state of an id is all a coordinator needs), no
compression, Kafka's ``segment.bytes`` and ``min.insync.replicas`` =
``transaction.state.log.min.isr`` capped at the replication factor (a standalone broker has one
replica; Kafka would refuse every write there, where this keeps acks=all meaningful in a
cluster and possible alone).

**Writes** go through the replica layer with acks=all (Kafka's ``EnforcedRequiredAcks``), the
same :data:`~sluice.server.group.offsets_store.Appender` signature the group coordinator uses.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.protocol.errors import ProtocolError
from sluice.protocol.records import RecordBatchBuilder
from sluice.protocol.schema import F, StructSchema
from sluice.server.group.offsets_store import (
    Appender,
    AppendOutcome,
    partition_for,
    read_log_chunks,
)
from sluice.server.transaction.config import TRANSACTION_CONFIG

if TYPE_CHECKING:
    from sluice.server.storage.log import Log
    from sluice.server.storage.log_manager import LogManager

TRANSACTION_STATE_TOPIC = "__transaction_state"

KEY_VERSION = 0
#: Written: Kafka 3.9's ``TransactionVersion.TV_0.transactionLogValueVersion``.
VALUE_VERSION = 0
_MAX_VALUE_VERSION = 1
_I16 = struct.Struct(">h")

# fmt: off
TransactionLogKey: StructSchema[Any] = StructSchema("TransactionLogKey", [
    F("transactional_id", "string"),
])
TransactionLogValue: StructSchema[Any] = StructSchema("TransactionLogValue", [
    F("producer_id", "int64"),
    F("previous_producer_id", "int64", "1+", default=-1, tag=0),
    F("next_producer_id", "int64", "1+", default=-1, tag=1),
    F("producer_epoch", "int16"),
    F("transaction_timeout_ms", "int32"),
    F("transaction_status", "int8"),
    F("transaction_partitions", "[]PartitionsSchema", nullable="0+", fields=[
        F("topic", "string"),
        F("partition_ids", "[]int32"),
    ]),
    F("transaction_last_update_timestamp_ms", "int64"),
    F("transaction_start_timestamp_ms", "int64"),
    F("client_transaction_version", "int16", "1+", default=0, tag=2),
])
# fmt: on
_PartitionsSchema: Any = TransactionLogValue.cls.PartitionsSchema


def topic_config(min_isr: int, replication_factor: int, segment_bytes: int) -> dict[str, str]:
    """The topic-level settings ``__transaction_state`` is created with (module docstring)."""
    return {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "unclean.leader.election.enable": "false",
        "min.insync.replicas": str(max(1, min(min_isr, replication_factor))),
        "segment.bytes": str(segment_bytes),
    }


@dataclass(frozen=True)
class TxnLogValue:
    """A decoded ``TransactionLogValue`` (what a coordinator restores an id from)."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state_id: int
    partitions: frozenset[tuple[str, int]]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1


def key_bytes(transactional_id: str) -> bytes:
    out = bytearray(_I16.pack(KEY_VERSION))
    TransactionLogKey.encoder(KEY_VERSION, False)(
        TransactionLogKey.cls(transactional_id=transactional_id), out, []
    )
    return bytes(out)


def value_bytes(value: TxnLogValue, *, empty_state_id: int = 0) -> bytes:
    """Kafka's ``valueToBytes``: the partitions are null in state Empty, else one entry per
    topic (sorted here, so the bytes are reproducible)."""
    partitions = None
    if value.state_id != empty_state_id:
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(value.partitions):
            by_topic.setdefault(topic, []).append(index)
        partitions = [_PartitionsSchema(topic=t, partition_ids=ids) for t, ids in by_topic.items()]
    elif value.partitions:
        raise ValueError("a transaction in state Empty has no partitions")
    msg = TransactionLogValue.cls(
        producer_id=value.producer_id,
        producer_epoch=value.producer_epoch,
        transaction_timeout_ms=value.timeout_ms,
        transaction_status=value.state_id,
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=value.last_update_ms,
        transaction_start_timestamp_ms=value.start_ms,
    )
    out = bytearray(_I16.pack(VALUE_VERSION))
    TransactionLogValue.encoder(VALUE_VERSION, VALUE_VERSION >= 1)(msg, out, [])
    return bytes(out)


def decode_key(data: bytes) -> str | None:
    """The transactional id of a key; None for a key version Kafka does not know either
    (Kafka's ``UnknownKey``, skipped by its loader)."""
    if len(data) < 2:
        raise ProtocolError("__transaction_state key without a version")
    (version,) = _I16.unpack_from(data, 0)
    if version != KEY_VERSION:
        return None
    msg, _end = TransactionLogKey.decoder(version, False)(data, 2)
    return str(msg.transactional_id)


def decode_value(data: bytes | None) -> TxnLogValue | None:
    """A value (None: a tombstone). Raises ProtocolError for an unknown version."""
    if data is None:
        return None
    if len(data) < 2:
        raise ProtocolError("__transaction_state value without a version")
    (version,) = _I16.unpack_from(data, 0)
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise ProtocolError(f"unknown __transaction_state value version {version}")
    v, _end = TransactionLogValue.decoder(version, version >= 1)(data, 2)
    partitions = frozenset(
        (p.topic, index) for p in (v.transaction_partitions or ()) for index in p.partition_ids
    )
    return TxnLogValue(
        producer_id=v.producer_id,
        producer_epoch=v.producer_epoch,
        timeout_ms=v.transaction_timeout_ms,
        state_id=v.transaction_status,
        partitions=partitions,
        last_update_ms=v.transaction_last_update_timestamp_ms,
        start_ms=v.transaction_start_timestamp_ms,
        previous_producer_id=v.previous_producer_id,
    )


class TxnStateLog:
    """The ``__transaction_state`` topic: open or create it, write through the
    :data:`~sluice.server.group.offsets_store.Appender`, read partitions back. Used only by the
    transaction coordinator, on the event-loop thread."""

    def __init__(
        self,
        log_manager: LogManager,
        num_partitions: int,
        topic_config: dict[str, str],
        appender: Appender,
        *,
        load_buffer_bytes: int = TRANSACTION_CONFIG.default(
            "transaction.state.log.load.buffer.size"
        ),
        clock: Callable[[], int] | None = None,
    ) -> None:
        self._logs = log_manager
        self._wanted_partitions = num_partitions
        self.num_partitions = num_partitions
        self.topic_config = topic_config
        self._appender = appender
        self._load_buffer_bytes = load_buffer_bytes
        self._clock = clock or (lambda: int(time.time() * 1000))

    def open(self) -> bool:
        """Adopt an existing topic (its partition count wins); False if there is none yet."""
        existing = self._logs.topics().get(TRANSACTION_STATE_TOPIC)
        if existing is None:
            return False
        self.num_partitions = existing
        return True

    def ensure_topic(self) -> None:
        """Standalone: create the topic if it does not exist (idempotent)."""
        if not self.open():
            self._logs.create_topic(
                TRANSACTION_STATE_TOPIC, self._wanted_partitions, self.topic_config
            )
            self.num_partitions = self._wanted_partitions

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def write(
        self, partition: int, key: bytes, value: bytes | None
    ) -> AppendOutcome | asyncio.Future[AppendOutcome]:
        """One record in its own batch, acks=all."""
        builder = RecordBatchBuilder()
        builder.append(self._clock(), key, value)
        return self._appender(partition, builder.build(), -1)

    def read_partition(self, partition: int) -> Iterator[list[tuple[str, TxnLogValue | None]]]:
        """``(transactional id, value or None)`` of ``partition`` from its log start to its log
        end offset, one list per read of ``transaction.state.log.load.buffer.size`` bytes, in log
        order (the last value of an id wins). Undecodable records are skipped."""
        log_: Log | None = self._logs.get_log(TRANSACTION_STATE_TOPIC, partition)
        if log_ is None:
            return
        for records in read_log_chunks(log_, self._load_buffer_bytes):
            chunk: list[tuple[str, TxnLogValue | None]] = []
            for header, record in records:
                if header.is_control or record.key is None:
                    continue
                try:
                    txn_id = decode_key(record.key)
                    if txn_id is not None:
                        chunk.append((txn_id, decode_value(record.value)))
                except ProtocolError:
                    continue
            yield chunk
