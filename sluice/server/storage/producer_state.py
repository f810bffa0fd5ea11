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
  zombie); a higher epoch must start again at sequence 0; an unknown producer id must start
  at sequence 0 too (else OUT_OF_ORDER_SEQUENCE_NUMBER).

**Derived state**: the log is authoritative. :meth:`ProducerStateManager.rebuild` replays the
batch headers (61 bytes each, no record decoding) of a partition; the Log builds its manager
lazily, on the first batch that carries a producer id, so opening a partition that only gets
non-idempotent writes costs nothing. A clean close writes Kafka's ``<offset>.snapshot`` file
(see below); the next build starts from the newest snapshot at or below the log end offset and
replays only the headers after it, and producers whose batches retention has deleted since are
still known. Without a usable snapshot, a producer whose batches have all been removed is
unknown (its next batch, with a sequence > 0, gets OUT_OF_ORDER_SEQUENCE_NUMBER and the client
resets its producer id).

**Concurrency**: only the partition's append path calls :meth:`check` and :meth:`update`
(event-loop thread), in that order for one append, with nothing in between.
"""

from __future__ import annotations

import struct
import time
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from sluice.protocol.errors import (
    DuplicateSequenceNumber,
    InvalidProducerEpoch,
    OutOfOrderSequenceNumber,
)
from sluice.protocol.records import BatchHeader
from sluice.server.storage.layout import SNAPSHOT_SUFFIX, offset_file_name, parse_offset_file_name
from sluice.server.storage.vfs import DEFAULT_VFS, VFS, atomic_write, read_file

BATCHES_TO_RETAIN = 5
INT32_MAX = 0x7FFFFFFF
NO_SEQUENCE = -1


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
    """The state of one producer id: current epoch, last batches (oldest first)."""

    __slots__ = ("batches", "epoch", "producer_id")

    def __init__(self, producer_id: int, epoch: int) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=BATCHES_TO_RETAIN)

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

    @classmethod
    def rebuild(cls, headers: Iterable[BatchHeader]) -> ProducerStateManager:
        """Replay the headers of every batch in the log, in offset order."""
        return cls().replay(headers)

    def replay(self, headers: Iterable[BatchHeader]) -> ProducerStateManager:
        """Apply batches already in the log (after a snapshot), in offset order; returns self."""
        for header in headers:
            if header.producer_id >= 0 and header.base_sequence >= 0:
                self._record(header, header.base_offset)
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
            if pid < 0 or header.base_sequence < 0:
                continue
            epoch, first, last = header.producer_epoch, header.base_sequence, last_sequence(header)
            entry = self.producers.get(pid)
            if pid in pending:
                cur_epoch, cur_last = pending[pid]
            elif entry is not None:
                cur_epoch, cur_last = entry.epoch, entry.last_seq
                dup = entry.find_duplicate(epoch, first, last)
                if dup is not None:
                    return dup
            else:
                cur_epoch, cur_last = -1, NO_SEQUENCE
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

    def update(self, header: BatchHeader, first_offset: int) -> None:
        """Record a batch just appended at ``first_offset`` (after :meth:`check` passed)."""
        if header.producer_id >= 0 and header.base_sequence >= 0:
            self._record(header, first_offset)

    def _record(self, header: BatchHeader, first_offset: int) -> None:
        pid = header.producer_id
        entry = self.producers.get(pid)
        if entry is None or entry.epoch != header.producer_epoch:
            entry = self.producers[pid] = ProducerEntry(pid, header.producer_epoch)
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                last_sequence(header),
                first_offset,
                first_offset + header.last_offset_delta,
            )
        )


# --- snapshot files (Kafka's ``<offset>.snapshot``, version 1) ---------------------------------
#
# Layout (big-endian): version int16 (1) | crc uint32 (CRC32C of everything after it) |
# producer_entries: int32 count, then per producer: producer_id int64, epoch int16,
# last_sequence int32, last_offset int64, offset_delta int32 (last - first offset of the last
# batch), timestamp int64, coordinator_epoch int32 (-1), current_txn_first_offset int64 (-1).
# The file is named by the log end offset it describes. Like Kafka's, a snapshot keeps only the
# last batch of each producer, so after a restart only that batch is recognised as a duplicate
# (a retry of an older one gets DUPLICATE_SEQUENCE_NUMBER, which clients treat as written).
# ``timestamp`` is the time the snapshot was taken (Sluice does not expire producer ids).

SNAPSHOT_VERSION = 1
_SNAP_HEADER = struct.Struct(">hI")
_SNAP_COUNT = struct.Struct(">i")
_SNAP_ENTRY = struct.Struct(">qhiqiqiq")


class CorruptSnapshotError(Exception):
    """A snapshot file that does not parse or whose CRC does not match (it is ignored)."""


def snapshot_files(directory: Path, vfs: VFS = DEFAULT_VFS) -> list[tuple[int, Path]]:
    """``(offset, path)`` of every snapshot file in a partition directory, oldest first."""
    found = []
    for name in vfs.listdir(directory):
        offset = parse_offset_file_name(name, SNAPSHOT_SUFFIX)
        if offset is not None:
            found.append((offset, directory / name))
    return sorted(found)


def encode_snapshot(manager: ProducerStateManager, timestamp: int) -> bytes:
    entries = []
    for e in manager.producers.values():
        if e.batches:
            last = e.batches[-1]
            delta = last.last_offset - last.first_offset
            fields = (e.producer_id, e.epoch, last.last_seq, last.last_offset, delta, timestamp)
            entries.append(_SNAP_ENTRY.pack(*fields, -1, -1))
    body = _SNAP_COUNT.pack(len(entries)) + b"".join(entries)
    return _SNAP_HEADER.pack(SNAPSHOT_VERSION, crc32c(body)) + body


def decode_snapshot(data: bytes) -> ProducerStateManager:
    """Raises :class:`CorruptSnapshotError` for anything but a well-formed version 1 file."""
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
    for pid, epoch, last_seq, last_offset, delta, _ts, _ce, _txn in _SNAP_ENTRY.iter_unpack(
        body[_SNAP_COUNT.size :]
    ):
        entry = manager.producers[pid] = ProducerEntry(pid, epoch)
        first_seq = last_seq - delta if last_seq - delta >= 0 else last_seq - delta + INT32_MAX + 1
        entry.batches.append(BatchMetadata(first_seq, last_seq, last_offset - delta, last_offset))
    return manager


def write_snapshot(
    directory: Path, offset: int, manager: ProducerStateManager, vfs: VFS = DEFAULT_VFS
) -> Path:
    """Write ``<offset>.snapshot`` atomically (tmp, fsync, rename, directory fsync), then
    remove older ones: the new one is durable before any fallback disappears."""
    path = directory / offset_file_name(offset, SNAPSHOT_SUFFIX)
    atomic_write(path, encode_snapshot(manager, int(time.time() * 1000)), vfs)
    for other_offset, other in snapshot_files(directory, vfs):
        if other_offset != offset:
            vfs.remove(other)
    return path


def load_latest_snapshot(
    directory: Path, log_end_offset: int, vfs: VFS = DEFAULT_VFS
) -> tuple[int, ProducerStateManager] | None:
    """The newest usable snapshot at or below ``log_end_offset``: ``(offset, state)``.

    Snapshots above the log end offset (the log was truncated after them) and corrupt ones
    (a torn write: the CRC fails) are deleted; None when nothing usable is left (the caller
    rebuilds from the log)."""
    for offset, path in reversed(snapshot_files(directory, vfs)):
        if offset > log_end_offset:
            vfs.remove(path)
            continue
        try:
            return offset, decode_snapshot(read_file(path, vfs))
        except (OSError, CorruptSnapshotError):
            vfs.remove(path)
    return None


def delete_snapshots_above(directory: Path, offset: int, vfs: VFS = DEFAULT_VFS) -> None:
    """Truncation: snapshots describing offsets past ``offset`` no longer match the log."""
    for snap_offset, path in snapshot_files(directory, vfs):
        if snap_offset > offset:
            vfs.remove(path)
