"""A log segment: ``<base>.log`` + ``<base>.index`` + ``<base>.timeindex`` (+ ``<base>.txnindex``),
as Kafka stores them.

Files (``base`` = the segment's base offset, zero-padded to 20 digits)::

    <base>.log        record batches (magic v2), back to back, exactly as received/served
    <base>.index      OffsetIndex  (sluice.server.storage.index): sparse offset -> byte position
    <base>.timeindex  TimeIndex    (sluice.server.storage.index): sparse max-timestamp-so-far ->
    offset
    <base>.txnindex   TransactionIndex (sluice.server.storage.txn_index): the transactions aborted
                      by a marker in this segment; created with its first entry

Only the ``.log`` is authoritative; the indexes and the in-memory fields (size, max timestamp,
bytes since the last index entry) are derived from it and rebuilt by :meth:`LogSegment.recover`.

Concurrency: Sluice runs one asyncio thread. Every method is called from the event-loop thread;
file I/O is synchronous (it hits the page cache). Mutators (``append``, ``recover``,
``truncate_to``, ``on_becoming_inactive``, ``flush``, ``close``, ``delete``, renames) are called
only by the owning ``sluice.server.storage.log.Log`` from the partition's append / roll / load /
retention paths;
``read``, ``translate_offset``, ``find_offset_by_timestamp`` and ``batches`` by anyone. Reads use
``pread`` on the descriptor, so there is no shared file position to disturb.

Open files (issue 13: more segments than ``ulimit -n``). The *active* segment (the last one of
its log, which appends write) keeps its three files open. An *inactive* one may have them
closed (:meth:`LogSegment.release_files`, called by the LogManager's
:class:`~sluice.server.storage.file_cache.OpenFileCache` when too many are open) and reopens
them on its next use; what the log needs of it without reading it (size, max timestamp, paths)
stays in memory. A :class:`FetchSlice` pins its segment while it exists, so a response waiting
to ``sendfile`` from a segment never has the descriptor closed under it.
"""

from __future__ import annotations

import contextlib
import random
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from sluice.protocol.errors import CorruptRecordError, ProtocolError
from sluice.protocol.records import (
    ATTR_TIMESTAMP_TYPE_MASK,
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    RECORDS_OFFSET,
    BatchHeader,
    parse_header,
)
from sluice.protocol.varint import decode_varint, decode_varlong

from .file_cache import OpenFileCache
from .index import (
    DEFAULT_MAX_INDEX_SIZE,
    NO_TIMESTAMP,
    CorruptIndexError,
    InvalidIndexAppendError,
    OffsetIndex,
    StorageError,
    TimeIndex,
)
from .layout import DELETED_SUFFIX, LOG_SUFFIX, TXN_INDEX_SUFFIX, segment_file_names
from .log_config import TOPIC_CONFIG
from .txn_index import TransactionIndex
from .vfs import DEFAULT_VFS, VFS, Buffer, VFSFile, as_path

#: The topic defaults of ``index.interval.bytes`` and ``max.message.bytes`` (a segment opened
#: without its log's config: tools, tests).
DEFAULT_INDEX_INTERVAL_BYTES: int = TOPIC_CONFIG.default("index.interval.bytes")
DEFAULT_MAX_MESSAGE_BYTES: int = TOPIC_CONFIG.default("max.message.bytes")
_INT32_MAX = 2**31 - 1
_CRC_CHUNK = 1 << 20  # recovery checksums big batches in chunks of this size
_HEADER_CACHE_SIZE = 128  # batch headers kept per segment for translate_offset
# Before 3.13 an mmap keeps a duplicate of its file's descriptor (see AbstractIndex._map_file).
_MAPS_HOLD_FDS = sys.version_info < (3, 13)
#: Descriptors an open segment holds at most: its ``.log``, and one per mapped index where a map
#: keeps one (Python < 3.13).
FILES_PER_SEGMENT = 3 if _MAPS_HOLD_FDS else 1


class SegmentOffsetOverflowError(StorageError):
    """A batch's last offset does not fit the segment's int32 relative offsets: roll first."""


class BatchPosition(NamedTuple):
    """Where a batch is: ``offset`` is its *last* offset (as Kafka's LogOffsetPosition)."""

    offset: int
    position: int
    size: int
    base_offset: int


class TimestampAndOffset(NamedTuple):
    timestamp: int
    offset: int


class FetchSlice:
    """``size`` bytes of a segment's ``.log`` from ``position``: whole batches, the first one
    starting at offset ``first_offset``. The broker either sends it with
    ``sendfile(file.fileno(), position, size)`` or copies it with :meth:`read_bytes`.

    The descriptor stays valid while the slice exists: the slice *pins* its segment (a count
    the segment keeps, taken here and given back when the slice is freed), and the open-file
    cache never closes a pinned segment's files. Also after ``rename_to_deleted``: the file is
    removed only after ``file.delete.delay.ms``, so a response in flight can finish.

    A plain class with slots, not a frozen dataclass: one is built per partition per Fetch,
    and this costs less to build than the dataclass did without the pin (bench/NOTES.md).
    Read-only by convention.
    """

    __slots__ = ("_segment", "file", "first_offset", "position", "size")

    def __init__(
        self,
        file: VFSFile,
        position: int,
        size: int,
        first_offset: int,
        segment: LogSegment | None = None,
    ) -> None:
        self.file = file
        self.position = position
        self.size = size
        self.first_offset = first_offset
        self._segment = segment
        if segment is not None:
            segment._pins += 1

    def __del__(self) -> None:
        segment = self._segment
        if segment is not None:
            self._segment = None
            segment._pins -= 1

    def __repr__(self) -> str:
        return (
            f"FetchSlice({self.file!r}, position={self.position}, size={self.size}, "
            f"first_offset={self.first_offset})"
        )

    def read_bytes(self) -> bytes:
        """Copy the slice (``pread``; the last batch may be cut short by the size limit)."""
        return self.read_range(self.position, self.size)

    def read_range(self, position: int, size: int) -> bytes:
        """Copy ``size`` bytes of the file from ``position`` (a part of the slice, for a copy
        in chunks); fewer if the file shrank underneath (truncation)."""
        if size <= 0:
            return b""
        data = self.file.pread(size, position)
        if len(data) == size:
            return data
        parts = [data]
        done = len(data)
        while done < size:
            chunk = self.file.pread(size - done, position + done)
            if not chunk:
                break  # the file shrank underneath (truncation): return what is there
            parts.append(chunk)
            done += len(chunk)
        return b"".join(parts)


