"""Crash recovery of a Log: torn tails at every byte, dropped later segments, rebuilt indexes.

A "crash" is a copy of the partition directory taken while the Log is open: exactly the files a
killed process leaves (no close, so indexes are not trimmed and no final time-index entry), then
reopened with ``had_clean_shutdown=False``.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from sluice.protocol import records as rec
from sluice.server.storage.log import Isolation, Log
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.vfs import OSVFS, OSFile

CONFIG = LogConfig(segment_index_bytes=4096, index_interval_bytes=128, file_delete_delay_ms=0)


def batch(values: list[bytes], timestamp: int = 1_000) -> bytes:
    return rec.build_batch([(timestamp + i, None, v) for i, v in enumerate(values)])


def crash_image(directory: Path, into: Path) -> Path:
    """Copy a live log's directory: what a crash would leave on disk."""
    target = into / directory.name
    shutil.copytree(directory, target)
    return target


def contents(log: Log) -> list[tuple[int, bytes | None]]:
    out: list[tuple[int, bytes | None]] = []
    start = log.log_start_offset
    for _ in range(10_000):
        info = log.read(start, 1 << 20, Isolation.LOG_END)
        if info.slice is None:
            return out
        records = [r for _, r in rec.iter_records(info.slice.read_bytes())]
        out.extend((r.offset, r.value) for r in records if r.offset >= start)
        start = records[-1].offset + 1
    raise AssertionError("read loop did not terminate")


def write_log(directory: Path, count: int, config: LogConfig = CONFIG) -> list[bytes]:
    """Append ``count`` two-record batches with distinct payloads; returns the values in order."""
    log = Log.open(directory, config)
    values: list[bytes] = []
    for i in range(count):
        pair = [b"%03d-a" % i + b"x" * (i % 7), b"%03d-b" % i]
        log.append_as_leader(batch(pair))
        values.extend(pair)
    log.close()
    return values


def test_torn_tail_at_every_byte_of_the_last_batch(tmp_path: Path) -> None:
    live = Log.open(tmp_path / "live" / "t-0", CONFIG)
    values: list[bytes] = []
    for i in range(12):
        pair = [b"%03d-a" % i + b"y" * i, b"%03d-b" % i]
        live.append_as_leader(batch(pair))
        values.extend(pair)
    (tmp_path / "img").mkdir()
    image = crash_image(live.directory, tmp_path / "img")
    first_batch = live.read(0, 1, Isolation.LOG_END)
    assert first_batch.slice is not None
    valid_old_batch = first_batch.slice.read_bytes()  # a valid batch, but offsets go backwards
    live.close()

    log_file = image / "00000000000000000000.log"
    full = log_file.read_bytes()
    last_size = len(batch([b"011-a" + b"y" * 11, b"011-b"]))
    last_start = len(full) - last_size
    garbage_variants = [b"", b"\x00" * 9, b"\xff" * 70, valid_old_batch]
    expected_prefix = list(enumerate(values[:-2]))
    files = {p.name: p.read_bytes() for p in image.iterdir()}
    directory = tmp_path / "work" / "t-0"
    directory.mkdir(parents=True)
    for cut in range(last_start, len(full) + 1):
        # Every cut point, each with one kind of garbage after it (cycling through them).
        garbage = garbage_variants[cut % len(garbage_variants)]
        if cut == len(full) and garbage == b"":
            garbage = b"\xff"
        for name in os.listdir(directory):
            os.remove(directory / name)
        for name, data in files.items():
            (directory / name).write_bytes(data)
        damaged = full[:cut] + garbage
        # Garbage may rebuild the cut bytes exactly (the last byte of a batch is often 0).
        intact = damaged[: len(full)] == full
        (directory / log_file.name).write_bytes(damaged)
        log = Log.open(directory, CONFIG, had_clean_shutdown=False, high_watermark=10**6)
        expected = list(enumerate(values)) if intact else expected_prefix
        assert log.log_end_offset == len(expected), (cut, garbage)
        assert log.high_watermark == log.log_end_offset
        assert contents(log) == expected
        assert (directory / log_file.name).stat().st_size == (len(full) if intact else last_start)
        # The recovered log takes appends again, at the right offset.
        assert log.append_as_leader(batch([b"after"])).first_offset == len(expected)
        log.close()

    log = Log.open(image, CONFIG, had_clean_shutdown=False)
    assert contents(log) == list(enumerate(values))
    log.close()


