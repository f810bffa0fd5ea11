"""The LogManager's background flusher fsyncs in its thread, not on the event loop (issue 13,
``LogManager.flush_in_background``): while an fsync of it blocks, the loop keeps serving; the
recovery point moves only once the fsyncs are done; retention, truncation, topic deletion and
shutdown during a flush in the thread are safe.

:class:`BlockingVFS` makes one fsync (the first of a ``.log`` under a given directory after it
is armed) wait on a ``threading.Event``. On code that flushes on the loop, the loop itself
waits there: the bounded wait in the VFS then runs out and the tests fail.
"""

from __future__ import annotations

import asyncio
import errno
import threading
import time
from pathlib import Path

import pytest

from sluice.server.storage.checkpoint import OffsetCheckpointFile
from sluice.server.storage.layout import CLEAN_SHUTDOWN_MARKER, RECOVERY_POINT_CHECKPOINT
from sluice.server.storage.log import Log
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.log_manager import LogManager
from sluice.server.storage.vfs import OSVFS, OSFile
from tests.storage.fullfs import FullDiskVFS
from tests.storage.test_log_manager import batch

CONFIG = LogConfig(segment_index_bytes=4096, file_delete_delay_ms=0)
BLOCK_LIMIT_S = 10.0  # the bounded wait of a blocked fsync


class BlockingVFS(OSVFS):
    """fsync of the first ``.log`` under :attr:`directory` after :meth:`arm` waits until
    :meth:`release` (at most :data:`BLOCK_LIMIT_S`; :attr:`timed_out` says if it ran out)."""

    def __init__(self) -> None:
        self.directory: Path | None = None
        self.entered = threading.Event()
        self.released = threading.Event()
        self.timed_out = False
        self.blocked_thread = ""

    def arm(self, directory: Path) -> None:
        self.directory = directory

    def release(self) -> None:
        self.released.set()

    def open(
        self, path: Path, *, create: bool = True, writable: bool = True, truncate: bool = False
    ) -> OSFile:
        real = super().open(path, create=create, writable=writable, truncate=truncate)
        return BlockingFile(self, real)

    def maybe_block(self, path: Path) -> None:
        if self.directory is None or path.parent != self.directory or path.suffix != ".log":
            return
        self.directory = None  # one-shot
        self.blocked_thread = threading.current_thread().name
        self.entered.set()
        self.timed_out = not self.released.wait(BLOCK_LIMIT_S)


class BlockingFile(OSFile):
    __slots__ = ("vfs",)

    def __init__(self, vfs: BlockingVFS, real: OSFile) -> None:
        super().__init__(real.path, real.fileno())
        self.vfs = vfs

    def fsync(self) -> None:
        self.vfs.maybe_block(self.path)
        super().fsync()


async def wait_for(condition: object, what: str, limit_s: float = 10.0) -> None:
    """Poll ``condition()`` on the loop (bounded)."""
    deadline = time.monotonic() + limit_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def rolled_log(m: LogManager, topic: str = "t", records: int = 1) -> Log:
    """A log with ``records`` records in a rolled segment: the flusher must fsync it."""
    (log,) = m.create_topic(topic, 1)
    log.append_as_leader(batch([b"v%d" % i for i in range(records)]))
    log.maybe_increment_high_watermark(log.log_end_offset)
    log.roll()
    assert log.pending_flush_offset == records and log.recovery_point == 0
    return log


def manager(path: Path, vfs: OSVFS, **kwargs: int) -> LogManager:
    m = LogManager(path, CONFIG, vfs=vfs, checkpoint_interval_ms=3_600_000, **kwargs)
    m.open()
    return m


