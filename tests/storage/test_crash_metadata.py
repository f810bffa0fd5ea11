"""Crashes in the middle of the LogManager's metadata writes: checkpoints, the clean-shutdown
marker, producer snapshots and the topic metadata.

Each test runs one operation (write the checkpoints, close, create/alter/delete a topic, add
partitions, open) on a data directory through :class:`tests.storage.crashfs.CrashVFS`, once to learn
its steps, then once per step: crashed there (a ``pwrite`` torn at several byte counts), the disk
taken as a killed process or a power loss leaves it, and reopened with the real OS VFS. Whatever the
crash point, the broker starts, no flushed record is lost, the log start offset is never below the
one a durable checkpoint holds, the topic metadata is the old or the new version (never garbage) and
an idempotent producer's retry is still a duplicate.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sluice.protocol import records as rec
from sluice.server.storage.checkpoint import OffsetCheckpointFile
from sluice.server.storage.log import Isolation, Log
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.log_manager import (
    CLEAN_SHUTDOWN_MARKER,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    TOPICS_FILE,
    LogManager,
)
from sluice.server.storage.producer_state import decode_snapshot, snapshot_files
from tests.storage.crashfs import Crash, CrashVFS

CONFIG = LogConfig(segment_bytes=300, segment_index_bytes=4096, file_delete_delay_ms=0)
PID = 7
T_OVERRIDES = {"retention.ms": "86400000"}
U_OVERRIDES = {"retention.ms": "7200000"}
SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")
TEARS = (0, 1, 9, 1 << 20)  # bytes of the crashing pwrite that reach the file (all of it: 1 MiB)
#: The idempotent batches' timestamp: recent, so that their producer is not expired
#: (``producer.id.expiration.ms``) when a restart loads it from a snapshot.
RECENT_MS = time.time_ns() // 1_000_000


def plain(value: bytes) -> bytes:
    return rec.build_batch([(1_000, None, value)])


def idempotent(seq: int) -> bytes:
    builder = rec.RecordBatchBuilder(producer_id=PID, producer_epoch=0, base_sequence=seq)
    builder.append(RECENT_MS, None, b"seq-%d" % seq)
    return builder.build()


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


def commit(log: Log) -> None:
    log.maybe_increment_high_watermark(log.log_end_offset)


# What every scenario may rely on: flushed before the operation under test ran.
T0_VALUES = [b"t0-%02d" % i for i in range(12)]
T1_SEQS = 6  # idempotent batches 0..5 at offsets 0..5
LSO_IN_BASE = 2  # DeleteRecords whose checkpoint the base directory holds
LSO_REQUESTED = 6  # DeleteRecords done in memory (flushed) before the operation
# u-0: offsets of two digits in the checkpoints, so a line cut inside a number is a different
# number (12 -> 1).
U_VALUES = [b"u0-%02d" % i for i in range(12)]
U_LSO = 10


def build_base(root: Path) -> None:
    """A cleanly shut down data directory: topics t (2 partitions) and u, records in each, an
    idempotent producer on t-1 (its snapshot written by the clean close), t-0's log start
    offset moved to 2 and checkpointed."""
    m = LogManager(root, CONFIG)
    m.open()
    m.create_topic("t", 2, T_OVERRIDES)
    m.create_topic("u", 1, U_OVERRIDES)
    t0, t1, u0 = (m.logs[tp] for tp in (("t", 0), ("t", 1), ("u", 0)))
    for value in T0_VALUES[:8]:
        t0.append_as_leader(plain(value))
    for seq in range(4):
        t1.append_as_leader(idempotent(seq))
    for value in U_VALUES:
        u0.append_as_leader(plain(value))
    for log in (t0, t1, u0):
        commit(log)
    t0.delete_records(LSO_IN_BASE)
    u0.delete_records(U_LSO)
    m.close()


def prelude(m: LogManager) -> None:
    """More flushed records and a DeleteRecords whose checkpoint is not written yet."""
    t0, t1 = m.logs[("t", 0)], m.logs[("t", 1)]
    for value in T0_VALUES[8:]:
        t0.append_as_leader(plain(value))
    for seq in range(4, T1_SEQS):
        t1.append_as_leader(idempotent(seq))
    commit(t0)
    commit(t1)
    t0.delete_records(LSO_REQUESTED)  # flushes t-0
    t1.flush()


Operation = Callable[[LogManager], object]

OPERATIONS: dict[str, Operation] = {
    "write_checkpoints": LogManager.write_checkpoints,
    "close": LogManager.close,
    "create_topic": lambda m: m.create_topic("v", 2, {"retention.ms": "1000"}),
    "alter_topic_config": lambda m: m.alter_topic_config("t", {"retention.ms": "5000"}),
    "add_partitions": lambda m: m.add_partitions("t", 4),
    "delete_topic": lambda m: m.delete_topic("u"),
}

# The topic metadata the operation started from, and the one it writes.
OLD_TOPICS = {"t": (2, T_OVERRIDES), "u": (1, U_OVERRIDES)}
NEW_TOPICS = {
    "write_checkpoints": OLD_TOPICS,
    "close": OLD_TOPICS,
    "open": OLD_TOPICS,
    "create_topic": {**OLD_TOPICS, "v": (2, {"retention.ms": "1000"})},
    "alter_topic_config": {**OLD_TOPICS, "t": (2, {"retention.ms": "5000"})},
    "add_partitions": {**OLD_TOPICS, "t": (4, T_OVERRIDES)},
    "delete_topic": {"t": (2, T_OVERRIDES)},
}


class Run:
    """One replay of an operation on a fresh copy of the base directory."""

    def __init__(self, base: Path, work: Path, name: str) -> None:
        shutil.copytree(base, work)
        self.vfs = CrashVFS(work)
        self.manager = LogManager(work, CONFIG, vfs=self.vfs)
        self.name = name
        if name == "open":
            self.start = len(self.vfs.steps)
        else:
            self.manager.open()
            prelude(self.manager)
            self.start = len(self.vfs.steps)

    def operate(self) -> None:
        if self.name == "open":
            self.manager.open()
        else:
            OPERATIONS[self.name](self.manager)

    def abandon(self) -> None:
        """The process is gone: free its descriptors and lock without writing anything."""
        self.vfs.release()
        self.manager._unlock()


def dry_run(base: Path, work: Path, name: str) -> tuple[int, list[tuple[str, Path]]]:
    run = Run(base, work, name)
    run.operate()
    run.abandon()
    return run.start, [(s.kind, s.path.relative_to(run.vfs.root)) for s in run.vfs.steps]


def step_after(steps: list[tuple[str, Path]], kind: str, name: str) -> int:
    """Index of the first ``kind`` step on a file called ``name`` (or ``name``.tmp)."""
    for i, (k, path) in enumerate(steps):
        if k == kind and path.name in (name, name + ".tmp"):
            return i
    return len(steps)  # never: the operation does not write it


def release(m: LogManager) -> None:
    """Drop a reopened manager without close(): its fsyncs would dominate the run time, and
    the directory is thrown away. Only descriptors and the lock go."""
    for log in m.logs.values():
        for segment in log.segments:
            segment.close_handlers()
    m._unlock()


def check_reopened(image: Path, name: str, lso_floor: int, expect_new_topics: bool | None) -> None:
    """Start a LogManager (real OS VFS) on what the crash left and check the invariants."""
    m = LogManager(image, CONFIG)
    m.open()  # starts, whatever the crash point
    try:
        topics = {t: (count, m.topic_overrides(t)) for t, count in m.topics().items()}
        allowed = [OLD_TOPICS, NEW_TOPICS[name]]
        if expect_new_topics is not None:
            allowed = [allowed[expect_new_topics]]
        assert topics in allowed, f"topic metadata is neither the old nor the new version: {topics}"
        if "u" in topics:
            u0 = m.logs[("u", 0)]
            assert u0.log_start_offset == U_LSO
            # Empty only if a crash during delete_topic left the topic but not its directory.
            assert contents(u0) in (list(enumerate(U_VALUES))[U_LSO:], [])
        t0 = m.logs[("t", 0)]
        assert lso_floor <= t0.log_start_offset <= LSO_REQUESTED
        base = 0 if name == "open" else None
        flushed = T0_VALUES[:8] if base == 0 else T0_VALUES
        expected = list(enumerate(flushed))[t0.log_start_offset :]
        assert contents(t0) == expected  # no flushed record lost, nothing invented
        t1 = m.logs[("t", 1)]
        seqs = 4 if name == "open" else T1_SEQS
        assert t1.log_end_offset == seqs
        # The producer's retry of its last batch is still a duplicate: the original offset.
        commit(t1)
        retry = t1.append_as_leader(idempotent(seqs - 1))
        assert (retry.first_offset, retry.record_count, t1.log_end_offset) == (seqs - 1, 0, seqs)
        assert t1.append_as_leader(idempotent(seqs)).first_offset == seqs
    finally:
        release(m)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("base") / "data"
    build_base(root)
    return root


@pytest.mark.parametrize("name", [*OPERATIONS, "open"])
def test_crash_at_every_step(base: Path, tmp_path: Path, name: str) -> None:
    start, steps = dry_run(base, tmp_path / "dry", name)
    # Where t-0's new log start offset becomes visible after a restart: once the checkpoint's
    # rename is done (a killed process) or the directory fsync after it (a power loss).
    lso_renamed = step_after(steps[start:], "rename", LOG_START_OFFSET_CHECKPOINT) + start
    lso_durable = lso_renamed + 1
    assert lso_renamed == len(steps) or steps[lso_durable][0] == "fsync_dir"
    topics_renamed = step_after(steps[start:], "rename", TOPICS_FILE) + start
    # Steps on segment files are left to tests/storage/test_log_recovery.py.
    crash_points = [
        i for i in range(start, len(steps)) if steps[i][1].suffix not in SEGMENT_SUFFIXES
    ]
    assert crash_points
    runs = 0
    for crash_at in crash_points:
        kind, path = steps[crash_at]
        for mode in ("process", "power"):
            tears = TEARS if kind == "pwrite" and mode == "process" else (0,)
            for tear in tears:
                work = tmp_path / f"run-{runs}"
                runs += 1
                run = Run(base, work, name)
                run.vfs.crash_at, run.vfs.tear = crash_at, tear
                with pytest.raises(Crash):
                    run.operate()
                step = run.vfs.steps[crash_at]
                assert (step.kind, step.path.relative_to(work)) == (kind, path)  # same path
                run.abandon()
                image = work.with_name(work.name + "-image")
                if mode == "process":
                    run.vfs.process_crash_image(image)
                    lso_visible = crash_at > lso_renamed
                    new_topics = crash_at > topics_renamed
                else:
                    run.vfs.power_loss_image(image)
                    lso_visible = crash_at > lso_durable
                    new_topics = crash_at > topics_renamed + 1
                lso_floor = LSO_REQUESTED if lso_visible else LSO_IN_BASE
                expect = None if NEW_TOPICS[name] is OLD_TOPICS else new_topics
                try:
                    check_reopened(image, name, lso_floor, expect)
                except AssertionError as exc:
                    raise AssertionError(
                        f"{name}: crash at step {crash_at} ({kind} {path.name}), "
                        f"{mode} image, tear {tear}: {exc}"
                    ) from exc
                shutil.rmtree(work)
                shutil.rmtree(image)
    assert runs >= 2 * len(crash_points)


def reopen_unclean(base: Path, work: Path, name: str, content: bytes) -> LogManager:
    """A copy of ``base`` with file ``name`` replaced by ``content`` and no clean-shutdown
    marker, opened with the real OS VFS."""
    shutil.copytree(base, work)
    (work / name).write_bytes(content)
    (work / CLEAN_SHUTDOWN_MARKER).unlink()
    m = LogManager(work, CONFIG)
    m.open()
    return m


def torn_versions(full: bytes, every: int = 1) -> list[bytes]:
    """Strict prefixes of ``full`` (each ``every``-th length, and the longest), and each padded
    back to full length with zeros (a file system that extended the file but lost the data)."""
    out = []
    for cut in sorted({*range(0, len(full), every), len(full) - 1}):
        out.append(full[:cut])
        out.append(full[:cut] + bytes(len(full) - cut))
    return out


@pytest.mark.parametrize(
    "checkpoint",
    [RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT],
)
def test_torn_checkpoint_is_ignored_not_trusted(
    base: Path, tmp_path: Path, checkpoint: str
) -> None:
    # atomic_write never leaves a torn checkpoint; a file system that persists a rename before
    # the data (or outside damage) can. Kafka's answer: treat it as absent (full recovery,
    # log start at the first segment, HW at the log start), never use a number read from a
    # cut line.
    stored = OffsetCheckpointFile(base / checkpoint).read()
    full = (base / checkpoint).read_bytes()
    for i, content in enumerate(torn_versions(full)):
        m = reopen_unclean(base, tmp_path / f"run-{i}", checkpoint, content)
        try:
            for tp, log in m.logs.items():
                value = {
                    RECOVERY_POINT_CHECKPOINT: log.recovery_point,
                    LOG_START_OFFSET_CHECKPOINT: log.log_start_offset,
                    HIGH_WATERMARK_CHECKPOINT: log.high_watermark,
                }[checkpoint]
                fallback = {
                    RECOVERY_POINT_CHECKPOINT: 0,
                    LOG_START_OFFSET_CHECKPOINT: log.segments[0].base_offset,
                    HIGH_WATERMARK_CHECKPOINT: log.log_start_offset,
                }[checkpoint]
                assert value in (stored[tp], fallback), (content, tp, value)
                assert log.log_end_offset == {"t": (8, 4), "u": (12,)}[tp[0]][tp[1]]
        finally:
            release(m)


def test_torn_topics_file_still_starts_with_every_partition(base: Path, tmp_path: Path) -> None:
    full = (base / TOPICS_FILE).read_bytes()
    for i, content in enumerate(torn_versions(full, every=9)):
        m = reopen_unclean(base, tmp_path / f"run-{i}", TOPICS_FILE, content)
        try:
            # Unreadable: rebuilt from the partition directories (with default configs).
            assert m.topics() == {"t": 2, "u": 1}
            assert contents(m.logs[("u", 0)]) == list(enumerate(U_VALUES))[U_LSO:]
        finally:
            release(m)


def test_torn_producer_snapshot_is_ignored_and_rebuilt_from_the_log(
    base: Path, tmp_path: Path
) -> None:
    [(offset, path)] = snapshot_files(base / "t-1")
    assert offset == 4
    name = str(path.relative_to(base))
    for i, content in enumerate(torn_versions(path.read_bytes(), every=5)):
        m = reopen_unclean(base, tmp_path / f"run-{i}", name, content)
        try:
            t1 = m.logs[("t", 1)]
            # The producer retries its last batch after the restart: still a duplicate.
            retry = t1.append_as_leader(idempotent(3))
            assert (retry.first_offset, retry.record_count, t1.log_end_offset) == (3, 0, 4)
            assert t1.append_as_leader(idempotent(4)).first_offset == 4
            # The torn one was deleted; the append rolled a segment at 4, whose snapshot is
            # written anew from the rebuilt state (the producer's batch at 3).
            [(offset, path)] = snapshot_files(t1.directory)
            assert offset == 4
            state = decode_snapshot(path.read_bytes())
            assert [b.last_offset for e in state.producers.values() for b in e.batches] == [3]
        finally:
            release(m)
