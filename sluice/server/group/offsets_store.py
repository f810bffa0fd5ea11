"""Committed offsets and group metadata, stored the Kafka way: records in ``__consumer_offsets``.

**Format** (byte-compatible with Kafka's group coordinator, so a data dir stays Kafka-shaped and
Kafka's own ``kafka-dump-log --offsets-decoder`` can read it). Every record's key and value start
with an int16 *version*, followed by the struct of that version (schemas declared below with
:mod:`sluice.protocol.schema`, transcribed from Kafka's ``group-coordinator/.../common/message``):

* key version 0/1 ``OffsetCommitKey`` (group, topic, partition) -> value ``OffsetCommitValue``
  (offset, leaderEpoch v3+, metadata, commitTimestamp, expireTimestamp v1 only). Written as key
  v1 / value v3.
* key version 2 ``GroupMetadataKey`` (group) -> value ``GroupMetadataValue`` (protocolType,
  generation, protocol, leader, currentStateTimestamp v2+, members[]). Written as key v2 /
  value v3.
* a null value is a tombstone: the offset (or the whole group) is deleted.

**Placement**: group ``g`` lives in partition ``abs(javaHashCode(g)) % n`` (Kafka's
``partitionFor``), ``n`` = ``offsets.topic.num.partitions`` (Kafka's 50 in a cluster; 1 for a
standalone broker that does not set it: :mod:`sluice.server.group.config`). The partition count
of an existing topic wins over the config (changing it would move groups).

**Durability / compaction**: the topic is created as Kafka creates it (``offsetsTopicConfigs``):
``cleanup.policy=compact``, ``segment.bytes`` = ``offsets.topic.segment.bytes`` (100 MiB),
``compression.type=producer`` (the coordinator's batches are compressed with
``offsets.topic.compression.codec``, stored as written). The log cleaner
(:mod:`sluice.server.storage.log_cleaner`) keeps the latest value of every key (a tombstone
until ``delete.retention.ms`` after its first cleaning), so replaying the log from its start
offset restores the latest value of every key and the topic stays bounded by the live groups.
``retention.ms=-1`` and ``retention.bytes=-1`` are set too, so that a policy altered to
``compact,delete`` still never drops a live offset. A topic an older Sluice created with
``cleanup.policy=delete`` (it kept the topic bounded by re-appending live offsets instead) is
switched to ``compact`` when the broker starts (:func:`compacted_overrides`; standalone
:meth:`OffsetsStore.compact_old_topic`, in a cluster the broker rewrites
``/config/topics/__consumer_offsets``): its records are all keyed, so the cleaner takes it from
there, and nothing is lost on the way (the cleaner keeps the last record of every key).

**Writes go through the replica layer** (Kafka's ``appendForGroup``): the store builds one batch
and hands it to an injected :data:`Appender` -- in the broker the ReplicaManager's leader append
(so the batch carries the partition's leader epoch and is refused by a non-leader) that answers
once the partition's high watermark passed the batch for ``acks=-1``. This room sits below the
core and does not import it; the broker core supplies the appender.

**Concurrency**: called only from the event-loop thread (the group coordinator). Reads are
synchronous Log reads; :meth:`OffsetsStore.read_partition` reads a partition chunk by chunk so
that a caller can yield to the loop between chunks.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from sluice.protocol.errors import CorruptRecordError, ProtocolError
from sluice.protocol.records import (
    EndTxnMarker,
    RecordBatchBuilder,
    iter_records,
    parse_end_txn_marker,
)
from sluice.protocol.schema import F, Message, StructSchema
from sluice.server.group.config import GROUP_CONFIG
from sluice.server.logging import get_logger

if TYPE_CHECKING:
    from sluice.protocol.records import BatchHeader, Record
    from sluice.server.storage.log import Log
    from sluice.server.storage.log_manager import LogManager

logger = get_logger("sluice.groups")

OFFSETS_TOPIC = "__consumer_offsets"

#: ``offsets.topic.segment.bytes``'s declared default.
DEFAULT_SEGMENT_BYTES: int = GROUP_CONFIG.default("offsets.topic.segment.bytes")


def offsets_topic_config(segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> dict[str, str]:
    """Topic-level settings of the internal topic (see the module docstring on compaction)."""
    return {
        "cleanup.policy": "compact",
        "compression.type": "producer",
        "retention.ms": "-1",
        "retention.bytes": "-1",
        "segment.bytes": str(segment_bytes),
    }


#: :func:`offsets_topic_config` with Kafka's defaults.
OFFSETS_TOPIC_CONFIG = offsets_topic_config()


def compacted_overrides(overrides: Mapping[str, str], compact: bool) -> dict[str, str] | None:
    """The overrides that make an existing offsets topic compacted, or None when it is
    (``compact``: its effective ``cleanup.policy`` holds ``compact``). Only the policy
    changes: the other overrides (an older Sluice's ``retention.ms=-1``...) stay."""
    if compact:
        return None
    return {**overrides, "cleanup.policy": "compact"}


OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")

# fmt: off
# Kafka's internal record formats, not API messages: not in the generated messages.pyi, so
# their instances are untyped (Any).
OffsetCommitKey: StructSchema[Any] = StructSchema("OffsetCommitKey", [
    F("group", "string"),
    F("topic", "string"),
    F("partition", "int32"),
])
OffsetCommitValue: StructSchema[Any] = StructSchema("OffsetCommitValue", [
    F("offset", "int64"),
    F("leader_epoch", "int32", "3+", default=-1),
    F("metadata", "string"),
    F("commit_timestamp", "int64"),
    F("expire_timestamp", "int64", "1", default=-1),
])
GroupMetadataKey: StructSchema[Any] = StructSchema("GroupMetadataKey", [
    F("group", "string"),
])
GroupMetadataValue: StructSchema[Any] = StructSchema("GroupMetadataValue", [
    F("protocol_type", "string"),
    F("generation", "int32"),
    F("protocol", "string", nullable="0+"),
    F("leader", "string", nullable="0+"),
    F("current_state_timestamp", "int64", "2+", default=-1),
    F("members", "[]MemberMetadata", fields=[
        F("member_id", "string"),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
        F("client_id", "string"),
        F("client_host", "string"),
        F("rebalance_timeout", "int32", "1+"),
        F("session_timeout", "int32"),
        F("subscription", "bytes"),
        F("assignment", "bytes"),
    ]),
])
# fmt: on
GroupMetadataValue.set_owner(GroupMetadataValue.cls)
MemberMetadata: type[Message] = GroupMetadataValue.cls.MemberMetadata

_VALUE_FLEXIBLE_FROM = 4  # both value schemas: version 4 is the first flexible one


def _encode(schema: StructSchema[Any], version: int, msg: Message) -> bytes:
    out = bytearray(_I16.pack(version))
    schema.encoder(version, version >= _VALUE_FLEXIBLE_FROM and schema.name.endswith("Value"))(
        msg, out, []
    )
    return bytes(out)


def _decode(schema: StructSchema[Any], data: bytes, max_version: int) -> tuple[int, Any]:
    if len(data) < 2:
        raise ProtocolError(f"{schema.name}: {len(data)} bytes, no version")
    (version,) = _I16.unpack_from(data, 0)
    if not 0 <= version <= max_version:
        raise ProtocolError(f"{schema.name}: unknown version {version}")
    flexible = version >= _VALUE_FLEXIBLE_FROM and schema.name.endswith("Value")
    msg, _end = schema.decoder(version, flexible)(data, 2)
    return version, msg


@dataclass(frozen=True)
class OffsetAndMetadata:
    """One committed offset, as OffsetFetch returns it."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


def offset_commit_record(
    group: str, topic: str, partition: int, value: OffsetAndMetadata | None
) -> tuple[bytes, bytes | None]:
    """(key, value) of one committed offset; ``value=None`` writes a tombstone."""
    key = _encode(
        OffsetCommitKey,
        OFFSET_COMMIT_KEY_VERSION,
        OffsetCommitKey.cls(group=group, topic=topic, partition=partition),
    )
    if value is None:
        return key, None
    body = OffsetCommitValue.cls(
        offset=value.offset,
        leader_epoch=value.leader_epoch,
        metadata=value.metadata,
        commit_timestamp=value.commit_timestamp,
    )
    return key, _encode(OffsetCommitValue, OFFSET_COMMIT_VALUE_VERSION, body)


def group_metadata_record(group: str, value: Message | None) -> tuple[bytes, bytes | None]:
    """(key, value) of a group's metadata (a ``GroupMetadataValue`` message) or a tombstone."""
    key = _encode(GroupMetadataKey, GROUP_METADATA_KEY_VERSION, GroupMetadataKey.cls(group=group))
    if value is None:
        return key, None
    return key, _encode(GroupMetadataValue, GROUP_METADATA_VALUE_VERSION, value)


@dataclass(frozen=True)
class OffsetRecord:
    """A decoded offset-commit record (``value`` None: tombstone). Read from a log
    (:meth:`OffsetsStore.read_partition`): ``position`` is its batch's base offset, and
    ``producer_id`` the transactional producer whose batch holds it (-1: a plain commit,
    visible at once; else pending until that producer's marker, a :class:`TxnMarkerRecord`)."""

    group: str
    topic: str
    partition: int
    value: OffsetAndMetadata | None
    producer_id: int = -1
    position: int = -1


@dataclass(frozen=True)
class TxnMarkerRecord:
    """A transaction marker read from ``__consumer_offsets``: the pending offsets of
    ``producer_id`` become committed offsets (``commit``) or are dropped."""

    producer_id: int
    commit: bool
    position: int


@dataclass(frozen=True)
class GroupRecord:
    """A decoded group-metadata record (``value`` None: tombstone)."""

    group: str
    value: Message | None


#: What :meth:`OffsetsStore.read_partition` yields, in log order.
LoadedRecord = OffsetRecord | GroupRecord | TxnMarkerRecord


def decode_record(key: bytes, value: bytes | None) -> OffsetRecord | GroupRecord:
    """Decode one ``__consumer_offsets`` record. Raises ProtocolError for anything malformed."""
    if len(key) < 2:
        raise ProtocolError("__consumer_offsets key without a version")
    (key_version,) = _I16.unpack_from(key, 0)
    if key_version in (0, 1):
        _v, k = _decode(OffsetCommitKey, key, 1)
        if value is None:
            return OffsetRecord(k.group, k.topic, k.partition, None)
        _v, v = _decode(OffsetCommitValue, value, 4)
        return OffsetRecord(
            k.group,
            k.topic,
            k.partition,
            OffsetAndMetadata(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp),
        )
    if key_version == 2:
        _v, gk = _decode(GroupMetadataKey, key, 2)
        if value is None:
            return GroupRecord(gk.group, None)
        _v, gv = _decode(GroupMetadataValue, value, 4)
        return GroupRecord(gk.group, gv)
    raise ProtocolError(f"__consumer_offsets key version {key_version} is not a classic group")


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, int32 overflow): Kafka's group placement."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % n`` (its ``abs`` is ``& 0x7fffffff``)."""
    return (java_string_hash(group) & 0x7FFFFFFF) % num_partitions