async def test_the_loop_serves_while_the_flusher_fsyncs_and_the_recovery_point_waits(
    tmp_path: Path,
) -> None:
    vfs = BlockingVFS()
    m = manager(tmp_path, vfs, flush_check_interval_ms=10)
    log = rolled_log(m)
    (other,) = m.create_topic("other", 1)
    vfs.arm(log.directory)
    await m.start()
    await wait_for(vfs.entered.is_set, "the flusher's fsync")
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    task = asyncio.create_task(ticker())
    await wait_for(lambda: ticks >= 5, "the loop to run a coroutine during the fsync")
    task.cancel()
    # An append to another partition is served while the fsync blocks.
    info = other.append_as_leader(batch([b"served"]))
    assert info.first_offset == 0
    assert not vfs.timed_out and not vfs.released.is_set()
    assert vfs.blocked_thread.startswith("sluice-log-flusher")
    assert log.recovery_point == 0 and log.pending_flush_offset == 1  # not before the fsync
    vfs.release()
    recovery = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    await wait_for(
        lambda: log.recovery_point == 1 and recovery.read().get(("t", 0)) == 1,
        "the recovery point after the fsync",
    )
    assert log.pending_flush_offset is None
    assert not vfs.timed_out
    await m.stop()
    assert (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()


async def start_blocked_pass(m: LogManager, vfs: BlockingVFS, log: Log) -> asyncio.Task[int]:
    vfs.arm(log.directory)
    task = asyncio.create_task(m.flush_in_background())
    await wait_for(vfs.entered.is_set, "the flusher's fsync")
    assert not task.done()
    return task


async def test_a_truncation_during_the_flush_keeps_the_recovery_point_down(
    tmp_path: Path,
) -> None:
    """The follower truncates below the flush in flight and appends new records at the same
    offsets, which the fsync may have preceded: the pass must not claim them."""
    vfs = BlockingVFS()
    m = manager(tmp_path, vfs)
    log = rolled_log(m, records=2)
    task = await start_blocked_pass(m, vfs, log)
    log.truncate_to(0)
    log.append_as_follower(batch([b"new0", b"new1", b"new2"]))
    assert log.recovery_point == 0 and log.log_end_offset == 3
    vfs.release()
    assert await task == 0  # discarded: the next pass flushes again
    assert log.recovery_point == 0
    assert not vfs.timed_out
    log.flush()  # as the next pass after flush.ms (or close) would
    assert log.recovery_point == 3
    m.close()


async def test_retention_deleting_the_flushed_segment_during_the_flush(tmp_path: Path) -> None:
    vfs = BlockingVFS()
    m = manager(tmp_path, vfs)
    log = rolled_log(m, records=2)
    log.append_as_leader(batch([b"kept"], timestamp=time.time_ns() // 1_000_000))
    log.maybe_increment_high_watermark(log.log_end_offset)
    task = await start_blocked_pass(m, vfs, log)
    assert log.delete_records(2) == 2  # flushes itself, on the loop: recovery point 3
    assert log.delete_old_segments() == 1  # its files removed at once (no delay)
    assert not (log.directory / f"{0:020d}.index").exists()
    vfs.release()
    assert await task == 1  # the indexes it could no longer open were skipped
    assert log.recovery_point == 3 and log.pending_flush_offset is None  # not lowered to 2
    assert not vfs.timed_out
    m.close()
    assert (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()


async def test_a_topic_deleted_during_the_flush(tmp_path: Path) -> None:
    vfs = BlockingVFS()
    m = manager(tmp_path, vfs)
    log = rolled_log(m)
    task = await start_blocked_pass(m, vfs, log)
    m.delete_topic("t")  # closes the log (its own flush) and renames its directory
    assert log.closed
    vfs.release()
    assert await task == 0
    assert not vfs.timed_out
    m.close()


async def test_stop_waits_for_the_flush_thread_before_closing_files(tmp_path: Path) -> None:
    vfs = BlockingVFS()
    m = manager(tmp_path, vfs, flush_check_interval_ms=10)
    log = rolled_log(m)
    vfs.arm(log.directory)
    await m.start()
    await wait_for(vfs.entered.is_set, "the flusher's fsync")
    stopping = asyncio.create_task(m.stop())
    for _ in range(20):  # the loop turns; stop must still be waiting for the thread
        await asyncio.sleep(0.005)
    assert not stopping.done() and not log.closed
    vfs.release()
    await asyncio.wait_for(stopping, BLOCK_LIMIT_S)
    assert log.closed and (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    assert not vfs.timed_out
    again = manager(tmp_path, OSVFS())
    assert again.had_clean_shutdown
    assert again.get_log("t", 0).recovery_point == 1  # type: ignore[union-attr]
    again.close()


async def test_a_failing_background_fsync_changes_nothing_and_is_retried(tmp_path: Path) -> None:
    vfs = FullDiskVFS(errno.EIO)
    m = manager(tmp_path, vfs)
    log = rolled_log(m)
    vfs.fail_fsync = True
    with pytest.raises(OSError):
        await m.flush_in_background()
    assert log.recovery_point == 0 and log.pending_flush_offset == 1
    vfs.fail_fsync = False
    assert await m.flush_in_background() == 1
    assert log.recovery_point == 1 and log.pending_flush_offset is None
    m.close()
