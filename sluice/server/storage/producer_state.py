"""Idempotent-producer state of one partition: which sequences each producer id has written.

An idempotent producer (``enable.idempotence=true``) gets a producer id and epoch from
InitProducerId and numbers its batches per partition: ``baseSequence`` of a batch is the
sequence of its first record, the batch covers ``baseSequence .. baseSequence +
lastOffsetDelta`` (int32, wrapping to 0 after 2^31-1). A retry after a lost response resends
the *same* bytes, so the broker can recognise it. Rules (Kafka's ``ProducerStateManager`` /
``ProducerAppendInfo``), checked before anything is written:

* a batch identical (same epoch, first and last sequence) to one of the last
  :data:`BATCHES_TO_RETAIN` = 5 batches of that producer is a **duplicate**: nothing is
  appended and the append answers with the *original* batch's offsets (error NONE -- what Kafka
  does since 1.0; a client in flight with up to 5 requests can only resend one of those);
* an older sequence that is no longer cached -> DUPLICATE_SEQUENCE_NUMBER (46), which clients
  treat as "already written";
* a gap or an overlap (first sequence != last sequence + 1) -> OUT_OF_ORDER_SEQUENCE_NUMBER (45);
* an epoch lower than the producer's current one -> INVALID_PRODUCER_EPOCH (47) (a fenced
  zombie); a higher epoch must start again at sequence 0 (else OUT_OF_ORDER_SEQUENCE_NUMBER);
* an *unknown* producer id (never seen here, expired, or its batches all removed) may start
  at any sequence, and the other batches of the same epoch in that append are not checked
  either (Kafka 3.x's ``ProducerAppendInfo.checkSequence``: its current entry has no epoch,
  ``NO_PRODUCER_EPOCH``, since KIP-360). The client sees a plain success; what is lost is
  only the recognition of a retry written before the producer was forgotten.

**Derived state**: the log is authoritative. :meth:`ProducerStateManager.rebuild` replays the
batch headers (61 bytes each, no record decoding) of a partition; the Log builds its manager
lazily, on the first batch that carries a producer id, so opening a partition that only gets
non-idempotent writes costs nothing. A clean close writes Kafka's ``<offset>.snapshot`` file
(see below); the next build starts from the newest snapshot at or below the log end offset and
replays only the headers after it, and producers whose batches retention has deleted since are
still known. Without a usable snapshot, a producer whose batches have all been removed is
unknown (its next batch is accepted whatever its sequence, as above).

**Expiration** (``producer.id.expiration.ms``, Kafka's ``removeExpiredProducers``; KIP-854):
a producer is *expired* when it has no ongoing transaction and ``now - last_timestamp >=
producer.id.expiration.ms``, ``last_timestamp`` being the max timestamp of its last batch or
marker (the producer's clock under CreateTime, not the broker's arrival time: Kafka's rule).
The LogManager removes the expired producers of every built state every
``producer.id.expiration.check.interval.ms`` (:meth:`ProducerStateManager.remove_expired`),
so the state and the snapshots written after stay bounded by the producers active within the
window; a snapshot load skips the producers already expired (Kafka's ``loadFromSnapshot``;
:func:`decode_snapshot`'s ``expired``). An expired producer is unknown from then on: its next
batch starts it afresh, and the cleaner no longer keeps its last batch. Moving the log start
offset forgets no producer (Kafka 3.x keeps a producer after retention removed its batches).

**Transactions** (KIP-98; Kafka's ``ProducerAppendInfo.appendDataBatch`` /
``appendEndTxnMarker``): the first transactional batch of a producer starts its *ongoing*
transaction at that batch's first offset (``ProducerEntry.current_txn_first_offset``); later
batches of the producer must be transactional too (else INVALID_TXN_STATE) until a control
batch -- the coordinator's COMMIT or ABORT marker -- ends it. A marker is refused when its
producer epoch is older than the producer's (INVALID_PRODUCER_EPOCH) or its coordinator epoch
is older than the last one seen for that producer (TRANSACTION_COORDINATOR_FENCED: a zombie
coordinator). A marker that ends a transaction with data yields a :class:`CompletedTxn`; the Log
writes an aborted one to the segment's ``.txnindex`` *before* calling :meth:`complete_txn`
(the entry's last stable offset is :meth:`last_stable_offset` as of that moment). A completed
transaction stays *unreplicated* until the high watermark passes its marker
(:meth:`on_high_watermark_updated`): until then a follower might not have the marker, and the
first unstable offset -- the smallest first offset of the ongoing and unreplicated
transactions -- does not move past it. Ongoing transactions are kept in a dict keyed by first
offset in insertion order, which is offset order: a transaction starts at the log end offset,
and the snapshot load inserts the older ones first, sorted.

**Concurrency**: only the partition's append path calls :meth:`check` and :meth:`update`
(event-loop thread), in that order for one append, with nothing in between.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from sluice.protocol.errors import (
    DuplicateSequenceNumber,
    InvalidProducerEpoch,
    InvalidTxnState,
    OutOfOrderSequenceNumber,
    TransactionCoordinatorFenced,
)
from sluice.protocol.records import BatchHeader, EndTxnMarker
from sluice.server.storage.layout import SNAPSHOT_SUFFIX, offset_file_name, parse_offset_file_name
from sluice.server.storage.vfs import DEFAULT_VFS, VFS, atomic_write, read_file

BATCHES_TO_RETAIN = 5
INT32_MAX = 0x7FFFFFFF
NO_SEQUENCE = -1
NO_OFFSET = -1


class CompletedTxn(NamedTuple):
    """A transaction a marker ended: its producer, first data offset, the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class BatchMetadata(NamedTuple):
    """One appended batch of a producer: its sequences and where it landed."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


def last_sequence(header: BatchHeader) -> int:
    """The sequence of the batch's last record (wrapping past INT32_MAX, like Kafka)."""
    seq = header.base_sequence + header.last_offset_delta
    return seq - INT32_MAX - 1 if seq > INT32_MAX else seq


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (last_seq == INT32_MAX and next_seq == 0)