def log_compacted_old_topic(old: Mapping[str, str], new: Mapping[str, str]) -> None:
    """The one line saying an older offsets topic was switched to ``compact``."""
    logger.warning(
        "__consumer_offsets switched to cleanup.policy=compact (an older Sluice created it with "
        f"{old.get('cleanup.policy', 'the broker default policy')}): the log cleaner keeps it "
        "bounded from now on",
        overrides=dict(new),
    )


class AppendOutcome(NamedTuple):
    """How an append to ``__consumer_offsets`` ended: the append's Kafka error code (0: written
    and, for ``acks=-1``, replicated to the ISR) and the batch's first offset (-1 on error)."""

    error: int
    first_offset: int


#: Appends one batch (``records``, v2 batch bytes) to ``__consumer_offsets-<partition>`` as its
#: leader with ``acks`` (-1 or 1). Answers an :class:`AppendOutcome` at once when the append is
#: settled by the time it returns (always for ``acks=1``; for ``acks=-1`` when the high
#: watermark is already past the batch, e.g. a single replica), else a future of it that
#: completes when it is replicated, fails, or ``offsets.commit.timeout.ms`` passes. It never
#: raises for a Kafka error: the code is in the outcome.
Appender = Callable[[int, bytes, int], AppendOutcome | asyncio.Future[AppendOutcome]]