def segment_paths(directory: Path, base_offset: int, suffix: str = "") -> tuple[Path, Path, Path]:
    """Paths of the ``.log``, ``.index`` and ``.timeindex`` files (plus ``suffix``)."""
    log_name, index_name, time_index_name = segment_file_names(base_offset, suffix)
    directory = as_path(directory)
    return directory / log_name, directory / index_name, directory / time_index_name


def random_segment_jitter(
    segment_jitter_ms: int, segment_ms: int, rng: random.Random | None = None
) -> int:
    """The roll jitter of a new segment: uniform in ``[0, min(segment.jitter.ms, segment.ms))``,
    0 when ``segment.jitter.ms`` is 0.

    Why jitter: partitions created together (a new topic, a broker restart) would otherwise all
    reach ``segment.ms`` in the same second and roll, trim, flush and later delete their segments
    at once, a burst of disk I/O; drawing a per-segment jitter spreads those moments out.
    """
    if segment_jitter_ms <= 0 or segment_ms <= 0:
        return 0
    return (rng or random).randrange(min(segment_jitter_ms, segment_ms))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _RecoveryStart(NamedTuple):
    """Where :meth:`LogSegment.recover` starts walking: a batch boundary, and the last offset
    of the batch before it (``base_offset - 1`` if none)."""

    position: int
    previous_last_offset: int


class _NotMonotonic(Exception):
    """Sampled leader epochs of a segment decrease (see :meth:`LogSegment.epoch_changes`)."""