def test_truncated_segment_drops_every_later_segment(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=400, segment_index_bytes=4096, file_delete_delay_ms=0)
    live = Log.open(tmp_path / "live" / "t-0", config)
    values: list[bytes] = []
    for i in range(20):
        pair = [b"%03d-a" % i, b"%03d-b" % i]
        live.append_as_leader(batch(pair))
        values.extend(pair)
    bases = [s.base_offset for s in live.segments]
    assert len(bases) >= 4
    (tmp_path / "img").mkdir()
    image = crash_image(live.directory, tmp_path / "img")
    live.close()

    # Flip one byte inside the second batch of the second segment: CRC mismatch there.
    victim = image / f"{bases[1]:020d}.log"
    data = bytearray(victim.read_bytes())
    first = rec.parse_header(data)
    second_start = first.size
    data[second_start + rec.RECORDS_OFFSET + 3] ^= 0x55
    victim.write_bytes(bytes(data))

    log = Log.open(image, config, had_clean_shutdown=False, recovery_point=0)
    lost_from = first.last_offset + 1
    assert log.log_end_offset == lost_from
    assert [s.base_offset for s in log.segments] == bases[:2]
    for base in bases[2:]:
        assert not (image / f"{base:020d}.log").exists()
        assert not (image / f"{base:020d}.index").exists()
    assert victim.stat().st_size == second_start
    assert contents(log) == list(enumerate(values))[:lost_from]
    log.close()


def test_empty_segments_above_lost_records_are_dropped(tmp_path: Path) -> None:
    """A power loss after two rolls whose fsyncs were still pending: the last two segments'
    files survive, empty (their directory entries reached the disk, their data did not). The
    log ends where its records end, not at the last empty segment's base above a hole."""
    config = LogConfig(segment_bytes=400, segment_index_bytes=4096, file_delete_delay_ms=0)
    live = Log.open(tmp_path / "live" / "t-0", config)
    values: list[bytes] = []
    for i in range(20):
        pair = [b"%03d-a" % i, b"%03d-b" % i]
        live.append_as_leader(batch(pair))
        values.extend(pair)
    bases = [s.base_offset for s in live.segments]
    assert len(bases) >= 4
    (tmp_path / "img").mkdir()
    image = crash_image(live.directory, tmp_path / "img")
    live.close()
    for base in bases[-2:]:  # never fsynced: emptied by the power loss
        os.truncate(image / f"{base:020d}.log", 0)

    log = Log.open(image, config, had_clean_shutdown=False, recovery_point=bases[-3])
    assert log.log_end_offset == bases[-2]  # was bases[-1], above the lost [bases[-2], bases[-1])
    assert [s.base_offset for s in log.segments] == bases[:-1]
    assert not (image / f"{bases[-1]:020d}.log").exists()
    assert contents(log) == list(enumerate(values))[: bases[-2]]
    # Appended again from there: the offsets stay contiguous.
    log.append_as_leader(batch([b"again"]))
    assert contents(log)[-1] == (bases[-2], b"again")
    log.close()


def test_recovery_starts_at_the_recovery_point(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=400, segment_index_bytes=4096)
    write_log(tmp_path / "t-0", 20, config)
    # Damage below the recovery point is not looked at (it was fsynced: trusted, as in Kafka);
    # damage above it is.
    directory = tmp_path / "t-0"
    logs = sorted(directory.glob("*.log"))
    last = logs[-1]
    last.write_bytes(last.read_bytes() + b"torn")
    last_base = int(last.name.split(".")[0])
    log = Log.open(directory, config, had_clean_shutdown=False, recovery_point=last_base)
    assert log.log_end_offset == 40
    assert last.stat().st_size == log.active_segment.size
    assert log.recovery_point == last_base  # recovered, but not known to be on disk
    log.flush()
    assert log.recovery_point == 40
    log.close()