#: ``offsets.load.buffer.size``'s declared default: bytes read per step when loading a partition.
DEFAULT_LOAD_BUFFER_BYTES: int = GROUP_CONFIG.default("offsets.load.buffer.size")


class OffsetsStore:
    """The ``__consumer_offsets`` topic: open or create it, write batches through the
    :data:`Appender`, read partitions back.

    Only the group coordinator calls this, from the event-loop thread.
    """

    def __init__(
        self,
        log_manager: LogManager,
        num_partitions: int,
        appender: Appender,
        *,
        clock: Any = None,
        load_buffer_bytes: int = DEFAULT_LOAD_BUFFER_BYTES,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        compression: int = 0,
    ) -> None:
        self._logs = log_manager
        #: The settings the topic is created with (:func:`offsets_topic_config`).
        self.topic_config = offsets_topic_config(segment_bytes)
        #: Codec of the batches written (``offsets.topic.compression.codec``).
        self.compression = compression
        self._wanted_partitions = num_partitions
        self.num_partitions = num_partitions
        self._appender = appender
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._load_buffer_bytes = load_buffer_bytes

    def open(self) -> bool:
        """Adopt an existing topic (its partition count wins); False if there is none yet.

        The topic is created lazily, like Kafka does on the first FindCoordinator: a broker
        nobody uses groups on has no internal topic in its Metadata.
        """
        existing = self._logs.topics().get(OFFSETS_TOPIC)
        if existing is None:
            return False
        self.num_partitions = existing
        return True

    def ensure_topic(self) -> None:
        """Create the topic if it does not exist (idempotent)."""
        if not self.open():
            self._logs.create_topic(OFFSETS_TOPIC, self._wanted_partitions, self.topic_config)
            self.num_partitions = self._wanted_partitions

    def compact_old_topic(self) -> bool:
        """Standalone start: switch an offsets topic an older Sluice created with
        ``cleanup.policy=delete`` to ``compact`` (:func:`compacted_overrides`), logged; returns
        whether it did. In a cluster the broker does it in ZooKeeper."""
        if OFFSETS_TOPIC not in self._logs.topics():
            return False
        overrides = self._logs.topic_overrides(OFFSETS_TOPIC)
        compact = self._logs.topic_config(OFFSETS_TOPIC).compact
        new = compacted_overrides(overrides, compact)
        if new is None:
            return False
        self._logs.alter_topic_config(OFFSETS_TOPIC, new)
        log_compacted_old_topic(overrides, new)
        return True

    def partition_for(self, group: str) -> int:
        return partition_for(group, self.num_partitions)

    def log(self, partition: int) -> Log:
        log_ = self._logs.get_log(OFFSETS_TOPIC, partition)
        if log_ is None:
            raise RuntimeError(f"{OFFSETS_TOPIC}-{partition} is not open")
        return log_

    def log_if_open(self, partition: int) -> Log | None:
        return self._logs.get_log(OFFSETS_TOPIC, partition)

    def write(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        acks: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> AppendOutcome | asyncio.Future[AppendOutcome]:
        """Append ``records`` as one batch to ``partition`` through the appender (see
        :data:`Appender` for when it answers). Creates the topic first if it does not exist.

        With a ``producer_id`` (TxnOffsetCommit) the batch is transactional, of that producer
        and epoch, with no sequence (Kafka's coordinator-origin appends are not sequence
        checked): it opens or joins the producer's transaction in the partition, and its
        offsets stay pending until the transaction's marker."""
        self.ensure_topic()
        now = self._clock()
        builder = RecordBatchBuilder(
            producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=True,
            compression=self.compression,
        ) if producer_id >= 0 else RecordBatchBuilder(compression=self.compression)  # fmt: skip
        for key, value in records:
            builder.append(now, key, value)
        return self._appender(partition, builder.build(), acks)

    def read_partition(self, partition: int) -> Iterator[list[LoadedRecord]]:
        """The records of ``partition`` from its log start to its log end offset (LEO, as
        Kafka's loader reads: FetchLogEnd), one list per read of ``offsets.load.buffer.size``
        bytes, in log order (the last value of a key wins). Nothing if the partition's log is
        not open here.

        Undecodable records (a newer Kafka's consumer-group records, damage) are skipped.
        """
        log_ = self.log_if_open(partition)
        if log_ is None:
            return
        for records in read_log_chunks(log_, self._load_buffer_bytes):
            chunk: list[LoadedRecord] = []
            for header, record in records:
                if header.is_control:
                    if header.producer_id >= 0 and record.key is not None:
                        marker = _marker_of(record.key, record.value)
                        if marker is not None:
                            chunk.append(TxnMarkerRecord(
                                header.producer_id, marker.commit, header.base_offset
                            ))  # fmt: skip
                    continue
                if record.key is None:
                    continue
                try:
                    decoded = decode_record(record.key, record.value)
                except ProtocolError:
                    continue
                if isinstance(decoded, OffsetRecord):
                    pid = header.producer_id if header.is_transactional else -1
                    decoded = replace(decoded, producer_id=pid, position=header.base_offset)
                chunk.append(decoded)
            yield chunk

    def replay(self) -> Iterator[LoadedRecord]:
        """Every record of every partition, in log order (see :meth:`read_partition`)."""
        if not self.open():
            return
        for partition in range(self.num_partitions):
            for chunk in self.read_partition(partition):
                yield from chunk


def _marker_of(key: bytes, value: bytes | None) -> EndTxnMarker | None:
    """The COMMIT/ABORT marker of a control record (None: another control type, or damage)."""
    try:
        return parse_end_txn_marker(key, value)
    except CorruptRecordError:
        return None


def read_log_chunks(log_: Log, buffer_bytes: int) -> Iterator[list[tuple[BatchHeader, Record]]]:
    """A coordinator's load: the records of ``log_`` from its log start to its log end offset
    (LEO, as Kafka's loaders read: FetchLogEnd), one list per read of ``buffer_bytes``, in log
    order, control batches' records included (records below the read's start, from a batch that
    began before it, are left out)."""
    from sluice.server.storage.log import Isolation

    offset = log_.log_start_offset
    while offset < log_.log_end_offset:
        info = log_.read(offset, buffer_bytes, Isolation.LOG_END, min_one_message=True)
        if info.slice is None or info.slice.size == 0:
            break
        next_offset = offset
        chunk: list[tuple[BatchHeader, Record]] = []
        for header, record in iter_records(info.slice.read_bytes()):
            next_offset = header.next_offset
            if record.offset >= offset:
                chunk.append((header, record))
        if next_offset <= offset:
            break
        offset = next_offset
        yield chunk
