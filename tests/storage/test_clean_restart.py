"""The clean-restart fast path of a log load (issue 27: rolling restarts of brokers with
thousands of partitions) and that an unclean restart still recovers and re-syncs everything.

After a clean shutdown a load lists each partition directory once, changes no file, leaves the
trimmed indexes of the active segments as they are (the first append re-extends them) and
marks the directories clean, so neither a flush nor the next close fsyncs them; nothing is
recovered. After an unclean one: recovery runs and every directory is fsynced again. The
proof is counted calls on the VFS, not time."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

from sluice.protocol import records as rec
from sluice.server.storage.layout import CLEAN_SHUTDOWN_MARKER, LEADER_EPOCH_CHECKPOINT
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.log_manager import LogManager
from sluice.server.storage.vfs import OSVFS, VFSFile

CONFIG = LogConfig(segment_index_bytes=4096, file_delete_delay_ms=0)
PARTITIONS = 4


class CountingVFS(OSVFS):
    """Counts the calls a load and a close make, by kind (and fsynced directories by path)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.synced_dirs: list[Path] = []

    def listdir(self, path: Path) -> list[str]:
        self.calls["listdir"] += 1
        return super().listdir(path)

    def rename(self, src: Path, dst: Path) -> None:
        self.calls["rename"] += 1
        super().rename(src, dst)

    def remove(self, path: Path) -> None:
        self.calls["remove"] += 1
        super().remove(path)

    def open(
        self, path: Path, *, create: bool = True, writable: bool = True, truncate: bool = False
    ) -> VFSFile:
        if create and not Path(path).exists():
            self.calls["created"] += 1
        return super().open(path, create=create, writable=writable, truncate=truncate)

    def fsync_dir(self, path: Path) -> None:
        self.synced_dirs.append(Path(path))
        super().fsync_dir(path)


def _batch(*values: bytes) -> bytes:
    return rec.build_batch([(1_000 + i, None, v) for i, v in enumerate(values)])


def _populate(path: Path) -> LogManager:
    """A data dir with ``PARTITIONS`` partitions, one of them holding records."""
    m = LogManager(path, CONFIG)
    m.open()
    m.create_topic("t", PARTITIONS)
    log = m.get_log("t", 0)
    assert log is not None
    for i in range(5):
        log.append_as_leader(_batch(b"%d" % i + b"x" * 50))
    log.maybe_increment_high_watermark(log.log_end_offset)
    return m


def _partition_dirs(path: Path) -> set[Path]:
    return {path / f"t-{p}" for p in range(PARTITIONS)}


def test_clean_restart_lists_once_changes_nothing_and_syncs_no_partition_directory(
    tmp_path: Path,
) -> None:
    _populate(tmp_path).close()
    index = tmp_path / "t-0" / "00000000000000000000.index"
    trimmed = index.stat().st_size
    assert trimmed < CONFIG.segment_index_bytes  # the close trimmed it to its entries

    vfs = CountingVFS()
    m = LogManager(tmp_path, CONFIG, vfs=vfs)
    m.open()
    assert m.had_clean_shutdown
    assert vfs.calls["listdir"] == PARTITIONS  # one listing per partition
    assert vfs.calls["rename"] == vfs.calls["created"] == 0
    assert vfs.calls["remove"] == 1  # the clean-shutdown marker, nothing in a partition
    assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    assert index.stat().st_size == trimmed  # not re-extended by the load
    assert not _partition_dirs(tmp_path) & set(vfs.synced_dirs)
    log = m.get_log("t", 0)
    assert log is not None and log.log_end_offset == 5 and log.recovery_point == 5

    m.run_flushes(now_ms=10**13)  # a flush of an untouched log syncs no directory either
    m.close()
    assert not _partition_dirs(tmp_path) & set(vfs.synced_dirs)
    assert (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()

    # The first append re-extends the active segment's indexes, and a roll after the restart
    # makes the directory dirty again: the next flush syncs it.
    m = LogManager(tmp_path, CONFIG, vfs=vfs)
    m.open()
    log = m.get_log("t", 0)
    assert log is not None
    log.append_as_leader(_batch(b"after"))
    assert index.stat().st_size == CONFIG.segment_index_bytes
    log.roll()
    vfs.synced_dirs.clear()
    log.flush()
    assert tmp_path / "t-0" in vfs.synced_dirs
    m.close()


def test_unclean_restart_still_recovers_and_syncs_every_partition_directory(
    tmp_path: Path,
) -> None:
    m = _populate(tmp_path)
    m.write_checkpoints()
    # Crash: the image of the data dir while everything is open (no close, no marker), with a
    # torn tail on the partition that holds records.
    image = tmp_path / "image"
    shutil.copytree(tmp_path, image, ignore=shutil.ignore_patterns("image", ".lock"))
    m.close()
    segment = image / "t-0" / "00000000000000000000.log"
    segment.write_bytes(segment.read_bytes()[:-3])

    vfs = CountingVFS()
    m2 = LogManager(image, CONFIG, vfs=vfs)
    m2.open()
    assert not m2.had_clean_shutdown
    log = m2.get_log("t", 0)
    assert log is not None
    assert log.log_end_offset == 4  # the torn last batch was cut by recovery
    m2.close()
    assert _partition_dirs(image) <= set(vfs.synced_dirs)


def test_partition_with_a_created_file_is_not_trusted_clean(tmp_path: Path) -> None:
    """A load that creates a file (a missing index rebuilt) must sync that directory."""
    _populate(tmp_path).close()
    (tmp_path / "t-1" / "00000000000000000000.timeindex").unlink()
    (tmp_path / "t-2" / LEADER_EPOCH_CHECKPOINT).unlink(missing_ok=True)
    vfs = CountingVFS()
    m = LogManager(tmp_path, CONFIG, vfs=vfs)
    m.open()
    assert m.had_clean_shutdown
    m.close()
    synced = set(vfs.synced_dirs) & _partition_dirs(tmp_path)
    assert tmp_path / "t-1" in synced
    assert tmp_path / "t-3" not in synced
