"""The aborted-transaction index of a segment: ``<base>.txnindex``, Kafka's ``TransactionIndex``.

Format: back-to-back 34-byte entries (Kafka's ``AbortedTxn``), big-endian, no header::

    version           int16   0
    producerId        int64
    firstOffset       int64   first offset of the aborted transaction's data (may lie in an
                              earlier segment)
    lastOffset        int64   offset of the ABORT marker: the entry lives in the segment that
                              holds the marker
    lastStableOffset  int64   the partition's last stable offset once this transaction was
                              complete: the first offset of the oldest other transaction still
                              open, else lastOffset + 1

Entries are in increasing ``lastOffset`` order (markers are appended in offset order). Only
aborts are indexed: a read_committed consumer gets, with each Fetch, the aborted transactions
that overlap the returned range and drops their data batches (KIP-98). ``lastStableOffset``
bounds the search: once an entry's LSO is at or beyond the upper end of the fetched range, no
later entry (in this segment or the next ones) can overlap the range -- a transaction aborted
later was either open when this one completed, so it starts at or after that LSO, or started
after this marker (Kafka's ``collectAbortedTxns``, ``isComplete``).

**Derived data**: every entry follows from the ``.log`` files (the markers and the producer
state before them). The file is created only with its first entry (most segments have none);
it is truncated with the segment, renamed with it (``.deleted``, ``.swap``, ``.cleaned``) and
removed with it. A file whose length is not a multiple of 34 or whose entries do not fit the
segment is rebuilt at load (``Log.open``); after an unclean shutdown the index of every
recovered segment is rebuilt from the producer state replayed over the batches.

**Concurrency**: the owning Log's append / roll / truncation / retention paths mutate it;
:meth:`collect` may be called by any reader on the event-loop thread. The entries are held in
memory once read (34 bytes each, few), so reads do not touch the file and no descriptor is held
between calls (the open-file budget of the segments is unchanged).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from .index import CorruptIndexError
from .layout import TXN_INDEX_SUFFIX
from .vfs import DEFAULT_VFS, VFS, read_file

__all__ = ["ABORTED_TXN_SIZE", "TXN_INDEX_SUFFIX", "AbortedTxn", "TransactionIndex"]
ABORTED_TXN_VERSION = 0
ABORTED_TXN = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, LSO
ABORTED_TXN_SIZE = ABORTED_TXN.size  # 34


class AbortedTxn(NamedTuple):
    """One ``.txnindex`` entry; Fetch v4+ answers ``(producer_id, first_offset)`` of it."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ABORTED_TXN.pack(ABORTED_TXN_VERSION, *self)


class TxnIndexSearchResult(NamedTuple):
    """The entries overlapping a range, and whether the search may stop here (Kafka's
    ``TxnIndexSearchResult``): an entry's last stable offset reached the upper bound."""

    aborted: list[AbortedTxn]
    complete: bool


def decode_entries(data: bytes, where: object = "") -> list[AbortedTxn]:
    """Every entry of a ``.txnindex`` file's content. Raises :class:`CorruptIndexError` for a
    length that is not a multiple of 34, an unknown version, or last offsets not increasing."""
    if len(data) % ABORTED_TXN_SIZE:
        raise CorruptIndexError(
            f"{where}: {len(data)} bytes is not a multiple of the {ABORTED_TXN_SIZE}-byte entry"
        )
    entries = []
    previous = -1
    for version, *fields in ABORTED_TXN.iter_unpack(data):
        if version != ABORTED_TXN_VERSION:
            raise CorruptIndexError(f"{where}: aborted transaction version {version}")
        entry = AbortedTxn(*fields)
        if entry.last_offset <= previous:
            raise CorruptIndexError(f"{where}: last offsets not increasing at {entry}")
        previous = entry.last_offset
        entries.append(entry)
    return entries


class TransactionIndex:
    """The ``.txnindex`` of one segment (see the module docstring)."""

    __slots__ = ("_dirty", "_entries", "_vfs", "base_offset", "path")

    def __init__(self, path: Path, base_offset: int, vfs: VFS = DEFAULT_VFS) -> None:
        self.path = path
        self.base_offset = base_offset
        self._vfs = vfs
        self._entries: list[AbortedTxn] | None = None  # read on first use
        self._dirty = False

    @property
    def entries(self) -> list[AbortedTxn]:
        """Every entry, oldest first (read from the file on first use; a missing file is an
        empty index). Raises :class:`CorruptIndexError` for a damaged file."""
        entries = self._entries
        if entries is None:
            try:
                data = read_file(self.path, self._vfs)
            except FileNotFoundError:
                data = b""
            entries = self._entries = decode_entries(data, self.path)
        return entries

    def __iter__(self) -> Iterator[AbortedTxn]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def sanity_check(self, next_offset: int | None = None) -> None:
        """Raise :class:`CorruptIndexError` if the file is damaged, or an entry's marker lies
        below the segment's base offset or at/after ``next_offset`` (the segment's end)."""
        for entry in self.entries:
            if entry.last_offset < self.base_offset or (
                next_offset is not None and entry.last_offset >= next_offset
            ):
                raise CorruptIndexError(
                    f"{self.path}: marker offset {entry.last_offset} outside the segment "
                    f"[{self.base_offset}, {next_offset})"
                )

    def append(self, entry: AbortedTxn) -> bool:
        """Add the entry of an ABORT marker just appended to the segment. Returns whether
        this created the file (the Log must then fsync the directory at its next flush: a
        ``.txnindex`` lost to a power loss would read as "nothing aborted")."""
        created = not self._vfs.exists(self.path)
        entries = self.entries
        if entries and entries[-1].last_offset >= entry.last_offset:
            raise ValueError(
                f"{self.path}: last offset {entry.last_offset} is not above "
                f"{entries[-1].last_offset}"
            )
        file = self._vfs.open(self.path)
        try:
            file.pwrite(entry.encode(), len(entries) * ABORTED_TXN_SIZE)
        finally:
            file.close()
        entries.append(entry)
        self._dirty = True
        return created

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """The aborted transactions whose range overlaps ``[fetch_offset, upper_bound_offset)``
        (marker at or after the start, data starting below the end), in marker order."""
        aborted = []
        for entry in self.entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
                aborted.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(aborted, True)
        return TxnIndexSearchResult(aborted, False)

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose marker is at or after ``offset`` (truncation of the log)."""
        entries = self.entries
        keep = len(entries)
        while keep and entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(entries):
            return
        del entries[keep:]
        self._write_size(keep * ABORTED_TXN_SIZE)

    def reset(self) -> None:
        """Empty the index (recovery rebuilds it)."""
        self._entries = []
        if self._vfs.exists(self.path):
            self._write_size(0)

    def _write_size(self, size: int) -> None:
        file = self._vfs.open(self.path)
        try:
            file.truncate(size)
        finally:
            file.close()
        self._dirty = True

    def flush(self) -> None:
        """fsync the file if it changed since the last flush (the segment's flush calls this
        after the ``.log``'s)."""
        if not self._dirty:
            return
        if self._vfs.exists(self.path):
            file = self._vfs.open(self.path, create=False)
            try:
                file.fsync()
            finally:
                file.close()
        self._dirty = False

    def rename_to(self, path: Path) -> None:
        """Follow the segment's rename (a missing file is only renamed in name)."""
        if self._vfs.exists(self.path):
            self._vfs.rename(self.path, path)
        self.path = path

    def delete(self) -> None:
        self._vfs.remove(self.path)
        self._entries = []
        self._dirty = False
