"""Crashes in the middle of a truncation (and of a follower append that starts a new epoch).

Each operation runs on a copy of a cleanly closed partition through
:class:`tests.storage.crashfs.CrashVFS`: once to learn its steps, then once per step, crashed
there (a ``pwrite`` torn at several byte counts), the disk taken as a killed process or a power
loss leaves it, and reopened with the real OS VFS as after an unclean stop, with the offsets the
LogManager had checkpointed before the operation. Whatever the crash point:

* the log opens and holds a prefix of the records it had, at least what the operation keeps
  (a truncation removes a tail, a crash may leave more of it, never a gap or a foreign record);
* once the epoch cache's new file is visible, the records it forgot are gone too (the
  truncation is durable before the cache is rewritten);
* the epoch cache agrees with the batch headers, indexes are consistent (``dump-log --verify``
  finds nothing), and the idempotent producer continues where the surviving log ends.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from sluice.protocol import records as rec
from sluice.server.storage.dump_log import verify_partition
from sluice.server.storage.layout import LEADER_EPOCH_CHECKPOINT
from sluice.server.storage.leader_epoch import entries_from_batches
from sluice.server.storage.log import Log
from sluice.server.storage.log_config import LogConfig
from tests.storage.crashfs import Crash, CrashVFS
from tests.storage.test_crash_metadata import RECENT_MS, contents

CONFIG = LogConfig(segment_bytes=400, index_interval_bytes=100, file_delete_delay_ms=0)
PID = 7
EPOCHS = (0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 5, 5, 5, 5, 5, 5)  # per batch of 2 records
LEO = 2 * len(EPOCHS)
TEARS = (0, 1, 9, 1 << 20)


def produced(seq: int, epoch: int, base_offset: int = 0) -> bytes:
    builder = rec.RecordBatchBuilder(
        producer_id=PID,
        producer_epoch=0,
        base_sequence=seq,
        base_offset=base_offset,
        partition_leader_epoch=epoch,
    )
    builder.append(RECENT_MS + seq, None, b"v-%d" % seq)
    builder.append(RECENT_MS + seq + 1, None, b"v-%d" % (seq + 1))
    return builder.build()


def values(log: Log) -> list[bytes | None]:
    return [value for _, value in contents(log)]


ORIGINAL = [b"v-%d" % i for i in range(LEO)]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("base")
    log = Log.open(root / "t-0", CONFIG)
    for i, epoch in enumerate(EPOCHS):
        log.append_as_leader(produced(2 * i, epoch), leader_epoch=epoch)
    log.maybe_increment_high_watermark(log.log_end_offset)
    log.close()  # flushed, producer snapshot at LEO
    assert len(log.segments) >= 4
    return root


def _truncate_mid_epoch(log: Log) -> None:
    assert log.truncate_to(15)  # inside epoch 2's batch 14..15: LEO 14


def _truncate_fully(log: Log) -> None:
    log.truncate_fully_and_start_at(100)


def _follower_append_new_epoch(log: Log) -> None:
    log.append_as_follower(produced(LEO, 7, LEO) + produced(LEO + 2, 7, LEO + 2))


# name -> (operation, LEO it leaves, records it keeps)
OPERATIONS: dict[str, tuple[Callable[[Log], None], int]] = {
    "truncate_to": (_truncate_mid_epoch, 14),
    "truncate_fully_and_start_at": (_truncate_fully, 100),
    "append_as_follower": (_follower_append_new_epoch, LEO + 4),
}


class Run:
    def __init__(self, base: Path, work: Path) -> None:
        shutil.copytree(base, work)
        self.vfs = CrashVFS(work)
        self.log = Log.open(work / "t-0", CONFIG, recovery_point=LEO, vfs=self.vfs)
        self.start = len(self.vfs.steps)


def dry_run(base: Path, work: Path, name: str) -> tuple[int, list[tuple[str, str]]]:
    run = Run(base, work)
    OPERATIONS[name][0](run.log)
    run.vfs.release()
    return run.start, [(s.kind, s.path.name) for s in run.vfs.steps]


def check_reopened(directory: Path, name: str, cache_rewritten: bool) -> None:
    log = Log.open(
        directory,
        CONFIG,
        recovery_point=LEO,
        log_start_offset=0,
        high_watermark=LEO,
        had_clean_shutdown=False,
    )
    try:
        leo = log.log_end_offset
        new_leo = OPERATIONS[name][1]
        got = values(log)
        if name == "append_as_follower":
            assert LEO <= leo <= new_leo
            assert got == [*ORIGINAL, *(b"v-%d" % i for i in range(LEO, LEO + 4))][:leo]
        elif leo == 100:  # fully truncated
            assert (log.log_start_offset, got) == (100, [])
        else:
            assert (0 if new_leo == 100 else new_leo) <= leo <= LEO
            assert got == ORIGINAL[:leo]  # a prefix: no gap, nothing foreign
        if cache_rewritten and name != "append_as_follower":
            assert leo == new_leo, "the cache forgot epochs of records that came back"
        # The cache says what the batch headers say (plus at most an empty term at LEO).
        headers = [h for s in log.segments for _, h in s.batches()]
        derived = entries_from_batches(headers, log.log_start_offset)
        assert log.leader_epoch_cache.entries[: len(derived)] == derived
        assert len(log.leader_epoch_cache) <= len(derived) + 1
        assert log.high_watermark <= leo
        # The idempotent producer continues where the log ends (its retry is a duplicate).
        if leo and leo != 100:
            retry = log.append_as_leader(produced(leo - 2, 9), leader_epoch=9)
            assert (retry.first_offset, retry.record_count) == (leo - 2, 0)
            assert log.append_as_leader(produced(leo, 9), leader_epoch=9).first_offset == leo
    finally:
        log.close()
    assert verify_partition(directory) == []


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_crash_at_every_step(base: Path, tmp_path: Path, name: str) -> None:
    start, steps = dry_run(base, tmp_path / "dry", name)
    assert len(steps) > start
    # Where the cache's new content becomes visible: after its rename (killed process), after
    # the directory fsync that follows (power loss).
    renames = [
        i
        for i in range(start, len(steps))
        if steps[i] == ("rename", LEADER_EPOCH_CHECKPOINT + ".tmp")
    ]
    assert renames, steps[start:]
    runs = 0
    for crash_at in range(start, len(steps)):
        kind, file_name = steps[crash_at]
        for mode in ("process", "power"):
            for tear in TEARS if kind == "pwrite" and mode == "process" else (0,):
                work = tmp_path / f"run-{runs}"
                runs += 1
                run = Run(base, work)
                run.vfs.crash_at, run.vfs.tear = crash_at, tear
                with pytest.raises(Crash):
                    OPERATIONS[name][0](run.log)
                assert (run.vfs.steps[crash_at].kind, run.vfs.steps[crash_at].path.name) == (
                    kind,
                    file_name,
                )
                run.vfs.release()
                image = tmp_path / f"image-{runs}"
                if mode == "process":
                    run.vfs.process_crash_image(image)
                    rewritten = crash_at > renames[-1]
                else:
                    run.vfs.power_loss_image(image)
                    rewritten = crash_at > renames[-1] + 1
                try:
                    check_reopened(image / "t-0", name, rewritten)
                except AssertionError as exc:
                    raise AssertionError(
                        f"{name}: crash at step {crash_at} ({kind} {file_name}), {mode} image, "
                        f"tear {tear}: {exc}"
                    ) from exc
                shutil.rmtree(work)
                shutil.rmtree(image)
    assert runs >= 2 * (len(steps) - start)