def test_missing_and_corrupt_indexes_are_rebuilt_at_load(tmp_path: Path) -> None:
    config = LogConfig(
        segment_bytes=2000,
        segment_index_bytes=4096,
        index_interval_bytes=100,
        file_delete_delay_ms=0,
    )
    directory = tmp_path / "t-0"
    values = write_log(directory, 40, config)
    indexes = sorted(directory.glob("*.index"))
    assert len(indexes) >= 2
    index0, second = indexes[0], indexes[1]
    time0 = directory / "00000000000000000000.timeindex"
    original_index, original_time = index0.read_bytes(), time0.read_bytes()
    assert len(original_index) >= 16  # the segment had index entries
    index0.unlink()
    time0.write_bytes(original_time + b"\x01\x02\x03")  # not a multiple of 12 bytes
    second_original = second.read_bytes()
    second.write_bytes(b"\x7f\xff\xff\xff\x00\x00\x00\x00")  # an entry pointing nowhere sane

    log = Log.open(directory, config)  # even after a clean shutdown
    assert contents(log) == list(enumerate(values))
    assert index0.read_bytes() == original_index
    assert time0.read_bytes() == original_time
    # (the active segment's index is re-extended with zeros to take new entries)
    rebuilt = second.read_bytes()
    assert rebuilt[: len(second_original)] == second_original
    assert rebuilt[len(second_original) :] == bytes(len(rebuilt) - len(second_original))
    for offset in range(0, 80, 3):
        info = log.read(offset, 1, Isolation.LOG_END)
        assert info.slice is not None
        header = rec.parse_header(info.slice.read_bytes())
        assert header.base_offset <= offset <= header.last_offset
    log.close()


def test_stray_files_are_cleaned_up_at_load(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    values = write_log(directory, 3)
    strays = [
        "00000000000000000000.log.deleted",
        "00000000000000000000.index.deleted",
        "00000000000000000007.log.cleaned",
        "00000000000000000007.index.swap",
        "00000000000000000000.index.tmp",
        "00000000000000000999.index",
        "00000000000000000999.timeindex",
    ]
    for name in strays:
        (directory / name).write_bytes(b"junk")
    log = Log.open(directory, CONFIG)
    remaining = sorted(p.name for p in directory.iterdir())
    assert remaining == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        f"{log.log_end_offset:020d}.snapshot",  # the clean close's producer snapshot
        "leader-epoch-checkpoint",
    ]
    assert contents(log) == list(enumerate(values))
    log.close()


def test_interrupted_kafka_segment_swap_is_completed(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=300, segment_index_bytes=4096)
    directory = tmp_path / "t-0"
    values = write_log(directory, 12, config)
    logs = sorted(directory.glob("*.log"))
    assert len(logs) >= 4
    # Kafka's compaction: segments 0 and 1 merged into one cleaned segment at base 0, renamed
    # to .swap; the crash came before the swap finished (the old segments are still there).
    merged = logs[0].read_bytes() + logs[1].read_bytes()
    (directory / (logs[0].name + ".swap")).write_bytes(merged)
    log = Log.open(directory, config, had_clean_shutdown=False)
    assert not list(directory.glob("*.swap"))
    assert not logs[1].exists()
    bases = [s.base_offset for s in log.segments]
    assert bases[0] == 0 and bases[1] == int(logs[2].name.split(".")[0])
    assert log.segments[0].size == len(merged)
    assert contents(log) == list(enumerate(values))
    log.close()


