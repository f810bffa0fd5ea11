"""A full disk (ENOSPC) and failing I/O (EIO) through :class:`tests.storage.fullfs.FullDiskVFS`
(issue 13): a failed append leaves no trace and appends resume when space returns; closing on
a full disk closes everything, raises nothing and leaves a start that is clean (marker written)
when every log flushed, or one that recovers when a flush failed; a background task that keeps
failing logs once per episode, without a traceback."""

from __future__ import annotations

import asyncio
import errno
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from sluice.server.storage.checkpoint import OffsetCheckpointFile
from sluice.server.storage.log import Log
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.log_manager import (
    CLEAN_SHUTDOWN_MARKER,
    LOG_START_OFFSET_CHECKPOINT,
    LogManager,
)
from tests.storage.fullfs import FullDiskVFS
from tests.storage.test_log_manager import batch, values_of

CONFIG = LogConfig(segment_bytes=600, segment_index_bytes=4096, file_delete_delay_ms=0)


def log_bytes(log: Log) -> list[int]:
    return [s.log_path.stat().st_size for s in log.segments]


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO])
def test_failed_appends_leave_no_trace_and_resume(tmp_path: Path, error: int) -> None:
    vfs = FullDiskVFS(error)
    log = Log.open(tmp_path / "t-0", CONFIG, vfs=vfs)
    for i in range(3):
        log.append_as_leader(batch([b"before-%d" % i, b"x" * 40]))
    leo, sizes = log.log_end_offset, log_bytes(log)
    vfs.full = True
    for attempt in range(20):  # single batches, a multi-batch request, and appends that roll
        records = batch([b"lost-%d" % attempt] * (1 + attempt % 5))
        if attempt % 3 == 0:
            records += batch([b"lost-too"])
        with pytest.raises(OSError) as info:
            log.append_as_leader(records)
        assert info.value.errno == error
        assert log.log_end_offset == leo
    # A roll may have made an empty segment; nothing that was there changed or grew.
    assert log_bytes(log)[: len(sizes)] == sizes and not any(log_bytes(log)[len(sizes) :])
    vfs.full = False
    for i in range(10):
        log.append_as_leader(batch([b"after-%d" % i, b"y" * 40]))
    log.maybe_increment_high_watermark(log.log_end_offset)
    expected = [v for i in range(3) for v in (b"before-%d" % i, b"x" * 40)] + [
        v for i in range(10) for v in (b"after-%d" % i, b"y" * 40)
    ]
    assert values_of(log) == expected
    assert len(log.segments) > 2
    log.close()
    reopened = Log.open(tmp_path / "t-0", CONFIG, had_clean_shutdown=False)  # scan it all
    reopened.maybe_increment_high_watermark(reopened.log_end_offset)
    assert values_of(reopened) == expected
    reopened.close()


def manager(path: Path, vfs: FullDiskVFS | None = None) -> LogManager:
    m = LogManager(path, CONFIG, **({} if vfs is None else {"vfs": vfs}))
    m.open()
    return m


