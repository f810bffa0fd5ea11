"""LogManager: topics and overrides that survive restart, checkpoints, the clean-shutdown marker,
crash restart, topic deletion, background tasks."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from sluice.protocol import records as rec
from sluice.protocol.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidTopic,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from sluice.server.storage.checkpoint import OffsetCheckpointFile
from sluice.server.storage.log import Isolation, Log
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.log_manager import (
    CLEAN_SHUTDOWN_MARKER,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
)
from sluice.server.storage.vfs import OSVFS

DEFAULT = LogConfig(segment_index_bytes=4096, file_delete_delay_ms=0)


def batch(values: list[bytes], timestamp: int = 1_000) -> bytes:
    return rec.build_batch([(timestamp + i, None, v) for i, v in enumerate(values)])


def produce(log: Log, *values: bytes) -> None:
    log.append_as_leader(batch(list(values)))
    log.maybe_increment_high_watermark(log.log_end_offset)


def values_of(log: Log) -> list[bytes | None]:
    out: list[bytes | None] = []
    start = log.log_start_offset
    for _ in range(1000):
        info = log.read(start, 1 << 20)
        if info.slice is None:
            return out
        records = [r for _, r in rec.iter_records(info.slice.read_bytes())]
        out.extend(r.value for r in records if r.offset >= start)
        start = records[-1].offset + 1
    raise AssertionError("read loop did not terminate")


def opened(path: Path, config: LogConfig = DEFAULT, **kw: int) -> LogManager:
    manager = LogManager(path, config, **kw)
    manager.open()
    return manager


def test_create_topics_append_and_restart_keeps_everything(tmp_path: Path) -> None:
    m = opened(tmp_path)
    assert not m.had_clean_shutdown  # a fresh directory has no marker
    assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    logs = m.create_topic("orders-eu-west", 3, {"retention.ms": "-1", "segment.bytes": "300"})
    assert [log.partition for log in logs] == [0, 1, 2]
    assert {p.name for p in tmp_path.iterdir() if p.is_dir()} == {
        "orders-eu-west-0",
        "orders-eu-west-1",
        "orders-eu-west-2",
    }
    m.create_topic("plain", 1)
    log = m.get_log("orders-eu-west", 1)
    assert log is not None and log.config.segment_bytes == 300
    for i in range(10):
        produce(log, b"v%d" % i)
    log.delete_records(3)
    log.update_high_watermark(8)
    m.close()
    assert (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    recovery = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read()
    assert recovery[("orders-eu-west", 1)] == 10
    assert (
        OffsetCheckpointFile(tmp_path / LOG_START_OFFSET_CHECKPOINT).read()[("orders-eu-west", 1)]
        == 3
    )
    assert (
        OffsetCheckpointFile(tmp_path / HIGH_WATERMARK_CHECKPOINT).read()[("orders-eu-west", 1)]
        == 8
    )

    m2 = opened(tmp_path)
    assert m2.had_clean_shutdown
    assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()  # removed while running
    assert m2.topics() == {"orders-eu-west": 3, "plain": 1}
    assert m2.topic_overrides("orders-eu-west") == {"retention.ms": "-1", "segment.bytes": "300"}
    assert m2.topic_config("orders-eu-west").retention_ms == -1
    assert m2.topic_config("plain") == DEFAULT
    log2 = m2.get_log("orders-eu-west", 1)
    assert log2 is not None
    assert (log2.log_start_offset, log2.high_watermark, log2.log_end_offset) == (3, 8, 10)
    assert log2.config.segment_bytes == 300
    assert values_of(log2) == [b"v%d" % i for i in range(3, 8)]
    assert m2.get_log("orders-eu-west", 3) is None
    m2.close()


def test_crash_restart_recovers_and_reports_unclean(tmp_path: Path) -> None:
    m = opened(tmp_path)
    m.create_topic("t", 1)
    log = m.get_log("t", 0)
    assert log is not None
    for i in range(5):
        produce(log, b"%d" % i)
    m.write_checkpoints()
    produce(log, b"5")
    # Crash: copy the data dir while everything is open (no close, no marker), tear the tail.
    image = tmp_path / "image"
    shutil.copytree(tmp_path / "t-0", image / "t-0")
    for name in ("sluice-topics.json", RECOVERY_POINT_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT):
        shutil.copy(tmp_path / name, image / name)
    m.close()
    segment = image / "t-0" / "00000000000000000000.log"
    segment.write_bytes(segment.read_bytes()[:-3])

    m2 = opened(image)
    assert not m2.had_clean_shutdown
    log2 = m2.get_log("t", 0)
    assert log2 is not None
    assert log2.log_end_offset == 5
    assert log2.high_watermark == 5  # checkpointed HW
    assert values_of(log2) == [b"0", b"1", b"2", b"3", b"4"]
    m2.close()
    assert (image / CLEAN_SHUTDOWN_MARKER).exists()


def test_torn_checkpoint_tmp_and_corrupt_checkpoint_are_ignored(tmp_path: Path) -> None:
    m = opened(tmp_path)
    m.create_topic("t", 1)
    log = m.get_log("t", 0)
    assert log is not None
    produce(log, b"a", b"b")
    m.close()
    (tmp_path / (HIGH_WATERMARK_CHECKPOINT + ".tmp")).write_text("0\n1\nt 0 9")
    m2 = opened(tmp_path)
    log2 = m2.get_log("t", 0)
    assert log2 is not None and log2.high_watermark == 2
    m2.close()
    (tmp_path / HIGH_WATERMARK_CHECKPOINT).write_text("0\n7\ngarbage")
    m3 = opened(tmp_path)
    log3 = m3.get_log("t", 0)
    assert log3 is not None
    assert log3.high_watermark == 0  # no HW known: restarts at the log start offset
    assert log3.log_end_offset == 2
    m3.close()


@pytest.mark.parametrize(
    ("name", "partitions", "overrides", "error"),
    [
        ("", 1, {}, InvalidTopic),
        ("..", 1, {}, InvalidTopic),
        ("has space", 1, {}, InvalidTopic),
        ("slash/y", 1, {}, InvalidTopic),
        ("x" * 250, 1, {}, InvalidTopic),
        ("ok", 0, {}, InvalidPartitions),
        ("ok", -1, {}, InvalidPartitions),
        ("ok", 1, {"cleanup.policy": "shred"}, InvalidConfig),
        ("ok", 1, {"segment.bytes": "nope"}, InvalidConfig),
        ("ok", 1, {"no.such.config": "1"}, InvalidConfig),
    ],
)
def test_create_topic_validation(
    tmp_path: Path, name: str, partitions: int, overrides: dict[str, str], error: type[Exception]
) -> None:
    m = opened(tmp_path)
    with pytest.raises(error):
        m.create_topic(name, partitions, overrides)
    assert m.topics() == {}
    assert [p for p in tmp_path.iterdir() if p.is_dir()] == []
    m.close()


def test_create_existing_and_colliding_topics(tmp_path: Path) -> None:
    m = opened(tmp_path)
    m.create_topic("a.b", 1)
    with pytest.raises(TopicAlreadyExists):
        m.create_topic("a.b", 2)
    with pytest.raises(InvalidTopic, match="collides"):
        m.create_topic("a_b", 1)
    m.close()


def test_delete_topic_removes_directories_and_metadata(tmp_path: Path) -> None:
    m = opened(tmp_path)
    m.create_topic("gone-soon", 2)
    m.create_topic("stays", 1)
    log = m.get_log("gone-soon", 0)
    assert log is not None
    produce(log, b"x")
    m.delete_topic("gone-soon")
    assert m.topics() == {"stays": 1}
    assert m.get_log("gone-soon", 0) is None
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["stays-0"]
    with pytest.raises(UnknownTopicOrPartition):
        m.delete_topic("gone-soon")
    with pytest.raises(UnknownTopicOrPartition):
        m.topic_config("gone-soon")
    m.close()
    m2 = opened(tmp_path)
    assert m2.topics() == {"stays": 1}
    assert ("gone-soon", 0) not in OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read()
    m2.close()


def test_delayed_topic_delete_and_leftover_delete_dirs(tmp_path: Path) -> None:
    m = opened(tmp_path, LogConfig(segment_index_bytes=4096, file_delete_delay_ms=3_600_000))
    m.create_topic("t", 1)
    m.delete_topic("t")
    pending = [p.name for p in tmp_path.iterdir() if p.is_dir()]
    assert len(pending) == 1 and pending[0].startswith("t-0.") and pending[0].endswith("-delete")
    # A crash now (the image of the data dir): the next open finishes the deletion.
    image = tmp_path / "image"
    shutil.copytree(tmp_path, image, ignore=shutil.ignore_patterns("image"))
    m.close()
    m2 = opened(image)
    assert [p for p in image.iterdir() if p.is_dir()] == []
    assert m2.topics() == {}
    m2.close()


def test_data_dir_is_locked_while_open(tmp_path: Path) -> None:
    m = opened(tmp_path)
    with pytest.raises(RuntimeError, match="in use"):
        opened(tmp_path)
    m.close()
    opened(tmp_path).close()  # released by close


def test_partition_directories_without_metadata_are_adopted(tmp_path: Path) -> None:
    m = opened(tmp_path)
    m.create_topic("my-topic", 2)
    log = m.get_log("my-topic", 1)
    assert log is not None
    produce(log, b"kept")
    m.close()
    (tmp_path / "sluice-topics.json").unlink()
    (tmp_path / "not a partition").mkdir()
    m2 = opened(tmp_path)
    assert m2.topics() == {"my-topic": 2}
    log2 = m2.get_log("my-topic", 1)
    assert log2 is not None and values_of(log2) == [b"kept"]
    stored = json.loads((tmp_path / "sluice-topics.json").read_text())
    assert stored["topics"]["my-topic"]["partitions"] == 2
    m2.close()


def test_alter_topic_config_applies_and_persists(tmp_path: Path) -> None:
    m = opened(tmp_path)
    m.create_topic("t", 2, {"retention.ms": "1000"})
    config = m.alter_topic_config("t", {"retention.bytes": "100"})
    assert config.retention_bytes == 100 and config.retention_ms == DEFAULT.retention_ms
    log = m.get_log("t", 1)
    assert log is not None and log.config == config
    with pytest.raises(InvalidConfig):
        m.alter_topic_config("t", {"cleanup.policy": "shred"})
    compacted = m.alter_topic_config("t", {"retention.bytes": "100", "cleanup.policy": "compact"})
    assert compacted.compact and not compacted.delete
    assert log.config == compacted
    m.alter_topic_config("t", {"retention.bytes": "100"})
    m.close()
    m2 = opened(tmp_path)
    assert m2.topic_overrides("t") == {"retention.bytes": "100"}
    m2.close()


def test_add_partitions_grows_the_topic_and_persists(tmp_path: Path) -> None:
    m = opened(tmp_path)
    m.create_topic("t", 2, {"retention.bytes": "100"})
    old = m.get_log("t", 0)
    assert old is not None
    produce(old, b"kept")
    added = m.add_partitions("t", 5)
    assert len(added) == 3 and all(log.log_end_offset == 0 for log in added)
    assert m.topics()["t"] == 5 and m.get_log("t", 0) is old
    assert all(log.config.retention_bytes == 100 for log in added)  # the topic's own config
    with pytest.raises(InvalidPartitions, match="already has 5 partitions"):
        m.validate_new_partition_count("t", 5)
    with pytest.raises(InvalidPartitions, match="higher than the requested 3"):
        m.add_partitions("t", 3)
    with pytest.raises(UnknownTopicOrPartition):
        m.add_partitions("nope", 3)
    with pytest.raises(InvalidPartitions):
        m.add_partitions("t", 10_001)
    assert m.topics()["t"] == 5  # the refused requests changed nothing
    m.close()
    m2 = opened(tmp_path)
    assert m2.topics()["t"] == 5 and (tmp_path / "t-4").is_dir()
    log0 = m2.get_log("t", 0)
    assert log0 is not None and values_of(log0) == [b"kept"]
    assert m2.topic_overrides("t") == {"retention.bytes": "100"}
    m2.close()


async def test_background_tasks_run_retention_flush_and_checkpoints(tmp_path: Path) -> None:
    now = [1_000_000]
    m = LogManager(
        tmp_path,
        DEFAULT,
        retention_check_interval_ms=10,
        flush_check_interval_ms=10,
        checkpoint_interval_ms=10,
        clock=lambda: now[0],
    )
    m.open()
    m.create_topic("t", 1, {"retention.ms": "5000", "flush.ms": "50"})
    log = m.get_log("t", 0)
    assert log is not None
    for i in range(4):
        log.append_as_leader(batch([b"%d" % i], timestamp=1_000 + i))
        log.maybe_increment_high_watermark(log.log_end_offset)
        log.roll()
    log.append_as_leader(batch([b"recent"], timestamp=now[0]))
    log.maybe_increment_high_watermark(log.log_end_offset)
    await m.start()
    checkpoint = OffsetCheckpointFile(tmp_path / HIGH_WATERMARK_CHECKPOINT)
    for _ in range(500):  # bounded wait: up to ~5 s
        if (
            log.log_start_offset == 4
            and log.recovery_point == 5
            and checkpoint.read().get(("t", 0)) == 5
        ):
            break
        now[0] += 10
        await asyncio.sleep(0.01)
    assert log.log_start_offset == 4  # the four old segments went, the recent one stayed
    assert [s.base_offset for s in log.segments] == [4]
    assert log.recovery_point == 5  # flushed by flush.ms
    assert checkpoint.read()[("t", 0)] == 5
    await m.stop()
    assert (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    assert log.closed
    assert values_of_after_restart(tmp_path) == [b"recent"]


def values_of_after_restart(path: Path) -> list[bytes | None]:
    m = opened(path)
    log = m.get_log("t", 0)
    assert log is not None
    try:
        return values_of(log)
    finally:
        m.close()


def test_read_isolation_via_manager_logs(tmp_path: Path) -> None:
    m = opened(tmp_path)
    m.create_topic("t", 1)
    log = m.logs[("t", 0)]
    log.append_as_leader(batch([b"a"]))
    assert log.read(0, 100).slice is None
    assert log.read(0, 100, Isolation.LOG_END).slice is not None
    m.close()


class DirSyncRecordingVFS(OSVFS):
    def __init__(self) -> None:
        self.synced: list[Path] = []

    def fsync_dir(self, path: Path) -> None:
        self.synced.append(Path(path))
        super().fsync_dir(path)


def test_partition_directories_created_at_load_are_made_durable(tmp_path: Path) -> None:
    m = opened(tmp_path)
    m.create_topic("t", 2)
    m.close()
    shutil.rmtree(tmp_path / "t-1")  # listed in the metadata, gone from disk
    vfs = DirSyncRecordingVFS()
    m2 = LogManager(tmp_path, DEFAULT, vfs=vfs)
    m2.open()
    assert (tmp_path / "t-1").is_dir()
    # One sync for the recreated partition directory, one for removing the marker.
    assert vfs.synced == [tmp_path, tmp_path]
    m2.close()
    vfs.synced.clear()
    m3 = LogManager(tmp_path, DEFAULT, vfs=vfs)
    m3.open()  # nothing created: only the marker removal is synced
    assert vfs.synced == [tmp_path]
    m3.close()


def test_cluster_mode_hosts_only_the_assigned_partitions(tmp_path: Path) -> None:
    """create_log opens one partition of a topic whose others live on other brokers; a restart
    opens just those (not empty copies of the rest), and deletion removes only them."""
    manager = opened(tmp_path)
    log2 = manager.create_log("spread", 2, 4, {"retention.ms": "1000"})
    produce(log2, b"a", b"b")
    assert manager.create_log("spread", 2, 4, {"retention.ms": "1000"}) is log2  # idempotent
    manager.create_log("spread", 0, 4, {"retention.ms": "1000"})
    assert manager.hosted_partitions("spread") == [0, 2]
    assert manager.topics()["spread"] == 4
    assert manager.get_log("spread", 1) is None
    assert manager.topic_config("spread").retention_ms == 1000
    manager.close()

    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["spread-0", "spread-2"]
    manager = opened(tmp_path)
    assert manager.hosted_partitions("spread") == [0, 2]
    assert sorted(manager.logs) == [("spread", 0), ("spread", 2)]
    assert values_of(manager.logs[("spread", 2)]) == [b"a", b"b"]
    manager.delete_topic("spread")
    assert manager.hosted_partitions("spread") == []
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]
    manager.close()


def test_cluster_mode_deletes_a_partition_reassigned_away(tmp_path: Path) -> None:
    """delete_partition (StopReplica with delete): that partition's directory goes (renamed
    ``-delete`` first, then removed after ``file.delete.delay.ms``), the others stay; with the
    last one the topic is forgotten; a restart does not bring any back."""
    manager = opened(tmp_path)
    produce(manager.create_log("moved", 0, 2, {"file.delete.delay.ms": "60000"}), b"a")
    manager.create_log("moved", 1, 2, {"file.delete.delay.ms": "60000"})
    manager.delete_partition("moved", 0)
    assert manager.hosted_partitions("moved") == [1]
    assert manager.get_log("moved", 0) is None
    assert not (tmp_path / "moved-0").exists()
    (pending,) = [p for p in tmp_path.iterdir() if p.name.startswith("moved-0.")]
    assert pending.name.endswith("-delete")
    manager.delete_partition("moved", 0)  # not hosted: nothing to do
    manager.close()
    manager = opened(tmp_path)
    assert manager.hosted_partitions("moved") == [1]
    assert sorted(manager.logs) == [("moved", 1)]
    manager.delete_partition("moved", 1)
    assert "moved" not in manager.topics()
    manager.close()
    manager = opened(tmp_path)
    assert "moved" not in manager.topics() and not manager.logs
    manager.close()


def test_cluster_mode_a_standalone_topic_gains_a_partition(tmp_path: Path) -> None:
    manager = opened(tmp_path)
    manager.create_topic("t", 2)
    manager.create_log("t", 3, 4)
    assert manager.hosted_partitions("t") == [0, 1, 3]
    manager.close()
    manager = opened(tmp_path)
    assert sorted(manager.logs) == [("t", 0), ("t", 1), ("t", 3)]
    manager.close()


def test_flushes_and_truncations_checkpoint_the_recovery_point(tmp_path: Path) -> None:
    """A flush pass that moved a recovery point writes it to the checkpoint at once (a restart
    after a crash scans from it), and a truncation below it lowers it there at once (a stale one
    above the log end would make recovery trust bytes written after the truncation)."""
    m = opened(tmp_path, checkpoint_interval_ms=3_600_000)
    log = m.create_topic("t", 1, {"flush.ms": "0"})[0]
    recovery = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    for i in range(6):
        produce(log, b"v%d" % i)
    assert m.run_flushes() == 1
    assert log.recovery_point == 6 and recovery.read()[("t", 0)] == 6
    assert m.run_flushes() == 0  # nothing to flush: no write
    log.truncate_to(2)
    assert recovery.read()[("t", 0)] == 2
    m.close()


def test_a_new_log_dir_is_said_to_be_new_not_uncleanly_shut_down(tmp_path: Path) -> None:
    from structlog.testing import capture_logs

    with capture_logs() as first:
        manager = opened(tmp_path / "data")
    manager.close()
    with capture_logs() as second:
        opened(tmp_path / "data").close()
    (loaded,) = [e for e in first if e["event"] == "logs loaded"]
    assert loaded["new_log_dir"] is True and "clean_shutdown" not in loaded
    (again,) = [e for e in second if e["event"] == "logs loaded"]
    assert again["clean_shutdown"] is True and "new_log_dir" not in again
    # An empty directory made beforehand (a volume, mkdir data) is new too.
    (tmp_path / "empty").mkdir()
    with capture_logs() as third:
        opened(tmp_path / "empty").close()
    assert [e.get("new_log_dir") for e in third if e["event"] == "logs loaded"] == [True]


class BootVFS(OSVFS):
    """The OS, booted as ``boot`` ("": unknown)."""

    def __init__(self, boot: str) -> None:
        self.boot = boot

    def boot_id(self) -> str:
        return self.boot


def test_only_an_unclean_stop_in_another_boot_may_have_lost_unflushed_writes(
    tmp_path: Path,
) -> None:
    """A crashed process's writes survive in the page cache; a new boot (a power loss) may
    have lost every write not fsynced. Unknown boots count as new."""
    vfs = BootVFS("a")

    def restart(boot: str, *, crash: bool) -> bool:
        if crash:
            (tmp_path / CLEAN_SHUTDOWN_MARKER).unlink()  # as if killed: no marker written
        vfs.boot = boot
        m = LogManager(tmp_path, DEFAULT, vfs=vfs)
        m.open()
        m.close()
        return m.may_have_lost_unflushed

    first = LogManager(tmp_path, DEFAULT, vfs=vfs)
    first.open()
    first.create_topic("t", 1)
    first.close()
    assert not first.may_have_lost_unflushed  # a new data dir
    assert not restart("a", crash=False)
    assert not restart("a", crash=True)  # kill -9: same boot
    assert restart("b", crash=True)  # a power loss
    assert not restart("c", crash=False)  # a clean stop, then a reboot
    assert not restart("c", crash=True)
    assert restart("", crash=True)


def test_a_log_ending_below_its_checkpointed_high_watermark_lost_acknowledged_records(
    tmp_path: Path,
) -> None:
    """Same boot, yet the log was cut below the high watermark it checkpointed (fsynced): the
    broker knows it lost records it had acknowledged."""
    vfs = BootVFS("a")
    m = LogManager(tmp_path, DEFAULT, vfs=vfs)
    m.open()
    m.create_topic("t", 2)
    for p in (0, 1):
        log = m.get_log("t", p)
        assert log is not None
        produce(log, b"0", b"1", b"2")
        log.update_high_watermark(3)
    m.write_checkpoints()
    m.close()
    (tmp_path / CLEAN_SHUTDOWN_MARKER).unlink()
    again = LogManager(tmp_path, DEFAULT, vfs=vfs)
    again.open()
    again.close()
    assert not again.may_have_lost_unflushed  # every log reaches its high watermark
    (tmp_path / CLEAN_SHUTDOWN_MARKER).unlink()
    (tmp_path / "t-1" / "00000000000000000000.log").write_bytes(b"")
    cut = LogManager(tmp_path, DEFAULT, vfs=vfs)
    cut.open()
    cut.close()
    assert cut.may_have_lost_unflushed