def test_checkpointed_offsets_are_clamped_at_load(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    write_log(directory, 5)  # offsets 0..9
    log = Log.open(directory, CONFIG, log_start_offset=4, high_watermark=99, recovery_point=99)
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (4, 10, 10)
    assert log.recovery_point == 10
    log.close()
    # A log start offset beyond what survived: the log restarts empty there.
    log = Log.open(directory, CONFIG, log_start_offset=25, had_clean_shutdown=False)
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (25, 25, 25)
    assert [s.base_offset for s in log.segments] == [25]
    assert log.append_as_leader(batch([b"x"])).first_offset == 25
    log.close()


@pytest.mark.parametrize("clean", [True, False])
def test_reopen_after_close_keeps_everything(tmp_path: Path, clean: bool) -> None:
    config = LogConfig(segment_bytes=500, segment_index_bytes=4096)
    directory = tmp_path / "t-0"
    values = write_log(directory, 30, config)
    log = Log.open(directory, config, had_clean_shutdown=clean)
    assert contents(log) == list(enumerate(values))
    assert log.append_as_leader(batch([b"more"])).first_offset == len(values)
    log.close()


class TornWriteFile:
    """A real file whose pwrite can be told to write half of the data, then fail (ENOSPC)."""

    def __init__(self, inner: OSFile, vfs: FaultyVFS) -> None:
        self._inner = inner
        self._vfs = vfs

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def pwrite(self, data: bytes | bytearray | memoryview, offset: int) -> None:
        if self._vfs.fail_log_writes and self._inner.path.suffix == ".log":
            self._vfs.fail_log_writes -= 1
            if self._vfs.fail_log_writes == 0:
                half = memoryview(data)[: len(data) // 2]
                self._inner.pwrite(half, offset)
                raise OSError(errno.ENOSPC, "injected: disk full")
        self._inner.pwrite(data, offset)


class FaultyVFS(OSVFS):
    """The real file system, with injectable torn writes on ``.log`` files."""

    def __init__(self) -> None:
        self.fail_log_writes = 0  # the n-th next write to a .log file tears and fails

    def open(
        self, path: Path, *, create: bool = True, writable: bool = True, truncate: bool = False
    ) -> OSFile:
        return TornWriteFile(
            super().open(path, create=create, writable=writable, truncate=truncate), self
        )  # type: ignore[return-value]


@pytest.mark.parametrize("failing_write", [1, 2])
def test_io_error_during_append_leaves_the_log_unchanged(
    tmp_path: Path, failing_write: int
) -> None:
    vfs = FaultyVFS()
    log = Log.open(tmp_path / "t-0", CONFIG, vfs=vfs)
    log.append_as_leader(batch([b"kept"]))
    before = (log.active_segment.log_path.read_bytes(), log.log_end_offset)
    vfs.fail_log_writes = failing_write  # 2 = the second batch of a two-batch request tears
    with pytest.raises(OSError, match="injected"):
        log.append_as_leader(batch([b"lost-1"]) + batch([b"lost-2"]))
    assert (log.active_segment.log_path.read_bytes(), log.log_end_offset) == before
    assert log.append_as_leader(batch([b"next"])).first_offset == 1
    log.maybe_increment_high_watermark(log.log_end_offset)
    assert contents(log) == [(0, b"kept"), (1, b"next")]
    log.close()
    reopened = Log.open(tmp_path / "t-0", CONFIG, had_clean_shutdown=False)
    assert contents(reopened) == [(0, b"kept"), (1, b"next")]
    reopened.close()


class DirSyncVFS(OSVFS):
    """The real file system, recording ``fsync_dir`` calls; can make them fail."""

    def __init__(self) -> None:
        self.dir_syncs: list[Path] = []
        self.fail_dir_sync = False

    def fsync_dir(self, path: Path) -> None:
        if self.fail_dir_sync:
            raise OSError(errno.EIO, "injected: directory fsync failed")
        self.dir_syncs.append(Path(path))
        super().fsync_dir(path)


def test_first_flush_of_a_new_log_makes_its_segment_entry_durable(tmp_path: Path) -> None:
    # Log.open creates 00000000000000000000.log; an fsync of the file alone does not make its
    # directory entry durable, so the flush that moves the recovery point must sync the dir.
    vfs = DirSyncVFS()
    log = Log.open(tmp_path / "t-0", CONFIG, vfs=vfs)
    log.append_as_leader(batch([b"a"]))
    vfs.dir_syncs.clear()  # (the first append wrote the leader-epoch-checkpoint)
    log.flush()
    assert log.recovery_point == 1
    assert vfs.dir_syncs == [tmp_path / "t-0"]
    # Nothing created since: the next flush does not sync the directory again.
    log.append_as_leader(batch([b"b"]))
    log.flush()
    assert vfs.dir_syncs == [tmp_path / "t-0"]
    log.close()


def test_flush_after_roll_syncs_the_directory(tmp_path: Path) -> None:
    vfs = DirSyncVFS()
    log = Log.open(tmp_path / "t-0", CONFIG, vfs=vfs)
    log.append_as_leader(batch([b"a"]))
    log.flush()
    vfs.dir_syncs.clear()
    log.roll()
    log.append_as_leader(batch([b"b"]))
    assert log.pending_flush_offset == 1
    log.flush(log.pending_flush_offset)
    assert vfs.dir_syncs == [tmp_path / "t-0"]
    log.close()


def test_recovery_point_does_not_move_when_the_directory_sync_fails(tmp_path: Path) -> None:
    vfs = DirSyncVFS()
    log = Log.open(tmp_path / "t-0", CONFIG, vfs=vfs)
    log.append_as_leader(batch([b"a"]))
    vfs.dir_syncs.clear()  # (the first append wrote the leader-epoch-checkpoint)
    vfs.fail_dir_sync = True
    with pytest.raises(OSError, match="injected"):
        log.flush()
    # A checkpoint written now must not claim offset 0 is durable.
    assert log.recovery_point == 0
    vfs.fail_dir_sync = False
    log.flush()
    assert log.recovery_point == 1
    assert vfs.dir_syncs == [tmp_path / "t-0"]
    log.close()


def test_delete_records_flushes_before_moving_the_log_start_offset(tmp_path: Path) -> None:
    # A writer that restates live values, then moves the log start offset past the old
    # copies: the restated records must be durable before the checkpointed log start offset
    # can name them (a lost tail would otherwise empty the log at load).
    log = Log.open(tmp_path / "t-0", CONFIG)
    for value in (b"old-1", b"old-2", b"restated-1", b"restated-2"):
        log.append_as_leader(batch([value]))
    log.maybe_increment_high_watermark(log.log_end_offset)
    assert log.recovery_point == 0
    assert log.delete_records(2) == 2
    assert log.recovery_point == log.log_end_offset == 4
    log.append_as_leader(batch([b"later"]))
    log.maybe_increment_high_watermark(log.log_end_offset)
    assert log.delete_records(2) == 2  # no move: no flush either
    assert log.recovery_point == 4
    log.close()


class SyncSnapshotVFS(OSVFS):
    """The real file system; each fsync of a file records the file's content at that moment
    (what a power loss right after it would keep at best)."""

    def __init__(self) -> None:
        self.synced: dict[Path, bytes] = {}

    def open(
        self, path: Path, *, create: bool = True, writable: bool = True, truncate: bool = False
    ) -> OSFile:
        return SnapshotOnSyncFile(
            super().open(path, create=create, writable=writable, truncate=truncate), self
        )  # type: ignore[return-value]


class SnapshotOnSyncFile:
    def __init__(self, inner: OSFile, vfs: SyncSnapshotVFS) -> None:
        self._inner = inner
        self._vfs = vfs

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def fsync(self) -> None:
        self._inner.fsync()
        self._vfs.synced[self._inner.path] = self._inner.path.read_bytes()


def test_clean_close_makes_the_final_time_index_entry_durable(tmp_path: Path) -> None:
    vfs = SyncSnapshotVFS()
    log = Log.open(tmp_path / "t-0", CONFIG, vfs=vfs)
    for i in range(20):  # several index entries, then a newest timestamp after the last one
        log.append_as_leader(batch([b"v%02d" % i + b"x" * 40], timestamp=1_000 + i))
    time_index = log.active_segment.time_index.path
    log.close()
    final = time_index.read_bytes()
    assert final[-12:-4] == (1_019).to_bytes(8, "big")  # the max timestamp is the last entry
    assert vfs.synced[time_index] == final
    reopened = Log.open(tmp_path / "t-0", CONFIG)
    assert reopened.active_segment.largest_timestamp == 1_019
    reopened.close()


class ReadCountingVFS(OSVFS):
    """The real file system, counting the bytes read from ``.log`` files."""

    def __init__(self) -> None:
        self.log_bytes_read = 0

    def open(
        self, path: Path, *, create: bool = True, writable: bool = True, truncate: bool = False
    ) -> OSFile:
        return ReadCountingFile(
            super().open(path, create=create, writable=writable, truncate=truncate), self
        )  # type: ignore[return-value]


class ReadCountingFile:
    def __init__(self, inner: OSFile, vfs: ReadCountingVFS) -> None:
        self._inner = inner
        self._vfs = vfs

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def pread(self, size: int, offset: int) -> bytes:
        data = self._inner.pread(size, offset)
        if self._inner.path.suffix == ".log":
            self._vfs.log_bytes_read += len(data)
        return data


def index_state(log: Log) -> tuple[object, ...]:
    segment = log.active_segment
    offsets, times = segment.offset_index, segment.time_index
    return (
        [offsets.entry_at(i) for i in range(offsets.entries)],
        [times.entry_at(i) for i in range(times.entries)],
        segment.max_timestamp_so_far,
        segment.offset_of_max_timestamp_so_far,
        segment.size,
    )


@pytest.mark.parametrize("torn", [False, True])
def test_recovery_reads_only_what_was_written_since_the_last_flush(
    tmp_path: Path, torn: bool
) -> None:
    """One big active segment, flushed, then a little more: a restart after a crash reads the
    batches after the recovery point (from the last index entry before it), not the segment
    (it read all 627 KB of it before), and rebuilds the same indexes a full scan does."""
    config = LogConfig(
        segment_bytes=1 << 30, segment_index_bytes=1 << 16, index_interval_bytes=4096
    )
    log = Log.open(tmp_path / "t-0", config)
    values: list[bytes] = []
    for i in range(300):  # ~600 KB, timestamps not monotonic (the time index skips some)
        pair = [b"%04d-a" % i + b"x" * 1000, b"%04d-b" % i + b"y" * 1000]
        log.append_as_leader(batch(pair, timestamp=10_000 + (i * 7919) % 1000))
        values.extend(pair)
    log.flush()
    flushed_size = log.active_segment.size
    for i in range(300, 305):
        pair = [b"%04d-a" % i, b"%04d-b" % i]
        log.append_as_leader(batch(pair, timestamp=20_000 + i))
        values.extend(pair)
    tail = log.active_segment.size - flushed_size
    images = [crash_image(log.directory, tmp_path / name) for name in ("fast", "full")]
    recovery_point = log.recovery_point
    log.close()
    assert recovery_point == 600
    if torn:
        for image in images:
            segment = next(image.glob("*.log"))
            with open(segment, "ab") as f:
                f.write(b"torn write")

    vfs = ReadCountingVFS()
    fast = Log.open(
        images[0], config, had_clean_shutdown=False, recovery_point=recovery_point, vfs=vfs
    )
    read = vfs.log_bytes_read
    full = Log.open(images[1], config, had_clean_shutdown=False, recovery_point=0)
    # the tail, back to the last index entry before it, and a few header reads of other steps
    assert read < tail + config.index_interval_bytes + 3 * 2100, (read, tail, flushed_size)
    assert index_state(fast) == index_state(full)
    assert contents(fast) == contents(full) == list(enumerate(values))
    # and it goes on appending and indexing like the full rebuild
    for log_ in (fast, full):
        log_.append_as_leader(batch([b"z" * 5000]))
    assert index_state(fast) == index_state(full)
    fast.close()
    full.close()