class ProducerEntry:
    """The state of one producer id: current epoch, last batches (oldest first), the epoch
    of the coordinator that wrote its last marker (-1 none), the first offset of its
    ongoing transaction (-1 none), and the max timestamp of its last batch or marker (kept in
    snapshots; DescribeProducers shows it; -1 when only an emptied marker told its epoch)."""

    __slots__ = (
        "batches",
        "coordinator_epoch",
        "current_txn_first_offset",
        "epoch",
        "last_timestamp",
        "producer_id",
    )

    def __init__(self, producer_id: int, epoch: int) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=BATCHES_TO_RETAIN)
        self.coordinator_epoch = -1
        self.current_txn_first_offset = NO_OFFSET
        self.last_timestamp = -1

    def set_epoch(self, epoch: int) -> None:
        """A new producer epoch starts a new sequence space: the old batches are forgotten."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches.clear()

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None


class ProducerStateManager:
    """Producer ids -> :class:`ProducerEntry` for one partition. See the module docstring."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        # The most producers held at once before the last expiration (0: none removed yet):
        # Kafka's HashMap never shrinks its table, and the table decides the snapshot's
        # entry order (:func:`java_hash_map_order`).
        self.peak_size = 0
        # first offset -> producer id of every ongoing transaction, in offset order
        self.ongoing: dict[int, int] = {}
        # first offset -> marker offset of transactions completed above the high watermark
        self.unreplicated: dict[int, int] = {}

    @classmethod
    def rebuild(cls, headers: Iterable[BatchHeader]) -> ProducerStateManager:
        """Replay the headers of every batch in the log, in offset order."""
        return cls().replay(headers)

    def replay(self, headers: Iterable[BatchHeader]) -> ProducerStateManager:
        """Apply data batches already in the log (after a snapshot), in offset order; returns
        self. Control batches need their marker: use :meth:`replay_batches`."""
        return self.replay_batches((header, None) for header in headers)

    def replay_batches(
        self,
        batches: Iterable[tuple[BatchHeader, EndTxnMarker | None]],
        on_complete: Callable[[CompletedTxn, int], None] | None = None,
    ) -> ProducerStateManager:
        """Apply batches already in the log, in offset order, with the marker of each control
        batch (None for data batches and empty control batches); returns self. Nothing is
        checked: the log is authoritative (Kafka's replication origin). Each transaction a
        marker completes is passed to ``on_complete`` with its last stable offset (recovery
        rebuilds ``.txnindex`` from it), then completed (unreplicated until
        :meth:`on_high_watermark_updated`)."""
        for header, marker in batches:
            if header.producer_id < 0:
                continue
            completed = self.update(header, header.base_offset, marker)
            if completed is not None:
                if on_complete is not None:
                    on_complete(completed, self.last_stable_offset(completed))
                self.complete_txn(completed)
        return self

    def check(self, headers: Sequence[BatchHeader]) -> BatchMetadata | None:
        """Validate the producer batches of one append, in order, before it is written.

        Returns the original batch's metadata when the append is a duplicate (the caller
        writes nothing and answers with those offsets); None when it may be appended. Raises
        OutOfOrderSequenceNumber, DuplicateSequenceNumber or InvalidProducerEpoch.
        """
        # (epoch, last sequence) per producer as the earlier batches of this append leave it.
        pending: dict[int, tuple[int, int]] = {}
        for header in headers:
            pid = header.producer_id
            if pid < 0:
                continue
            if header.base_sequence < 0:
                # A transactional batch without sequences is the group coordinator's
                # (TxnOffsetCommit, origin coordinator): not sequence checked, but a zombie
                # producer's older epoch is fenced (Kafka's ``checkProducerEpoch``).
                entry = self.producers.get(pid)
                if (
                    header.is_transactional
                    and entry is not None
                    and (header.producer_epoch < entry.epoch)
                ):
                    raise InvalidProducerEpoch(
                        f"producer {pid}: epoch {header.producer_epoch} is older than the "
                        f"current {entry.epoch}"
                    )
                continue
            epoch, first, last = header.producer_epoch, header.base_sequence, last_sequence(header)
            entry = self.producers.get(pid)
            if entry is None:
                # An unknown producer: any sequence (see the module docstring), also for the
                # later batches of its epoch in this append; an older epoch there is fenced.
                if pid in pending and epoch < pending[pid][0]:
                    raise InvalidProducerEpoch(
                        f"producer {pid}: epoch {epoch} is older than the current {pending[pid][0]}"
                    )
                if pid in pending and epoch != pending[pid][0] and first != 0:
                    raise OutOfOrderSequenceNumber(
                        f"producer {pid} epoch {epoch}: a new epoch must start at sequence 0, "
                        f"got {first}"
                    )
                pending[pid] = (epoch, last)
                continue
            if (
                not header.is_transactional
                and entry is not None
                and entry.current_txn_first_offset != NO_OFFSET
            ):
                raise InvalidTxnState(
                    f"producer {pid}: a non-transactional batch while its transaction from "
                    f"offset {entry.current_txn_first_offset} is open"
                )
            if pid in pending:
                cur_epoch, cur_last = pending[pid]
            else:
                cur_epoch, cur_last = entry.epoch, entry.last_seq
                dup = entry.find_duplicate(epoch, first, last)
                if dup is not None:
                    return dup
            if cur_epoch >= 0 and epoch < cur_epoch:
                raise InvalidProducerEpoch(
                    f"producer {pid}: epoch {epoch} is older than the current {cur_epoch}"
                )
            if epoch != cur_epoch or cur_last == NO_SEQUENCE:
                if first != 0:
                    raise OutOfOrderSequenceNumber(
                        f"producer {pid} epoch {epoch}: a new producer or epoch must start at "
                        f"sequence 0, got {first}"
                    )
            elif not in_sequence(cur_last, first):
                if first <= cur_last and last <= cur_last and first <= last:
                    raise DuplicateSequenceNumber(
                        f"producer {pid}: sequences {first}..{last} were written before"
                    )
                expected = 0 if cur_last == INT32_MAX else cur_last + 1
                raise OutOfOrderSequenceNumber(
                    f"producer {pid}: expected sequence {expected}, got {first}"
                )
            pending[pid] = (epoch, last)
        return None

    # -- expiration ---------------------------------------------------------------------------

    @staticmethod
    def is_expired(entry: ProducerEntry, now_ms: int, expiration_ms: int) -> bool:
        """Kafka's ``isProducerExpired``: no ongoing transaction, and the last batch's
        timestamp at least ``expiration_ms`` old."""
        return (
            entry.current_txn_first_offset == NO_OFFSET
            and now_ms - entry.last_timestamp >= expiration_ms
        )

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget the expired producers (Kafka's ``removeExpiredProducers``); returns how many.
        Only from the event loop, between appends (the append path's ``check`` and ``update``
        of one append are never split by it)."""
        expired = [
            pid for pid, e in self.producers.items() if self.is_expired(e, now_ms, expiration_ms)
        ]
        if expired:
            self.peak_size = max(self.peak_size, len(self.producers))
            for pid in expired:
                del self.producers[pid]
        return len(expired)

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Validate a transaction marker the coordinator is about to write (Kafka's
        ``checkProducerEpoch`` and ``checkCoordinatorEpoch`` for the coordinator origin).
        Raises InvalidProducerEpoch or TransactionCoordinatorFenced."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpoch(
                f"producer {producer_id}: marker epoch {producer_epoch} is older than the "
                f"current {entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFenced(
                f"producer {producer_id}: coordinator epoch {coordinator_epoch} (zombie) is "
                f"older than {entry.coordinator_epoch} (current)"
            )

    def update(
        self, header: BatchHeader, first_offset: int, marker: EndTxnMarker | None = None
    ) -> CompletedTxn | None:
        """Record a batch just appended at ``first_offset`` (after :meth:`check` or
        :meth:`check_marker` passed); ``marker`` is that of a control batch. Returns the
        transaction a marker completed (not yet :meth:`complete_txn`-ed), if it had data."""
        pid = header.producer_id
        if pid < 0:
            return None
        if header.is_control:
            if marker is None:  # an empty control batch, or a control type we do not know
                # An empty one is a marker the cleaner emptied but kept for its epoch (the
                # producer's last batch): the epoch is all it still says.
                if header.record_count == 0:
                    entry = self.producers.get(pid)
                    if entry is None:
                        self.producers[pid] = ProducerEntry(pid, header.producer_epoch)
                    elif header.producer_epoch > entry.epoch:
                        entry.set_epoch(header.producer_epoch)
                return None
            entry = self.producers.get(pid)
            if entry is None:
                entry = self.producers[pid] = ProducerEntry(pid, header.producer_epoch)
            entry.set_epoch(header.producer_epoch)
            entry.coordinator_epoch = marker.coordinator_epoch
            entry.last_timestamp = header.max_timestamp
            txn_first = entry.current_txn_first_offset
            entry.current_txn_first_offset = NO_OFFSET
            if txn_first == NO_OFFSET:
                return None  # a marker without data changes no stable offset
            return CompletedTxn(pid, txn_first, first_offset, not marker.commit)
        if header.base_sequence >= 0 or header.is_transactional:
            self._record(header, first_offset)
        return None

    def _record(self, header: BatchHeader, first_offset: int) -> None:
        pid = header.producer_id
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid, header.producer_epoch)
        entry.set_epoch(header.producer_epoch)
        entry.last_timestamp = header.max_timestamp
        if header.is_transactional and entry.current_txn_first_offset == NO_OFFSET:
            entry.current_txn_first_offset = first_offset
            self.ongoing[first_offset] = pid
        if header.base_sequence < 0:
            return
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                last_sequence(header),
                first_offset,
                first_offset + header.last_offset_delta,
            )
        )

    # -- transactions -------------------------------------------------------------------------

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The last stable offset once ``completed`` is complete (the value its ``.txnindex``
        entry records): the first offset of the oldest other ongoing transaction, else the
        offset after the marker. Call before :meth:`complete_txn`."""
        for first_offset, pid in self.ongoing.items():
            if pid != completed.producer_id:
                return first_offset
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """The marker of ``completed`` is in the log (and its index entry written)."""
        if self.ongoing.pop(completed.first_offset, None) is None:
            raise ValueError(f"transaction {completed} was not ongoing")
        self.unreplicated[completed.first_offset] = completed.last_offset

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Transactions whose marker is below the high watermark are stable."""
        if self.unreplicated:
            done = [f for f, last in self.unreplicated.items() if last < high_watermark]
            for first_offset in done:
                del self.unreplicated[first_offset]

    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of an ongoing transaction or of a completed one whose
        marker is not below the high watermark yet; None when every transaction is stable."""
        first = next(iter(self.ongoing), None)
        if self.unreplicated:
            oldest = min(self.unreplicated)
            if first is None or oldest < first:
                return oldest
        return first

    def first_undecided_offset(self) -> int | None:
        """The first offset of the oldest ongoing transaction (Kafka's firstUndecidedOffset)."""
        return next(iter(self.ongoing), None)


# --- snapshot files (Kafka's ``<offset>.snapshot``, version 1) ---------------------------------
#
# Layout (big-endian): version int16 (1) | crc uint32 (CRC32C of everything after it) |
# producer_entries: int32 count, then per producer: producer_id int64, epoch int16,
# last_sequence int32, last_offset int64, offset_delta int32 (last - first offset of the last
# batch), timestamp int64 (the max timestamp of the producer's last batch or marker: Kafka's
# ``lastTimestamp``, what DescribeProducers shows), coordinator_epoch int32,
# current_txn_first_offset int64 (-1: no ongoing transaction). A producer with no batch (only
# markers, or only an epoch) has last_sequence -1, last_offset -1 and offset_delta 0, as Kafka
# writes it. Recovery restarts the ongoing transactions from current_txn_first_offset (Kafka's
# ``loadProducerEntry``). The entries are in the iteration order of Kafka's producer map (a
# ``java.util.HashMap<Long, ...>``: :func:`java_hash_map_order`), so a Sluice snapshot is
# byte-identical to the one Kafka writes for the same batches.
#
# The file is named by the offset it describes the state up to (exclusive): the base offset
# of each new segment at a roll, LEO at a clean close (the Log's class docstring has the
# life cycle). Like Kafka's, a snapshot keeps only the last batch of each producer, so after a
# restart only that batch is recognised as a duplicate (a retry of an older one gets
# DUPLICATE_SEQUENCE_NUMBER, which clients treat as written).

SNAPSHOT_VERSION = 1
_SNAP_HEADER = struct.Struct(">hI")
_SNAP_COUNT = struct.Struct(">i")
_SNAP_ENTRY = struct.Struct(">qhiqiqiq")


class CorruptSnapshotError(Exception):
    """A snapshot file that does not parse or whose CRC does not match (it is ignored)."""


def snapshot_files(directory: Path, vfs: VFS = DEFAULT_VFS) -> list[tuple[int, Path]]:
    """``(offset, path)`` of every snapshot file in a partition directory, oldest first."""
    return snapshots_in(directory, vfs.listdir(directory))


def snapshots_in(directory: Path, names: Iterable[str]) -> list[tuple[int, Path]]:
    """``(offset, path)`` of the snapshot files among ``names`` (a listing), oldest first."""
    found = []
    for name in names:
        offset = parse_offset_file_name(name, SNAPSHOT_SUFFIX)
        if offset is not None:
            found.append((offset, directory / name))
    return sorted(found)


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / offset_file_name(offset, SNAPSHOT_SUFFIX)


def java_hash_map_order(keys: Sequence[int], peak_size: int = 0) -> list[int]:
    """``keys`` (int64, in insertion order) in the order a ``java.util.HashMap<Long, V>``
    holding them iterates: by bucket (``Long.hashCode`` spread by ``h ^ (h >>> 16)``, masked
    by the table size), insertion order within a bucket (a resize splits buckets keeping it,
    a removal keeps the others' order, a key added again goes last). The table starts at 16
    and doubles whenever the size passes 3/4 of it, and never shrinks: ``peak_size`` is the
    most keys the map held before removals (expiration), so the table is that of
    ``max(len(keys), peak_size)`` keys, as Kafka's map has for the same producers."""
    capacity = 16
    while max(len(keys), peak_size) > capacity * 3 // 4:
        capacity *= 2
    mask = capacity - 1

    def bucket(key: int) -> int:
        k = key & 0xFFFFFFFFFFFFFFFF
        h = (k ^ (k >> 32)) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & mask

    return sorted(keys, key=bucket)  # stable: insertion order within a bucket


def encode_snapshot(manager: ProducerStateManager) -> bytes:
    """Kafka's ``ProducerStateManager.writeSnapshot`` bytes of ``manager``'s producers."""
    entries = []
    producers = manager.producers
    for pid in java_hash_map_order(list(producers), manager.peak_size):
        e = producers[pid]
        if e.batches:
            last = e.batches[-1]
            last_seq, last_offset = last.last_seq, last.last_offset
            delta = last.last_offset - last.first_offset
        else:
            last_seq, last_offset, delta = NO_SEQUENCE, NO_OFFSET, 0
        fields = (pid, e.epoch, last_seq, last_offset, delta, e.last_timestamp)
        entries.append(_SNAP_ENTRY.pack(*fields, e.coordinator_epoch, e.current_txn_first_offset))
    body = _SNAP_COUNT.pack(len(entries)) + b"".join(entries)
    return _SNAP_HEADER.pack(SNAPSHOT_VERSION, crc32c(body)) + body


def decode_snapshot(
    data: bytes, expired: Callable[[ProducerEntry], bool] | None = None
) -> ProducerStateManager:
    """Raises :class:`CorruptSnapshotError` for anything but a well-formed version 1 file.
    The producers for which ``expired`` is true are left out (Kafka's ``loadFromSnapshot``)."""
    if len(data) < _SNAP_HEADER.size + _SNAP_COUNT.size:
        raise CorruptSnapshotError(f"{len(data)} bytes: too short")
    version, crc = _SNAP_HEADER.unpack_from(data, 0)
    body = memoryview(data)[_SNAP_HEADER.size :]
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"version {version}")
    if crc32c(body) != crc:
        raise CorruptSnapshotError("CRC mismatch")
    (count,) = _SNAP_COUNT.unpack_from(body, 0)
    if count < 0 or len(body) != _SNAP_COUNT.size + count * _SNAP_ENTRY.size:
        raise CorruptSnapshotError(f"{count} entries do not fill {len(body)} bytes")
    manager = ProducerStateManager()
    txns = []
    for pid, epoch, last_seq, last_offset, delta, ts, coord, txn in _SNAP_ENTRY.iter_unpack(
        body[_SNAP_COUNT.size :]
    ):
        entry = ProducerEntry(pid, epoch)
        entry.coordinator_epoch = coord
        entry.last_timestamp = ts
        entry.current_txn_first_offset = txn if txn >= 0 else NO_OFFSET
        if expired is not None and expired(entry):
            continue
        manager.producers[pid] = entry
        if txn >= 0:
            txns.append((txn, pid))
        if last_offset >= 0 and last_seq >= 0:
            first_seq = last_seq - delta
            if first_seq < 0:
                first_seq += INT32_MAX + 1
            meta = BatchMetadata(first_seq, last_seq, last_offset - delta, last_offset)
            entry.batches.append(meta)
    manager.ongoing = dict(sorted(txns))
    return manager


