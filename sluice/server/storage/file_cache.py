"""A bound on the files the partition logs keep open: an LRU cache over the inactive segments.

Why: Kafka keeps every segment's ``.log`` open (and maps both indexes) for the life of the
process, so its ``nofile`` must exceed about three descriptors per segment: a broker with 2,000
partitions of 50 segments needs 300,000. Sluice opens an inactive (rolled) segment's files when
it is first read and closes the least recently used ones when more are open than
``sluice.log.open.files.max`` allows, so any number of old segments fits any limit.

What counts: the descriptors a segment holds, as the segment reports them
(``LogSegment.open_files``): its ``.log``, plus on Python < 3.13 one per mapped index (``mmap``
keeps a duplicate of the descriptor there; 3.13's ``trackfd=False`` does not). Active segments
are counted too but never evicted (every append writes them): their files, at most
:data:`~sluice.server.storage.segment.FILES_PER_SEGMENT` each, are a floor the LogManager keeps
under the bound (it refuses partitions beyond it, see ``LogManager``).

Entries (:class:`CachedFiles`): any object that can say whether it is pinned and release its
files. An entry is *pinned* while something outside holds one of its descriptors (a Fetch
response's ``FetchSlice`` waiting for ``sendfile``): eviction skips it, so the number in flight
can exceed the bound by what in-flight responses pin, for as long as they are in flight.

Invariants: ``open_files`` is the sum of the registered entries' files; after :meth:`hold`
returns, ``open_files <= max_open_files`` unless every evictable entry is pinned or the
fixed ones alone exceed the bound. Eviction happens only inside :meth:`make_room` and
:meth:`hold` (when an entry opens files), never from a release or a lookup, so no entry is
closed in the middle of one of its own methods.

Concurrency: none; the event-loop thread only, like the logs that use it.
"""

from __future__ import annotations

import resource
from collections import OrderedDict
from typing import Protocol

import structlog

logger = structlog.get_logger("sluice.storage")

#: Descriptors kept out of the segment budget when it is derived from ``RLIMIT_NOFILE``: client
#: connections (one each), the listener, the event loop's own, checkpoint and snapshot writes.
#: At least this many, or a quarter of the limit when that is more.
MIN_HEADROOM_FILES = 64
#: Derived budgets are capped here: beyond it a cache only costs memory for bookkeeping.
MAX_DERIVED_OPEN_FILES = 1_000_000


class CachedFiles(Protocol):
    """What the cache needs of an entry (a ``LogSegment``)."""

    @property
    def pinned(self) -> bool:
        """Whether a descriptor of this entry is in use outside it (must not be closed now)."""
        ...

    def release_files(self) -> None:
        """Close every file; the next use reopens them (and calls :meth:`OpenFileCache.hold`)."""
        ...


def nofile_limit() -> int:
    """The soft ``RLIMIT_NOFILE`` (``ulimit -n``); ``RLIM_INFINITY`` as a very large number."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 2**31 - 1 if soft == resource.RLIM_INFINITY else int(soft)


def default_max_open_files(nofile: int | None = None) -> int:
    """The default ``sluice.log.open.files.max``: the open-file limit less a headroom for
    sockets and everything else (:data:`MIN_HEADROOM_FILES`, or a quarter of the limit), at
    least 1, at most :data:`MAX_DERIVED_OPEN_FILES`."""
    limit = nofile_limit() if nofile is None else nofile
    headroom = max(MIN_HEADROOM_FILES, limit // 4)
    return max(1, min(limit - headroom, MAX_DERIVED_OPEN_FILES))


class OpenFileCache:
    """Counts the files entries hold and closes the least recently used evictable ones when
    there are more than ``max_open_files``. See the module docstring for what counts and why.

    Calls: an entry calls :meth:`make_room` before it opens files, :meth:`hold` once it has
    opened them and each time their number or its evictability changes, :meth:`touch` when it
    is used, :meth:`forget` when it closes its files
    itself (close, delete). The cache calls the entry's ``release_files`` when it evicts it,
    after forgetting it.
    """

    def __init__(self, max_open_files: int) -> None:
        if max_open_files < 1:
            raise ValueError(f"max open files must be at least 1, not {max_open_files}")
        self.max_open_files = max_open_files
        # Evictable entries, least recently used first -> the files each holds.
        self._lru: OrderedDict[CachedFiles, int] = OrderedDict()
        # Entries never evicted (active segments) -> the files each holds.
        self._fixed: dict[CachedFiles, int] = {}
        self._open = 0
        self._fixed_open = 0
        #: Entries closed to stay under the bound, since the cache was made.
        self.evictions = 0

    @property
    def open_files(self) -> int:
        """Files held by every registered entry."""
        return self._open

    @property
    def fixed_files(self) -> int:
        """Files held by entries that are never evicted (active segments)."""
        return self._fixed_open

    def __len__(self) -> int:
        return len(self._lru) + len(self._fixed)

    def __contains__(self, entry: object) -> bool:
        return entry in self._lru or entry in self._fixed

    def hold(self, entry: CachedFiles, files: int, *, evictable: bool) -> None:
        """``entry`` holds ``files`` open files now (replacing what it held before), and may or
        may not be evicted; as most recently used. Then evicts other entries, least recently
        used first and skipping pinned ones, until the total is within the bound."""
        self._drop(entry)
        if evictable:
            self._lru[entry] = files
        else:
            self._fixed[entry] = files
            self._fixed_open += files
        self._open += files
        if self._open > self.max_open_files:
            self._evict(keep=entry)

    def make_room(self, files: int) -> None:
        """Evict as :meth:`hold` would, until ``files`` more fit: called before an entry opens
        them, so that the process never holds more than the bound (plus what is pinned)."""
        if self._open + files > self.max_open_files:
            self._evict(keep=None, extra=files)

    def touch(self, entry: CachedFiles) -> None:
        """``entry`` was used: it becomes the most recently used (a no-op if not evictable)."""
        if entry in self._lru:
            self._lru.move_to_end(entry)

    def forget(self, entry: CachedFiles) -> None:
        """``entry`` closed its files itself; a no-op if it held none."""
        self._drop(entry)

    def _drop(self, entry: CachedFiles) -> None:
        files = self._lru.pop(entry, None)
        if files is None:
            files = self._fixed.pop(entry, None)
            if files is None:
                return
            self._fixed_open -= files
        self._open -= files

    def _evict(self, keep: CachedFiles | None, extra: int = 0) -> None:
        excess = self._open + extra - self.max_open_files
        victims: list[CachedFiles] = []
        for entry, files in self._lru.items():
            if excess <= 0:
                break
            if entry is keep or entry.pinned:
                continue
            victims.append(entry)
            excess -= files
        for entry in victims:
            self._open -= self._lru.pop(entry)
            self.evictions += 1
            entry.release_files()

    def describe(self) -> dict[str, int]:
        """Figures for a log line: the bound, files open (fixed ones too), entries, evictions."""
        return {
            "max_open_files": self.max_open_files,
            "open_files": self._open,
            "active_files": self._fixed_open,
            "open_segments": len(self),
            "evictions": self.evictions,
        }
