"""The partition log: an ordered list of segments plus the offsets that make it a Kafka log.

See :class:`Log` for the format, the offsets and their invariants, and :meth:`Log.open` for the
numbered crash-recovery procedure.
"""

from __future__ import annotations

import bisect
import contextlib
import enum
import os
import random
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import structlog

from sluice.protocol import records as rec
from sluice.protocol.errors import (
    CorruptMessage,
    CorruptRecordError,
    InconsistentTopicId,
    InvalidRecord,
    InvalidRequest,
    InvalidTimestamp,
    KafkaStorageError,
    OffsetOutOfRange,
    RecordListTooLarge,
    UnknownTopicOrPartition,
)
from sluice.protocol.records import EndTxnMarker
from sluice.protocol.types import uuid_to_str
from sluice.server.storage.checkpoint import CorruptCheckpointError, LeaderEpochCheckpointFile
from sluice.server.storage.file_cache import OpenFileCache
from sluice.server.storage.index import CorruptIndexError, StorageError
from sluice.server.storage.layout import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    STRAY_SUFFIXES,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    offset_file_name,
    parse_offset_file_name,
    parse_partition_dir,
    segment_file_names,
)
from sluice.server.storage.leader_epoch import (
    UNDEFINED_EPOCH,
    LeaderEpochFileCache,
    entries_from_batches,
)
from sluice.server.storage.log_config import LONG_MAX, LogConfig, ProducerStateManagerConfig
from sluice.server.storage.partition_metadata import (
    CorruptPartitionMetadataError,
    read_partition_metadata,
    write_partition_metadata,
)
from sluice.server.storage.producer_state import (
    EMPTY_SNAPSHOT,
    CompletedTxn,
    ProducerEntry,
    ProducerStateManager,
    delete_snapshots_above,
    delete_snapshots_below,
    encode_snapshot,
    load_latest_snapshot,
    remove_stray_snapshots,
    snapshot_files,
    snapshot_path,
    write_snapshot,
)
from sluice.server.storage.segment import FetchSlice, LogSegment
from sluice.server.storage.txn_index import AbortedTxn
from sluice.server.storage.vfs import DEFAULT_VFS, VFS, as_path, read_file

logger = structlog.get_logger("sluice.storage")

# ListOffsets special timestamps (Kafka's ListOffsetsRequest constants). -3 is KIP-734 (v7+),
# -4 KIP-405 (v8+), -5 KIP-1005 (v9+); Sluice has no tiered storage, so -4 is the log start offset
# and -5 has no answer, as in a Kafka broker without remote storage.
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

_I32 = struct.Struct(">i")
# baseOffset, batchLength, partitionLeaderEpoch: the first 16 bytes of a batch header, none of
# them covered by the CRC (sluice.protocol.records.HEADER has the whole layout).
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")
assert _OFFSET_LENGTH_EPOCH.size == rec.PARTITION_LEADER_EPOCH_OFFSET + 4
# From this size on a single batch is written as (copied header, caller's body) rather than
# copied whole: the copy costs more than the second write (~40 us per MiB vs ~1 us per call).
_SPLIT_WRITE_BYTES = 256 * 1024
_INT32_MAX = 2**31 - 1


