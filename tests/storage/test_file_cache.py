"""The open-file cache (issue 13): the LRU itself against stand-in entries, then real segments
closed and reopened under it -- reads of every old segment, a pinned Fetch slice surviving
evictions, retention and truncation of closed segments, a load with more segments than the
bound that never holds more than it open -- and the LogManager refusing partitions whose active
segments alone would not fit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sluice.protocol import records as rec
from sluice.protocol.errors import KafkaStorageError
from sluice.server.storage.file_cache import OpenFileCache, default_max_open_files
from sluice.server.storage.log import Isolation, Log
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.log_manager import LogManager, OpenFileLimitError
from sluice.server.storage.segment import FILES_PER_SEGMENT
from sluice.server.storage.vfs import OSVFS, OSFile

# ---------------------------------------------------------------------------- the cache alone


class Entry:
    def __init__(self, name: str) -> None:
        self.name = name
        self.pinned = False
        self.released = 0

    def release_files(self) -> None:
        self.released += 1

    def __repr__(self) -> str:
        return self.name


def test_least_recently_used_entries_are_released_first() -> None:
    cache = OpenFileCache(6)
    a, b, c, d = (Entry(n) for n in "abcd")
    for entry in (a, b, c):
        cache.hold(entry, 2, evictable=True)
    assert cache.open_files == 6 and not any(e.released for e in (a, b, c))
    cache.touch(a)  # b is now the least recently used
    cache.hold(d, 3, evictable=True)  # 9 > 6: b and c go (3 files over)
    assert (a.released, b.released, c.released, d.released) == (0, 1, 1, 0)
    assert cache.open_files == 5 and cache.evictions == 2
    assert b not in cache and a in cache and d in cache


def test_pinned_and_fixed_entries_are_never_released() -> None:
    cache = OpenFileCache(4)
    fixed, pinned, free = Entry("fixed"), Entry("pinned"), Entry("free")
    cache.hold(fixed, 2, evictable=False)
    cache.hold(pinned, 1, evictable=True)
    pinned.pinned = True
    cache.hold(free, 1, evictable=True)
    newcomer = Entry("new")
    cache.hold(newcomer, 1, evictable=True)  # 5 > 4: only `free` may go
    assert (fixed.released, pinned.released, free.released) == (0, 0, 1)
    assert cache.fixed_files == 2 and cache.open_files == 4
    # Everything else pinned or fixed: over the bound, with nothing to release.
    newcomer.pinned = True
    more = Entry("more")
    cache.hold(more, 1, evictable=True)
    assert cache.open_files == 5 and pinned.released == newcomer.released == 0
    pinned.pinned = False
    cache.hold(Entry("last"), 1, evictable=True)  # 6: the unpinned ones go, oldest first
    assert (pinned.released, newcomer.released, more.released) == (1, 0, 1)
    assert cache.open_files == 4


def test_hold_again_replaces_the_count_and_forget_removes_it() -> None:
    cache = OpenFileCache(10)
    entry = Entry("e")
    cache.hold(entry, 3, evictable=True)
    cache.hold(entry, 1, evictable=True)
    assert cache.open_files == 1
    cache.hold(entry, 3, evictable=False)  # became active
    assert cache.open_files == cache.fixed_files == 3
    cache.forget(entry)
    cache.forget(entry)  # twice: a no-op
    assert cache.open_files == cache.fixed_files == 0 and len(cache) == 0


def test_default_bound_leaves_headroom_under_the_limit() -> None:
    assert default_max_open_files(256) == 192
    assert default_max_open_files(128) == 64
    assert default_max_open_files(1 << 20) == 786432
    assert default_max_open_files(10) == 1
    with pytest.raises(ValueError):
        OpenFileCache(0)


# ---------------------------------------------------------------------------- real segments

VALUE = b"v" * 90
CONFIG = LogConfig(
    segment_bytes=1024, index_interval_bytes=100, segment_index_bytes=4096, retention_ms=-1
)


def fill(log: Log, batches: int) -> None:
    for i in range(batches):
        log.append_as_leader(rec.build_batch([(1_000 + i, None, VALUE + b"%d" % i)] * 2))
    log.maybe_increment_high_watermark(log.log_end_offset)


def values(log: Log, start: int = 0) -> list[tuple[int, bytes | None]]:
    out: list[tuple[int, bytes | None]] = []
    while True:
        info = log.read(start, 300, Isolation.LOG_END)
        if info.slice is None:
            return out
        for _, record in rec.iter_records(info.slice.read_bytes()):
            if record.offset >= start:
                out.append((record.offset, record.value))
        start = out[-1][0] + 1


def expected(batches: int) -> list[tuple[int, bytes | None]]:
    return [(2 * i + k, VALUE + b"%d" % i) for i in range(batches) for k in range(2)]


def open_fds(under: Path) -> int:
    """Descriptors this process holds on files under ``under`` (a map's duplicate included).
    Only those: a full run's other tests leave threads that open and close their own at any
    time (a process-wide count failed once, 45 <= 44)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor, another thread's)
            continue
        count += target.startswith(str(under))
    return count


def segment_log(tmp_path: Path, cache: OpenFileCache, batches: int = 60) -> Log:
    log = Log.open(tmp_path / "t-0", CONFIG, file_cache=cache)
    fill(log, batches)
    return log


def test_every_old_segment_reads_back_through_a_small_cache(tmp_path: Path) -> None:
    cache = OpenFileCache(4 * FILES_PER_SEGMENT)
    log = segment_log(tmp_path, cache)
    assert len(log.segments) > 10
    assert cache.open_files <= cache.max_open_files and cache.evictions > 0
    closed = [s for s in log.segments if not s.files_open]
    assert closed and all(not s.active for s in closed)
    assert log.active_segment.files_open and log.active_segment.active
    before = open_fds(tmp_path)
    for _ in range(2):  # the second pass reopens what the first closed again
        assert values(log) == expected(60)
        assert cache.open_files <= cache.max_open_files
        assert open_fds(tmp_path) <= before + FILES_PER_SEGMENT  # the one segment being read
    # What the log knows without reading a closed segment is still right.
    closed = [s for s in log.segments if not s.files_open]
    assert closed
    assert log.size_in_bytes == sum((tmp_path / "t-0" / s.log_path.name).stat().st_size
                                    for s in log.segments)  # fmt: skip
    offsets = [
        log.fetch_offset_by_timestamp(1_000 + i) for i in range(0, 60, 7)
    ]  # time index of closed segments
    assert [o.offset for o in offsets if o] == [2 * i for i in range(0, 60, 7)]
    log.close()
    assert cache.open_files == 0 and len(cache) == 0


def test_a_fetch_slice_pins_its_segment_through_evictions(tmp_path: Path) -> None:
    cache = OpenFileCache(3 * FILES_PER_SEGMENT)
    log = segment_log(tmp_path, cache)
    first = log.segments[0]
    info = log.read(0, 300, Isolation.LOG_END)
    assert info.slice is not None and first.pinned
    wanted = info.slice.read_bytes()
    for segment in log.segments[1:]:  # every other segment opened: the cache evicts a lot
        log.read(segment.base_offset, 300, Isolation.LOG_END)
    assert first.files_open, "a pinned segment was closed"
    # The descriptor the slice carries is still this file: sendfile and pread agree.
    r, w = os.pipe()
    try:
        sent = os.sendfile(w, info.slice.file.fileno(), info.slice.position, info.slice.size)
        assert os.read(r, sent) == wanted[:sent] and sent == len(wanted)
    finally:
        os.close(r)
        os.close(w)
    evictions = cache.evictions
    del info  # the slice goes: the pin with it
    assert not first.pinned
    for segment in log.segments[1:]:
        log.read(segment.base_offset, 300, Isolation.LOG_END)
    assert not first.files_open and cache.evictions > evictions
    log.close()


def test_retention_and_truncation_of_closed_segments(tmp_path: Path) -> None:
    cache = OpenFileCache(3 * FILES_PER_SEGMENT)
    log = segment_log(tmp_path, cache)
    directory = tmp_path / "t-0"
    oldest = log.segments[0]
    assert not oldest.files_open
    log.delete_records(log.segments[2].base_offset)
    assert log.delete_old_segments() == 2
    assert not oldest.files_open  # renamed to .deleted without opening it
    assert log.run_delayed_deletes(2**62) == 2
    assert not list(directory.glob(f"{oldest.base_offset:020d}.*"))
    # A follower truncates into an old, closed segment: it becomes active, open and fixed.
    target = log.segments[3]
    assert not target.files_open
    cut = target.base_offset + 2
    assert log.truncate_to(cut)
    assert log.active_segment is target and target.files_open and target.active
    assert log.log_end_offset == cut
    fill(log, 30)  # appends go on and roll as usual
    assert len(log.segments) > 4
    got = values(log, log.log_start_offset)
    assert [o for o, _ in got] == list(range(log.log_start_offset, log.log_end_offset))
    log.close()


def test_a_segment_closed_with_unflushed_writes_is_flushed_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = segment_log(tmp_path, OpenFileCache(1000))
    segment = log.segments[1]
    segment.recover()  # rebuilt indexes (and maybe a cut .log): writes not yet fsynced
    synced: list[Path] = []
    real_fsync = OSFile.fsync

    def fsync(file: OSFile) -> None:
        synced.append(file.path)
        real_fsync(file)

    monkeypatch.setattr(OSFile, "fsync", fsync)
    segment.release_files()
    segment.flush()  # closed: nothing more to do
    assert synced[0] == segment.log_path  # (then the resized indexes)
    assert len(synced) == len(set(synced))  # once: flush() after the release did nothing
    assert not segment.files_open
    log.close()


class PeakVFS(OSVFS):
    """Tracks the most descriptors the process held at any open() (maps included)."""

    def __init__(self, under: Path) -> None:
        self.peak = 0
        self.under = under

    def open(self, path: Path, **kw: bool) -> OSFile:
        self.peak = max(self.peak, open_fds(self.under))
        return super().open(path, **kw)


@pytest.mark.parametrize("clean", [True, False])
def test_load_holds_no_more_than_the_bound_open(tmp_path: Path, clean: bool) -> None:
    log = segment_log(tmp_path, OpenFileCache(1000), batches=120)
    segments = len(log.segments)
    log.close()
    bound = 4 * FILES_PER_SEGMENT
    cache = OpenFileCache(bound)
    vfs = PeakVFS(tmp_path)
    before = open_fds(tmp_path)
    reopened = Log.open(
        tmp_path / "t-0",
        CONFIG,
        had_clean_shutdown=clean,  # unclean: every segment re-validated, indexes rebuilt
        file_cache=cache,
        vfs=vfs,
    )
    assert len(reopened.segments) == segments > 20
    assert vfs.peak <= before + bound  # (measured before each open: + the one opening)
    assert cache.open_files <= bound
    assert values(reopened) == expected(120)
    reopened.close()


def test_partitions_beyond_the_bound_are_refused_at_creation_and_at_start(tmp_path: Path) -> None:
    bound = 10 * FILES_PER_SEGMENT  # 9 partitions and one old segment being read
    manager = LogManager(tmp_path / "d", LogConfig(), max_open_files=bound)
    manager.open()
    manager.create_topic("fits", 8)
    with pytest.raises(KafkaStorageError) as info:
        manager.create_topic("big", 2)
    message = str(info.value)
    assert "sluice.log.open.files.max" in message and f"than the {bound} allowed" in message
    assert "nothing was created" in message and "ulimit -n" in message
    assert "big" not in manager.topics() and not list((tmp_path / "d").glob("big-*"))
    with pytest.raises(KafkaStorageError):
        manager.add_partitions("fits", 10)
    assert manager.topics() == {"fits": 8}
    manager.add_partitions("fits", 9)  # the last one that fits
    manager.close()
    again = LogManager(tmp_path / "d", LogConfig(), max_open_files=bound - 1)
    with pytest.raises(OpenFileLimitError) as start:
        again.open()
    assert "9 partitions" in str(start.value) and "raise the open-file limit" in str(start.value)
    again = LogManager(tmp_path / "d", LogConfig(), max_open_files=bound)
    again.open()  # the lock was released by the refused start
    assert again.topics() == {"fits": 9}
    again.close()