EMPTY_SNAPSHOT = encode_snapshot(ProducerStateManager())


def write_snapshot(
    directory: Path, offset: int, data: bytes, vfs: VFS = DEFAULT_VFS, *, sync: bool = True
) -> Path:
    """Write ``<offset>.snapshot`` holding ``data`` (:func:`encode_snapshot`); older snapshots
    stay (each is where recovery of the segment starting there begins). ``sync``: atomically
    and durably (tmp, fsync, rename, directory fsync: a clean close). Without: written in
    place and not synced, as Kafka's ``takeSnapshot(false)`` at a roll -- the log's next
    flush fsyncs it; a torn one fails its CRC and is ignored."""
    path = snapshot_path(directory, offset)
    if sync:
        atomic_write(path, data, vfs)
        return path
    file = vfs.open(path, truncate=True)
    try:
        file.pwrite(data, 0)
    except BaseException:  # a full disk: no torn file left for a later roll to take as written
        file.close()
        vfs.remove(path)
        raise
    file.close()
    return path


def load_latest_snapshot(
    directory: Path,
    log_end_offset: int,
    vfs: VFS = DEFAULT_VFS,
    expired: Callable[[ProducerEntry], bool] | None = None,
) -> tuple[int, ProducerStateManager] | None:
    """The newest usable snapshot at or below ``log_end_offset``: ``(offset, state)``, without
    the producers for which ``expired`` is true (:func:`decode_snapshot`).

    Snapshots above the log end offset (the log was truncated after them) and corrupt ones
    (a torn write: the CRC fails) are deleted; None when nothing usable is left (the caller
    rebuilds from the log)."""
    for offset, path in reversed(snapshot_files(directory, vfs)):
        if offset > log_end_offset:
            vfs.remove(path)
            continue
        try:
            return offset, decode_snapshot(read_file(path, vfs), expired)
        except (OSError, CorruptSnapshotError):
            vfs.remove(path)
    return None