class UnexpectedAppendOffsetError(StorageError):
    """A follower append whose batch does not start where the log ends (Kafka's
    ``UnexpectedAppendOffsetException``): the follower's fetch position and its log disagree,
    or the batches are not contiguous. Nothing of the append was written."""

    def __init__(self, message: str, *, first_offset: int, expected_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.expected_offset = expected_offset


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _next_offset_of_file(path: Path, base_offset: int, vfs: VFS) -> int:
    """The offset after the last whole batch of a segment file (``base_offset`` when it has
    none), by walking the batch headers: the range a ``.swap`` segment covers."""
    file = vfs.open(path, create=False, writable=False)
    try:
        size = file.size()
        position, end = 0, base_offset
        while size - position >= rec.HEADER_SIZE:
            header = rec.parse_header(file.pread(rec.HEADER_SIZE, position))
            if position + header.size > size:
                break
            end = max(end, header.next_offset)
            position += header.size
        return end
    except CorruptRecordError:
        return end
    finally:
        file.close()


class Isolation(enum.Enum):
    """Upper bound of a read. Consumers read below HW; followers (replication) up to LEO."""

    LOG_END = 0
    HIGH_WATERMARK = 1
    TXN_COMMITTED = 2  # below the last stable offset: a read_committed consumer


# Result types are NamedTuples: immutable like frozen dataclasses, but several times cheaper to
# build, and one is built per append/read on the hot path.


class AppendInfo(NamedTuple):
    """What one append did. ``log_append_time`` is -1 under CreateTime.

    ``offset_of_max_timestamp`` is the last offset of the batch holding the max timestamp
    (Kafka's "shallow" offset: the records are not decoded on the append path).
    """

    first_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    max_timestamp: int
    offset_of_max_timestamp: int
    valid_bytes: int


# AppendInfo(*fields) without the keyword-argument machinery of the generated __new__.
_new_append_info: Callable[[type[AppendInfo], tuple[Any, ...]], AppendInfo] = tuple.__new__


class FetchDataInfo(NamedTuple):
    """A read's result: a slice of one segment file (None = nothing to return) and the offsets
    at the time of the read, which the Fetch response reports."""

    slice: FetchSlice | None
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class TimestampAndOffset(NamedTuple):
    timestamp: int
    offset: int


class LogOffsetMetadata(NamedTuple):
    """An offset together with where it lives: the base offset of its segment and the byte
    position of the batch holding it (Kafka's LogOffsetMetadata). Remembered for HW so a
    consumer read knows the byte it must not pass without searching the index."""

    offset: int
    segment_base_offset: int
    position: int


class PendingFlush:
    """A background flush of one log decided on the event loop (:meth:`Log.begin_flush`):
    the files to fsync, by path, and what to record once they are (:meth:`Log.finish_flush`).

    :meth:`run` is the only part that may run in another thread. It touches no object of the
    log: it opens each file by the path noted at :meth:`Log.begin_flush` (its own descriptor),
    fsyncs and closes it, then fsyncs the directory. So a segment the event loop closes
    (the open-file cache, :meth:`Log.close`), truncates, renames for deletion or unmaps
    meanwhile is never closed or resized under the thread, and the thread never calls into a
    ``mmap`` object (whose ``flush``, msync, holds the GIL on Python < 3.13 and is not safe
    against a concurrent ``close``/``resize``): an fsync of any descriptor of a file writes
    back all of its dirty pages, those stored through a shared map included (Linux tracks
    them per page; ``msync(MS_SYNC)`` is an fsync of the range there). A file renamed or
    removed before its turn (``FileNotFoundError``) was deleted by retention or truncation:
    its offsets are below the new log start, or the truncation discards the result anyway.
    """

    __slots__ = (
        "dir_version",
        "directory",
        "files",
        "inactive_segments",
        "log",
        "seconds",
        "synced",
        "truncations",
        "upto",
    )

    def __init__(
        self,
        log: Log,
        upto: int,
        files: tuple[Path, ...],
        inactive_segments: list[LogSegment],
        directory: Path | None,
        dir_version: int,
        truncations: int,
    ) -> None:
        self.log = log
        self.upto = upto
        self.files = files
        self.inactive_segments = inactive_segments
        self.directory = directory
        self.dir_version = dir_version
        self.truncations = truncations
        self.synced = False
        self.seconds = 0.0

    def run(self) -> None:
        """fsync the files, then the directory (thread-safe: see the class docstring)."""
        vfs = self.log._vfs
        started = time.perf_counter()
        for path in self.files:
            try:
                file = vfs.open(path, create=False, writable=False)
            except FileNotFoundError:
                continue
            try:
                file.fsync()
            finally:
                file.close()
            self.synced = True
        if self.directory is not None:
            try:
                vfs.fsync_dir(self.directory)
                self.synced = True
            except FileNotFoundError:  # the topic was deleted (its log is closed)
                self.directory = None
        self.seconds = time.perf_counter() - started


class Log:
    """One partition: a directory of segments and the offsets that govern them.

    **On disk** (storage spec §1)::

        <topic>-<partition>/
            <base>.log / <base>.index / <base>.timeindex   one segment per base offset
            <base>.log.deleted ...                          removed after file.delete.delay.ms
            leader-epoch-checkpoint                         first offset of each leader epoch

    The ``.log`` files are authoritative; indexes and the leader epoch cache
    (:mod:`sluice.server.storage.leader_epoch`) are derived and rebuilt when missing or
    inconsistent. The offsets below are *not* in the directory: the LogManager keeps them in
    its checkpoint files and hands them to :meth:`open`.

    **Offsets**

    * ``log_start_offset``: first readable offset; moves forward on retention and
      :meth:`delete_records`. Always ``>=`` the base offset of the first segment.
    * ``high_watermark`` (HW): offsets below it are committed; consumers read only below it.
    * ``log_end_offset`` (LEO): the offset the next record gets (last offset + 1).
    * ``recovery_point``: offsets below it are known to be fsynced.
    * ``first_unstable_offset``: first offset of the oldest transaction that is open, or whose
      marker is not below HW yet (None: none); ``last_stable_offset`` (LSO) =
      ``min(first_unstable_offset, HW)``: a read_committed consumer reads below it.

    **Transactions** (KIP-98; Kafka's ``UnifiedLog``): a transactional batch of a producer
    opens its transaction (producer state: :mod:`sluice.server.storage.producer_state`); the
    coordinator's marker (:meth:`append_end_txn_marker`; a follower copies it) closes it, and
    an ABORT marker adds an entry to the active segment's ``.txnindex``
    (:mod:`sluice.server.storage.txn_index`). On a compacted log the cleaner removes aborted
    data and, once their transaction has nothing left and a delete horizon passed, markers;
    a cleaned segment carries the entries of the aborts whose markers it keeps
    (:mod:`sluice.server.storage.log_cleaner`, :meth:`replace_segments`). How Fetch and
    ListOffsets use this:

    * Fetch v4+ with ``isolation_level=1`` (read_committed): ``read(start, max_bytes,
      Isolation.TXN_COMMITTED)`` returns batches below the LSO only; answer
      ``last_stable_offset = log.last_stable_offset`` and ``aborted_transactions =
      [(t.producer_id, t.first_offset) for t in log.collect_aborted_transactions(start,
      upper)]`` with ``upper`` = the offset after the last batch returned (the client drops
      the data batches of those producers from each first offset until their ABORT marker).
      With read_uncommitted answer ``last_stable_offset`` too and ``aborted_transactions``
      null. A reader that never asks for transactions costs nothing: the producer state is
      built on first use.
    * ListOffsets with read_committed: :meth:`fetch_offset_by_timestamp` with
      ``Isolation.TXN_COMMITTED`` answers latest (-1) with the LSO and finds timestamps below
      it only (Kafka's ``lastFetchableOffset``); a caller that answers latest itself (the
      replica manager today) must use ``last_stable_offset`` instead of HW for read_committed.

    **Invariants**: ``log_start_offset <= high_watermark <= log_end_offset``; segments are
    sorted by base offset, do not overlap, and only the last (*active*) one is written; HW only
    moves forward except on truncation; the log is never left half-appended: an append that
    fails (validation, size) raises before touching any file. The leader epoch cache holds the
    epoch of every batch from the log start on (entries start in ``[log start, LEO]``; one may
    start at LEO with no batch yet, a new leader's term): appends assign, truncation and a
    moving log start trim it.

    **Leader epochs**: a leader append stamps ``partitionLeaderEpoch`` with the epoch it is
    given; :meth:`assign_leader_epoch` starts a term at LEO on election (KIP-279); a follower
    append (:meth:`append_as_follower`) keeps the leader's offsets and epochs;
    :meth:`end_offset_for_epoch` answers OffsetForLeaderEpoch and
    :func:`sluice.server.storage.leader_epoch.follower_truncation_offset` turns the answer into
    a :meth:`truncate_to` offset.

    **Producer snapshots** (``<offset>.snapshot``, Kafka's ``ProducerStateManager``): each
    :meth:`roll` writes the producer state as of the new segment's base offset (not synced: the
    next flush fsyncs it, as Kafka's roll leaves it to its flush task), a clean :meth:`close`
    writes it at LEO (synced when the state is built). A snapshot at an offset describes the
    batches below it, so it stays valid until a truncation cuts below it (which removes it);
    retention removes the snapshots below the new first segment, a cleaning those of the
    segments it merged away, :meth:`truncate_fully_and_start_at` all of them; :meth:`open`
    removes the stray ones (Kafka's ``removeStraySnapshots``: not at a segment's base, except
    the newest above the last base) and those past LEO. The state is built lazily (first
    batch with a producer id, or first stable-offset question) from the newest snapshot at or
    below LEO plus the batches after it. Until then a roll copies the *idle* snapshot -- the
    one at LEO found at open, or an empty state for a log with no batch and no snapshot --
    which stays the state at LEO while only batches without a producer id are appended; a
    log opened with neither (after an unclean stop) takes no roll snapshots until its state
    is built. Timestamps in the snapshot are each producer's last batch's, so a snapshot is
    the same bytes Kafka would write (:mod:`sluice.server.storage.producer_state`). Producers
    idle for ``producer.id.expiration.ms`` are removed from the built state by the
    LogManager's periodic check (:meth:`remove_expired_producers`), so later snapshots leave
    them out, and every load of a snapshot skips those expired by then. An idle snapshot
    copied at a roll is copied as it is (expired producers included: they are skipped when
    the state is built from it).

    **Concurrency**: none. The broker is single-threaded asyncio: every method is called from the
    event-loop thread, and appends, reads and retention of one partition therefore never
    interleave. File I/O is synchronous (it hits the page cache; fsync happens in
    :meth:`flush`, for ``flush.messages`` and at close and truncation, and in the LogManager's
    background flusher, whose fsyncs alone run in a thread: :meth:`begin_flush` and
    :meth:`finish_flush` on the loop around :meth:`PendingFlush.run`). Readers hold
    :class:`FetchSlice` objects referring to segment files: a deleted segment is renamed first
    and its files are closed only ``file.delete.delay.ms`` later, so an in-flight sendfile of
    it stays valid.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: list[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        high_watermark: int,
        clock: Callable[[], int],
        vfs: VFS,
        leader_epochs: LeaderEpochFileCache,
        file_cache: OpenFileCache | None = None,
        directory_synced: bool = False,
        producer_config: ProducerStateManagerConfig | None = None,
    ) -> None:
        # Private: use Log.open(), which runs the load/recovery procedure.
        self.directory = directory
        #: Told the duration (seconds) of every flush that fsynced something (the broker's
        #: flush-latency histogram; set by the LogManager).
        self.flush_listener: Callable[[float], None] | None = None
        #: Called when a truncation lowered the recovery point (set by the LogManager, which
        #: checkpoints it at once: a checkpoint above the log end would let recovery trust index
        #: entries and bytes written after the truncation and never fsynced).
        self.recovery_point_lowered: Callable[[], None] | None = None
        #: Called with the new log end offset after a truncation removed records (set by the
        #: LogManager: the log cleaner's first dirty offset must not stay above it, Kafka's
        #: ``maybeTruncateCheckpoint``).
        self.truncated: Callable[[int], None] | None = None
        #: Called once, on the event loop, when the log goes offline (:meth:`_go_offline`; set
        #: by the LogManager, whose listeners tell the controller: Kafka's
        #: ``LogDirFailureChannel`` feeding ``ReplicaManager.handleLogDirFailure``).
        self.went_offline: Callable[[Log], None] | None = None
        self.topic, self.partition = parse_partition_dir(directory.name)
        self._config = config
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._clock = clock
        self._vfs = vfs
        self._file_cache = file_cache
        self._leo = segments[-1].read_next_offset()
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._hw = min(max(high_watermark, log_start_offset), self._leo)
        self._hw_meta: LogOffsetMetadata | None = None
        self._last_flush_ms = clock()
        # Set by roll(): the old segments are fsynced by the LogManager's flusher, not inline.
        self._pending_flush_offset: int | None = None
        # The directory is dirty (a segment file was created/renamed/removed since its last
        # fsync) while these differ: every change bumps the version, an fsync of the directory
        # records the version it started at. Versions rather than a flag so that a background
        # flush (:meth:`begin_flush`) finishing late never marks clean a change made after it
        # started. Dirty at first if Log.open created the directory's first segment (or
        # completed a swap, truncated, deleted segments): a flush must make those durable.
        # Clean (``directory_synced``) when it changed no entry after a clean shutdown, whose
        # close fsynced the directory: a restart then costs no directory fsync per partition
        # at the next flush or close. Not after an unclean one: an entry listed at load may
        # be one a power loss can still take back.
        self._dir_version = 1
        self._dir_synced_version = 1 if directory_synced else 0
        # Bumped by every truncation: a background flush that started before one is discarded.
        self._truncations = 0
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._closed = False
        #: Why the log went offline (:meth:`_go_offline`), or None.
        self._offline: str | None = None
        # Producer state (sluice.server.storage.producer_state): derived from the batches, built
        # on the first batch with a producer id or the first stable-offset question, dropped on
        # truncation.
        self._producers: ProducerStateManager | None = None
        # Shared with the LogManager and its other logs (dynamic: read at each use).
        self._producer_config = producer_config or ProducerStateManagerConfig()
        # While ``_producers`` is not built: the snapshot (a file, or EMPTY_SNAPSHOT's bytes)
        # that holds the producer state at LEO, when known without building it (no batch with
        # a producer id after it); None when unknown. See "Producer snapshots" in the class
        # docstring.
        self._idle_snapshot: Path | bytes | None = None
        # Snapshots written at a roll and not fsynced yet: the next flush fsyncs them.
        self._unsynced_snapshots: list[Path] = []
        self._epochs = leader_epochs
        #: The topic id recorded in ``partition.metadata`` (None: none recorded yet).
        self.topic_id: uuid.UUID | None = None

    # ------------------------------------------------------------------ load / recovery

    @classmethod
    def open(
        cls,
        directory: Path | str,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int | None = None,
        had_clean_shutdown: bool = True,
        clock: Callable[[], int] = _wall_clock_ms,
        vfs: VFS = DEFAULT_VFS,
        file_cache: OpenFileCache | None = None,
        producer_config: ProducerStateManagerConfig | None = None,
    ) -> Log:
        """Load (and if needed recover) the partition in ``directory``, creating it if missing.

        ``file_cache`` (the LogManager's) bounds the files the inactive segments keep open
        (:mod:`sluice.server.storage.file_cache`): every step below opens one segment at a time
        and leaves the cache free to close the segments it is done with, so a log with more
        segments than the process may open files loads (step 2 checks each segment right after
        opening it). Without a cache every segment stays open.

        Crash-recovery procedure (Kafka's LogLoader), in order:

        1. Create the directory if missing. A ``<base>.log.swap`` is a complete, fsynced
           cleaned segment (:mod:`sluice.server.storage.log_cleaner`) whose swap was
           interrupted: first delete every segment file (``.log``, ``.index``,
           ``.timeindex``) whose base offset lies in its offset range ``[base, its next
           offset)`` -- the segments it replaces, ``<base>.log`` included -- then rename it to
           ``<base>.log`` (Kafka's ``LogLoader`` order: a crash during this step finds the
           swap again, and never both the old segments and the cleaned one). Delete what a
           crash can leave behind that is never valid data: ``*.deleted`` (deletion was
           decided, only the unlink was pending), ``*.cleaned``, other ``*.swap`` (the swap's
           indexes: rebuilt in step 2), ``*.tmp``; then index files with no ``.log``
           (orphans). The swapped segment's ``.txnindex`` (renamed after its ``.log`` in each
           step of the swap: ``.txnindex.swap``, or ``.txnindex.cleaned`` if the crash came
           before) is renamed with it; a ``.txnindex.swap`` whose ``.log.swap`` is gone but
           whose ``.log`` is there belongs to that ``.log`` (the swap's last step was cut after
           the ``.log``'s rename) and is renamed into place too.
        2. Open every ``<base>.log`` in base-offset order. An index file that was missing (the
           segment open recreates it empty), that fails its sanity check (size not a multiple
           of the entry size, last offset below base, timestamps decreasing, position past the
           end) or whose last entry names an offset the segment does not hold is rebuilt by
           recovering that segment from the log file: indexes are derived data.
        3. If the clean-shutdown marker was absent (``had_clean_shutdown=False``), recover every
           segment from the one holding ``recovery_point`` to the end: walk its batches,
           validating each (length, magic, CRC), rebuild its indexes, and truncate the file at
           the first invalid batch (a torn write). If a segment lost bytes, every later segment
           is unreachable (offsets must be contiguous from a valid prefix) and is deleted. The
           segment holding ``recovery_point`` is walked from its last offset-index entry below
           it (``LogSegment.recover(from_offset=...)``: that prefix and its index entries were
           fsynced), so a restart reads only what was written since the last flush, not the
           whole active segment (Kafka re-reads whole segments). One log line per segment
           with the bytes scanned, as Kafka's "Recovering unflushed segment". Then trailing
           empty segments (above the recovery point) that start past the end of the segment
           before them are deleted: a power loss kept their files but lost the records below
           them (a segment rolled after another whose fsync was still pending; the directory
           entry of the new file reached the disk, the old one's data did not). Without this
           the log end would be the empty segment's base, above a hole, and a follower would
           fetch from there, never to hold the lost records, and still rejoin the ISR (found by
           the fault suite's compacted workload, which rolls segments every 200 ms). Only empty
           segments go, never records: a follower fetches them again; a compaction gap before
           an empty segment is re-used offsets at most, never lost data.
        4. With no segment left, create an empty one at ``log_start_offset``.
        5. LEO := the next offset of the last segment. If the checkpointed log start offset is
           beyond LEO (records deleted by DeleteRecords were lost in the crash), delete every
           segment and start empty at the log start offset.
        6. Clamp: log start offset := max(checkpoint, first segment's base);
           recovery point := LEO after a clean shutdown, else min(checkpoint, LEO) (recovered
           bytes are valid but not known to be on disk: only a flush advances it, as in Kafka);
           HW := the checkpoint (default: log start offset) clamped into [log start, LEO].
        7. The active segment's indexes take ``segment.index.bytes`` as their size; trimmed
           when it was closed, they are re-extended by its first append (not here: most
           partitions of a restarting broker may not be written for a while); it stays open
           from now on.
        8. Leader epochs: read ``leader-epoch-checkpoint``, drop entries starting past LEO
           (their records were lost) and restate those before the log start offset as Kafka's
           load does (rewriting the file only if that changed it); then check the last batch's
           epoch against the cache, one header read. A missing file (a log written before
           epochs were kept, or never written to), an unreadable one, or one that fails that
           check is rebuilt from the batch headers from the log start on and written anew
           (reading only where epochs change: ``LogSegment.epoch_changes``, milliseconds per
           GiB; the leader_epoch section of the measurement notes has the figures).
        9. Transaction indexes: a ``.txnindex`` that fails its check (not a multiple of 34
           bytes, unknown version, markers not increasing or outside its segment), the one of
           a segment swapped in without its cleaned ``.txnindex`` (one carried over in step 1
           is kept as the cleaner wrote it, also through step 2's index rebuild unless that
           truncated the segment), that of a segment whose step-2 index rebuild met a control
           batch, and those of the segments recovered in step 3 whose walk met
           a control batch are rebuilt -- the latter from the recovery point on: entries of
           markers below it were fsynced with them (the others only lose entries past their
           end). The producer state is replayed from the newest snapshot at or below the first
           offset rebuilt (else from the log start) to LEO, and each ABORT marker from there
           in those segments writes its entry with the last stable offset as of that marker
           (Kafka's LogLoader recovering segments with a ProducerStateManager). The replayed
           state is the log's producer state from then on, ongoing transactions included.
        10. Topic id: read ``partition.metadata``
            (:mod:`sluice.server.storage.partition_metadata`) into :attr:`topic_id`; without
            it (or unreadable: logged) None, until :meth:`assign_topic_id` records one.

        The LogManager removes the clean-shutdown marker only after every log is loaded.
        """
        directory = as_path(directory)
        clock_ms = clock
        os.makedirs(directory, exist_ok=True)
        parse_partition_dir(directory.name)  # fail early on a bad directory name
        log = logger.bind(dir=str(directory))

        # 1. complete an interrupted segment swap; clean up leftovers
        names = vfs.listdir(directory)
        listed = set(names)
        # Whether this load changed the directory's entries (renamed, removed or created a
        # file): if not, after a clean shutdown (whose close fsynced it) it needs no fsync.
        touched = False
        swapped: list[int] = []
        # Swapped in with their cleaned .txnindex: kept through step 2's index rebuild.
        carried: set[int] = set()
        for name in names:
            swap_base = parse_offset_file_name(name, LOG_SUFFIX + SWAP_SUFFIX)
            if swap_base is None:
                continue
            # The cleaned segment replaces every segment its offsets cover (Kafka's order:
            # those go first, then the rename).
            end = _next_offset_of_file(directory / name, swap_base, vfs)
            for other in names:
                for suffix in (*SEGMENT_SUFFIXES, TXN_INDEX_SUFFIX):
                    base = parse_offset_file_name(other, suffix)
                    if base is not None and swap_base <= base < end:
                        vfs.remove(directory / other)
            vfs.rename(directory / name, directory / segment_file_names(swap_base)[0])
            # Its transaction index is the cleaned one, renamed after the .log (complete and
            # fsynced like it); none with the .log.swap: the cleaned segment may have none,
            # or the file is from an older version: rebuilt (step 9).
            txn_index = offset_file_name(swap_base, TXN_INDEX_SUFFIX)
            for suffix in (SWAP_SUFFIX, CLEANED_SUFFIX):
                if txn_index + suffix in listed:
                    vfs.rename(directory / (txn_index + suffix), directory / txn_index)
                    carried.add(swap_base)
                    break
            else:
                swapped.append(swap_base)
            touched = True
            log.warning("completed interrupted segment swap", segment=swap_base, next_offset=end)
        for name in names:
            # A swap interrupted in its last step, after the .log's rename: the .txnindex.swap
            # is the segment's (the others are rebuilt in step 2).
            base = parse_offset_file_name(name, TXN_INDEX_SUFFIX + SWAP_SUFFIX)
            if (
                base is not None
                and offset_file_name(base, LOG_SUFFIX + SWAP_SUFFIX) not in listed
                and offset_file_name(base, LOG_SUFFIX) in listed
            ):
                vfs.rename(directory / name, directory / offset_file_name(base, TXN_INDEX_SUFFIX))
                carried.add(base)
                touched = True
                log.warning("completed interrupted transaction index swap", segment=base)
        for name in vfs.listdir(directory) if touched else names:
            if name.endswith(STRAY_SUFFIXES):
                log.info("removing leftover file", file=name)
                vfs.remove(directory / name)
                touched = True
        if touched:
            names = vfs.listdir(directory)
        bases: list[int] = []
        for name in names:
            base = parse_offset_file_name(name, LOG_SUFFIX)
            if base is not None:
                bases.append(base)
        log_bases = set(bases)
        for name in names:
            suffix = os.path.splitext(name)[1]
            if (
                suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
                and parse_offset_file_name(name, suffix) not in log_bases
            ):
                log.info("removing orphan index file", file=name)
                vfs.remove(directory / name)
                touched = True
        bases.sort()

        # 2. open segments, rebuilding missing or inconsistent indexes
        segments: list[LogSegment] = []
        max_record_size = config.max_message_bytes
        # Segments whose .txnindex step 9 rebuilds -> the offset from which (None: all of it).
        rebuild_txn: dict[int, int | None] = dict.fromkeys(swapped)
        for i, base in enumerate(bases):
            segment = cls._open_segment(
                directory, base, config, clock_ms(), vfs, file_cache, active=False
            )
            segments.append(segment)
            try:
                segment.sanity_check()
                # An entry for an offset the segment does not hold would make lookups and the
                # next index append fail: the index is as good as corrupt.
                end = bases[i + 1] if i + 1 < len(bases) else segment.read_next_offset()
                for index in (segment.offset_index, segment.time_index):
                    if index.entries and index.last_offset >= end:
                        raise CorruptIndexError(
                            f"{index.path}: entry for offset {index.last_offset}, "
                            f"beyond the segment's data (next offset {end})"
                        )
            except (CorruptIndexError, CorruptRecordError) as exc:
                # (CorruptRecordError: the scan for the next offset met a torn batch.)
                truncated = segment.recover(max_record_size)
                log.warning(
                    "rebuilt index",
                    segment=segment.base_offset,
                    reason=str(exc),
                    truncated_bytes=truncated,
                )
                if segment.recovered_control and (base not in carried or truncated > 0):
                    rebuild_txn[base] = None
            try:
                end = bases[i + 1] if i + 1 < len(bases) else segment.read_next_offset()
                segment.txn_index.sanity_check(end)
            except CorruptIndexError as exc:
                log.warning("rebuilding transaction index", segment=base, reason=str(exc))
                rebuild_txn[base] = None

        # 3. recover everything above the recovery point after an unclean shutdown
        if not had_clean_shutdown and segments:
            first = max(
                0, bisect.bisect_right([s.base_offset for s in segments], recovery_point) - 1
            )
            scanned = 0
            for i in range(first, len(segments)):
                segment = segments[i]
                size = segment.size
                truncated = segment.recover(
                    max_record_size, from_offset=recovery_point if i == first else None
                )
                scanned += size - segment.recovered_from
                if segment.recovered_control:
                    # Entries of markers below the recovery point were fsynced with them.
                    rebuild_txn.setdefault(segment.base_offset, recovery_point)
                elif segment.base_offset not in rebuild_txn:
                    # No marker in what was walked: no entry can describe it. (An index
                    # step 2 found unreadable is rebuilt whole in step 9 instead.)
                    segment.txn_index.truncate_to(segment.read_next_offset())
                log.info(
                    "recovering unflushed segment",
                    segment=segment.base_offset,
                    recovered=f"{i - first + 1}/{len(segments) - first}",
                    from_position=segment.recovered_from,
                    scanned_bytes=size - segment.recovered_from,
                )
                if truncated > 0:
                    log.warning(
                        "truncated torn tail",
                        segment=segment.base_offset,
                        truncated_bytes=truncated,
                        dropped_segments=[s.base_offset for s in segments[i + 1 :]],
                    )
                    for later in segments[i + 1 :]:
                        later.delete()
                        touched = True
                    del segments[i + 1 :]
                    break
            # 3b. a power loss may keep a later segment's (empty) file but not the records
            # of the one before it: trailing empty segments that start past the end of the
            # segment before them sit above lost records, and are deleted.
            while (
                len(segments) > 1
                and segments[-1].size == 0
                and segments[-1].base_offset >= recovery_point
                and segments[-2].read_next_offset() < segments[-1].base_offset
            ):
                empty = segments.pop()
                log.warning(
                    "dropped an empty segment above lost records",
                    segment=empty.base_offset,
                    log_end_offset=segments[-1].read_next_offset(),
                )
                empty.delete()
                touched = True
            log.info(
                "recovered log",
                from_segment=segments[min(first, len(segments) - 1)].base_offset,
                recovery_point=recovery_point,
                scanned_bytes=scanned,
            )

        # 4. an empty log still has an (empty) active segment
        if not segments:
            segments.append(
                cls._open_segment(directory, log_start_offset, config, clock_ms(), vfs, file_cache)
            )

        # 5. the checkpointed log start offset may lie beyond what survived
        leo = segments[-1].read_next_offset()
        if log_start_offset > leo:
            log.warning("log start offset beyond log end: starting empty", leo=leo)
            for segment in segments:
                segment.delete()
            segments = [
                cls._open_segment(directory, log_start_offset, config, clock_ms(), vfs, file_cache)
            ]
            leo = log_start_offset
            touched = True

        # 6. clamp the offsets
        log_start_offset = max(log_start_offset, segments[0].base_offset)
        recovery_point = leo if had_clean_shutdown else min(recovery_point, leo)
        hw = log_start_offset if high_watermark is None else high_watermark

        # 7. the active segment takes new index entries again
        segments[-1].set_active(True)
        segments[-1].resize_indexes(config.segment_index_bytes, extend=False)

        # 8. leader epochs
        epochs = cls._load_leader_epochs(directory, segments, log_start_offset, leo, vfs)

        # Every segment file was listed at the start (none created by an open above).
        touched = touched or any(
            name not in listed for s in segments for name in segment_file_names(s.base_offset)
        )
        # 9. below rebuilds these segments' transaction indexes (files written: not synced)
        targets = {s: rebuild_txn[s.base_offset] for s in segments if s.base_offset in rebuild_txn}
        loaded = cls(
            directory,
            config,
            segments,
            log_start_offset=log_start_offset,
            recovery_point=recovery_point,
            high_watermark=hw,
            clock=clock,
            vfs=vfs,
            leader_epochs=epochs,
            file_cache=file_cache,
            directory_synced=had_clean_shutdown and not touched and not targets,
            producer_config=producer_config,
        )

        # 11. producer snapshots (below 9, which may build the producer state from them)
        kept = remove_stray_snapshots(directory, names, loaded._bases, vfs)
        for offset in kept[:]:
            if offset > leo:  # the log was cut below it (Kafka's truncateAndReload)
                vfs.remove(snapshot_path(directory, offset))
                kept.remove(offset)
        loaded._idle_snapshot = loaded._idle_snapshot_at_leo(kept)

        # 10. topic id (before 9, which logs; read errors leave it unknown, re-recorded later)
        try:
            loaded.topic_id = read_partition_metadata(directory, vfs)
        except CorruptPartitionMetadataError as exc:
            log.error("partition metadata unreadable: ignored", error=str(exc))

        # 9. transaction indexes
        if targets:
            loaded._rebuild_txn_indexes(targets)
            log.info(
                "rebuilt transaction indexes",
                segments=[s.base_offset for s in targets],
                aborted=sum(len(s.txn_index) for s in targets),
            )
        return loaded

    def assign_topic_id(self, topic_id: uuid.UUID) -> None:
        """Record the id of the topic this log belongs to (Kafka's ``UnifiedLog.assignTopicId``):
        written to ``partition.metadata`` the first time, before anything is appended by the
        caller; the same id again is a no-op. Another id means this log belongs to an earlier
        topic of the same name (deleted and created again while this log stayed behind):
        :class:`~sluice.protocol.errors.InconsistentTopicId`, nothing written -- the caller
        must not serve the log as the new topic's."""
        if self.topic_id == topic_id:
            return
        if self.topic_id is not None:
            raise InconsistentTopicId(
                f"Tried to assign topic ID {uuid_to_str(topic_id)} to log for topic partition "
                f"{self.topic}-{self.partition}, but log already contained topic ID "
                f"{uuid_to_str(self.topic_id)}"
            )
        write_partition_metadata(self.directory, topic_id, self._vfs)
        self._dir_version += 1  # a new entry: the next flush fsyncs the directory
        self.topic_id = topic_id

    def _rebuild_txn_indexes(self, targets: dict[LogSegment, int | None]) -> None:
        """Step 9 of :meth:`open`: drop the entries of each target's ``.txnindex`` from the
        offset given (None: the whole file, which may be unreadable) and refill them by
        replaying the producer state over the log, from the newest snapshot at or below the
        lowest such offset (else from the log start); keep that state."""
        cuts: dict[int, int] = {}
        for segment, cut in targets.items():
            if cut is None or cut <= segment.base_offset:
                segment.txn_index.reset()
                cuts[segment.base_offset] = segment.base_offset
            else:
                segment.txn_index.truncate_to(cut)
                cuts[segment.base_offset] = cut
        by_base = {s.base_offset: s for s in targets}
        found = self._load_latest_snapshot()
        if found is not None and found[0] <= min(cuts.values()):
            start, producers = found
        else:
            start, producers = -1, ProducerStateManager()
        bases = self._bases

        def on_complete(txn: CompletedTxn, lso: int) -> None:
            if txn.is_aborted:
                base = bases[bisect.bisect_right(bases, txn.last_offset) - 1]
                segment = by_base.get(base)
                if segment is not None and txn.last_offset >= cuts[base]:
                    segment.txn_index.append(
                        AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso)
                    )

        producers.replay_batches(self._batches_with_markers(start), on_complete)
        producers.on_high_watermark_updated(self._hw)
        self._producers = producers

    def _batches_with_markers(
        self, start: int
    ) -> Iterator[tuple[rec.BatchHeader, EndTxnMarker | None]]:
        """``(header, marker)`` of every batch from offset ``start`` on (marker: that of a
        control batch; only control batches are read beyond their header)."""
        first = max(0, bisect.bisect_right(self._bases, start) - 1)
        for i, segment in enumerate(self._segments[first:]):
            begin = 0
            if i == 0 and start > segment.base_offset:
                found = segment.translate_offset(start)  # the offset index, not a scan
                if found is None:
                    continue
                begin = found.position
            for position, header in segment.batches(begin):
                if header.base_offset < start:
                    continue
                marker = None
                if header.is_control:
                    marker = rec.end_txn_marker_of(segment.read_batch(position, header))
                yield header, marker

    @staticmethod
    def _load_leader_epochs(
        directory: Path,
        segments: list[LogSegment],
        log_start_offset: int,
        leo: int,
        vfs: VFS,
    ) -> LeaderEpochFileCache:
        """Step 8 of :meth:`open`."""
        log = logger.bind(dir=str(directory))
        checkpoint = LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT, vfs)
        reason = "missing"
        try:
            stored = checkpoint.read()
        except (CorruptCheckpointError, OSError) as exc:
            stored, reason = None, f"unreadable: {exc}"
        if stored is not None:
            cache = LeaderEpochFileCache(checkpoint, stored)
            if list(cache.entries) != stored:
                cache.flush()  # entries out of order: the constructor repaired them
            cache.truncate_from_end(leo + 1)  # keeps an entry at LEO: a term without records
            cache.truncate_from_start(log_start_offset)
            last = Log._last_batch(segments)
            if (
                last is None
                or last.partition_leader_epoch < 0
                or last.last_offset < log_start_offset  # nothing readable left
            ):
                return cache
            at = max(last.base_offset, log_start_offset)
            if cache.epoch_for_offset(at) == last.partition_leader_epoch:
                return cache
            reason = (
                f"batch at offset {at} has epoch {last.partition_leader_epoch}, "
                f"the file says {cache.epoch_for_offset(at)}"
            )
        elif leo == log_start_offset and reason == "missing":
            return LeaderEpochFileCache(checkpoint)  # nothing written yet: no file either
        first = max(0, bisect.bisect_right([s.base_offset for s in segments], log_start_offset) - 1)
        started = time.monotonic()
        entries = entries_from_batches(
            (header for segment in segments[first:] for header in segment.epoch_changes()),
            log_start_offset,
        )
        cache = LeaderEpochFileCache(checkpoint, entries)
        cache.flush()
        log.warning(
            "rebuilt leader epoch cache from the batch headers",
            reason=reason,
            entries=len(entries),
            seconds=round(time.monotonic() - started, 3),
        )
        return cache

    @staticmethod
    def _last_batch(segments: list[LogSegment]) -> rec.BatchHeader | None:
        """The header of the log's last batch (a scan from the last index entry)."""
        for segment in reversed(segments):
            last = None
            for _, header in segment.batches(segment.offset_index.last_entry.position):
                last = header
            if last is not None:
                return last
        return None

    @staticmethod
    def _open_segment(
        directory: Path,
        base_offset: int,
        config: LogConfig,
        now_ms: int,
        vfs: VFS,
        file_cache: OpenFileCache | None,
        *,
        active: bool = True,
    ) -> LogSegment:
        # Jitter is drawn once per segment so partitions created together do not all roll (and
        # hit the disk) in the same second.
        jitter = (
            random.randrange(min(config.segment_jitter_ms, config.segment_ms))
            if config.segment_jitter_ms > 0
            else 0
        )
        return LogSegment.open(
            directory,
            base_offset,
            index_interval_bytes=config.index_interval_bytes,
            max_index_size=config.segment_index_bytes,
            rolling_jitter_ms=jitter,
            vfs=vfs,
            now_ms=now_ms,
            cache=file_cache,
            active=active,
        )

    # ------------------------------------------------------------------ properties

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        """Apply a new topic config; it governs the next append, roll, flush and retention."""
        self._config = config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """The segments, oldest first (a snapshot; the last one is the active segment)."""
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def pending_flush_offset(self) -> int | None:
        """Set after a roll: flush up to here (the LogManager's flusher does it off the append
        path, as Kafka schedules its post-roll flush)."""
        return self._pending_flush_offset

    @property
    def closed(self) -> bool:
        """Closed, or offline (:attr:`offline`): either way nothing reads or writes it."""
        return self._closed

    @property
    def offline(self) -> bool:
        """Taken offline by an I/O error its in-memory state could not survive
        (:meth:`_go_offline`): every read and write answers KAFKA_STORAGE_ERROR."""
        return self._offline is not None

    @property
    def offline_reason(self) -> str | None:
        """Why the log is offline (the step and the error), or None."""
        return self._offline

    @property
    def vfs(self) -> VFS:
        """The file-system seam this log's files go through (the cleaner writes through it)."""
        return self._vfs

    @property
    def truncation_count(self) -> int:
        """Bumped by every truncation: work planned before one (a cleaning) is discarded."""
        return self._truncations

    # ------------------------------------------------------------------ leader epochs

    @property
    def leader_epoch_cache(self) -> LeaderEpochFileCache:
        """The partition's epoch -> start offset cache (read it; the Log writes it)."""
        return self._epochs

    @property
    def latest_epoch(self) -> int | None:
        """The epoch of the newest term this log knows (None before any)."""
        return self._epochs.latest_epoch

    def assign_leader_epoch(self, epoch: int) -> None:
        """This replica became leader at ``epoch``: the term starts at LEO now, before any
        append (KIP-279), so OffsetForLeaderEpoch for the previous epoch ends here at once.
        A no-op if ``epoch`` is already the latest; a newer epoch than any cached is the normal
        case (an older one drops the newer entries, as :meth:`LeaderEpochFileCache.assign`)."""
        self._check_open()
        self._epochs.assign(epoch, self._leo)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(largest epoch <= epoch, where it ends)``; ``(-1, -1)`` when
        undefined. See :meth:`LeaderEpochFileCache.end_offset_for`."""
        self._check_open()
        return self._epochs.end_offset_for(epoch, self._leo)

    def epoch_for_offset(self, offset: int) -> int:
        """The leader epoch that wrote ``offset`` (ListOffsets v4+ reports it); -1 when
        unknown (before the first cached epoch)."""
        epoch = self._epochs.epoch_for_offset(offset)
        return UNDEFINED_EPOCH if epoch is None else epoch

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self._log_start_offset}, "
            f"hw={self._hw}, leo={self._leo}, segments={len(self._segments)})"
        )

    # ------------------------------------------------------------------ append

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        *,
        leader_epoch: int = 0,
        in_place: bool = False,
    ) -> AppendInfo:
        """Validate ``records`` (back-to-back v2 batches from a producer), assign offsets from
        LEO, stamp ``partitionLeaderEpoch`` with ``leader_epoch`` (and, on a term's first
        append, record the epoch's start in the leader epoch cache, as Kafka's ``Log.append``
        does), stamp LogAppendTime if configured, roll if needed, append, advance LEO, flush per
        ``flush.messages``. Does not move HW (the caller does, once replicas have it).

        The headers must be rewritten (baseOffset, partitionLeaderEpoch, LogAppendTime), so the
        request is copied once into a private buffer. With ``in_place=True`` and a writable
        buffer (bytearray, writable memoryview: e.g. the Produce request's frame, which the
        broker discards afterwards) the headers are rewritten in the caller's buffer instead and
        nothing is copied; the caller must not reuse those bytes as a producer batch.

        Raises CorruptMessage, InvalidRecord, MessageTooLarge, UnsupportedCompressionType (per
        batch, via ``sluice.protocol.records.kafka_error_for``) or RecordListTooLarge; on any error
        nothing has been written (and nothing rewritten: validation comes first).
        """
        # Hot path (once per partition per Produce request). A single batch (the usual case)
        # is validated without slicing; without a producer id under CreateTime it takes
        # _append_one, every other request _append_general.
        if self._closed:
            self._check_open()
        view = memoryview(records).cast("B")
        config = self._config
        if config.conform_on_append and len(view):
            # compression.type / timestamp bounds: a private, conformed copy (so in place).
            view = self._conform(view, config)
            in_place = True
        total = len(view)
        if total == 0:
            raise InvalidRecord("produce request without any record batch")
        if total > config.segment_bytes:
            raise RecordListTooLarge(
                f"{total} bytes of batches exceed segment.bytes {config.segment_bytes}"
            )
        validate = rec.validate_batch
        max_batch_size = config.max_message_bytes
        headers: list[tuple[int, rec.BatchHeader]] = []
        offsets = 0  # offsets the request takes
        position = 0
        if (
            total >= rec.HEADER_SIZE
            and _I32.unpack_from(view, rec.LENGTH_OFFSET)[0] + rec.LOG_OVERHEAD == total
        ):
            # One batch: what nearly every Produce carries for a partition.
            try:
                header = validate(view, max_batch_size=max_batch_size, from_client=True)
            except CorruptRecordError as exc:
                raise rec.kafka_error_for(exc)(str(exc)) from exc
            if header.producer_id < 0 and not config.log_append_time:
                # The same checks and effects as _append_general, without its per-batch
                # bookkeeping (~2 us of a 16 KiB append); tests/test_log_append_paths.py
                # holds the two equal.
                return self._append_one(view, header, total, leader_epoch, in_place)
            headers.append((0, header))
            offsets = header.last_offset_delta + 1
            position = total
        # Validate every batch before anything is copied or written.
        while position < total:
            if total - position < rec.LOG_OVERHEAD:
                raise CorruptMessage(f"{total - position} stray bytes after the last batch")
            (length,) = _I32.unpack_from(view, position + rec.LENGTH_OFFSET)
            end = position + rec.LOG_OVERHEAD + length
            if length < rec.MIN_BATCH_LENGTH or end > total:
                raise CorruptMessage(
                    f"batchLength {length} at byte {position} does not match the bytes present"
                )
            try:
                header = validate(
                    view if end - position == total else view[position:end],
                    max_batch_size=max_batch_size,
                    from_client=True,
                )
            except CorruptRecordError as exc:
                raise rec.kafka_error_for(exc)(str(exc)) from exc
            headers.append((position, header))
            offsets += header.last_offset_delta + 1
            position = end
        return self._append_general(view, total, headers, offsets, leader_epoch, in_place)

    def _conform(self, view: memoryview, config: LogConfig) -> memoryview:
        """Apply the topic settings that rewrite or refuse a producer's batches (Kafka's
        ``LogValidator``), before the usual append path validates and places them:

        1. each batch is validated as on the usual path (a compressed one is decompressed and
           its record framing skimmed), with the same errors; recompressing keeps the records
           section byte for byte, so no record needs decoding for it;
        2. with a ``message.timestamp.{before,after}.max.ms`` bound (or the older
           ``difference`` one) under CreateTime, every record is decoded and one whose
           timestamp is further than that from the broker's clock fails the request with
           INVALID_TIMESTAMP;
        3. on a compacted topic (``cleanup.policy`` holding ``compact``) every record is
           decoded and one without a key fails the request with INVALID_RECORD and Kafka's
           message: the cleaner could never supersede or delete it;
        4. with ``compression.type`` naming a codec, a batch in another codec is rebuilt in
           that one (:func:`~sluice.protocol.records.recompress_batch`, the topic's level).

        Returns a private copy of the request, so the caller may rewrite it in place. Only
        called when :attr:`LogConfig.conform_on_append`: the default (``producer``, no bounds)
        never comes here (produce figures with and without: bench/NOTES.md).
        """
        codec = config.target_codec
        before, after = config.timestamp_before_max_ms, config.timestamp_after_max_ms
        check_time = min(before, after) < LONG_MAX and not config.log_append_time
        compact = config.compact
        now = self._clock()
        out = bytearray()
        position, total = 0, len(view)
        while position < total:
            if total - position < rec.LOG_OVERHEAD:
                raise CorruptMessage(f"{total - position} stray bytes after the last batch")
            (length,) = _I32.unpack_from(view, position + rec.LENGTH_OFFSET)
            end = position + rec.LOG_OVERHEAD + length
            if length < rec.MIN_BATCH_LENGTH or end > total:
                raise CorruptMessage(
                    f"batchLength {length} at byte {position} does not match the bytes present"
                )
            batch = view[position:end]
            try:
                header = rec.validate_batch(
                    batch, max_batch_size=config.max_message_bytes, from_client=True
                )
                if check_time:
                    for ts in rec.decode_batch_columns(batch).timestamps:
                        if ts != rec.NO_TIMESTAMP and (now - ts > before or ts - now > after):
                            raise InvalidTimestamp(
                                f"timestamp {ts} of a record is out of range: it must be within "
                                f"[{now} - {before}, {now} + {after}]"
                            )
                if compact and None in rec.decode_batch_columns(batch).keys:
                    raise InvalidRecord(
                        "Compacted topic cannot accept message without key in topic partition "
                        f"{self.topic}-{self.partition}."
                    )
                if codec is not None and header.compression != codec:
                    out += rec.recompress_batch(batch, codec, config.target_level)
                else:
                    out += batch
            except CorruptRecordError as exc:
                raise rec.kafka_error_for(exc)(str(exc)) from exc
            position = end
        return memoryview(out)

    def _append_general(
        self,
        view: memoryview,
        total: int,
        headers: list[tuple[int, rec.BatchHeader]],
        offsets: int,
        leader_epoch: int,
        in_place: bool,
    ) -> AppendInfo:
        """append_as_leader after validation: ``headers`` are (position, header) of every
        batch in ``view``, ``offsets`` the number of offsets they take."""
        config = self._config
        first_offset = self._leo
        next_offset = first_offset
        last_offset = first_offset + offsets - 1
        if offsets > _INT32_MAX:
            raise RecordListTooLarge("offset range of one append does not fit int32")
        # Idempotent producers: sequence checks before anything is written. A request without
        # a producer id (-1, the usual case) pays one compare (two for multi-batch requests).
        producers = None
        if headers[0][1].producer_id >= 0 or (
            len(headers) > 1 and any(h.producer_id >= 0 for _, h in headers)
        ):
            producers = self.producer_state()
            duplicate = producers.check([h for _, h in headers])
            if duplicate is not None:
                # A retry of a batch already in the log: nothing is written; the producer gets
                # the original offsets (what Kafka answers).
                return AppendInfo(
                    duplicate.first_offset,
                    duplicate.last_offset,
                    -1,
                    self._log_start_offset,
                    0,
                    rec.NO_TIMESTAMP,
                    duplicate.last_offset,
                    0,
                )
        # A new term's first append records where it starts (file first: see leader_epoch).
        if leader_epoch != self._epochs.latest_epoch and leader_epoch >= 0:
            self._epochs.assign(leader_epoch, first_offset)

        # baseOffset and partitionLeaderEpoch are outside the CRC, so rewriting them keeps the
        # batch valid; do it in the caller's buffer if allowed, else in one private copy.
        rest: memoryview | bytes = b""  # the batch body, when only its header is copied
        buf: bytearray | memoryview
        if in_place and not view.readonly:
            buf = view
        elif len(headers) == 1 and total >= _SPLIT_WRITE_BYTES and not config.log_append_time:
            # A big single batch: copy only the header that is rewritten (LogAppendTime, which
            # also rewrites the CRC over the whole batch, takes the copying path) and write the
            # body from the caller's buffer: two writes instead of a megabyte memcpy.
            buf = bytearray(view[: rec.HEADER_SIZE])
            rest = view[rec.HEADER_SIZE :]
        else:
            buf = bytearray(view)
        log_append_time = self._clock() if config.log_append_time else -1
        max_timestamp = rec.NO_TIMESTAMP
        offset_of_max = first_offset
        record_count = 0
        # (position, size, last offset, max timestamp) of each batch, offsets assigned; None for
        # a single batch, which is rewritten below without the per-batch bookkeeping.
        placed: list[tuple[int, int, int, int]] | None = None
        if len(headers) == 1:
            header = headers[0][1]
            # baseOffset, batchLength (unchanged), partitionLeaderEpoch: one contiguous store.
            _OFFSET_LENGTH_EPOCH.pack_into(buf, 0, first_offset, header.batch_length, leader_epoch)
            if log_append_time >= 0:
                rec.stamp_log_append_time(buf, log_append_time)  # buf is exactly this batch
                batch_max = log_append_time
            else:
                batch_max = header.max_timestamp
            if batch_max > max_timestamp:
                max_timestamp, offset_of_max = batch_max, last_offset
            record_count = header.record_count
        else:
            placed = []
            for position, header in headers:
                _OFFSET_LENGTH_EPOCH.pack_into(
                    buf, position, next_offset, header.batch_length, leader_epoch
                )
                batch_last = next_offset + header.last_offset_delta
                size = header.batch_length + rec.LOG_OVERHEAD
                if log_append_time >= 0:
                    with memoryview(buf)[position : position + size] as batch:
                        rec.stamp_log_append_time(batch, log_append_time)
                    batch_max = log_append_time
                else:
                    batch_max = header.max_timestamp
                if batch_max > max_timestamp:
                    max_timestamp, offset_of_max = batch_max, batch_last
                record_count += header.record_count
                placed.append((position, size, batch_last, batch_max))
                next_offset = batch_last + 1

        # The roll decision covers the whole request (it must fit one segment), as Kafka's.
        active = self._segment_for(total, max_timestamp, last_offset)
        if placed is None:
            active.append(last_offset, max_timestamp, offset_of_max, buf, rest=rest)
        else:
            # One call per batch: the segment indexes per append call, and recovery indexes per
            # batch; appending batch by batch keeps the two byte-identical.
            size_before = active.size
            try:
                with memoryview(buf) as out:
                    for position, size, batch_last, batch_max in placed:
                        active.append(
                            batch_last, batch_max, batch_last, out[position : position + size]
                        )
            except BaseException:
                # An I/O error after some batches: take them back, the append failed as a whole.
                if active.size != size_before:
                    active.truncate_to(first_offset)
                raise
        self._leo = last_offset + 1
        if self._leo - self._recovery_point >= config.flush_messages:
            self._flush_or_take_back(first_offset)  # before producer state records the batches
        if producers is not None:
            batch_first = first_offset
            for _, header in headers:
                producers.update(header, batch_first)
                batch_first += header.last_offset_delta + 1
        return AppendInfo(
            first_offset,
            last_offset,
            log_append_time,
            self._log_start_offset,
            record_count,
            max_timestamp,
            offset_of_max,
            total,  # valid_bytes
        )

    def _append_one(
        self,
        view: memoryview,
        header: rec.BatchHeader,
        total: int,
        leader_epoch: int,
        in_place: bool,
    ) -> AppendInfo:
        """append_as_leader for one validated batch without a producer id under CreateTime."""
        first_offset = self._leo
        if leader_epoch != self._epochs.latest_epoch and leader_epoch >= 0:
            self._epochs.assign(leader_epoch, first_offset)
        last_offset = first_offset + header.last_offset_delta
        rest: memoryview | bytes = b""
        buf: bytearray | memoryview
        if in_place and not view.readonly:
            buf = view
        elif total >= _SPLIT_WRITE_BYTES:
            buf = bytearray(view[: rec.HEADER_SIZE])
            rest = view[rec.HEADER_SIZE :]
        else:
            buf = bytearray(view)
        _OFFSET_LENGTH_EPOCH.pack_into(buf, 0, first_offset, header.batch_length, leader_epoch)
        max_timestamp = header.max_timestamp
        if max_timestamp > rec.NO_TIMESTAMP:
            offset_of_max = last_offset
        else:
            max_timestamp, offset_of_max = rec.NO_TIMESTAMP, first_offset
        active = self._segment_for(total, max_timestamp, last_offset)
        active.append(last_offset, max_timestamp, offset_of_max, buf, rest=rest)
        self._leo = leo = last_offset + 1
        if leo - self._recovery_point >= self._config.flush_messages:
            self._flush_or_take_back(first_offset)
        return _new_append_info(
            AppendInfo,
            (
                first_offset,
                last_offset,
                -1,
                self._log_start_offset,
                header.record_count,
                max_timestamp,
                offset_of_max,
                total,
            ),
        )

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Append batches copied from the leader (the records of a Fetch response for this
        partition), keeping their offsets, leader epochs and bytes.

        Validated before anything is written: every whole batch has magic 2, a consistent
        header and a matching CRC (else CorruptMessage / InvalidRecord); the first starts at
        or above LEO and each next one above the previous one's last offset (else
        :class:`UnexpectedAppendOffsetError`): a gap is the leader's log compacted (Kafka's
        check is the same ``<``). A partial batch at the end (a fetch cut at its
        byte limit) is ignored, as Kafka's follower does; ``valid_bytes`` counts what was
        appended. Not checked, as in Kafka: ``max.message.bytes`` (the leader took the batch)
        and producer sequences (the leader checked them; the follower records them).

        Then as if batch by batch, as the leader appended them: the batch's epoch goes into
        the leader epoch cache (file before data), the active segment rolls if the batch does
        not fit it (size, time, full index: the leader's rule, so a log copied batch by batch
        rolls where the leader's did), the bytes are written unchanged, LEO and producer state
        move. The writes are fewer: a run of batches in one epoch that no batch of would roll
        goes to the segment in one write, its index entries decided batch by batch
        (:meth:`LogSegment.append_batches`), so the files are those of one append per batch
        (``tests/storage/test_log_append_paths.py``); a pwrite per 11 KB batch cost ~6 us
        here, one per fetch ~2 us per batch (bench/NOTES.md). An I/O error leaves the runs
        before it appended (LEO covers exactly them) and raises. Does not move HW: a
        follower's HW is ``min(leader's HW, LEO)``, set by the caller with
        :meth:`update_high_watermark`.
        """
        if self._closed:
            self._check_open()
        view = memoryview(records).cast("B")
        try:
            batches = rec.validate_fetched_batches(view)
        except CorruptRecordError as exc:
            raise rec.kafka_error_for(exc)(str(exc)) from exc
        first_offset = expected = self._leo
        for _position, header in batches:
            if header.base_offset < expected:
                raise UnexpectedAppendOffsetError(
                    f"{self.topic}-{self.partition}: follower batch at offset "
                    f"{header.base_offset}, log end offset is {expected}",
                    first_offset=header.base_offset,
                    expected_offset=expected,
                )
            expected = header.base_offset + header.last_offset_delta + 1
        if not batches:
            return AppendInfo(
                first_offset, first_offset - 1, -1, self._log_start_offset, 0, -1, -1, 0
            )
        first_offset = batches[0][1].base_offset
        producers = None
        if any(h.producer_id >= 0 for _, h in batches):
            producers = self.producer_state()
        # Markers decoded before anything is written (a corrupt one refuses the append).
        markers: dict[int, EndTxnMarker | None] = {}
        for position, header in batches:
            if header.is_control and header.producer_id >= 0:
                try:
                    markers[position] = rec.end_txn_marker_of(
                        view[position : position + header.size]
                    )
                except CorruptRecordError as exc:
                    raise rec.kafka_error_for(exc)(str(exc)) from exc
        epochs = self._epochs
        max_timestamp, offset_of_max = rec.NO_TIMESTAMP, first_offset
        record_count = valid_bytes = 0
        count = len(batches)
        i = 0
        while i < count:
            # A run: batch i and the ones after it in the same leader epoch (a new epoch is
            # recorded before its first batch is written: file before data).
            header = batches[i][1]
            epoch = header.partition_leader_epoch
            if epoch >= 0 and epoch != epochs.latest_epoch:
                epochs.assign(epoch, header.base_offset)
            latest = epochs.latest_epoch
            j = i + 1
            while j < count:
                epoch = batches[j][1].partition_leader_epoch
                if epoch >= 0 and epoch != latest:
                    break
                j += 1
            while i < j:
                position, header = batches[i]
                if j - i > 1 and self._append_run(view, batches[i:j]):
                    done = batches[i:j]
                    i = j
                else:
                    done = batches[i : i + 1]
                    i += 1
                    size = header.batch_length + rec.LOG_OVERHEAD
                    last_offset = header.base_offset + header.last_offset_delta
                    active = self._segment_for(size, header.max_timestamp, last_offset)
                    active.append(
                        last_offset,
                        header.max_timestamp,
                        last_offset,
                        view[position : position + size],
                    )
                for position, header in done:
                    last_offset = header.base_offset + header.last_offset_delta
                    if producers is not None:
                        if header.is_control:
                            marker = markers.get(position)
                            segment = self._segments[-1]
                            self._record_marker(producers, segment, header, last_offset, marker)
                        else:
                            producers.update(header, header.base_offset)
                    batch_max = header.max_timestamp
                    if batch_max > max_timestamp:
                        max_timestamp, offset_of_max = batch_max, last_offset
                    record_count += header.record_count
                    valid_bytes += header.batch_length + rec.LOG_OVERHEAD
                self._leo = last_offset + 1
        if self._leo - self._recovery_point >= self._config.flush_messages:
            self.flush()
        return AppendInfo(
            first_offset,
            self._leo - 1,
            -1,
            self._log_start_offset,
            record_count,
            max_timestamp,
            offset_of_max,
            valid_bytes,
        )

    def _append_run(self, view: memoryview, run: list[tuple[int, rec.BatchHeader]]) -> bool:
        """Write ``run`` (back-to-back batches of ``view``, at least two) to the active segment
        with one write, if no batch of it would roll on its own (the segment holds something,
        the run as a whole fits it, its time and its indexes: then neither does any batch); else
        False, and the caller appends them one by one. The segment ends as after one append per
        batch (:meth:`LogSegment.append_batches`)."""
        active = self._segments[-1]
        if active.size == 0 or not active.has_index_room(len(run)):
            return False
        config = self._config
        overhead = rec.LOG_OVERHEAD
        described = [
            (h.base_offset + h.last_offset_delta, h.max_timestamp, h.batch_length + overhead)
            for _, h in run
        ]
        start = run[0][0]
        end = run[-1][0] + described[-1][2]
        if active.should_roll(
            messages_size=end - start,
            max_timestamp_in_messages=max(d[1] for d in described),
            max_offset_in_messages=described[-1][0],
            now_ms=self._clock(),
            segment_bytes=config.segment_bytes,
            segment_ms=config.segment_ms,
        ):
            return False
        active.append_batches(view[start:end], described)
        return True

    def _segment_for(self, size: int, max_timestamp: int, last_offset: int) -> LogSegment:
        """The segment to append ``size`` bytes of batches to: the active one, rolled first
        if it says so."""
        config = self._config
        active = self._segments[-1]
        if active.should_roll(
            messages_size=size,
            max_timestamp_in_messages=max_timestamp,
            max_offset_in_messages=last_offset,
            now_ms=self._clock(),
            segment_bytes=config.segment_bytes,
            segment_ms=config.segment_ms,
        ):
            active = self.roll(self._leo)
        return active

    def producer_state(self) -> ProducerStateManager:
        """The producer state of this partition (sequences, ongoing transactions), built on
        first use from the newest ``<offset>.snapshot`` at or below LEO plus the batches after
        it (or from every batch when there is none; only control batches are read beyond
        their header). The append paths and the stable-offset properties call this
        (sluice.server.storage.producer_state); callers must not mutate it."""
        producers = self._producers
        if producers is None:
            found = self._load_latest_snapshot()
            start = found[0] if found is not None else -1
            producers = found[1] if found is not None else ProducerStateManager()
            producers.replay_batches(self._batches_with_markers(start))
            producers.on_high_watermark_updated(self._hw)
            self._producers = producers
        return producers

    # ------------------------------------------------------------------ transactions

    def append_end_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        leader_epoch: int,
        timestamp: int | None = None,
    ) -> AppendInfo:
        """Append the COMMIT or ABORT marker of ``producer_id``'s transaction (origin
        coordinator: the WriteTxnMarkers path on the partition leader). Checked first:
        a producer epoch older than the producer's -> InvalidProducerEpoch; a coordinator epoch
        older than the last marker's -> TransactionCoordinatorFenced (nothing written).

        The control batch goes at LEO like any append (roll, leader epoch, flush.messages).
        If the marker ends a transaction with data in this partition: an ABORT adds
        ``(producer, first offset, marker offset, LSO)`` to the active segment's ``.txnindex``
        first, then the transaction is complete; it stops holding the first unstable offset
        back once HW passes the marker. A marker for a producer without an open transaction
        here (the coordinator writes to every partition it added; or a retried marker) is
        written all the same and changes no stable offset, as in Kafka."""
        if self._closed:
            self._check_open()
        producers = self.producer_state()
        producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        marker = EndTxnMarker(commit, coordinator_epoch)
        first_offset = self._leo
        batch = rec.build_end_txn_marker_batch(
            marker,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            timestamp=self._clock() if timestamp is None else timestamp,
            base_offset=first_offset,
            partition_leader_epoch=leader_epoch,
        )
        header = rec.parse_header(batch)
        if leader_epoch != self._epochs.latest_epoch and leader_epoch >= 0:
            self._epochs.assign(leader_epoch, first_offset)
        active = self._segment_for(len(batch), header.max_timestamp, first_offset)
        active.append(first_offset, header.max_timestamp, first_offset, batch)
        self._leo = first_offset + 1
        if self._leo - self._recovery_point >= self._config.flush_messages:
            self._flush_or_take_back(first_offset)
        try:
            self._record_marker(producers, active, header, first_offset, marker)
        except BaseException:
            # The .txnindex write failed: take the marker back, the coordinator retries.
            active.truncate_to(first_offset)
            self._leo = first_offset
            raise
        return AppendInfo(
            first_offset,
            first_offset,
            -1,
            self._log_start_offset,
            1,
            header.max_timestamp,
            first_offset,
            len(batch),
        )

    def _record_marker(
        self,
        producers: ProducerStateManager,
        segment: LogSegment,
        header: rec.BatchHeader,
        offset: int,
        marker: EndTxnMarker | None,
    ) -> None:
        """Producer state and ``.txnindex`` for a control batch written at ``offset`` in
        ``segment``: the index entry is written before the transaction completes (Kafka's
        order). If that write fails the producer state is dropped -- it is rebuilt from the
        log on next use -- and the error propagates."""
        completed = producers.update(header, offset, marker)
        if completed is None:
            return
        if completed.is_aborted:
            lso = producers.last_stable_offset(completed)
            entry = AbortedTxn(completed.producer_id, completed.first_offset, offset, lso)
            try:
                created = segment.txn_index.append(entry)
            except BaseException:
                self._producers = None
                self._idle_snapshot = None
                raise
            if created:
                self._dir_version += 1  # a new file: the next flush fsyncs the directory
        producers.complete_txn(completed)
        producers.on_high_watermark_updated(self._hw)

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest transaction that is open or whose marker is not below HW
        yet; None when there is none (Kafka's ``firstUnstableOffset``). Never below the log
        start offset: a transaction whose start retention or DeleteRecords removed is unstable
        from the first offset still there, as Kafka's ``updateFirstUnstableOffset`` clamps it."""
        first = self.producer_state().first_unstable_offset()
        if first is not None and first < self._log_start_offset:
            return self._log_start_offset
        return first

    @property
    def last_stable_offset(self) -> int:
        """LSO = min(first unstable offset, HW): the bound of read_committed reads and of
        ListOffsets latest for them; Fetch v4+ reports it (see the class docstring)."""
        first = self.first_unstable_offset
        hw = self._hw
        return first if first is not None and first < hw else hw

    @property
    def last_stable_offset_if_known(self) -> int:
        """:attr:`last_stable_offset` when the producer state is built, else HW, without
        building it: what a read_uncommitted Fetch reports (Kafka always reports the LSO; its
        clients use it only under read_committed, and building the state of a big log without
        a snapshot costs ~0.4 s on the loop). The state is built by the first transactional or
        idempotent append, read_committed read or marker since the log opened."""
        if self._producers is None:
            return self._hw
        return self.last_stable_offset

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound_offset)``: those
        whose ABORT marker is at or after ``start_offset`` and whose data starts below
        ``upper_bound_offset``, in marker order (Kafka's ``collectAbortedTransactions``).
        Searches the ``.txnindex`` of the segment holding ``start_offset`` and the next ones
        until an entry's last stable offset reaches the upper bound (no later abort can
        overlap then: txn_index module docstring). Fetch passes the offset after the last
        batch it returns as ``upper_bound_offset``."""
        if self._closed:
            self._check_open()
        aborted: list[AbortedTxn] = []
        first = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
        for segment in self._segments[first:]:
            found = segment.txn_index.collect(start_offset, upper_bound_offset)
            aborted += found.aborted
            if found.complete:
                break
        return aborted

    def _load_latest_snapshot(self) -> tuple[int, ProducerStateManager] | None:
        """The newest usable snapshot at or below LEO, without the producers expired by now
        (Kafka's ``loadFromSnapshot``)."""
        now, expiration_ms = self._clock(), self._producer_config.producer_id_expiration_ms

        def expired(entry: ProducerEntry) -> bool:
            return ProducerStateManager.is_expired(entry, now, expiration_ms)

        return load_latest_snapshot(self.directory, self._leo, self._vfs, expired)

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forget the producers idle for ``producer.id.expiration.ms`` (Kafka's
        ``UnifiedLog.removeExpiredProducers``, the LogManager's periodic check); returns how
        many. A state not built yet is left alone: it is built without them."""
        producers = self._producers
        if producers is None or self._closed:
            return 0
        now = self._clock() if now_ms is None else now_ms
        return producers.remove_expired(now, self._producer_config.producer_id_expiration_ms)

    @property
    def producer_count(self) -> int:
        """The producer ids the built producer state holds (0 when not built)."""
        producers = self._producers
        return 0 if producers is None else len(producers.producers)

    def _idle_snapshot_at_leo(self, snapshots: list[int]) -> Path | bytes | None:
        """The idle snapshot (see ``_idle_snapshot``) given the snapshot offsets on disk:
        the one at LEO; an empty state for a log without a batch nor a snapshot; else None."""
        if snapshots and snapshots[-1] == self._leo:
            return snapshot_path(self.directory, self._leo)
        if not snapshots and self._leo == self._bases[0]:
            return EMPTY_SNAPSHOT
        return None

    def _take_snapshot(self, offset: int, *, sync: bool) -> None:
        """Kafka's ``takeSnapshot``: write ``<offset>.snapshot`` holding the producer state
        at ``offset`` (= LEO, or the base of a segment just rolled past it), unless one is
        there already (a snapshot at an offset always describes the batches below it:
        truncation removes the ones above its cut) or it would describe an empty log (Kafka
        writes none at the log's first offset either). The state comes from the built
        producer state, else from the idle snapshot; when neither is known (a log opened
        after an unclean shutdown that no producer has written to since) none is written --
        recovery then starts from an older snapshot or the log start, as before."""
        path = snapshot_path(self.directory, offset)
        producers = self._producers
        if self._vfs.exists(path):
            if producers is None and offset == self._leo:
                self._idle_snapshot = path
            return
        if offset == self._bases[0] and self.active_segment.size == 0:
            return
        if producers is not None:
            data = encode_snapshot(producers)
        else:
            idle = self._idle_snapshot
            if idle is None:
                return
            try:
                data = idle if isinstance(idle, bytes) else read_file(idle, self._vfs)
            except OSError:
                self._idle_snapshot = None  # gone or unreadable: the state is unknown now
                raise
        write_snapshot(self.directory, offset, data, self._vfs, sync=sync)
        self._dir_version += 1
        if not sync:
            self._unsynced_snapshots.append(path)
        if producers is None:
            self._idle_snapshot = path

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at ``max(expected_next_offset, LEO)`` and return it.

        The old active segment writes its final time-index entry and trims its indexes; its
        fsync is left to the flusher (:attr:`pending_flush_offset`). Rolling onto an existing
        *empty* active segment with the same base offset recreates it; any other collision is a
        bug and raises.
        """
        self._check_open()
        new_base = max(expected_next_offset or 0, self._leo)
        active = self.active_segment
        if active.base_offset == new_base:
            if active.size != 0:
                raise RuntimeError(f"roll to {new_base}: active segment exists and is not empty")
            active.delete()
            self._segments.pop()
            self._bases.pop()
        elif new_base < active.base_offset:
            raise RuntimeError(f"roll to {new_base} below active segment {active.base_offset}")
        else:
            active.on_becoming_inactive()
            active.set_active(False)
        segment = self._open_segment(
            self.directory, new_base, self._config, self._clock(), self._vfs, self._file_cache
        )
        self._segments.append(segment)
        self._bases.append(new_base)
        self._dir_version += 1
        self._hw_meta = None
        if self._segments[:-1]:
            self._pending_flush_offset = new_base
        try:
            self._take_snapshot(new_base, sync=False)
        except OSError as exc:  # recovery then starts from an older snapshot, or the log
            logger.warning("producer snapshot not written", topic=self.topic,
                           partition=self.partition, offset=new_base, error=str(exc))  # fmt: skip
        logger.debug("rolled segment", topic=self.topic, partition=self.partition, base=new_base)
        return segment

    # ------------------------------------------------------------------ flush

    def _flush_or_take_back(self, first_offset: int) -> None:
        """The ``flush.messages`` flush of a leader append whose records (from
        ``first_offset`` to LEO, all in the active segment) are written. If it fails
        (``OSError``: EIO, ENOSPC from a file system that allocates at writeback), take the
        records back and raise: the producer is told the append failed (KAFKA_STORAGE_ERROR,
        retriable) and its retry must write them once, not a second time behind a first copy
        it was told is not there. The same contract as a failed write (the append fails as a
        whole), so appends go on when the disk works again, as after a full disk.

        Safe to take back: nothing has seen them (HW moves after the append returns, and the
        append and this flush run without yielding to the event loop); producer state records
        the batches only after this. If taking them back fails too, they stay (LEO covers
        them) and the flush's error is raised: a retry may then duplicate them."""
        try:
            self.flush()
        except OSError:
            try:
                self.active_segment.truncate_to(first_offset)
            except OSError as exc:
                logger.error(
                    "append not taken back after its flush failed",
                    topic=self.topic,
                    partition=self.partition,
                    error=str(exc),
                )
            else:
                self._leo = first_offset
            raise

    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets in ``[recovery_point, offset)`` (default: LEO)
        and the directory if segments were created; then recovery point := offset."""
        self._check_open()
        started = time.perf_counter()
        synced = False
        upto = self._leo if offset is None else min(offset, self._leo)
        for segment in self._segments_to_flush(upto):
            segment.flush()
            synced = True
        for path in self._unsynced_snapshots:
            try:
                file = self._vfs.open(path, create=False, writable=False)
            except FileNotFoundError:  # deleted since (retention, truncation)
                continue
            try:
                file.fsync()
            finally:
                file.close()
        self._unsynced_snapshots.clear()
        # The directory before the recovery point moves: fsynced bytes of a file whose entry
        # is not durable are lost in a crash, and a checkpoint must never claim them.
        dir_version = self._dir_version
        if dir_version != self._dir_synced_version:
            self._vfs.fsync_dir(self.directory)
            self._dir_synced_version = dir_version
            synced = True
        if synced and self.flush_listener is not None:
            self.flush_listener(time.perf_counter() - started)
        if upto > self._recovery_point:
            self._recovery_point = upto
        if self._pending_flush_offset is not None and self._pending_flush_offset <= upto:
            self._pending_flush_offset = None
        self._last_flush_ms = self._clock()

    def _segments_to_flush(self, upto: int) -> list[LogSegment]:
        """The segments holding offsets in ``[recovery_point, upto)``, and the active one if
        it holds any offset below ``upto``."""
        if upto <= self._recovery_point:
            return []
        chosen = []
        for segment, end in self._segment_ranges():
            if segment.base_offset >= upto:
                break
            if end > self._recovery_point or segment is self.active_segment:
                chosen.append(segment)
        return chosen

    def begin_flush(self, offset: int | None = None) -> PendingFlush:
        """The first half of a background flush (the LogManager's flusher): decide, on the
        event loop, what :meth:`flush` would fsync up to ``offset`` (default: LEO) and return
        it as a :class:`PendingFlush`, whose :meth:`PendingFlush.run` may then do the fsyncs
        in another thread; :meth:`finish_flush` back on the loop moves the recovery point.
        Nothing of the log changes here, so a flush abandoned between the halves (a cancelled
        task, shutdown) leaves the log as it was."""
        self._check_open()
        upto = self._leo if offset is None else min(offset, self._leo)
        files: list[Path] = []
        segments = self._segments_to_flush(upto)
        for segment in segments:
            files += (
                segment.log_path,
                segment.index_path,
                segment.time_index_path,
                segment.txn_index.path,  # usually missing: skipped
            )
        files += self._unsynced_snapshots
        dir_version = self._dir_version
        return PendingFlush(
            self,
            upto,
            tuple(files),
            [s for s in segments if not s.active],
            self.directory if dir_version != self._dir_synced_version else None,
            dir_version,
            self._truncations,
        )

    def finish_flush(self, pending: PendingFlush) -> bool:
        """The second half of a background flush, on the event loop, once
        ``pending.run()`` returned without raising: the recovery point becomes
        ``min(pending.upto, LEO)`` if that is higher, the directory changes it synced count
        as durable, a pending roll flush it covered is done. Returns whether it applied.

        Not applied (False, nothing changes) when the log was closed in the meantime (its
        close flushed everything itself) or truncated: a truncation may have removed offsets
        below ``upto`` and appends written new, unsynced ones at the same offsets, which the
        fsyncs may have preceded; the next pass flushes again. Retention in the meantime is
        harmless (a segment it deleted holds offsets below the new log start only), and so
        are appends and rolls (offsets at or above ``upto``; a roll's pending flush offset
        above ``upto`` stays pending)."""
        if self._closed or pending.truncations != self._truncations:
            return False
        if pending.synced and self.flush_listener is not None:
            self.flush_listener(pending.seconds)
        upto = min(pending.upto, self._leo)
        if upto > self._recovery_point:
            self._recovery_point = upto
        if pending.dir_version > self._dir_synced_version and pending.directory is not None:
            self._dir_synced_version = pending.dir_version
        for segment in pending.inactive_segments:
            if not segment.active:  # written since only if made active again (truncation)
                segment.mark_flushed()
        if self._unsynced_snapshots:
            synced_files = set(pending.files)
            self._unsynced_snapshots = [
                p for p in self._unsynced_snapshots if p not in synced_files
            ]
        if self._pending_flush_offset is not None and self._pending_flush_offset <= upto:
            self._pending_flush_offset = None
        self._last_flush_ms = self._clock()
        return True

    def _segment_ranges(self) -> Iterator[tuple[LogSegment, int]]:
        """(segment, exclusive end offset) oldest first; the active segment ends at LEO."""
        for i, segment in enumerate(self._segments):
            end = self._bases[i + 1] if i + 1 < len(self._bases) else self._leo
            yield segment, end

    # ------------------------------------------------------------------ high watermark

    def update_high_watermark(self, hw: int) -> int:
        """Set HW to ``hw`` clamped into ``[log_start_offset, LEO]`` (may move it backwards:
        used after truncation and when loading). Returns the new HW."""
        new = min(max(hw, self._log_start_offset), self._leo)
        if new != self._hw:
            self._hw = new
            self._hw_meta = None
            if self._producers is not None:
                self._producers.on_high_watermark_updated(new)
        return new

    def maybe_increment_high_watermark(self, hw: int) -> bool:
        """Raise HW to ``hw`` if it is greater; refuse a value above LEO (ValueError).
        Returns whether HW moved. (A leader with one replica calls it with LEO after append.)

        Where HW lives (segment, byte position) is derived when a read needs it: from the active
        segment's end while HW == LEO (so "equal but on a newer segment" after a roll is always
        current), else looked up once and cached until HW or the segments change."""
        if hw > self._leo:
            raise ValueError(f"high watermark {hw} above log end offset {self._leo}")
        if hw > self._hw:
            self._hw = hw
            if self._producers is not None:
                self._producers.on_high_watermark_updated(hw)
            return True
        return False

    def _leo_metadata(self) -> LogOffsetMetadata:
        active = self.active_segment
        return LogOffsetMetadata(self._leo, active.base_offset, active.size)

    def _offset_metadata(self, offset: int) -> LogOffsetMetadata:
        """Where ``offset`` lives: the start of the batch holding it (or the end of the data)."""
        if offset >= self._leo:
            return self._leo_metadata()
        i = max(0, bisect.bisect_right(self._bases, offset) - 1)
        segment = self._segments[i]
        found = segment.translate_offset(offset)
        position = segment.size if found is None else found.position
        return LogOffsetMetadata(offset, segment.base_offset, position)

    def _hw_metadata(self) -> LogOffsetMetadata:
        hw = self._hw
        if hw == self._leo:
            return self._leo_metadata()
        meta = self._hw_meta
        if meta is None or meta.offset != hw:
            meta = self._hw_meta = self._offset_metadata(hw)
        return meta

    # ------------------------------------------------------------------ read

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        isolation: Isolation = Isolation.HIGH_WATERMARK,
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """Whole batches from the one holding ``start_offset``, up to ``max_bytes`` (the first
        batch whole if ``min_one_message``), never past the bound: HW for consumers, LEO for
        followers (``Isolation.LOG_END``), the last stable offset for read_committed consumers
        (``Isolation.TXN_COMMITTED``).

        ``start_offset == bound`` -> empty (a caught-up reader); ``start_offset`` below the log
        start offset or above LEO -> OffsetOutOfRange; between HW and LEO -> empty.
        """
        if self._closed:
            self._check_open()
        leo = self._leo
        segments = self._segments
        lso = self.last_stable_offset if isolation is Isolation.TXN_COMMITTED else self._hw
        if lso < self._hw:
            bound_offset, bound_base, bound_position = self._offset_metadata(lso)
        elif isolation is Isolation.LOG_END or self._hw == leo:
            # Bounded by the log end (the common case of a consumer: HW == LEO on this
            # single-replica broker): the active segment's end, no LogOffsetMetadata built.
            bound_offset = leo
            active = segments[-1]
            bound_base, bound_position = active.base_offset, active.size
        else:
            bound = self._hw_metadata()
            bound_offset, bound_base, bound_position = bound
        if start_offset == bound_offset:
            return self._fetch_info(None)
        if start_offset > leo or start_offset < self._log_start_offset:
            raise OffsetOutOfRange(
                f"offset {start_offset} outside [{self._log_start_offset}, {leo}] of "
                f"{self.topic}-{self.partition}"
            )
        if start_offset > bound_offset:
            return self._fetch_info(None)
        for i in range(max(0, bisect.bisect_right(self._bases, start_offset) - 1), len(segments)):
            segment = segments[i]
            base = segment.base_offset
            if base > bound_base:
                break
            max_position = bound_position if base == bound_base else segment.size
            fetched = segment.read(start_offset, max_bytes, max_position, min_one_message)
            if fetched is not None and fetched.size > 0:
                return FetchDataInfo(fetched, self._hw, self._log_start_offset, leo)
        return self._fetch_info(None)

    def _fetch_info(self, fetched: FetchSlice | None) -> FetchDataInfo:
        return FetchDataInfo(fetched, self._hw, self._log_start_offset, self._leo)

    # ------------------------------------------------------------------ offsets by timestamp

    def fetch_offset_by_timestamp(
        self, timestamp: int, isolation: Isolation = Isolation.HIGH_WATERMARK
    ) -> TimestampAndOffset | None:
        """ListOffsets: -2 earliest (log start offset), -1 latest (HW for consumers, the last
        stable offset for read_committed ones -- ``TXN_COMMITTED`` --, LEO for ``LOG_END``), -3
        the first offset holding the max timestamp, otherwise the first offset whose timestamp
        is >= ``timestamp``. None when there is no such offset (or, for consumers, it is not
        below that bound: Kafka's ``lastFetchableOffset``). Timestamp -1 in the answer means
        "not applicable".
        """
        self._check_open()
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return TimestampAndOffset(rec.NO_TIMESTAMP, self._log_start_offset)
        if isolation is Isolation.LOG_END:
            bound = self._leo
        elif isolation is Isolation.TXN_COMMITTED:
            bound = self.last_stable_offset
        else:
            bound = self._hw
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(rec.NO_TIMESTAMP, bound)
        if timestamp == MAX_TIMESTAMP:
            found: tuple[int, int] | None = self._max_timestamp_and_offset()
        elif timestamp < 0:
            raise InvalidRequest(f"unsupported ListOffsets timestamp {timestamp}")
        else:
            found = None
            for segment in self._segments:
                if segment.size > 0 and segment.largest_timestamp >= timestamp:
                    found = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
                    if found is not None:
                        break
        if found is None:
            return None
        result = TimestampAndOffset(found[0], found[1])
        if result.offset >= bound or result.offset < self._log_start_offset:
            return None
        return result

    def _max_timestamp_and_offset(self) -> tuple[int, int] | None:
        """ListOffsets -3 (KIP-734): the largest timestamp at or above the log start offset and
        the first offset holding it, not its batch's last offset (Kafka 3.9's
        ``UnifiedLog.fetchOffsetByTimestamp`` after KAFKA-16310). Each segment's max timestamp
        is known in memory (its time index's last entry), so only the winning segment is read.
        In the segment the log start offset cuts (after DeleteRecords) the max may lie below it
        (Kafka would answer that unreadable offset): if no record from the log start on holds
        it, that segment's max from there is found by a scan. Ties: the earliest offset."""
        start = self._log_start_offset
        best: tuple[int, LogSegment] | None = None
        for i, segment in enumerate(self._segments):
            end = self._bases[i + 1] if i + 1 < len(self._bases) else self._leo
            if segment.size == 0 or end <= start:
                continue
            top = segment.max_timestamp_so_far
            if segment.base_offset < start and (
                top < 0 or segment.find_offset_by_timestamp(top, start) is None
            ):
                cut = segment.max_timestamp_from(start)
                top = rec.NO_TIMESTAMP if cut is None else cut.timestamp
            if best is None or top > best[0]:
                best = (top, segment)
        if best is None or best[0] < 0:
            return None
        return best[1].find_offset_by_timestamp(best[0], start)

    # ------------------------------------------------------------------ log start / retention

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (-1 = HW). Returns the new
        log start offset. ``offset > HW`` (or below -1) -> OffsetOutOfRange. The segments now
        wholly below it are removed by the next retention pass, as in Kafka.

        The log is flushed first (recovery point := LEO), so a checkpointed log start offset
        never covers records that a crash can still take back: otherwise the load would find
        the log start beyond the recovered LEO and empty the log (step 5 of :meth:`open`), and
        records a writer restated above it before moving it (say, an application that
        rewrites its live keys, then deletes the old copies) could be lost while their older
        copies are deleted."""
        self._check_open()
        target = self._hw if offset == -1 else offset
        if target < 0 or target > self._hw:
            raise OffsetOutOfRange(
                f"cannot delete records up to {offset}: high watermark is {self._hw}"
            )
        if target > self._log_start_offset:
            self.flush()
            self._log_start_offset = target
            self._epochs.truncate_from_start(target)
            logger.info(
                "log start offset moved",
                topic=self.topic,
                partition=self.partition,
                log_start_offset=target,
                reason="delete records",
            )
        return self._log_start_offset

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """One retention pass; returns how many segments were deleted.

        Deletes oldest segments first while one of these holds (Kafka's order): the segment lies
        wholly below the log start offset; ``retention.bytes`` is exceeded by at least the
        segment's size; the segment's largest timestamp is older than ``retention.ms``. Only a
        segment wholly below HW may go, and the active segment only if it is non-empty and fully
        committed (a fresh active segment is rolled first). Then runs due delayed deletions.
        Retention by size and time applies only with ``cleanup.policy`` holding ``delete``
        (Kafka's ``deleteOldSegments``): a compact-only log keeps its segments to the cleaner.
        """
        self._check_open()
        now = self._clock() if now_ms is None else now_ms
        deleted = self._delete_while(
            lambda segment, end: end <= self._log_start_offset, "log start offset"
        )
        if self._config.delete and self._config.retention_bytes >= 0:
            excess = self.size_in_bytes - self._config.retention_bytes

            def size_breached(segment: LogSegment, end: int) -> bool:
                nonlocal excess
                if excess - segment.size >= 0:
                    excess -= segment.size
                    return True
                return False

            deleted += self._delete_while(size_breached, "retention.bytes")
        if self._config.delete and self._config.retention_ms >= 0:
            retention_ms = self._config.retention_ms
            deleted += self._delete_while(
                lambda segment, end: now - segment.largest_timestamp > retention_ms,
                "retention.ms",
            )
        self.run_delayed_deletes(now)
        return deleted

    def replace_segments(self, cleaned_base: int, old: list[LogSegment], truncations: int) -> bool:
        """Swap the cleaned segment ``<cleaned_base>.*.cleaned`` (complete and fsynced by the
        cleaner) in for the consecutive segments ``old`` (Kafka's ``replaceSegments``).
        Returns False, touching nothing, when the log changed since the cleaning was planned:
        closed, truncated (``truncations`` is :attr:`truncation_count` then), or one of ``old``
        no longer in it (retention, DeleteRecords); the caller removes the cleaned files.

        File steps, in this order, so a crash at any point loads as either the old segments
        or the cleaned one (``open`` step 1): 1. the cleaned files ``.cleaned`` -> ``.swap``
        (the ``.log`` first, the ``.txnindex`` -- if the cleaned segment has one -- last);
        2. the old segments renamed ``.deleted`` (their files removed
        ``file.delete.delay.ms`` later, so fetches in flight finish); 3. ``.swap`` -> the
        segment's own names (the ``.log`` first, the ``.txnindex`` last). Then the new segment
        replaces the old ones in the list, and the directory is marked for the flusher's
        fsync. Never the active segment. On the event loop (the cleaner's thread only writes
        the ``.cleaned`` files).

        The cleaned ``.txnindex`` (the aborted transactions whose marker the cleaned segment
        keeps, Kafka's ``CleanedTransactionMetadata``) travels with the segment: derived data
        like the other indexes, but rebuilding it needs the producer state replayed from a
        snapshot, so load takes it as it is (``open`` step 1). The producer state in memory
        and its snapshots stay valid: cleaning keeps every producer's last batch and every
        marker whose transaction still has data, so the state the log replays to is the same.
        """
        if self._closed or truncations != self._truncations or not old:
            return False
        try:
            first = next(i for i, s in enumerate(self._segments) if s is old[0])
        except StopIteration:
            return False
        if (
            first + len(old) >= len(self._segments)  # the active segment is never replaced
            or any(self._segments[first + k] is not s for k, s in enumerate(old))
            or old[0].base_offset != cleaned_base
        ):
            return False
        vfs, directory = self._vfs, self.directory
        names: tuple[str, ...] = segment_file_names(cleaned_base)
        txn_index_name = offset_file_name(cleaned_base, TXN_INDEX_SUFFIX)
        try:
            if vfs.exists(directory / (txn_index_name + CLEANED_SUFFIX)):
                names = (*names, txn_index_name)
            for name in names:
                vfs.rename(directory / (name + CLEANED_SUFFIX), directory / (name + SWAP_SUFFIX))
            del self._segments[first : first + len(old)]
            del self._bases[first : first + len(old)]
            self._schedule_delete(old)
            for merged in old[1:]:  # their snapshots go with them (Kafka's deletedNotReplaced)
                vfs.remove(snapshot_path(directory, merged.base_offset))
            for name in names:
                vfs.rename(directory / (name + SWAP_SUFFIX), directory / name)
            segment = self._open_segment(
                directory, cleaned_base, self._config, self._clock(), vfs, self._file_cache,
                active=False,
            )  # fmt: skip
        except OSError as exc:
            # The files are somewhere between the old segments and the cleaned one, and the
            # segment list has a hole where the old ones were: no read may be served from it.
            self._go_offline(exc, "segment swap", old)
            raise
        self._segments.insert(first, segment)
        self._bases.insert(first, cleaned_base)
        self._hw_meta = None
        self._dir_version += 1
        return True

    def _delete_while(self, predicate: Callable[[LogSegment, int], bool], reason: str) -> int:
        deletable: list[LogSegment] = []
        for segment, end in self._segment_ranges():
            is_last_and_empty = segment is self.active_segment and segment.size == 0
            if self._hw >= end and not is_last_and_empty and predicate(segment, end):
                deletable.append(segment)
            else:
                break
        if not deletable:
            return 0
        if deletable[-1] is self.active_segment:
            self.roll()
        count = len(deletable)
        # Log start offset first: a reader must never be sent to a segment being deleted.
        new_start = self._bases[count]
        if new_start > self._log_start_offset:
            self._log_start_offset = new_start
            self._epochs.truncate_from_start(new_start)
        del self._segments[:count]
        del self._bases[:count]
        self._hw_meta = None
        self._schedule_delete(deletable)
        delete_snapshots_below(self.directory, self._bases[0], self._vfs)
        logger.info(
            "deleted segments",
            topic=self.topic,
            partition=self.partition,
            reason=reason,
            segments=[s.base_offset for s in deletable],
            log_start_offset=self._log_start_offset,
        )
        return count

    def _schedule_delete(self, segments: list[LogSegment]) -> None:
        due = self._clock() + self._config.file_delete_delay_ms
        for segment in segments:
            segment.rename_to_deleted()
            self._pending_deletes.append((due, segment))
        self._dir_version += 1
        if self._config.file_delete_delay_ms == 0:
            self.run_delayed_deletes(due)

    def run_delayed_deletes(self, now_ms: int | None = None) -> int:
        """Remove the files of segments deleted at least ``file.delete.delay.ms`` ago."""
        now = self._clock() if now_ms is None else now_ms
        keep: list[tuple[int, LogSegment]] = []
        removed = 0
        for due, segment in self._pending_deletes:
            if due <= now:
                segment.delete()
                removed += 1
            else:
                keep.append((due, segment))
        self._pending_deletes = keep
        return removed

    # ------------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> bool:
        """Remove every offset >= ``offset`` (a follower diverging from its leader). The batch
        containing ``offset`` goes whole, so LEO becomes the first offset actually missing.
        Returns whether any record was removed. HW and recovery point are clamped to the new
        LEO, producer state is dropped (rebuilt from what remains on the next idempotent
        append) with its snapshots past ``offset``, and the leader epoch cache loses the entries
        starting at or after the new LEO -- also when no record goes (``offset >= LEO``): an
        epoch that starts at LEO wrote nothing here, and a follower must stop asking for it
        (see ``leader_epoch.follower_truncation_offset``). Below the first segment the log is
        emptied and restarts at ``offset`` (:meth:`truncate_fully_and_start_at`).

        Order, so that a crash at any step reopens as a consistent log (the crash tests cut it
        at each one): 1. producer snapshots past ``offset`` removed; 2. later segments renamed
        ``.deleted`` newest first, and the directory fsynced; 3. the new active segment cut
        (indexes, then ``.log``) and fsynced; 4. only then the epoch cache file rewritten. A
        crash before 4 leaves the old cache, whose entries past the surviving LEO the load
        drops. Without the fsync in 2, a power loss could bring deleted segments back behind
        the shortened one (a gap in the offsets); without the one in 3, records whose epochs
        4 had already forgotten.
        """
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self._leo:
            self._epochs.truncate_from_end(offset)
            return False
        self._producers = None  # rebuilt from what remains, on the next idempotent append
        self._idle_snapshot = None  # known again below, if a snapshot sits at the new LEO
        self._truncations += 1
        delete_snapshots_above(self.directory, offset, self._vfs)
        if offset < self._bases[0]:
            self.truncate_fully_and_start_at(offset)
            return True
        keep = bisect.bisect_right(self._bases, offset)  # segments with base <= offset stay
        doomed = self._segments[keep:]
        del self._segments[keep:]
        del self._bases[keep:]
        if doomed:
            # Newest first: a crash part-way leaves a contiguous log (a longer prefix), never
            # a gap where an older segment went and a newer one stayed. Durable before the
            # cut: a power loss must not bring them back behind a shortened segment.
            self._schedule_delete(doomed[::-1])
            self._vfs.fsync_dir(self.directory)
            self._dir_synced_version = self._dir_version
        active = self.active_segment
        active.truncate_to(offset)
        active.set_active(True)
        active.resize_indexes(self._config.segment_index_bytes)
        self._leo = active.read_next_offset()
        self._log_start_offset = min(self._log_start_offset, self._leo)
        lowered = self._leo < self._recovery_point
        self._recovery_point = min(self._recovery_point, self._leo)
        self._hw_meta = None
        self.update_high_watermark(min(self._hw, self._leo))
        self._pending_flush_offset = None
        active.flush()
        self._epochs.truncate_from_end(self._leo)
        left = [o for o, _ in snapshot_files(self.directory, self._vfs)]
        self._idle_snapshot = self._idle_snapshot_at_leo(left)
        logger.info(
            "truncated log", topic=self.topic, partition=self.partition, log_end_offset=self._leo
        )
        if lowered and self.recovery_point_lowered is not None:
            self.recovery_point_lowered()
        if self.truncated is not None:
            self.truncated(self._leo)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart empty at ``offset`` (Kafka's
        ``truncateFullyAndStartAt``: a follower whose log end lies below the leader's log start
        restarts at it). LEO, log start, recovery point and HW become ``offset``; the epoch
        cache is emptied, after the new segment and the deletions are durable (as in
        :meth:`truncate_to`)."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot restart at negative offset {offset}")
        # Kafka's truncateFullyAndStartAt: no producer state, every snapshot removed.
        self._producers = None
        self._idle_snapshot = EMPTY_SNAPSHOT
        self._truncations += 1
        delete_snapshots_above(self.directory, -1, self._vfs)
        doomed = self._segments[::-1]  # newest first, as in truncate_to
        self._segments.clear()
        self._bases.clear()
        self._schedule_delete(doomed)
        segment = self._open_segment(
            self.directory, offset, self._config, self._clock(), self._vfs, self._file_cache
        )
        self._segments.append(segment)
        self._bases.append(offset)
        lowered = offset < self._recovery_point
        self._leo = self._log_start_offset = self._recovery_point = offset
        self._hw = offset
        self._hw_meta = None
        self._pending_flush_offset = None
        self._vfs.fsync_dir(self.directory)
        self._dir_synced_version = self._dir_version
        self._epochs.clear()
        logger.info(
            "truncated log fully", topic=self.topic, partition=self.partition, start_offset=offset
        )
        if lowered and self.recovery_point_lowered is not None:
            self.recovery_point_lowered()
        if self.truncated is not None:
            self.truncated(offset)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Flush, finish pending deletions and close every segment (trims the indexes).

        The files are closed even when the flush fails (an ``OSError``: EIO, or ENOSPC from
        a file system that allocates at writeback); the error is raised afterwards, so the
        LogManager knows this log was not made durable and writes no clean-shutdown marker.
        """
        if self._closed:
            return
        failure: OSError | None = None
        try:
            self.flush()
            active = self._segments[-1]
            if active.size > 0:
                # Final time-index entry and trimmed indexes on disk before the LogManager
                # writes the clean-shutdown marker: the next load trusts the indexes as they
                # are, and the last time-index entry is the segment's max timestamp that
                # retention.ms compares.
                active.on_becoming_inactive()
                active.flush()
        except OSError as exc:
            failure = exc
        if failure is None:
            # Kafka's clean-shutdown producer snapshot at LEO: the next build starts from it
            # (fsynced when the state is built; a copy of the idle state's need not be: one
            # that a power loss tore fails its CRC and the load falls back to the log).
            try:
                self._take_snapshot(self._leo, sync=self._producers is not None)
            except OSError as exc:
                logger.warning("producer snapshot not written", dir=str(self.directory),
                               error=str(exc))  # fmt: skip
        try:
            self.run_delayed_deletes(2**63 - 1)
        except OSError as exc:  # the files stay renamed *.deleted: the next open removes them
            logger.warning("delayed deletes not finished", dir=str(self.directory),
                           error=str(exc))  # fmt: skip
        for segment in self._segments:
            try:
                segment.close()
            except OSError as exc:
                failure = failure or exc
                with contextlib.suppress(OSError):
                    segment.close_handlers()
        self._closed = True
        if failure is not None:
            raise failure

    def delete(self) -> None:
        """Remove every file of this log and its directory (the topic is being deleted)."""
        self.run_delayed_deletes(2**63 - 1)
        for segment in self._segments:
            segment.delete()
        self._segments.clear()
        self._bases.clear()
        self._closed = True
        for name in self._vfs.listdir(self.directory):
            self._vfs.remove(self.directory / name)
        os.rmdir(self.directory)

    def _go_offline(self, exc: OSError, during: str, also: Iterable[LogSegment] = ()) -> None:
        """Take this log offline after an I/O error that left its in-memory state unusable
        (Kafka's ``LogDirFailureChannel``, for this log rather than its whole directory):
        every read and write raises KafkaStorageError (the partition answers
        KAFKA_STORAGE_ERROR, the rest of the broker keeps serving), background work skips it
        (it is :attr:`closed`), its files are closed without writing anything, and the
        LogManager writes no clean-shutdown marker, so the next start recovers it: ``open``
        step 1 completes a segment swap whose ``.swap`` files exist and otherwise keeps the
        old segments (the ``.cleaned`` files removed). One ERROR line."""
        self._offline = f"{during} failed: {exc}"
        self._closed = True
        logger.error(
            "log taken offline until restart: the next start completes or rolls back",
            topic=self.topic,
            partition=self.partition,
            during=during,
            error=str(exc),
        )
        for segment in (*self._segments, *also, *(s for _due, s in self._pending_deletes)):
            with contextlib.suppress(OSError):
                segment.close_handlers()
        if self.went_offline is not None:
            self.went_offline(self)

    def _check_open(self) -> None:
        if self._offline is not None:
            raise KafkaStorageError(
                f"log {self.topic}-{self.partition} is offline: {self._offline}"
            )
        if self._closed:
            # A closed log belongs to a deleted topic (or a stopping broker): to a client the
            # partition is no longer hosted here, a retriable condition.
            raise UnknownTopicOrPartition(f"log {self.topic}-{self.partition} is closed")