def test_close_on_a_full_disk_is_clean_and_so_is_the_next_start(tmp_path: Path) -> None:
    vfs = FullDiskVFS()
    m = manager(tmp_path, vfs)
    (log,) = m.create_topic("t", 1)
    log.append_as_leader(batch([b"a", b"b"]))
    m.write_checkpoints()
    log.append_as_leader(batch([b"c"]))
    log.maybe_increment_high_watermark(3)
    log.delete_records(1)
    vfs.full = True
    with pytest.raises(OSError):
        log.append_as_leader(batch([b"lost"]))
    with capture_logs() as logs:
        m.close()  # raises nothing: the checkpoints cannot be written, the marker can
    assert [e["event"] for e in logs if e["log_level"] == "error"] == [
        "checkpoints not written at shutdown: older ones stay"
    ]
    assert all(segment.closed for segment in (s._file for s in log.segments))
    assert (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    stale = OffsetCheckpointFile(tmp_path / LOG_START_OFFSET_CHECKPOINT).read()
    assert stale[("t", 0)] == 0  # the older checkpoint, as documented
    again = manager(tmp_path)  # the lock was released
    assert again.had_clean_shutdown
    reopened = again.get_log("t", 0)
    assert reopened is not None and reopened.log_end_offset == 3
    reopened.maybe_increment_high_watermark(3)
    assert values_of(reopened) == [b"a", b"b", b"c"]  # DeleteRecords after the checkpoint undone
    again.close()


def test_close_when_a_flush_fails_leaves_no_marker(tmp_path: Path) -> None:
    vfs = FullDiskVFS(errno.EIO)
    m = manager(tmp_path, vfs)
    logs = m.create_topic("t", 2)
    for log in logs:
        log.append_as_leader(batch([b"a", b"b"]))
    vfs.fail_fsync = True
    with capture_logs() as captured:
        m.close()
    errors = [e for e in captured if e["log_level"] == "error"]
    assert errors[0]["event"] == "logs not flushed at shutdown: the next start recovers them"
    assert errors[0]["logs"] == 2
    assert all(s._file.closed for log in logs for s in log.segments)
    assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    again = manager(tmp_path)
    assert not again.had_clean_shutdown
    assert [again.get_log("t", p).log_end_offset for p in (0, 1)] == [2, 2]  # type: ignore[union-attr]
    again.close()


async def test_a_failing_background_task_logs_once_per_episode(tmp_path: Path) -> None:
    vfs = FullDiskVFS()
    m = LogManager(tmp_path, CONFIG, vfs=vfs, checkpoint_interval_ms=5)
    m.open()
    m.create_topic("t", 1)
    with capture_logs() as captured:
        await m.start()
        vfs.full = True
        deadline = time.monotonic() + 10
        while vfs.failures < 5:
            assert time.monotonic() < deadline, "the checkpoint task did not run"
            await asyncio.sleep(0.005)
        vfs.full = False

        def recovered() -> list[dict[str, object]]:
            return [e for e in captured if e["event"] == "background storage task recovered"]

        while not recovered():
            assert time.monotonic() < deadline, "the checkpoint task did not recover"
            await asyncio.sleep(0.005)
        await m.stop()
    failing = [e for e in captured if e["event"] == "background storage task failing"]
    assert [e["task"] for e in failing] == ["checkpoint"]
    assert "exc_info" not in failing[0]
    (done,) = recovered()
    assert done["task"] == "checkpoint" and done["failed"] >= 5  # type: ignore[operator]
    assert not [e for e in captured if e["log_level"] == "error" and e not in failing]


def test_index_pages_are_reserved_before_a_batch_is_written(tmp_path: Path) -> None:
    """An append that needs an index page the disk cannot give fails with ENOSPC before the
    batch is written (a store into the sparse page would be SIGBUS: the next test)."""
    vfs = FullDiskVFS()
    config = LogConfig(segment_index_bytes=1 << 20, index_interval_bytes=1)
    log = Log.open(tmp_path / "t-0", config, vfs=vfs)
    sizes: list[int] = []
    for i in range(3000):  # entries cross many index pages
        if i == 1500:
            vfs.fail_allocate = True
            with pytest.raises(OSError) as info:
                for j in range(5000):
                    sizes = log_bytes(log)
                    log.append_as_leader(batch([b"%d" % (i + j)]))
            assert info.value.errno == errno.ENOSPC
            assert log_bytes(log) == sizes and log.log_end_offset == i + j
            vfs.fail_allocate = False
            break
        log.append_as_leader(batch([b"%d" % i]))
    log.close()


SIGBUS_CHILD = """
import errno, os, sys
from pathlib import Path
from sluice.server.storage.index import OffsetIndex
mount = Path(sys.argv[1])
index = OffsetIndex(mount / "00000000000000000000.index", 0, max_index_size=1 << 20)
with open(mount / "ballast", "wb") as f:  # the disk full: nothing behind the sparse index
    try:
        while True:
            f.write(bytes(1 << 16))
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
try:
    for i in range(2000):
        index.append(i, i * 100)
except OSError as exc:
    print("ENOSPC" if exc.errno == errno.ENOSPC else exc)
    sys.exit(0)
sys.exit(3)
"""


def test_a_full_disk_fails_an_index_append_instead_of_killing_the_process(
    tmp_path: Path,
) -> None:
    """Real pages on a real full file system (a small tmpfs, so root only): before index
    pages were reserved, this store was SIGBUS."""
    import os
    import signal
    import subprocess
    import sys

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "mnt"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                             capture_output=True, check=False)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        child = subprocess.run([sys.executable, "-c", SIGBUS_CHILD, str(mount)],
                               capture_output=True, timeout=60, check=False)  # fmt: skip
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
    assert child.returncode != -signal.SIGBUS, "killed by SIGBUS"
    assert (child.returncode, child.stdout.strip()) == (0, b"ENOSPC"), child.stderr.decode()


def _batch(value: bytes, producer_id: int = -1, sequence: int = -1) -> bytes:
    from sluice.protocol import records as rec

    return rec.build_batch(
        [(1_000, None, value)], producer_id=producer_id, producer_epoch=0, base_sequence=sequence
    )


@pytest.mark.parametrize("idempotent", [False, True])
@pytest.mark.parametrize("splits", [False, True])
def test_a_failed_flush_takes_the_append_back_so_a_retry_is_written_once(
    tmp_path: Path, idempotent: bool, splits: bool
) -> None:
    """``flush.messages``: the append is written, its flush fails (an fsync error), the producer
    is told it failed (OSError -> KAFKA_STORAGE_ERROR, retriable) and retries. The retry must be
    the only copy (before: the first write stayed, and the retry was a second one), and with an
    idempotent producer its retry must be written, not answered as a duplicate of records that
    are gone. Single-batch and multi-batch appends take different paths."""
    vfs = FullDiskVFS(errno.EIO)
    log = Log.open(tmp_path / "t-0", LogConfig(flush_messages=2), vfs=vfs)
    pid = 7 if idempotent else -1

    def request(values: list[bytes], first_sequence: int) -> bytes:
        count = 2 if splits else 1
        return b"".join(
            _batch(v, pid, first_sequence + i if idempotent else -1)
            for i, v in enumerate(values[:count])
        )

    log.append_as_leader(request([b"a", b"a2"], 0))
    first = log.log_end_offset
    vfs.fail_fsync = True
    with pytest.raises(OSError):
        log.append_as_leader(request([b"b", b"b2"], first))
    assert log.log_end_offset == first
    vfs.fail_fsync = False
    info = log.append_as_leader(request([b"b", b"b2"], first))  # the client's retry
    assert info.first_offset == first
    log.maybe_increment_high_watermark(log.log_end_offset)
    expected = [b"a", b"a2", b"b", b"b2"] if splits else [b"a", b"b"]
    assert values_of(log) == expected
    assert log.recovery_point == log.log_end_offset  # the retry's flush went through
    log.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig(flush_messages=2), had_clean_shutdown=False)
    reopened.maybe_increment_high_watermark(reopened.log_end_offset)
    assert values_of(reopened) == expected
    reopened.close()