def delete_snapshots_above(directory: Path, offset: int, vfs: VFS = DEFAULT_VFS) -> None:
    """Truncation: snapshots describing offsets past ``offset`` no longer match the log."""
    for snap_offset, path in snapshot_files(directory, vfs):
        if snap_offset > offset:
            vfs.remove(path)


def delete_snapshots_below(directory: Path, offset: int, vfs: VFS = DEFAULT_VFS) -> None:
    """Retention: the snapshots of segments wholly below the new first segment ``offset``
    go with them (Kafka keeps snapshots only from the log's first segment on)."""
    for snap_offset, path in snapshot_files(directory, vfs):
        if snap_offset >= offset:
            break
        vfs.remove(path)


def remove_stray_snapshots(
    directory: Path, names: Iterable[str], bases: Sequence[int], vfs: VFS = DEFAULT_VFS
) -> list[int]:
    """Kafka's ``removeStraySnapshots`` at load: a snapshot not at a segment's base offset is
    stray (its segment went, or a clean close wrote it at LEO) and is removed, except the
    newest stray one when it lies above the last segment's base (the clean-shutdown one).
    ``names`` is the directory listing; returns the offsets of the snapshots kept, oldest
    first."""
    at_bases = set(bases)
    kept: list[int] = []
    stray: tuple[int, Path] | None = None
    for offset, path in snapshots_in(directory, names):
        if offset in at_bases:
            kept.append(offset)
            continue
        if stray is not None:
            vfs.remove(stray[1])
        stray = (offset, path)
    if stray is not None:
        if bases and stray[0] > bases[-1]:
            kept.append(stray[0])
        else:
            vfs.remove(stray[1])
    return sorted(kept)