class LogSegment:
    """One segment of a partition log. See the module docstring for files and concurrency.

    In-memory state (all derived from the files): ``size`` (bytes in ``.log``),
    ``max_timestamp_so_far`` / ``offset_of_max_timestamp_so_far`` (updated only on a strictly
    greater timestamp), bytes appended since the last index entry, the first batch's timestamp
    (roll clock), ``created_ms`` (wall clock at open, for segments without timestamps).

    Indexing rule (append and recovery alike): before writing a batch, if more than
    ``index_interval_bytes`` were written since the last index entry, add offset-index entry
    (batch last offset -> batch position) and offer the time index (max timestamp so far -> its
    offset). The first batch never gets an entry: a lookup below the first entry scans from 0.

    Open files: ``files_open`` says whether the ``.log`` and the indexes are open. Every method
    that reads or writes them reopens them first when they are closed, except the two only the
    active segment's append path calls (``append``, ``should_roll``): an active segment's files
    are open (:meth:`set_active` opens them and the cache never closes them). While open, a
    segment given a ``cache`` is registered there with :attr:`open_files` descriptors,
    evictable unless active; :meth:`release_files` closes them, flushing first if writes may be
    unflushed (a rolled segment until the Log's background flusher fsynced it, a recovery or
    truncation).
    ``_pins`` counts the live :class:`FetchSlice` objects of this segment (``pinned``).
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        log_file: VFSFile,
        log_path: Path,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        rolling_jitter_ms: int,
        vfs: VFS,
        now_ms: int,
        cache: OpenFileCache | None = None,
        active: bool = True,
    ) -> None:
        """Use :meth:`open`."""
        self.directory = as_path(directory)
        self.base_offset = base_offset
        self._file = log_file
        self.log_path = log_path
        self._offset_index = offset_index
        self._time_index = time_index
        self.index_path = offset_index.path
        self.time_index_path = time_index.path
        # <base>.txnindex<suffix>: no descriptor held (see txn_index); the Log writes, truncates
        # (with the segment) and rebuilds it, since its entries need the producer state.
        stem, _, suffix = log_path.name.partition(LOG_SUFFIX)
        self.txn_index = TransactionIndex(
            log_path.with_name(stem + TXN_INDEX_SUFFIX + suffix), base_offset, vfs
        )
        self._open = True
        self._active = active
        # Unflushed writes a release must fsync first: an active segment is assumed to have
        # some (kept after roll until the Log's flusher is done, mark_flushed); an inactive one
        # opened is clean; recover()/truncate_to() set it again.
        self._dirty = active
        self._pins = 0
        self._cache = cache
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.rolling_jitter_ms = rolling_jitter_ms
        self.created_ms = now_ms
        self._vfs = vfs
        self._size = log_file.size()
        last_time_entry = time_index.last_entry
        self.max_timestamp_so_far: int = last_time_entry.timestamp
        self.offset_of_max_timestamp_so_far: int = last_time_entry.offset
        # Kafka restarts this counter at 0 on open; continuing from the last index entry instead
        # makes "append, restart, append" index exactly like an uninterrupted append.
        self._bytes_since_last_index_entry = self._size - offset_index.last_entry.position
        self._rolling_based_timestamp: int | None = None  # first batch's max timestamp
        # position -> header of a whole batch already read by translate_offset (see _header_at).
        self._headers: dict[int, BatchHeader] = {}
        #: Byte at which the last :meth:`recover` started reading (0: the whole file).
        self.recovered_from = 0
        #: Whether the last :meth:`recover` walked over a control batch (a transaction marker:
        #: the Log then rebuilds the ``.txnindex``).
        self.recovered_control = False
        if cache is not None:
            self._hold()

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        rolling_jitter_ms: int = 0,
        vfs: VFS = DEFAULT_VFS,
        now_ms: int | None = None,
        file_suffix: str = "",
        cache: OpenFileCache | None = None,
        active: bool = True,
    ) -> LogSegment:
        """Open the segment with this base offset in ``directory``, creating missing files (a new
        index is preallocated to ``max_index_size``). Existing indexes are trusted as they are:
        call :meth:`sanity_check` and, on :class:`CorruptIndexError`, :meth:`recover`.
        ``cache`` bounds the open files (see the class docstring); ``active``: whether appends
        will write it (never evicted), else the cache may close its files."""
        log_path, index_path, time_index_path = segment_paths(directory, base_offset, file_suffix)
        if cache is not None:
            cache.make_room(FILES_PER_SEGMENT)
        log_file = vfs.open(log_path, create=True)
        try:
            offset_index = OffsetIndex(index_path, base_offset, max_index_size, vfs=vfs)
            try:
                time_index = TimeIndex(time_index_path, base_offset, max_index_size, vfs=vfs)
            except BaseException:
                offset_index.close_handler()
                raise
        except BaseException:
            log_file.close()
            raise
        return cls(
            directory,
            base_offset,
            log_file,
            log_path,
            offset_index,
            time_index,
            index_interval_bytes=index_interval_bytes,
            max_index_size=max_index_size,
            rolling_jitter_ms=rolling_jitter_ms,
            vfs=vfs,
            now_ms=_now_ms() if now_ms is None else now_ms,
            cache=cache,
            active=active,
        )

    # -- properties ----------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Bytes in the ``.log``."""
        return self._size

    @property
    def file(self) -> VFSFile:
        if not self._open:
            self._reopen()
        return self._file

    @property
    def offset_index(self) -> OffsetIndex:
        if not self._open:
            self._reopen()
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if not self._open:
            self._reopen()
        return self._time_index

    # -- open files ----------------------------------------------------------------------------

    @property
    def files_open(self) -> bool:
        """Whether the ``.log`` and the indexes are open (see the class docstring)."""
        return self._open

    @property
    def open_files(self) -> int:
        """Descriptors held: 0 when closed, else the ``.log`` and, on Python < 3.13, one per
        mapped index (an empty, trimmed index has no map)."""
        if not self._open:
            return 0
        if not _MAPS_HOLD_FDS:
            return 1
        return 1 + self._offset_index.mapped + self._time_index.mapped

    @property
    def pinned(self) -> bool:
        """Whether a :class:`FetchSlice` of this segment exists (its files must stay open)."""
        return self._pins > 0

    @property
    def active(self) -> bool:
        return self._active

    def set_active(self, active: bool) -> None:
        """The Log says whether this is its active segment: one becoming active is opened and
        never evicted; one becoming inactive (after :meth:`on_becoming_inactive`) may be."""
        if active and not self._open:
            self._reopen()
        self._active = active
        if active:
            self._dirty = True
        if self._cache is not None and self._open:
            self._hold()

    def release_files(self) -> None:
        """Close the three files, keeping what is known of them in memory; the next use reopens
        them. Flushes first if writes may be unflushed. A no-op when closed. The cache calls
        this on an evictable, unpinned segment; closing an active or pinned one is a bug."""
        if not self._open:
            return
        if self._cache is not None:
            self._cache.forget(self)
        if self._dirty:
            self.flush()
        self._open = False
        self._offset_index.close()
        self._time_index.close()
        self._file.close()

    def _reopen(self) -> None:
        """Open the files again (after :meth:`release_files`); the indexes as they are on disk
        (trimmed at roll, so they hold exactly their entries)."""
        if self._cache is not None:
            self._cache.make_room(FILES_PER_SEGMENT)
        log_file = self._vfs.open(self.log_path, create=False)
        try:
            offset_index = OffsetIndex(
                self.index_path, self.base_offset, self.max_index_size, vfs=self._vfs
            )
            try:
                time_index = TimeIndex(
                    self.time_index_path, self.base_offset, self.max_index_size, vfs=self._vfs
                )
            except BaseException:
                offset_index.close_handler()
                raise
        except BaseException:
            log_file.close()
            raise
        self._file = log_file
        self._offset_index = offset_index
        self._time_index = time_index
        self._open = True
        if self._cache is not None:
            self._hold()

    def _hold(self, files: int | None = None) -> None:
        # An active segment counts as its maximum: its indexes are mapped and unmapped as they
        # are re-extended and trimmed, without telling the cache. An inactive one as it is, or
        # as ``files`` while an operation may map its indexes (recovery).
        assert self._cache is not None
        active = self._active
        if files is None:
            files = FILES_PER_SEGMENT if active else self.open_files
        self._cache.hold(self, files, evictable=not active)

    @property
    def last_modified_ms(self) -> int:
        return self._vfs.mtime_ms(self.log_path)

    @last_modified_ms.setter
    def last_modified_ms(self, value: int) -> None:
        self._vfs.set_mtime_ms(self.log_path, value)

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, or the file's last-modified time when no record has one
        (what retention.ms compares against)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return self.last_modified_ms

    # -- append --------------------------------------------------------------------------------

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_max_timestamp: int,
        records: Buffer,
        *,
        rest: Buffer = b"",
    ) -> None:
        """Append ``records`` (one or more whole, validated batches with offsets assigned).

        ``rest``, if given, is written right after ``records`` and counts as part of them: the
        Log passes a big batch as its rewritten header (``records``) and its untouched body
        (``rest``) rather than copying a megabyte to change 16 bytes.

        ``largest_offset``: last offset in ``records``; ``largest_timestamp``: their max
        timestamp; ``offset_of_max_timestamp``: the offset the time index should map it to. Pass
        the *last offset of the batch* holding the max timestamp (Kafka's "shallow" offset) and
        append one batch per call if recovery must rebuild byte-identical indexes: recovery
        indexes per batch with each batch's last offset.

        Raises :class:`SegmentOffsetOverflowError` (nothing written) if ``largest_offset`` does not
        fit; an OSError from the write leaves ``size`` unchanged and the file cut back to it.
        Only the partition's append path calls this, after :meth:`should_roll` said no.
        """
        # Hot path (once per produced batch): locals and cached index fields, no helper calls.
        head = len(records)
        size = head + len(rest)
        if size == 0:
            return
        if not 0 <= largest_offset - self.base_offset <= _INT32_MAX:
            raise SegmentOffsetOverflowError(
                f"offset {largest_offset} does not fit segment {self.log_path} "
                f"(base offset {self.base_offset})"
            )
        offset_index = self._offset_index
        time_index = self._time_index
        if offset_index.trimmed or time_index.trimmed:
            self._ensure_indexes_extended()
        index_it = self._bytes_since_last_index_entry > self.index_interval_bytes
        if index_it:
            # Check the index invariants before writing, so a caller bug (no roll when the
            # indexes are full, offsets not increasing) cannot leave unindexable bytes behind.
            if offset_index.is_full() or time_index.is_full():
                raise InvalidIndexAppendError(f"indexes of {self.log_path} are full: roll first")
            if offset_index.entries and largest_offset <= offset_index.last_offset:
                raise InvalidIndexAppendError(
                    f"offset {largest_offset} is not above the last indexed offset "
                    f"{offset_index.last_offset} of {self.log_path}"
                )
        if index_it or self._size == 0:
            # Storage for the next entries (and the final time-index entry of a roll or
            # close) before the batch: on a full disk this fails (ENOSPC) with nothing
            # written, where a store into an unbacked page would be SIGBUS (AbstractIndex).
            offset_index.reserve()
            time_index.reserve()
        position = self._size
        try:
            self._file.pwrite(records, position)
            if rest:
                self._file.pwrite(rest, position + head)
        except OSError:
            # Do not leave a torn batch behind the size we report: later appends overwrite
            # from `position` anyway (pwrite), and recovery would cut it, but readers of the raw
            # file (sendfile) should never see it.
            with contextlib.suppress(OSError):
                self._file.truncate(position)
            raise
        if position == 0:
            self._rolling_based_timestamp = largest_timestamp
        self._size = position + size
        if largest_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = largest_timestamp
            self.offset_of_max_timestamp_so_far = offset_of_max_timestamp
        if index_it:
            offset_index.append(largest_offset, position)
            time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far)
            self._bytes_since_last_index_entry = size
        else:
            self._bytes_since_last_index_entry += size

    def has_index_room(self, appends: int) -> bool:
        """Whether ``appends`` more :meth:`append` calls could each add an index entry without
        either index being full before one of them (what :meth:`should_roll` asks of one)."""
        offset_index = self._offset_index
        time_index = self._time_index
        if offset_index.trimmed or time_index.trimmed:
            self._ensure_indexes_extended()
        return (
            offset_index.entries + appends <= offset_index.max_entries
            and time_index.entries + appends <= time_index.max_entries - 1
        )

    def append_batches(self, records: Buffer, batches: Sequence[tuple[int, int, int]]) -> None:
        """Append back-to-back whole batches with one write: the follower's append of a fetched
        run of batches (:meth:`Log.append_as_follower`).

        ``batches`` describes ``records`` batch by batch: ``(last offset, max timestamp, size)``.
        The segment ends exactly as after one :meth:`append` per batch (``append(last, max
        timestamp, last, batch)``), so replicas and recovery keep byte-identical indexes: the
        index entries are decided batch by batch (one where the bytes since the previous entry
        passed ``index_interval_bytes``, at that batch's position); only the write is one.

        The caller checked, for the run as a whole, that the segment is not empty, that it need
        not roll (:meth:`should_roll` with the run's size, max timestamp and last offset) and
        that its indexes have room (:meth:`has_index_room` with the number of batches): then no
        batch would have rolled on its own. Raises :class:`SegmentOffsetOverflowError` or
        :class:`InvalidIndexAppendError` with nothing written; an OSError from the write leaves
        the segment as it was (the file cut back to ``size``).
        """
        size = len(records)
        if not batches or size == 0:
            return
        base = self.base_offset
        first_last, last_last = batches[0][0], batches[-1][0]
        if first_last < base or last_last - base > _INT32_MAX:
            raise SegmentOffsetOverflowError(
                f"offsets up to {last_last} do not fit segment {self.log_path} (base offset {base})"
            )
        if sum(b[2] for b in batches) != size:
            raise ValueError("batch sizes do not add up to the records given")
        offset_index = self._offset_index
        time_index = self._time_index
        if offset_index.trimmed or time_index.trimmed:
            self._ensure_indexes_extended()
        # Which batches take an index entry: the rule of append(), batch by batch.
        interval = self.index_interval_bytes
        since = self._bytes_since_last_index_entry
        indexed: list[int] = []
        for n, (_last, _ts, batch_size) in enumerate(batches):
            if since > interval:
                indexed.append(n)
                since = batch_size
            else:
                since += batch_size
        if indexed:
            if not self.has_index_room(len(indexed)):
                raise InvalidIndexAppendError(f"indexes of {self.log_path} are full: roll first")
            first_indexed = batches[indexed[0]][0]
            if offset_index.entries and first_indexed <= offset_index.last_offset:
                raise InvalidIndexAppendError(
                    f"offset {first_indexed} is not above the last indexed offset "
                    f"{offset_index.last_offset} of {self.log_path}"
                )
        if indexed or self._size == 0:
            # Storage for the entries and the final time-index entry before the write (append).
            offset_index.reserve(max(len(indexed) + 1, 2))
            time_index.reserve(max(len(indexed) + 1, 2))
        position = self._size
        try:
            self._file.pwrite(records, position)
        except OSError:
            with contextlib.suppress(OSError):
                self._file.truncate(position)
            raise
        if position == 0:
            self._rolling_based_timestamp = batches[0][1]
        self._size = position + size
        max_so_far = self.max_timestamp_so_far
        offset_of_max = self.offset_of_max_timestamp_so_far
        next_indexed = indexed[0] if indexed else -1
        k = 0
        for n, (last_offset, max_timestamp, batch_size) in enumerate(batches):
            if max_timestamp > max_so_far:
                max_so_far, offset_of_max = max_timestamp, last_offset
            if n == next_indexed:
                offset_index.append(last_offset, position)
                time_index.maybe_append(max_so_far, offset_of_max)
                k += 1
                next_indexed = indexed[k] if k < len(indexed) else -1
            position += batch_size
        self.max_timestamp_so_far = max_so_far
        self.offset_of_max_timestamp_so_far = offset_of_max
        self._bytes_since_last_index_entry = since

    # -- reading -------------------------------------------------------------------------------

    def _read_header(self, position: int, end: int) -> BatchHeader | None:
        """The header of the batch at ``position`` if the whole batch lies before ``end``;
        None at the end or before a partial batch. Raises CorruptRecordError on a bad header."""
        if end - position < HEADER_SIZE:
            return None
        if not self._open:
            self._reopen()
        raw = self._file.pread(HEADER_SIZE, position)
        if len(raw) < HEADER_SIZE:
            return None
        header = parse_header(raw)
        if position + header.size > end:
            return None
        return header

    def batches(self, start_position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of each whole batch from ``start_position`` (which must be a
        batch boundary), reading only the 61-byte headers."""
        position = start_position
        end = self._size
        while True:
            header = self._read_header(position, end)
            if header is None:
                return
            yield position, header
            position += header.size

    def read_batch(self, position: int, header: BatchHeader) -> bytes:
        """The bytes of the whole batch at ``position`` (a header :meth:`batches` yielded)."""
        if not self._open:
            self._reopen()
        return self._file.pread(header.size, position)

    def epoch_changes(self) -> list[BatchHeader]:
        """The header of the first batch and of every batch whose ``partitionLeaderEpoch``
        differs from the previous batch's, in order: all a leader epoch cache needs from this
        segment (the Log's rebuild of a missing or damaged ``leader-epoch-checkpoint``).

        Why not every header: that costs a read per batch, ~4 s per GiB of 1 KiB batches.
        Epochs never decrease along a log that leaders and followers wrote, so the batches at
        the sample points -- the first, each one an offset-index entry points at (one per
        ``index.interval.bytes``), the last -- are sorted by epoch too, and between two samples
        with the same epoch every batch has it. Only an interval whose ends differ is read: by
        bisection over the index entries down to two neighbouring samples, then a header scan
        between them (at most ``index.interval.bytes`` plus a batch). Cost: about
        ``changes x log2(entries)`` header reads. A sample out of order means a log this
        reasoning does not hold for: the segment is then scanned whole (a decrease hidden
        between two samples of one epoch goes unseen; no leader or follower writes one).
        """
        end = self._size
        first = self._read_header(0, end)
        if first is None:
            return []
        last_position = 0
        for position, _header in self.batches(self.offset_index.last_entry.position):
            last_position = position
        index = self.offset_index
        count = index.entries

        def position_at(k: int) -> int:  # sample k: 0 first batch, 1..count index, then last
            if k == 0:
                return 0
            return index.entry_at(k - 1).position if k <= count else last_position

        def epoch_at(k: int) -> int:
            header = self._read_header(position_at(k), end)
            if header is None:
                raise _NotMonotonic
            return header.partition_leader_epoch

        changes = [first]

        def scan(start: int, stop: int) -> None:
            previous = None
            for position, header in self.batches(start):
                if position > stop:
                    return
                epoch = header.partition_leader_epoch
                if previous is not None and epoch != previous:
                    changes.append(header)
                previous = epoch

        def split(lo: int, lo_epoch: int, hi: int, hi_epoch: int) -> None:
            if lo_epoch == hi_epoch:
                return
            if lo_epoch > hi_epoch:
                raise _NotMonotonic
            if hi - lo == 1:
                scan(position_at(lo), position_at(hi))
                return
            mid = (lo + hi) // 2
            mid_epoch = epoch_at(mid)
            split(lo, lo_epoch, mid, mid_epoch)
            split(mid, mid_epoch, hi, hi_epoch)

        try:
            split(0, first.partition_leader_epoch, count + 1, epoch_at(count + 1))
        except _NotMonotonic:
            return [header for _, header in self.batches()]
        return changes

    def _header_at(self, position: int, end: int) -> BatchHeader | None:
        """``_read_header`` through a small cache of the headers translate_offset has read.

        Why: the index stores each batch's *last* offset, so the floor entry of a fetch at a
        batch's base offset is the batch before it and every translate reads two 61-byte
        headers (a pread and a parse each, ~2 us). Readers going over the same data (several
        consumer groups, a consumer re-reading) hit the cache instead. Bytes below ``_size``
        never change except by ``truncate_to``/``recover``, which clear the cache; appends only
        write at ``_size``. Bounded: cleared when it reaches ``_HEADER_CACHE_SIZE`` entries.
        Event-loop thread only, like every read.
        """
        header = self._headers.get(position)
        if header is None:
            header = self._read_header(position, end)
            if header is None:
                return None
            if len(self._headers) >= _HEADER_CACHE_SIZE:
                self._headers.clear()
            self._headers[position] = header
        elif position + header.batch_length + LOG_OVERHEAD > end:
            return None
        return header

    def translate_offset(self, offset: int, starting_position: int = 0) -> BatchPosition | None:
        """The first batch whose last offset is >= ``offset`` (floor index entry, then a header
        scan); None if every batch ends before it."""
        # Fetch hot path: batches() inlined (no generator), headers through the cache.
        if not self._open:
            self._reopen()
        floor, following = self._offset_index.lookup_with_next(offset)
        position = max(floor.position, starting_position)
        end = self._size
        header_at = self._header_at
        if (
            following is not None
            and floor.offset < offset
            and starting_position <= following.position
        ):
            # The floor entry's batch ends before ``offset`` (its last offset is below it), so
            # a scan from there reads that header only to step over it. The next entry's batch
            # ends at or above ``offset`` (it is above the floor); if it also starts at or
            # below ``offset``, every batch between the two ends below its base offset, hence
            # below ``offset``: it is the answer, found with one header read instead of two.
            header = header_at(following.position, end)
            if header is not None and header.base_offset <= offset:
                last_offset = header.base_offset + header.last_offset_delta
                if last_offset >= offset:
                    size = header.batch_length + LOG_OVERHEAD
                    return BatchPosition(last_offset, following.position, size, header.base_offset)
        while True:
            header = header_at(position, end)
            if header is None:
                return None
            size = header.batch_length + LOG_OVERHEAD
            last_offset = header.base_offset + header.last_offset_delta
            if last_offset >= offset:
                return BatchPosition(last_offset, position, size, header.base_offset)
            position += size

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = False,
    ) -> FetchSlice | None:
        """Whole batches from the one holding ``start_offset``: at most ``max_size`` bytes
        (the first batch whole anyway with ``min_one_message``, so a consumer cannot starve on a
        big batch), never past byte ``max_position`` (default: end of segment; the Log passes the
        high watermark's position). The slice may end with a partial batch cut at the size
        limit, as Kafka's. None if every batch ends before ``start_offset``; an empty slice if
        the size limit is 0."""
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for a read from {self.log_path}")
        if not self._open:
            self._reopen()
        elif not self._active and self._cache is not None:
            self._cache.touch(self)
        if max_position is None:
            max_position = self._size
        start = self.translate_offset(start_offset)
        if start is None:
            return None
        adjusted_max_size = max(max_size, start.size) if min_one_message else max_size
        fetch_size = max(0, min(max_position - start.position, adjusted_max_size))
        return FetchSlice(self._file, start.position, fetch_size, start.base_offset, self)

    def read_next_offset(self) -> int:
        """Offset the next appended record would get: last batch's last offset + 1, or the base
        offset when empty (scans from the last index entry)."""
        next_offset = self.base_offset
        for _, header in self.batches(self.offset_index.last_entry.position):
            next_offset = header.next_offset
        return next_offset

    def find_offset_by_timestamp(
        self, timestamp: int, start_offset: int = 0
    ) -> TimestampAndOffset | None:
        """The first record with timestamp >= ``timestamp`` and offset >= ``start_offset``, as
        ``(its timestamp, its offset)``; None if there is none in this segment.

        The time-index floor entry for ``timestamp`` bounds where such a record can start; the
        offset index turns that offset into a position; batches whose max timestamp is below the
        target are skipped by header, the first candidate batch is decoded."""
        if not self._open:
            self._reopen()
        elif not self._active and self._cache is not None:
            self._cache.touch(self)
        entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(entry.offset, start_offset)).position
        for batch_position, header in self.batches(position):
            if header.max_timestamp < timestamp or header.last_offset < start_offset:
                continue
            for record_offset, record_timestamp in self._record_timestamps(batch_position, header):
                if record_timestamp >= timestamp and record_offset >= start_offset:
                    return TimestampAndOffset(record_timestamp, record_offset)
        return None

    def max_timestamp_from(self, start_offset: int) -> TimestampAndOffset | None:
        """The largest record timestamp among offsets >= ``start_offset`` and the first offset
        holding it; None if no such record has a timestamp. For a segment the log start offset
        cuts (after DeleteRecords): ``max_timestamp_so_far`` may belong to a record below it.
        Batches whose max timestamp cannot beat the best so far are skipped by header."""
        if not self._open:
            self._reopen()
        elif not self._active and self._cache is not None:
            self._cache.touch(self)
        best: TimestampAndOffset | None = None
        position = self.offset_index.lookup(start_offset).position
        for batch_position, header in self.batches(position):
            if header.last_offset < start_offset or (
                best is not None and header.max_timestamp <= best[0]
            ):
                continue
            for record_offset, record_timestamp in self._record_timestamps(batch_position, header):
                if record_offset >= start_offset and (best is None or record_timestamp > best[0]):
                    best = TimestampAndOffset(record_timestamp, record_offset)
        return best if best is not None and best[0] >= 0 else None

    def _record_timestamps(self, position: int, header: BatchHeader) -> Iterator[tuple[int, int]]:
        """``(offset, timestamp)`` of each record of the batch at ``position``."""
        batch = self._file.pread(header.size, position)
        if header.attributes & ATTR_TIMESTAMP_TYPE_MASK:
            # LogAppendTime: every record's timestamp is the batch's maxTimestamp.
            record_timestamp: int | None = header.max_timestamp
        else:
            record_timestamp = None
        data: Buffer = memoryview(batch)[RECORDS_OFFSET:]
        if header.compression:
            from sluice.protocol.compression import decompress  # owned by the records codec

            data = decompress(header.compression, bytes(data))
        pos = 0
        try:
            for _ in range(header.record_count):
                length, body = decode_varint(data, pos)
                timestamp_delta, after = decode_varlong(data, body + 1)  # +1: attributes
                offset_delta, _ = decode_varint(data, after)
                pos = body + length
                yield (
                    header.base_offset + offset_delta,
                    record_timestamp
                    if record_timestamp is not None
                    else header.base_timestamp + timestamp_delta,
                )
        except (ProtocolError, IndexError) as exc:
            raise CorruptRecordError(
                f"corrupt record in batch at {position}: {exc}", field="records", position=position
            ) from exc

    # -- rolling -------------------------------------------------------------------------------

    def _load_first_batch_timestamp(self) -> None:
        if self._rolling_based_timestamp is None and self._size > 0:
            header = self._read_header(0, self._size)
            if header is not None:
                self._rolling_based_timestamp = header.max_timestamp

    def first_batch_timestamp(self) -> int:
        """The first batch's max timestamp, -1 when there is none (Kafka's
        ``getFirstBatchTimestamp``: how long a segment has held dirty records)."""
        self._load_first_batch_timestamp()
        ts = self._rolling_based_timestamp
        return NO_TIMESTAMP if ts is None else ts

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """How long this segment has been filling: by record timestamps (incoming max timestamp -
        first batch's max timestamp) when the first batch has one, else by wall clock since
        the segment was opened."""
        self._load_first_batch_timestamp()
        ts = self._rolling_based_timestamp
        if ts is not None and ts >= 0:
            return message_timestamp - ts
        return now_ms - self.created_ms

    def should_roll(
        self,
        *,
        messages_size: int,
        max_timestamp_in_messages: int,
        max_offset_in_messages: int,
        now_ms: int,
        segment_bytes: int,
        segment_ms: int,
    ) -> bool:
        """Whether to roll before appending the described batches to this (active) segment:
        1. they would not fit (``size > segment_bytes - messages_size``);
        2. non-empty and older than ``segment_ms - rolling_jitter_ms`` (record-timestamp clock,
           see :meth:`time_waited_for_roll`);
        3. the offset index or the time index is full;
        4. ``max_offset_in_messages`` does not fit a relative int32 offset.
        """
        # Asked only of the active segment: if its indexes were trimmed (it was closed or
        # recovered and is being written again) give them their room back, or it would look
        # full and roll at once; Kafka does this explicitly at load and truncation.
        offset_index = self._offset_index
        time_index = self._time_index
        if offset_index.trimmed or time_index.trimmed:
            self._ensure_indexes_extended()
        size = self._size
        if size > segment_bytes - messages_size:
            return True
        if size > 0:
            # time_waited_for_roll(), inlined: this runs once per append.
            ts = self._rolling_based_timestamp
            if ts is None:
                self._load_first_batch_timestamp()
                ts = self._rolling_based_timestamp
            if ts is not None and ts >= 0:
                waited = max_timestamp_in_messages - ts
            else:
                waited = now_ms - self.created_ms
            if waited > segment_ms - self.rolling_jitter_ms:
                return True
        return (
            offset_index.is_full()
            or time_index.is_full()
            or not 0 <= max_offset_in_messages - self.base_offset <= _INT32_MAX
        )

    def resize_indexes(self, size: int | None = None, *, extend: bool = True) -> None:
        """Set both index files to ``size`` bytes (default ``max_index_size``), which becomes
        the new ``max_index_size`` (``segment.index.bytes`` may have changed): the Log calls
        this on the segment that is active after load.

        ``extend=False`` leaves a trimmed (shorter) index as it is: the first append or roll
        check re-extends it (:meth:`_ensure_indexes_extended`), so a load does not pay a
        truncate and a remap of two files per partition that may never be written again; a
        longer one (``segment.index.bytes`` lowered) is still cut now."""
        if size is not None:
            self.max_index_size = size
            self.offset_index.max_index_size = self.time_index.max_index_size = size
        for index in (self.offset_index, self.time_index):
            if extend or not index.trimmed:
                index.resize(self.max_index_size)

    def _ensure_indexes_extended(self) -> None:
        for index in (self._offset_index, self._time_index):
            if index.trimmed:
                index.resize(index.max_index_size)

    def on_becoming_inactive(self) -> None:
        """At roll: write the final time-index entry (max timestamp so far, in the slot kept
        free for it), trim both indexes to their entries. No fsync (Kafka's
        ``onBecomeInactiveSegment`` neither): the Log's background flusher fsyncs the rolled
        segment in its thread (``Log.pending_flush_offset``); until then the segment stays
        dirty, so a release by the open-file cache flushes it first."""
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, skip_full_check=True
        )
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    # -- recovery and truncation ---------------------------------------------------------------

    def sanity_check(self) -> None:
        """Raise :class:`CorruptIndexError` if an index must be rebuilt: it was missing (created
        empty by :meth:`open`) while the log has data, fails its own sanity check, or points past
        the end of the log."""
        if self._size > 0:
            for index in (self.offset_index, self.time_index):
                if index.newly_created:
                    raise CorruptIndexError(f"index {index.path} was missing")
        self.offset_index.sanity_check()
        self.time_index.sanity_check()
        if self.offset_index.entries and self.offset_index.last_entry.position >= self._size:
            raise CorruptIndexError(
                f"index {self.offset_index.path} points at byte "
                f"{self.offset_index.last_entry.position}, past the end of the log ({self._size})"
            )

    def recover(
        self, max_message_size: int = DEFAULT_MAX_MESSAGE_BYTES, *, from_offset: int | None = None
    ) -> int:
        """Rebuild the indexes from the log and cut an invalid tail. Returns bytes truncated;
        :attr:`recovered_from` is the byte the walk started at (what it read is the rest).

        Procedure (Kafka's LogSegment.recover, plus a start past the flushed prefix):

        1. Empty both indexes and re-extend them to ``max_index_size``; forget the max timestamp.
           With ``from_offset`` (the log's recovery point: every batch below it, and the index
           entries describing them, were fsynced before the crash -- :meth:`flush` syncs the
           ``.log`` first, then the indexes), keep instead the index entries of offsets below
           it, and start the walk at the last kept offset-index entry if the batch there is
           whole and ends exactly at that entry's offset (a check against an index that does
           not describe this file); the max timestamp so far is the last kept time-index entry
           (an entry is written after its batch counted). Otherwise start from byte 0. The
           rebuilt indexes are the same either way: the walk indexes by the same rule from the
           same last entry.
        2. Walk the batches from there. A batch is valid if: its 61-byte header is all there;
           magic is 2 and batchLength >= 49; the whole batch is in the file; its CRC-32C
           matches; its offsets are at or above the base offset, increase over the previous
           batch, and its last offset fits a relative int32.
        3. For each valid batch, exactly as :meth:`append`: track the max timestamp (with the
           batch's last offset), and if more than ``index_interval_bytes`` lie between the last
           index entry and this batch, index it (offset index: last offset -> position; time
           index: max timestamp so far). If an index is full (its size was lowered since), skip
           the entry: fewer entries are safe.
        4. At the first invalid batch stop, and truncate the ``.log`` there: what follows is a
           write torn by a crash (or garbage); nothing after it can be trusted.
        5. Append the final time-index entry (as at roll) and trim both indexes.

        The ``.txnindex`` is not touched: its entries need the producer state before this
        segment; :attr:`recovered_control` tells the Log whether the walk met a marker.

        ``max_message_size`` only bounds memory: larger batches are still accepted if their CRC
        matches (the topic's limit may have been lowered after they were written); they are
        checksummed in chunks. The caller must re-extend the indexes of a segment that stays
        active (:meth:`resize_indexes`; :meth:`should_roll` also does it).
        """
        if not self._open:
            self._reopen()
        if self._cache is not None:
            self._hold(FILES_PER_SEGMENT)  # both indexes mapped until trimmed at the end
        self._dirty = True
        end = self._file.size()
        start = self._flushed_prefix(from_offset, end) if from_offset is not None else None
        if start is None:
            self._offset_index.reset()
            self._time_index.reset()
            self.max_timestamp_so_far = NO_TIMESTAMP
            self.offset_of_max_timestamp_so_far = self.base_offset
            valid = last_index_entry = 0
            previous_last_offset = self.base_offset - 1
        else:
            valid = last_index_entry = start.position
            previous_last_offset = start.previous_last_offset
        self.recovered_from = valid
        self.recovered_control = False
        self._rolling_based_timestamp = None
        while valid < end:
            header = self._valid_batch_at(valid, end, previous_last_offset, max_message_size)
            if header is None:
                break
            if header.is_control:
                self.recovered_control = True
            if header.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = header.max_timestamp
                self.offset_of_max_timestamp_so_far = header.last_offset
            if valid - last_index_entry > self.index_interval_bytes:
                if not self.offset_index.is_full():
                    self.offset_index.append(header.last_offset, valid)
                if not self.time_index.is_full():
                    self.time_index.maybe_append(
                        self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far
                    )
                last_index_entry = valid
            previous_last_offset = header.last_offset
            valid += header.size
        truncated = end - valid
        if truncated > 0:
            self._file.truncate(valid)
        self._size = valid
        self._headers.clear()
        self._bytes_since_last_index_entry = valid - last_index_entry
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, skip_full_check=True
        )
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.offset_index.newly_created = self.time_index.newly_created = False  # rebuilt now
        if self._cache is not None:
            self._hold()
        return truncated

    def _flushed_prefix(self, from_offset: int, end: int) -> _RecoveryStart | None:
        """Step 1 of :meth:`recover` with a recovery point: keep the index entries below
        ``from_offset`` and return where the walk starts, or None to rebuild from byte 0."""
        index = self.offset_index
        keep = index.entries_below(from_offset)
        if keep == 0:
            return None
        entry = index.entry_at(keep - 1)
        previous = index.entry_at(keep - 2).offset if keep >= 2 else self.base_offset - 1
        try:
            header = self._read_header(entry.position, end)
        except CorruptRecordError:
            return None
        if (
            header is None
            or header.last_offset != entry.offset
            or header.base_offset <= previous
            or not self.time_index.entries
        ):
            return None
        index.truncate_to(entry.offset + 1)
        self.time_index.truncate_to(entry.offset + 1)
        if not self.time_index.entries:
            return None
        index.resize(self.max_index_size)
        self.time_index.resize(self.max_index_size)
        last_time = self.time_index.last_entry
        self.max_timestamp_so_far = last_time.timestamp
        self.offset_of_max_timestamp_so_far = last_time.offset
        return _RecoveryStart(entry.position, previous)

    def _valid_batch_at(
        self, position: int, end: int, previous_last_offset: int, max_message_size: int
    ) -> BatchHeader | None:
        """The header of the batch at ``position`` if it passes recovery's checks, else None."""
        raw = self._file.pread(HEADER_SIZE, position) if end - position >= HEADER_SIZE else b""
        if len(raw) < HEADER_SIZE:
            return None
        try:
            header = parse_header(raw)
        except CorruptRecordError:
            return None
        if position + header.size > end:
            return None
        if not (
            header.base_offset > previous_last_offset
            and header.last_offset_delta >= 0
            and header.last_offset - self.base_offset <= _INT32_MAX
        ):
            return None
        # CRC-32C from attributes to the end of the batch; a batch bigger than the usual limit
        # is read in chunks rather than all at once.
        crc = crc32c(raw[ATTRIBUTES_OFFSET:])
        done = HEADER_SIZE
        chunk_size = max(max_message_size, _CRC_CHUNK)
        while done < header.size:
            chunk = self._file.pread(min(chunk_size, header.size - done), position + done)
            if not chunk:
                return None
            crc = crc32c(chunk, crc)
            done += len(chunk)
        if crc != header.crc:
            return None
        return header

    def truncate_to(self, offset: int, now_ms: int | None = None) -> int:
        """Remove every batch whose last offset is >= ``offset`` (the batch holding ``offset``
        goes whole) and the index entries at or above it; the segment is active afterwards
        (indexes re-extended). Returns the bytes removed from the ``.log``."""
        mapping = self.translate_offset(offset)  # (reopens the files if they were closed)
        self._dirty = True
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.resize_indexes()
        truncated = 0
        if mapping is not None:
            truncated = self._size - mapping.position
            self._file.truncate(mapping.position)
            self._size = mapping.position
        self._headers.clear()
        if self._size == 0:
            self.created_ms = _now_ms() if now_ms is None else now_ms
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = self._size - self.offset_index.last_entry.position
        if self.max_timestamp_so_far >= 0:
            self._reload_largest_timestamp()
        return truncated

    def _reload_largest_timestamp(self) -> None:
        # The last time-index entry, then any larger timestamp in the batches after it.
        entry = self.time_index.last_entry
        best = TimestampAndOffset(entry.timestamp, entry.offset)
        position = self.offset_index.lookup(entry.offset).position
        for _, header in self.batches(position):
            if header.max_timestamp > best.timestamp:
                best = TimestampAndOffset(header.max_timestamp, header.last_offset)
        self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = best

    # -- lifecycle -----------------------------------------------------------------------------

    def flush(self) -> None:
        """fsync the ``.log``, then the indexes (so an index never describes unflushed data).
        Nothing to do when the files are closed: :meth:`release_files` flushed them."""
        if not self._open:
            return
        self._file.fsync()
        self._offset_index.flush()
        self._time_index.flush()
        self.txn_index.flush()
        self._dirty = False

    def mark_flushed(self) -> None:
        """The Log's background flusher fsynced the files of this inactive segment (by
        their paths, in its thread; ``Log.finish_flush``): a release need not flush them."""
        self._dirty = False

    def close(self) -> None:
        """Write the final time-index entry, trim the indexes, close every file (a segment
        whose files the cache closed has all of that done already)."""
        if self._cache is not None:
            self._cache.forget(self)
        if not self._open:
            return
        self._open = False
        if self.max_timestamp_so_far >= 0:
            self._time_index.maybe_append(
                self.max_timestamp_so_far,
                self.offset_of_max_timestamp_so_far,
                skip_full_check=True,
            )
        self._offset_index.close()
        self._time_index.close()
        self._file.close()

    def close_handlers(self) -> None:
        """Close the files without writing anything (disk failure)."""
        if self._cache is not None:
            self._cache.forget(self)
        if not self._open:
            return
        self._open = False
        self._offset_index.close_handler()
        self._time_index.close_handler()
        self._file.close()

    def delete(self) -> None:
        """Close and remove the files (missing ones are fine)."""
        self.close_handlers()
        self._vfs.remove(self.log_path)
        self._vfs.remove(self.index_path)
        self._vfs.remove(self.time_index_path)
        self.txn_index.delete()

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the files (and the ``.txnindex`` if there is one) from ``*<old_suffix>`` to
        ``*<new_suffix>``; open ones stay open, closed ones are not opened."""

        def renamed(path: Path) -> Path:
            name = path.name
            if old_suffix:
                if not name.endswith(old_suffix):
                    raise ValueError(f"{path} does not end with {old_suffix!r}")
                name = name[: -len(old_suffix)]
            return path.with_name(name + new_suffix)

        new_log_path = renamed(self.log_path)
        self._vfs.rename(self.log_path, new_log_path)
        self.log_path = new_log_path
        new_index_path = renamed(self.index_path)
        new_time_index_path = renamed(self.time_index_path)
        if self._open:
            self._offset_index.rename_to(new_index_path)
        else:
            self._vfs.rename(self.index_path, new_index_path)
        self.index_path = new_index_path
        if self._open:
            self._time_index.rename_to(new_time_index_path)
        else:
            self._vfs.rename(self.time_index_path, new_time_index_path)
        self.time_index_path = new_time_index_path
        self.txn_index.rename_to(renamed(self.txn_index.path))

    def rename_to_deleted(self) -> None:
        """First step of deletion: ``*.log`` -> ``*.log.deleted`` etc. Files stay open, so
        fetches in flight finish; :meth:`delete` removes them after ``file.delete.delay.ms``."""
        self.change_file_suffixes("", DELETED_SUFFIX)

    def has_suffix(self, suffix: str) -> bool:
        return all(
            p.name.endswith(suffix) for p in (self.log_path, self.index_path, self.time_index_path)
        )

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, size={self._size}, "
            f"max_timestamp={self.max_timestamp_so_far})"
        )
