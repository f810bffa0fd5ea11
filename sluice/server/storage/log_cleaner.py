"""Log compaction: Kafka's log cleaner, on Kafka's own segment files.

A log with ``cleanup.policy`` holding ``compact`` keeps, for every key, at least its last
record: the cleaner rewrites the segments below the *dirty* section's end, dropping every record
a later record of the same key supersedes, and tombstones (a key with a null value) once they
have been kept ``delete.retention.ms``. Offsets and timestamps of the records kept do not
change, so a compacted log has offset gaps; every reader already takes a batch whose offsets
are not contiguous (Kafka's clients skip them too).

**Sections of a log** (Kafka's ``LogCleaner`` class docstring)::

    | clean (cleaned before)   | dirty (cleanable)                 | uncleanable       |
    log start        first dirty offset             first uncleanable offset     LEO

The first dirty offset is the log's entry in the data dir's ``cleaner-offset-checkpoint``
(the log start offset when there is none, or when it is out of range). The first uncleanable
offset is the base offset of the segment holding the smallest of: the active segment's base
(never cleaned), the last stable offset (the high watermark, or below it the first offset of an
open transaction: uncommitted records may still be truncated and an open transaction may still
abort, so neither may supersede another record yet; Kafka's ``cleanableOffsets``) and, with
``min.compaction.lag.ms``, the first segment holding a record younger than the lag. Bounded at
a segment boundary, as Kafka's ``calculateCleanableBytes`` does.

**Choosing a log** (:meth:`LogCleaner.grab_filthiest_log`, Kafka's
``LogCleanerManager.grabFilthiestCompactedLog``): among the compacted logs not being cleaned,
the one with the largest dirty ratio (cleanable bytes / (clean + cleanable bytes)) whose ratio
is above ``min.cleanable.dirty.ratio``, or that has held a dirty record longer than
``max.compaction.lag.ms`` (the first batch of a dirty segment older than the lag).

**One cleaning** (:class:`Cleaner`, Kafka's ``Cleaner.doClean``), three phases:

1. *plan*, on the event loop (:func:`plan_cleaning`): the segments below the first
   uncleanable offset (paths and sizes: the thread reads each through a descriptor of its
   own, as the open-file cache may close the segment's), the last offset of every
   idempotent producer (the epoch of those with only markers), every ``.txnindex`` entry of
   the log, the log's truncation count.
2. *write*, CPU- and I/O-heavy, in a thread (:meth:`Cleaner.write_cleaned`): build the offset
   map of the dirty section (:class:`OffsetMap`: key hash -> last offset, Kafka's
   ``SkimpyOffsetMap``, MD5 of the key, at most ``dedupe buffer / 24 * load factor`` keys: when
   the dirty section has more, the map covers a prefix, the checkpoint moves only that far, and
   the next cleaning continues from there); group the segments below the map's end
   (:func:`group_segments_by_size`, Kafka's ``groupSegmentsBySize``: consecutive segments
   whose data and indexes fit one segment's bounds and whose offsets fit int32 relative
   offsets); write each group's retained batches (:func:`clean_batch`) as one segment
   ``<base>.log.cleaned`` (+ indexes, + ``<base>.txnindex.cleaned`` when it keeps an ABORT
   marker whose entry stays), fsynced. Throttled by
   ``log.cleaner.io.max.bytes.per.second`` (reads and writes together, Kafka's ``Throttler``).
3. *swap*, on the event loop (:meth:`sluice.server.storage.log.Log.replace_segments`, Kafka's
   ``LocalLog.replaceSegments``): for each group in order: rename the cleaned files
   ``.cleaned`` -> ``.swap`` (the ``.log`` first, the ``.txnindex`` last); rename the
   replaced segments to ``.deleted`` (removed
   ``file.delete.delay.ms`` later: fetches in flight finish); rename ``.swap`` -> the segment's
   name. If the log changed under the cleaning (truncated, a replaced segment deleted by
   retention or DeleteRecords, closed), the rest is discarded: cleaning is never required for
   correctness. Then the directory is fsynced (in the thread) and only then does the
   checkpoint move to the map's end: were the swap lost to a power loss after the checkpoint
   moved, superseded records would come back in a section the next cleaning takes for clean,
   and outlive the tombstone that deleted their key.

**Crash safety** (kill -9 at any step): ``.cleaned`` files are never valid on their own and
load removes them (phase 2 or the first rename lost = the old segments stand). A
``<base>.log.swap`` is complete and fsynced: load deletes every segment whose base offset lies
in its offset range, then renames it into place (``Log.open`` step 1, Kafka's ``LogLoader``),
so a crash between the renames of phase 3 ends with either the old segments or the cleaned one,
never both; its indexes are rebuilt, its ``.txnindex`` (``.swap``, or still ``.cleaned``) is
renamed with it, and a ``.txnindex.swap`` whose ``.log`` was renamed already follows it. A
lost checkpoint write only means the next cleaning repeats work (cleaning is idempotent).

**Which records stay** (:func:`clean_batch`, Kafka's ``cleanInto`` and ``MemoryRecords.filterTo``):

* a record whose offset is beyond the map's end (not yet mapped): kept;
* a record without a key (written before the topic became compacted): removed;
* otherwise kept iff no later record of its key is mapped, and it has a value or is a tombstone
  still inside its batch's delete horizon. A batch holding a kept tombstone and no horizon yet is
  rewritten with the horizon ``now + delete.retention.ms`` (KIP-534: the attribute bit and the
  base timestamp); a later cleaning after the horizon removes the tombstone.

Per batch: all records kept and no horizon to set -> the original bytes; some kept -> the batch
rebuilt from them (:func:`sluice.protocol.records.retained_batch`: offsets, last offset delta,
timestamps, codec, producer fields kept, CRC recomputed); none kept -> the batch is dropped,
except the last batch of an idempotent producer (so its sequence and epoch survive a restart
that rebuilds producer state from the batch headers; for a producer whose current epoch wrote
only markers, its control batches of that epoch) and the last batch before the first
uncleanable offset (so the offset it ended at survives), kept as an empty batch (Kafka's
``RETAIN_EMPTY``, :func:`is_last_batch_of_producer`).

**Transactions** (KIP-98; Kafka's ``CleanedTransactionMetadata``, see
:class:`CleanedTransactionMetadata`): the map and the rewrite each walk the batches in offset
order knowing, from the ``.txnindex`` entries, which transactions were aborted:

* a batch of an aborted transaction never enters the offset map (an aborted value does not
  supersede a committed one) and none of its records stays (an empty batch if it is its
  producer's last); every transaction below the first uncleanable offset is decided (the LSO
  bounds the dirty section), so any other transactional batch is committed data, cleaned as
  any record;
* a marker (control batch) stays while its transaction still has a batch the walk meets; an
  ABORT marker that stays takes its ``.txnindex`` entry (the original: first offset, marker,
  LSO) into the cleaned segment's index. A marker whose transaction has nothing left gets the
  delete horizon ``now + delete.retention.ms`` (KIP-534, as a tombstone's batch) and a
  cleaning after it removes it. So a reader that fetched the data in time meets its marker,
  and a producer state replayed from the cleaned log never sees a transaction without its
  end: the live producer state and its snapshots stay valid through a swap.

**Concurrency**: :class:`LogCleaner` lives on the event loop; only phase 2 runs in a thread, and
it touches no object of the log: its own descriptors (one segment file at a time), the new
``.cleaned`` files, nothing else.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import heapq
import math
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import structlog

from sluice.protocol import records as rec
from sluice.protocol.errors import CorruptRecordError
from sluice.server.storage.checkpoint import CorruptCheckpointError, OffsetCheckpointFile
from sluice.server.storage.layout import (
    CLEANED_SUFFIX,
    CLEANER_OFFSET_CHECKPOINT,
    TXN_INDEX_SUFFIX,
    offset_file_name,
)
from sluice.server.storage.log_config import CleanerConfig, LogConfig
from sluice.server.storage.segment import LogSegment
from sluice.server.storage.txn_index import AbortedTxn, TransactionIndex
from sluice.server.storage.vfs import DEFAULT_VFS, VFS, VFSFile

if TYPE_CHECKING:
    from sluice.server.storage.log import Log

logger = structlog.get_logger("sluice.storage.cleaner")

#: Bytes one key takes in Kafka's ``SkimpyOffsetMap``: a 16-byte MD5 and an 8-byte offset.
OFFSET_MAP_ENTRY_BYTES = 16 + 8
_I32 = struct.Struct(">i")
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


class CleaningAbortedError(Exception):
    """The log changed under a cleaning (or the cleaner stops): its output is discarded."""


class OffsetMap:
    """Key -> offset of its last record in the mapped section (Kafka's ``SkimpyOffsetMap``).

    Keys are stored as their MD5 digest, as Kafka does: a hash collision would let one key's
    later record remove another key's record, which at 2^-128 per pair is not a practical
    concern (Kafka makes the same trade). ``slots`` = memory / 24 bytes (digest + offset);
    the cleaner fills it to ``slots * load factor`` at most. A dict rather than Kafka's probed
    array: the bound is the same, Python's dict is the fast hash table here.
    """

    __slots__ = ("_map", "latest_offset", "slots")

    def __init__(self, memory: int) -> None:
        self.slots = max(0, memory) // OFFSET_MAP_ENTRY_BYTES
        self._map: dict[bytes, int] = {}
        #: The last offset the map covers (every record at or below it was considered).
        self.latest_offset = -1

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1

    def put(self, key: bytes, offset: int) -> None:
        self._map[hashlib.md5(key, usedforsecurity=False).digest()] = offset
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The last offset of ``key`` in the map, or -1."""
        return self._map.get(hashlib.md5(key, usedforsecurity=False).digest(), -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    @property
    def size(self) -> int:
        return len(self._map)

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots if self.slots else 0.0


class Throttler:
    """Keeps the average rate of ``maybe_throttle``'s bytes under ``rate`` per second by
    sleeping (Kafka's ``Throttler``: measured over windows of ``check_interval`` seconds).
    Only the cleaner's thread calls it."""

    def __init__(
        self,
        rate: float,
        *,
        check_interval: float = 0.3,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate = rate
        self._check_interval = check_interval
        self._clock = clock
        self._sleep = sleep
        self._period_start = clock()
        self._observed = 0.0
        #: Seconds slept so far (a metric).
        self.slept = 0.0

    def maybe_throttle(self, observed: int) -> None:
        if not math.isfinite(self.rate) or self.rate >= 1e300:
            return
        self._observed += observed
        elapsed = self._clock() - self._period_start
        if elapsed < self._check_interval and self._observed < self.rate * self._check_interval:
            return
        needed = self._observed / self.rate
        if needed > elapsed:
            self._sleep(needed - elapsed)
            self.slept += needed - elapsed
        self._period_start = self._clock()
        self._observed = 0.0


@dataclass
class CleanerStats:
    """What one cleaning did (Kafka's ``CleanerStats``): the log line and the metrics."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_written: int = 0
    map_bytes_read: int = 0
    map_records_read: int = 0
    invalid_records: int = 0
    map_utilization: float = 0.0
    started: float = field(default_factory=time.monotonic)
    map_done: float = 0.0
    finished: float = 0.0

    @property
    def elapsed(self) -> float:
        return max(self.finished - self.started, 0.0)


class SourceSegment(NamedTuple):
    """A segment as the cleaning's thread sees it: facts noted on the event loop. The thread
    reads the ``.log`` through a descriptor of its own, one segment at a time (the open-file
    cache may close the segment's, a plan holding one per segment could exhaust them)."""

    base_offset: int
    #: The next segment's base offset (or the first uncleanable offset for the last one):
    #: this segment's offsets lie below it.
    end_offset: int
    size: int
    index_bytes: int
    time_index_bytes: int
    last_modified_ms: int
    path: Path
    segment: LogSegment  # the log's object: only the swap (on the loop) uses it


@dataclass
class CleaningPlan:
    """Phase 1's output (:func:`plan_cleaning`): what the thread needs, and what the swap
    checks the log against."""

    log: Log
    first_dirty: int
    first_uncleanable: int
    segments: list[SourceSegment]
    #: producer id -> last offset of its last batch (Kafka's ``lastRecordsOfActiveProducers``)
    producer_last_offsets: dict[int, int]
    #: producer id -> epoch, for the producers with no batch of the current epoch (only
    #: markers: Kafka's ``LastRecord`` without a last data offset): their control batches of
    #: that epoch stay, so the epoch survives a rebuild of the producer state from the log
    producer_marker_epochs: dict[int, int]
    #: every ``.txnindex`` entry of the log (Kafka's ``collectAbortedTransactions``, noted on
    #: the event loop: the thread reads no index of the log)
    aborted: list[AbortedTxn]
    truncations: int
    config: LogConfig
    now_ms: int
    directory: Path
    vfs: VFS


class CleanedGroup(NamedTuple):
    """One written ``<base>.log.cleaned`` and the segments it replaces."""

    base_offset: int
    sources: list[SourceSegment]
    size: int


@dataclass
class CleaningResult:
    """Phase 2's output: the cleaned groups to swap in, and the new first dirty offset."""

    plan: CleaningPlan
    end_offset: int
    groups: list[CleanedGroup]
    stats: CleanerStats


class LogToClean(NamedTuple):
    """A compacted log's cleanable range and how dirty it is (Kafka's ``LogToClean``)."""

    log: Log
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool
    force_checkpoint: bool
    #: How long past ``max.compaction.lag.ms`` its oldest dirty record is (Kafka's
    #: ``maxCompactionDelay``; 0: not overdue).
    compaction_delay_ms: int = 0

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


# ------------------------------------------------------------------ choosing what to clean


def _floor_index(bases: Sequence[int], offset: int) -> int:
    """Index of the segment holding ``offset`` (the last base at or below it; 0 if none)."""
    return max(bisect.bisect_right(bases, offset) - 1, 0)


def log_to_clean(log: Log, checkpoint: int | None, now_ms: int) -> LogToClean:
    """The cleanable range of ``log`` given its checkpointed first dirty offset (Kafka's
    ``cleanableOffsets``, ``calculateCleanableBytes`` and ``maxCompactionDelay``). Call on the
    event loop."""
    config = log.config
    segments = log.segments
    bases = [s.base_offset for s in segments]
    start, leo = log.log_start_offset, log.log_end_offset
    first_dirty = start if checkpoint is None else checkpoint
    force = False
    if first_dirty < start or first_dirty > leo:
        if checkpoint is not None and not (config.delete and first_dirty < start):
            logger.warning(
                "resetting the first dirty offset to the log start offset",
                topic=log.topic,
                partition=log.partition,
                checkpoint=first_dirty,
                log_start_offset=start,
                log_end_offset=leo,
            )
        first_dirty, force = start, True
    active = segments[-1]
    bound = min(log.last_stable_offset, active.base_offset)
    inactive_dirty = segments[_floor_index(bases, first_dirty) : -1]
    if config.min_compaction_lag_ms > 0:
        horizon = now_ms - config.min_compaction_lag_ms
        for segment in inactive_dirty:
            if segment.largest_timestamp > horizon:
                bound = min(bound, segment.base_offset)
                break
    bound = max(first_dirty, bound)
    # Round down to the base of the segment holding it: cleaning ends at a segment boundary.
    first_uncleanable = bases[_floor_index(bases, bound)] if bound < active.base_offset else bound
    first_uncleanable = min(first_uncleanable, active.base_offset)
    clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
    lo = bases[_floor_index(bases, min(first_dirty, first_uncleanable))]
    cleanable_bytes = sum(
        s.size for s in segments if lo <= s.base_offset < first_uncleanable and s is not active
    )
    delay_ms = 0
    if config.max_compaction_lag_ms < 2**63 - 1:
        timestamps = [t for t in (s.first_batch_timestamp() for s in inactive_dirty) if t > 0]
        clean_until = now_ms - config.max_compaction_lag_ms
        if timestamps and min(timestamps) < clean_until:
            delay_ms = clean_until - min(timestamps)
    return LogToClean(
        log,
        first_dirty,
        first_uncleanable,
        clean_bytes,
        cleanable_bytes,
        delay_ms > 0,
        force,
        delay_ms,
    )


# ------------------------------------------------------------------ phase 1: plan


def plan_cleaning(log: Log, first_dirty: int, first_uncleanable: int, now_ms: int) -> CleaningPlan:
    """Note what the thread needs (see the module docstring, phase 1). On the event loop."""
    segments = log.segments
    vfs = log.vfs
    sources: list[SourceSegment] = []
    for i, segment in enumerate(segments[:-1]):
        if segment.base_offset >= first_uncleanable:
            break
        end = min(segments[i + 1].base_offset, first_uncleanable)
        index_bytes, time_index_bytes = _index_sizes(segment)
        sources.append(
            SourceSegment(
                segment.base_offset,
                end,
                segment.size,
                index_bytes,
                time_index_bytes,
                segment.last_modified_ms,
                segment.log_path,
                segment,
            )
        )
    producers = log.producer_state().producers
    last_offsets = {pid: e.batches[-1].last_offset for pid, e in producers.items() if e.batches}
    marker_epochs = {pid: e.epoch for pid, e in producers.items() if not e.batches}
    return CleaningPlan(
        log=log,
        first_dirty=first_dirty,
        first_uncleanable=first_uncleanable,
        segments=sources,
        producer_last_offsets=last_offsets,
        producer_marker_epochs=marker_epochs,
        aborted=[entry for segment in segments for entry in segment.txn_index],
        truncations=log.truncation_count,
        config=log.config,
        now_ms=now_ms,
        directory=log.directory,
        vfs=vfs,
    )


def _index_sizes(segment: LogSegment) -> tuple[int, int]:
    """Bytes of the offset and time index of an inactive segment (trimmed: its entries),
    without reopening a segment whose files the open-file cache closed."""
    if segment.files_open:
        return segment.offset_index.entries * 8, segment.time_index.entries * 12
    sizes = []
    for path in (segment.index_path, segment.time_index_path):
        try:
            sizes.append(path.stat().st_size)
        except FileNotFoundError:
            sizes.append(0)
    return sizes[0], sizes[1]


# ------------------------------------------------------------------ phase 2: write


def read_batches(
    vfs: VFS, path: Path, size: int, buffer_size: int, throttler: Throttler | None = None
) -> Iterator[tuple[int, memoryview]]:
    """``(position, batch)`` of every whole batch in the first ``size`` bytes of the segment
    file ``path``, read through a descriptor of its own ``buffer_size`` bytes at a time (a
    bigger batch is read whole). The log changed under the cleaner (the file renamed away by
    retention: CleaningAbortedError; a length that does not fit: CorruptRecordError): the
    cleaning is discarded."""
    try:
        file = vfs.open(path, create=False, writable=False)
    except FileNotFoundError:
        raise CleaningAbortedError(f"{path} was deleted during the cleaning") from None
    try:
        yield from _read_batches(file, size, buffer_size, throttler)
    finally:
        file.close()


def _read_batches(
    file: VFSFile, size: int, buffer_size: int, throttler: Throttler | None
) -> Iterator[tuple[int, memoryview]]:
    position = 0
    buffer_size = max(buffer_size, rec.HEADER_SIZE)
    while position < size:
        chunk = file.pread(min(buffer_size, size - position), position)
        if throttler is not None:
            throttler.maybe_throttle(len(chunk))
        view = memoryview(chunk)
        offset = 0
        while len(view) - offset >= rec.LOG_OVERHEAD:
            total = _I32.unpack_from(view, offset + rec.LENGTH_OFFSET)[0] + rec.LOG_OVERHEAD
            if total < rec.HEADER_SIZE or position + offset + total > size:
                raise CorruptRecordError(
                    f"batch of {total} bytes at byte {position + offset} does not fit the "
                    f"segment ({size} bytes)",
                    field="batchLength",
                    position=position + offset,
                )
            if offset + total > len(view):
                break
            yield position + offset, view[offset : offset + total]
            offset += total
        if offset == 0:  # a batch larger than the buffer: read it whole
            (length,) = _I32.unpack_from(view, rec.LENGTH_OFFSET)
            whole = file.pread(length + rec.LOG_OVERHEAD, position)
            if throttler is not None:
                throttler.maybe_throttle(len(whole))
            yield position, memoryview(whole)
            offset = len(whole)
        position += offset


def group_segments_by_size(
    segments: Sequence[SourceSegment], max_size: int, max_index_size: int, first_uncleanable: int
) -> list[list[SourceSegment]]:
    """Consecutive segments merged into one cleaned segment each (Kafka's
    ``groupSegmentsBySize``): a group's log bytes stay within ``max_size``
    (``segment.bytes``), its offset-index and time-index bytes each within ``max_index_size``
    (``segment.index.bytes``), and its offsets within int32 of its base offset (the next
    segment's end is estimated by the segment after it, or by the first uncleanable offset),
    so that cleaning does not leave a log of ever smaller segments."""
    groups: list[list[SourceSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size = segments[i].size
        index_size = segments[i].index_bytes
        time_index_size = segments[i].time_index_bytes
        i += 1
        while i < len(segments):
            nxt = segments[i]
            last_offset = (
                segments[i + 1].base_offset - 1 if i + 1 < len(segments) else first_uncleanable - 1
            )
            if not (
                log_size + nxt.size <= max_size
                and index_size + nxt.index_bytes <= max_index_size
                and time_index_size + nxt.time_index_bytes <= max_index_size
                and (nxt.size == 0 or last_offset - group[0].base_offset <= _INT32_MAX)
            ):
                break
            group.append(nxt)
            log_size += nxt.size
            index_size += nxt.index_bytes
            time_index_size += nxt.time_index_bytes
            i += 1
        groups.append(group)
    return groups


class _AbortedTxnState:
    """An aborted transaction the walk is inside of, and whether it met a batch of it."""

    __slots__ = ("observed", "txn")

    def __init__(self, txn: AbortedTxn) -> None:
        self.txn = txn
        self.observed = False


class CleanedTransactionMetadata:
    """The transactions a walk over the log in offset order is inside of (Kafka's
    ``CleanedTransactionMetadata``): which data batches belong to an aborted transaction,
    which markers may go, and the ``.txnindex`` entries the cleaned segment keeps.

    Built from ``.txnindex`` entries whose ABORT marker is at or after the walk's first
    offset (earlier ones would open a transaction whose marker the walk never meets). An
    entry becomes *ongoing* for its producer at the first batch reaching its first offset;
    a transactional batch of that producer is then aborted, until the ABORT marker. Any other
    transactional batch belongs to a committed transaction (the LSO bounds the cleaning: no
    transaction below it is open).

    Markers: an ABORT marker stays while the walk met data of its transaction (that data
    goes in this same walk: the next walk finds none), and then its entry goes to
    :attr:`cleaned_index`; a COMMIT marker stays while the walk met data of its
    transaction. Otherwise the marker is *discardable*: it stays until the KIP-534 delete
    horizon the first such cleaning stamps on it (``delete.retention.ms`` later, so a
    consumer that read the data has time to read the marker), and a cleaning after that
    removes it. A marker never goes before the data of its transaction, so a producer state
    rebuilt from the cleaned log never sees a transaction without its end.
    """

    __slots__ = ("_aborted", "_ongoing_aborted", "_ongoing_committed", "cleaned_index")

    def __init__(self, aborted: Iterable[AbortedTxn], from_offset: int) -> None:
        self._aborted = [
            (t.first_offset, t.last_offset, t) for t in aborted if t.last_offset >= from_offset
        ]
        heapq.heapify(self._aborted)
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, _AbortedTxnState] = {}
        #: The ``.txnindex`` of the cleaned segment being written (None: building the map).
        self.cleaned_index: TransactionIndex | None = None

    def _consume_aborted_up_to(self, offset: int) -> None:
        heap = self._aborted
        while heap and heap[0][0] <= offset:
            txn = heapq.heappop(heap)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, _AbortedTxnState(txn))

    def on_control_batch(self, header: rec.BatchHeader, records: Sequence[rec.Record]) -> bool:
        """A control batch the walk reached; returns whether it is discardable."""
        self._consume_aborted_up_to(header.last_offset)
        if not records:
            return True  # an empty control batch: its transaction was cleaned away already
        control_type = rec.parse_control_key(records[0].key)
        pid = header.producer_id
        if control_type == rec.CONTROL_TYPE_ABORT:
            state = self._ongoing_aborted.pop(pid, None)
            if state is not None and state.observed:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(state.txn)
                return False
            return True
        if control_type == rec.CONTROL_TYPE_COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False  # a control type this version does not know: kept

    def on_data_batch(self, header: rec.BatchHeader) -> bool:
        """A data batch the walk reached; returns whether it belongs to an aborted
        transaction (then none of its records stays, and none goes into the offset map)."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        state = self._ongoing_aborted.get(header.producer_id)
        if state is not None:
            state.observed = True
            return True
        self._ongoing_committed.add(header.producer_id)
        return False


def delete_horizon(now_ms: int, delete_retention_ms: int) -> int:
    """The KIP-534 horizon a cleaning stamps: ``now + delete.retention.ms``, at most the int64
    maximum (``delete.retention.ms`` may be Long.MAX_VALUE: keep deletes and markers forever;
    Java's sum would wrap negative and remove them at once)."""
    return min(now_ms + delete_retention_ms, _INT64_MAX)


def clean_batch(
    header: rec.BatchHeader,
    batch: memoryview,
    offset_map: OffsetMap,
    *,
    now_ms: int,
    delete_retention_ms: int,
    retain_empty: bool,
    stats: CleanerStats,
    txn: CleanedTransactionMetadata,
) -> bytes | memoryview | None:
    """What the cleaned segment holds of one batch (see the module docstring): the original
    bytes, a rebuilt batch, an empty batch (``retain_empty``: a producer's last batch or the
    cleaning's last) or None (dropped). ``txn`` is told of every batch, in offset order."""
    stats.bytes_read += len(batch)
    if header.is_control:
        return _clean_control_batch(
            header, batch, now_ms, delete_retention_ms, retain_empty, stats, txn
        )
    if txn.on_data_batch(header):  # aborted: no record stays
        stats.records_read += header.record_count
        return rec.empty_batch(header) if retain_empty else None
    records = rec.decode_batch(batch).records
    stats.records_read += len(records)
    horizon = rec.delete_horizon_ms(header)
    retain_deletes = horizon is None or now_ms < horizon
    latest = offset_map.latest_offset
    kept: list[rec.Record] = []
    tombstones = False
    for record in records:
        if record.offset > latest:
            keep = True
        elif record.key is None:
            stats.invalid_records += 1
            keep = False
        else:
            keep = record.offset >= offset_map.get(record.key) and (
                record.value is not None or retain_deletes
            )
        if keep:
            kept.append(record)
            if record.value is None:
                tombstones = True
    stats.records_written += len(kept)
    if not kept:
        return rec.empty_batch(header) if retain_empty else None
    set_horizon = tombstones and horizon is None
    if len(kept) == len(records) and not set_horizon:
        return batch
    new_horizon = delete_horizon(now_ms, delete_retention_ms) if set_horizon else horizon
    return rec.retained_batch(header, kept, delete_horizon_ms=new_horizon)


def _clean_control_batch(
    header: rec.BatchHeader,
    batch: memoryview,
    now_ms: int,
    delete_retention_ms: int,
    retain_empty: bool,
    stats: CleanerStats,
    txn: CleanedTransactionMetadata,
) -> bytes | memoryview | None:
    """A transaction marker (Kafka's ``checkBatchRetention`` for control batches): kept as
    it is while not discardable (:class:`CleanedTransactionMetadata`); discardable, it is
    stamped with the delete horizon ``now + delete.retention.ms`` the first time (KIP-534,
    the bit tombstones use) and removed by a cleaning past it -- left as an empty batch if it
    is its producer's last (the epoch it carries) or the cleaning's last batch."""
    records = rec.decode_batch(batch).records
    stats.records_read += len(records)
    discardable = txn.on_control_batch(header, records)
    horizon = rec.delete_horizon_ms(header)
    if discardable and horizon is not None and horizon <= now_ms:
        return rec.empty_batch(header) if retain_empty else None
    if not records:
        return rec.empty_batch(header) if retain_empty else None
    stats.records_written += len(records)
    if discardable and horizon is None:
        horizon = delete_horizon(now_ms, delete_retention_ms)
        return rec.retained_batch(header, records, delete_horizon_ms=horizon)
    return batch


class Cleaner:
    """Phases 2 and 3 of a cleaning (see the module docstring), with one offset map reused
    from cleaning to cleaning (Kafka's ``Cleaner``: one per cleaner thread)."""

    def __init__(self, config: CleanerConfig, *, throttler: Throttler | None = None) -> None:
        # One Cleaner per data dir whatever ``log.cleaner.threads`` says (see LogCleaner): it
        # gets the whole dedupe and I/O buffers Kafka shares among its threads.
        threads = 1
        self.config = config
        self.offset_map = OffsetMap(min(config.dedupe_buffer_size // threads, _INT32_MAX))
        self.max_map_size = int(self.offset_map.slots * config.dedupe_buffer_load_factor)
        if self.max_map_size < 1:
            raise ValueError(
                "log.cleaner.dedupe.buffer.size is too small to map even one key: raise it or "
                "lower log.cleaner.threads"
            )
        self.io_buffer_size = max(config.io_buffer_size // threads // 2, rec.HEADER_SIZE)
        self.throttler = throttler or Throttler(config.io_max_bytes_per_second)
        #: Set from the event loop to make a cleaning in progress stop at its next batch.
        self.stopping = False

    def _check_stop(self) -> None:
        """Between two batches: stop if asked to, and let the event loop run. The thread holds
        the GIL while it decodes; each append of the loop releases it for its pwrite, and
        without a yield here the loop would then wait a whole switch interval (5 ms) to get
        it back, once per append (the convoy effect: produce throughput on another partition
        fell ~10x in ``bench cleaner``). ``sleep(0)`` hands the GIL over at once when the loop
        waits for it, so the loop waits at most one batch's work."""
        time.sleep(0)
        if self.stopping:
            raise CleaningAbortedError("the cleaner is stopping")

    def build_offset_map(self, plan: CleaningPlan, stats: CleanerStats) -> None:
        """Map the dirty section's keys to their last offsets (Kafka's ``buildOffsetMap``),
        stopping when the map is full; ``latest_offset`` is then the last offset mapped."""
        offset_map = self.offset_map
        offset_map.clear()
        start = plan.first_dirty
        limit = self.max_map_size
        txn: CleanedTransactionMetadata | None = None
        for source in plan.segments:
            if source.end_offset <= start:
                continue
            if txn is None:  # the walk starts at this segment's first batch
                txn = CleanedTransactionMetadata(plan.aborted, source.base_offset)
            for _position, view in read_batches(
                plan.vfs, source.path, source.size, self.io_buffer_size, self.throttler
            ):
                self._check_stop()
                header = rec.parse_header(view)
                stats.map_bytes_read += len(view)
                if header.is_control:
                    txn.on_control_batch(header, rec.decode_batch(view).records)
                    aborted = False
                else:
                    aborted = txn.on_data_batch(header)
                if header.last_offset < start:
                    continue  # clean: nothing of it goes into the map
                if aborted:
                    # Never in the map: an aborted value must not supersede a committed one.
                    stats.map_records_read += header.record_count
                elif not header.is_control:
                    columns = rec.decode_batch_columns(view)
                    for offset, key in zip(columns.offsets, columns.keys, strict=True):
                        if key is not None and offset >= start:
                            if offset_map.size >= limit and offset_map.get(key) < 0:
                                stats.map_done = time.monotonic()
                                return
                            offset_map.put(key, offset)
                        stats.map_records_read += 1
                if header.last_offset >= start:
                    offset_map.update_latest_offset(header.last_offset)
            # Offset gaps: the map covers everything up to the next segment.
            offset_map.update_latest_offset(source.end_offset - 1)
        stats.map_done = time.monotonic()

    def write_cleaned(self, plan: CleaningPlan) -> CleaningResult:
        """Phase 2: the offset map, then one ``.cleaned`` segment per group. Thread-safe with
        respect to the log (touches none of its objects). On any failure the cleaned files
        written so far are removed and the error raised."""
        stats = CleanerStats()
        groups: list[CleanedGroup] = []
        try:
            if plan.first_uncleanable <= plan.first_dirty:  # nothing dirty to map
                self.offset_map.clear()
                end_offset = plan.first_dirty
                sources = []
            else:
                self.build_offset_map(plan, stats)
                end_offset = max(self.offset_map.latest_offset + 1, plan.first_dirty)
                sources = [s for s in plan.segments if s.base_offset < end_offset]
            config = plan.config
            # One walk over the groups in order, from the log's first batch: a transaction's
            # data and its marker may lie in different groups.
            txn = CleanedTransactionMetadata(
                plan.aborted, sources[0].base_offset if sources else plan.first_dirty
            )
            for group in group_segments_by_size(
                sources, config.segment_bytes, config.segment_index_bytes, plan.first_uncleanable
            ):
                size = self._write_group(plan, group, stats, txn)
                groups.append(CleanedGroup(group[0].base_offset, group, size))
        except BaseException:
            for group_done in groups:
                remove_cleaned(plan.directory, group_done.base_offset, plan.vfs)
            raise
        stats.map_utilization = self.offset_map.utilization
        stats.finished = time.monotonic()
        return CleaningResult(plan, end_offset, groups, stats)

    def _write_group(
        self,
        plan: CleaningPlan,
        group: list[SourceSegment],
        stats: CleanerStats,
        txn: CleanedTransactionMetadata,
    ) -> int:
        """Write one ``<base>.log.cleaned`` (+ indexes, and the ``.txnindex.cleaned`` of the
        aborted transactions whose marker it keeps, if any) from ``group`` and fsync it."""
        config = plan.config
        base = group[0].base_offset
        cleaned = LogSegment.open(
            plan.directory,
            base,
            index_interval_bytes=config.index_interval_bytes,
            max_index_size=config.segment_index_bytes,
            vfs=plan.vfs,
            now_ms=plan.now_ms,
            file_suffix=CLEANED_SUFFIX,
        )
        txn.cleaned_index = cleaned.txn_index
        try:
            for source in group:
                for _position, view in read_batches(
                    plan.vfs, source.path, source.size, self.io_buffer_size, self.throttler
                ):
                    self._check_stop()
                    header = rec.parse_header(view)
                    retain_empty = (
                        is_last_batch_of_producer(plan, header)
                        or header.next_offset == plan.first_uncleanable
                    )
                    out = clean_batch(
                        header,
                        view,
                        self.offset_map,
                        now_ms=plan.now_ms,
                        delete_retention_ms=config.delete_retention_ms,
                        retain_empty=retain_empty,
                        stats=stats,
                        txn=txn,
                    )
                    if out is None:
                        continue
                    max_timestamp = (
                        header.max_timestamp if out is view else rec.parse_header(out).max_timestamp
                    )
                    cleaned.append(header.last_offset, max_timestamp, header.last_offset, out)
                    stats.bytes_written += len(out)
                    self.throttler.maybe_throttle(len(out))
            cleaned.on_becoming_inactive()
            cleaned.flush()
            size = cleaned.size
            cleaned.close()
            # The cleaned segment keeps the replaced ones' age (what retention.ms falls back
            # on for a segment without timestamps), as Kafka does.
            plan.vfs.set_mtime_ms(cleaned.log_path, group[-1].last_modified_ms)
            return size
        except BaseException:
            cleaned.delete()
            raise
        finally:
            txn.cleaned_index = None

    def swap(self, result: CleaningResult) -> int:
        """Phase 3, on the event loop: swap every cleaned group in, in order; returns how many
        were. A group the log no longer allows (it changed) is discarded with the rest."""
        log = result.plan.log
        swapped = 0
        for i, group in enumerate(result.groups):
            if not log.replace_segments(
                group.base_offset, [s.segment for s in group.sources], result.plan.truncations
            ):
                for rest in result.groups[i:]:
                    remove_cleaned(result.plan.directory, rest.base_offset, result.plan.vfs)
                raise CleaningAbortedError(
                    f"{log.topic}-{log.partition} changed during its cleaning"
                )
            swapped += 1
        return swapped

    def clean(self, log: Log, first_dirty: int, first_uncleanable: int, now_ms: int) -> int:
        """All three phases on the calling thread (tests and tools); returns the new first
        dirty offset. The LogManager's cleaner runs phase 2 in a thread instead
        (:meth:`LogCleaner.clean_one`)."""
        plan = plan_cleaning(log, first_dirty, first_uncleanable, now_ms)
        result = self.write_cleaned(plan)
        if self.swap(result):
            log.vfs.fsync_dir(log.directory)
        return result.end_offset


def remove_cleaned(directory: Path, base_offset: int, vfs: VFS = DEFAULT_VFS) -> None:
    """Remove the ``.cleaned`` files of ``base_offset`` (missing ones are fine)."""
    from sluice.server.storage.segment import segment_paths

    for path in segment_paths(directory, base_offset, CLEANED_SUFFIX):
        vfs.remove(path)
    vfs.remove(directory / (offset_file_name(base_offset, TXN_INDEX_SUFFIX) + CLEANED_SUFFIX))


def is_last_batch_of_producer(plan: CleaningPlan, header: rec.BatchHeader) -> bool:
    """Whether the batch must stay (at least as an empty batch) for its producer's state
    (Kafka's ``isBatchLastRecordOfProducer``): the producer's last batch, whose sequence
    and epoch a producer state rebuilt from the log needs; for a producer whose current
    epoch has no batch (only markers), its control batches of that epoch."""
    pid = header.producer_id
    if pid < 0:
        return False
    last_offset = plan.producer_last_offsets.get(pid)
    if last_offset is not None:
        return header.last_offset == last_offset
    epoch = plan.producer_marker_epochs.get(pid)
    return epoch is not None and header.is_control and header.producer_epoch == epoch


# ------------------------------------------------------------------ the cleaner of a data dir


class LogCleaner:
    """The cleaner of one data directory (Kafka's ``LogCleaner`` + ``LogCleanerManager``):
    picks the filthiest compacted log, cleans it (phase 2 in a thread), moves its entry in
    ``cleaner-offset-checkpoint``, logs the result, keeps the metrics.

    One cleaning at a time: ``log.cleaner.threads`` > 1 is accepted (a Kafka configuration
    starts unchanged) and runs as 1, logged at start by the LogManager. A cleaning is CPU work
    under the GIL (decoding, hashing, re-encoding batches): a second thread would take turns
    with the first, not run beside it, and take more of the event loop's GIL time. The one
    cleaner gets the whole ``log.cleaner.dedupe.buffer.size`` and ``log.cleaner.io.buffer.size``.
    Call everything from the event loop; :meth:`run_once` awaits the thread.

    **Metrics** (read by :mod:`sluice.server.metrics.prometheus` when scraped): Kafka's
    ``LogCleaner`` gauges (:meth:`max_buffer_utilization_percent`, :meth:`recopy_percent`,
    :meth:`max_clean_time_secs`, :meth:`max_compaction_delay_secs`) over the last cleaning and
    ``LogCleanerManager``'s (:meth:`max_dirty_percent`, :meth:`time_since_last_run_ms`,
    :meth:`uncleanable_partitions_count`, :meth:`uncleanable_bytes`), each computed as Kafka's.
    """

    def __init__(
        self,
        log_dir: Path,
        config: CleanerConfig,
        *,
        vfs: VFS = DEFAULT_VFS,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.config = config
        self.cleaner = Cleaner(config)
        self._checkpoint_file = OffsetCheckpointFile(Path(log_dir) / CLEANER_OFFSET_CHECKPOINT, vfs)
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        try:
            self._checkpoints: dict[tuple[str, int], int] = self._checkpoint_file.read()
        except CorruptCheckpointError as exc:
            logger.warning(
                "unreadable cleaner checkpoint: cleaning from the log starts", error=str(exc)
            )
            self._checkpoints = {}
        self.in_progress: set[tuple[str, int]] = set()
        #: Partitions whose cleaning failed unexpectedly: skipped until restart.
        self.uncleanable: set[tuple[str, int]] = set()
        self._in_flight: asyncio.Future[CleaningResult] | None = None
        # Kafka's cleaner metrics.
        self.max_dirty_ratio = 0.0
        #: When the cleaner last looked for a log to clean (Kafka starts it at construction).
        self.last_run_ms: int = self._clock()
        #: The largest compaction delay seen at that look (Kafka's ``lastPreCleanStats``).
        self.max_compaction_delay_ms = 0
        self.cleanings = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.last_stats: CleanerStats | None = None

    @property
    def checkpoints(self) -> Mapping[tuple[str, int], int]:
        """Partition -> first dirty offset, as in ``cleaner-offset-checkpoint``."""
        return self._checkpoints

    def _write_checkpoint(self) -> None:
        self._checkpoint_file.write(self._checkpoints)

    def forget(self, topic: str, partition: int) -> None:
        """A deleted partition leaves the checkpoint."""
        if self._checkpoints.pop((topic, partition), None) is not None:
            self._write_checkpoint()

    def truncated(self, topic: str, partition: int, offset: int) -> None:
        """Kafka's ``maybeTruncateCheckpoint``: a log truncated below its first dirty offset
        is dirty again from the truncation point."""
        key = (topic, partition)
        if self._checkpoints.get(key, -1) > offset:
            self._checkpoints[key] = offset
            self._write_checkpoint()

    def grab_filthiest_log(self, logs: Iterable[Log]) -> LogToClean | None:
        """The compacted log to clean next (module docstring), marked in progress; None."""
        now = self._clock()
        self.last_run_ms = now
        candidates: list[LogToClean] = []
        delays: list[LogToClean] = []
        for log in logs:
            key = (log.topic, log.partition)
            if not log.config.compact or key in self.in_progress or log.closed:
                continue
            if key in self.uncleanable:
                continue
            ltc = log_to_clean(log, self._checkpoints.get(key), now)
            delays.append(ltc)
            if ltc.force_checkpoint:
                self._checkpoints[key] = ltc.first_dirty
                self._write_checkpoint()
            if ltc.total_bytes > 0:
                candidates.append(ltc)
        self.max_dirty_ratio = max((c.cleanable_ratio for c in candidates), default=0.0)
        self.max_compaction_delay_ms = max((c.compaction_delay_ms for c in delays), default=0)
        cleanable = [
            c
            for c in candidates
            if (c.needs_compaction_now and c.cleanable_bytes > 0)
            or c.cleanable_ratio > c.log.config.min_cleanable_dirty_ratio
        ]
        if not cleanable:
            return None
        filthiest = max(cleanable, key=lambda c: c.cleanable_ratio)
        self.in_progress.add((filthiest.log.topic, filthiest.log.partition))
        return filthiest

    async def wait_idle(self) -> None:
        """Wait for a cleaning's thread still running (after its task was cancelled: its
        output is discarded, the ``.cleaned`` files removed at the next load)."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            await asyncio.wait([in_flight])
            if not in_flight.cancelled():
                in_flight.exception()  # retrieved: an aborted cleaning is not an error

    async def run_once(self, logs: Iterable[Log]) -> bool:
        """Clean the filthiest log, if one needs it; returns whether one was cleaned."""
        ltc = self.grab_filthiest_log(logs)
        if ltc is None:
            return False
        log = ltc.log
        key = (log.topic, log.partition)
        try:
            plan = plan_cleaning(log, ltc.first_dirty, ltc.first_uncleanable, self._clock())
            self._in_flight = asyncio.get_running_loop().run_in_executor(
                None, self.cleaner.write_cleaned, plan
            )
            result = await asyncio.shield(self._in_flight)
            self._in_flight = None
            if self.cleaner.swap(result):
                # The swap durable before the checkpoint moves past it: a power loss must not
                # bring back superseded records the next cleaning would think clean (and keep
                # while their tombstone goes).
                await asyncio.to_thread(log.vfs.fsync_dir, log.directory)
            if log.closed or log.truncation_count != result.plan.truncations:
                # Truncated (or deleted) during that wait: the records written again below the
                # cleaning's end are dirty, so the checkpoint must not move past them (Kafka
                # aborts a cleaning before it truncates: abortAndPauseCleaning).
                logger.info(
                    "cleaning swapped in, but the log changed meanwhile: checkpoint kept",
                    topic=log.topic,
                    partition=log.partition,
                )
                return False
        except CleaningAbortedError as exc:
            logger.info(
                "cleaning aborted", topic=log.topic, partition=log.partition, reason=str(exc)
            )
            return False
        except (OSError, CorruptRecordError) as exc:
            # The disk (full, failing) or a segment changed under the reads: tried again.
            logger.warning(
                "cleaning failed", topic=log.topic, partition=log.partition, error=str(exc)
            )
            return False
        except Exception:
            # A bug or a log the cleaner cannot handle: Kafka's markPartitionUncleanable.
            logger.exception(
                "cleaning failed: partition left uncleanable until restart",
                topic=log.topic,
                partition=log.partition,
            )
            self.uncleanable.add(key)
            return False
        finally:
            self.in_progress.discard(key)
        self._done(ltc, result)
        return True

    def _done(self, ltc: LogToClean, result: CleaningResult) -> None:
        log = ltc.log
        stats = result.stats
        self._checkpoints[(log.topic, log.partition)] = result.end_offset
        self._write_checkpoint()
        self.cleanings += 1
        self.bytes_read += stats.bytes_read
        self.bytes_written += stats.bytes_written
        self.last_stats = stats
        mib = 1024 * 1024
        elapsed = max(stats.elapsed, 1e-9)
        logger.info(
            "cleaned log",
            topic=log.topic,
            partition=log.partition,
            offsets=f"[{ltc.first_dirty}, {result.end_offset})",
            dirty_ratio=round(ltc.cleanable_ratio, 3),
            segments=sum(len(g.sources) for g in result.groups),
            cleaned_segments=len(result.groups),
            read_mib=round(stats.bytes_read / mib, 3),
            written_mib=round(stats.bytes_written / mib, 3),
            size_reduction_pct=round(
                100 * (1 - stats.bytes_written / stats.bytes_read) if stats.bytes_read else 0.0, 1
            ),
            records_kept=f"{stats.records_written}/{stats.records_read}",
            map_utilization_pct=round(100 * stats.map_utilization, 1),
            seconds=round(elapsed, 3),
            mib_per_s=round(stats.bytes_read / mib / elapsed, 2),
            throttled_s=round(self.cleaner.throttler.slept, 3),
        )

    # ------------------------------------------------------------------ metrics (Kafka's gauges)

    def max_buffer_utilization_percent(self) -> int:
        """How full the offset map was in the last cleaning, percent. (Kafka 3.9 truncates
        the ratio to an int before multiplying, so its gauge reads 0 or 100; this is the
        percent its name and its cleaner's log line mean.)"""
        stats = self.last_stats
        return int(100 * stats.map_utilization) if stats is not None else 0

    def recopy_percent(self) -> int:
        """Bytes written / bytes read by the last cleaning, percent (Kafka's
        ``cleaner-recopy-percent``: 100 means nothing was removed)."""
        stats = self.last_stats
        if stats is None or stats.bytes_read == 0:
            return 0
        return int(100 * stats.bytes_written / stats.bytes_read)

    def max_clean_time_secs(self) -> int:
        """Duration of the last cleaning, whole seconds."""
        stats = self.last_stats
        return int(stats.elapsed) if stats is not None else 0

    def max_compaction_delay_secs(self) -> int:
        """How far past ``max.compaction.lag.ms`` the most overdue log was at the last look."""
        return self.max_compaction_delay_ms // 1000

    def max_dirty_percent(self) -> int:
        """The dirtiest compacted log's dirty ratio at the last look, percent."""
        return int(100 * self.max_dirty_ratio)

    def time_since_last_run_ms(self) -> int:
        return max(self._clock() - self.last_run_ms, 0)

    def uncleanable_partitions_count(self) -> int:
        return len(self.uncleanable)

    def uncleanable_bytes(self, logs: Iterable[Log]) -> int:
        """The cleanable bytes of the partitions left uncleanable (Kafka's
        ``uncleanable-bytes``: what the cleaner would have cleaned)."""
        now = self._clock()
        checkpoints = self._checkpoints
        return sum(
            log_to_clean(log, checkpoints.get((log.topic, log.partition)), now).cleanable_bytes
            for log in logs
            if (log.topic, log.partition) in self.uncleanable and not log.closed
        )
