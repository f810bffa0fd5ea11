"""``__consumer_offsets`` records: Kafka's byte layout, placement, replay, expiry.

Golden bytes are assembled here field by field from Kafka's ``OffsetCommitKey/Value.json`` and
``GroupMetadataKey/Value.json`` (int16 version prefix, then the classic encoding of that version).
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from sluice.protocol.errors import ProtocolError
from sluice.server.group.coordinator import GroupConfig, GroupCoordinator
from sluice.server.group.offsets_store import (
    OFFSETS_TOPIC,
    GroupMetadataValue,
    GroupRecord,
    MemberMetadata,
    OffsetAndMetadata,
    OffsetRecord,
    OffsetsStore,
    decode_record,
    group_metadata_record,
    java_string_hash,
    offset_commit_record,
    partition_for,
)
from sluice.server.replication.offsets_appender import ReplicaAppender
from sluice.server.replication.replica_manager import ReplicaManager
from sluice.server.storage.log import Isolation
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.log_manager import LogManager


def s16(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def b32(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def test_offset_commit_record_bytes() -> None:
    key, value = offset_commit_record("grp", "topic", 7, OffsetAndMetadata(42, 3, "meta", 1000))
    assert key == struct.pack(">h", 1) + s16("grp") + s16("topic") + struct.pack(">i", 7)
    assert value == (
        struct.pack(">h", 3) + struct.pack(">qi", 42, 3) + s16("meta") + struct.pack(">q", 1000)
    )
    assert decode_record(key, value) == OffsetRecord(
        "grp", "topic", 7, OffsetAndMetadata(42, 3, "meta", 1000)
    )
    tomb_key, tomb = offset_commit_record("grp", "topic", 7, None)
    assert tomb_key == key and tomb is None
    assert decode_record(key, None) == OffsetRecord("grp", "topic", 7, None)


def test_older_offset_value_versions_decode() -> None:
    key = struct.pack(">h", 0) + s16("g") + s16("t") + struct.pack(">i", 0)
    v0 = struct.pack(">h", 0) + struct.pack(">q", 5) + s16("") + struct.pack(">q", 9)
    v1 = struct.pack(">h", 1) + struct.pack(">q", 6) + s16("x") + struct.pack(">qq", 9, 99)
    assert decode_record(key, v0) == OffsetRecord("g", "t", 0, OffsetAndMetadata(5, -1, "", 9))
    assert decode_record(key, v1) == OffsetRecord("g", "t", 0, OffsetAndMetadata(6, -1, "x", 9))


def test_group_metadata_record_bytes() -> None:
    member = MemberMetadata(
        member_id="m-1",
        group_instance_id=None,
        client_id="cli",
        client_host="/127.0.0.1",
        rebalance_timeout=300000,
        session_timeout=45000,
        subscription=b"\x00\x01sub",
        assignment=b"asg",
    )
    value = GroupMetadataValue.cls(
        protocol_type="consumer",
        generation=4,
        protocol="range",
        leader="m-1",
        current_state_timestamp=1234,
        members=[member],
    )
    key, data = group_metadata_record("grp", value)
    assert key == struct.pack(">h", 2) + s16("grp")
    expected_member = (
        s16("m-1") + s16(None) + s16("cli") + s16("/127.0.0.1") + struct.pack(">ii", 300000, 45000)
        + b32(b"\x00\x01sub") + b32(b"asg")
    )  # fmt: skip
    assert data == (
        struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 4) + s16("range") + s16("m-1")
        + struct.pack(">q", 1234) + struct.pack(">i", 1) + expected_member
    )  # fmt: skip
    rec = decode_record(key, data)
    assert isinstance(rec, GroupRecord) and rec.group == "grp" and rec.value == value
    empty = GroupMetadataValue.cls(protocol_type="consumer", generation=5, protocol=None,
                                   leader=None, members=[])  # fmt: skip
    _k, data = group_metadata_record("grp", empty)
    assert data == struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 5) + s16(None) * 2 + (
        struct.pack(">qi", -1, 0)
    )


@pytest.mark.parametrize(
    "key",
    [b"", b"\x00", struct.pack(">h", 9) + s16("g"), struct.pack(">h", 1) + s16("g")],
)
def test_garbage_keys_raise_protocol_errors(key: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_record(key, b"\x00\x03")


def test_garbage_value_raises_protocol_error() -> None:
    key, _ = offset_commit_record("g", "t", 0, None)
    for value in (b"", b"\x00\x03\x00", struct.pack(">h", 7) + b"\x00" * 30):
        with pytest.raises(ProtocolError):
            decode_record(key, value)


def test_java_string_hash_and_placement() -> None:
    # Values of Java's String.hashCode, computed by the JVM.
    assert java_string_hash("") == 0
    assert java_string_hash("test") == 3556498
    assert java_string_hash("abc") == 96354
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert java_string_hash("\u00e9t\u00e9") == 233 * 31 * 31 + 116 * 31 + 233
    # Outside the BMP Java hashes the two UTF-16 surrogates, not the code point.
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00
    # Kafka's Utils.abs(Integer.MIN_VALUE) is 0 (it masks the sign bit).
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("test", 50) == 3556498 % 50
    assert partition_for("anything", 1) == 0


def open_manager(tmp_path: Path) -> LogManager:
    manager = LogManager(tmp_path / "data", LogConfig())
    manager.open()
    return manager


def store_for(manager: LogManager, partitions: int) -> OffsetsStore:
    """A store writing through a standalone ReplicaManager (the broker's wiring)."""
    return OffsetsStore(manager, partitions, ReplicaAppender(ReplicaManager(manager, 0), 5000))


def test_store_is_lazy_and_replays_with_tombstones(tmp_path: Path) -> None:
    manager = open_manager(tmp_path)
    try:
        store = store_for(manager, 3)
        assert store.open() is False and list(store.replay()) == []
        assert OFFSETS_TOPIC not in manager.topics()
        home = partition_for("g", 3)
        first = store.write(
            home, [offset_commit_record("g", "t", 0, OffsetAndMetadata(1, -1, "", 5))], -1
        )
        assert first == (0, 0)  # settled at once: one replica
        assert manager.topics()[OFFSETS_TOPIC] == 3
        assert manager.topic_config(OFFSETS_TOPIC).retention_ms == -1
        assert manager.topic_config(OFFSETS_TOPIC).compact  # as Kafka creates it
        second = store.write(
            home,
            [
                offset_commit_record("g", "t", 0, OffsetAndMetadata(2, -1, "", 6)),
                offset_commit_record("g", "t", 1, OffsetAndMetadata(3, -1, "", 6)),
            ],
            -1,
        )
        assert second == (0, 1)
        assert store.write(home, [offset_commit_record("g", "t", 1, None)], 1) == (0, 3)
        got = [(r.partition, r.value.offset if r.value else None) for r in store.replay()
               if isinstance(r, OffsetRecord)]  # fmt: skip
        assert got == [(0, 1), (0, 2), (1, 3), (1, None)]
        # Every record is in the group's partition.
        log_ = manager.get_log(OFFSETS_TOPIC, partition_for("g", 3))
        assert log_ is not None and log_.log_end_offset == 4
    finally:
        manager.close()
    manager = open_manager(tmp_path)
    try:
        store = store_for(manager, 50)  # an existing topic's partition count wins
        assert store.open() is True and store.num_partitions == 3
        assert len(list(store.replay())) == 4
    finally:
        manager.close()


async def test_expiry_of_empty_and_standalone_groups(tmp_path: Path) -> None:
    manager = open_manager(tmp_path)
    now = [1_000_000]
    try:
        config = GroupConfig(offsets_retention_ms=1000, offsets_retention_check_interval_ms=10**9)
        coordinator = GroupCoordinator(store_for(manager, 1), config, clock=lambda: now[0])
        coordinator.load()
        codes = coordinator.commit_offsets(
            group_id="solo",
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            offsets=[("t", 0, 5, -1, ""), ("t", 1, 6, -1, None)],
        )
        assert codes == [0, 0]
        now[0] += 600
        coordinator.commit_offsets(
            group_id="solo", generation_id=-1, member_id="", group_instance_id=None,
            offsets=[("t", 1, 7, -1, "")],
        )  # fmt: skip
        now[0] += 500  # t-0 is 1100 ms old, t-1 500 ms
        assert coordinator.expire_offsets() == 1
        assert [(t, p, v.offset if v else None) for t, p, v in
                coordinator.fetch_offsets("solo", None)] == [("t", 1, 7)]  # fmt: skip
        now[0] += 1000
        assert coordinator.expire_offsets() == 1
        assert "solo" not in coordinator.groups
        coordinator.shutdown()
        # The tombstones are durable: a fresh coordinator sees nothing.
        again = GroupCoordinator(store_for(manager, 1), config, clock=lambda: now[0])
        again.load()
        assert again.fetch_offsets("solo", None) == []
        again.shutdown()
    finally:
        manager.close()


def test_group_config_from_properties() -> None:
    config = GroupConfig.from_properties(
        {"group.initial.rebalance.delay.ms": "0", "offsets.retention.minutes": "2",
         "offsets.topic.num.partitions": "4", "log.dirs": "/x"}
    )  # fmt: skip
    assert (config.initial_rebalance_delay_ms, config.offsets_retention_ms) == (0, 120000)
    assert config.offsets_topic_num_partitions == 4
    assert GroupConfig().initial_rebalance_delay_ms == 3000  # Kafka's default
    with pytest.raises(ValueError):
        GroupConfig.from_properties({"offsets.topic.num.partitions": "0"})
    with pytest.raises(ValueError):
        GroupConfig.from_properties({"group.initial.rebalance.delay.ms": "soon"})


#: How an older Sluice created the offsets topic (before the log cleaner).
OLD_OFFSETS_CONFIG = {
    "cleanup.policy": "delete",
    "retention.ms": "-1",
    "retention.bytes": "-1",
    "segment.bytes": "1024",  # (100 MiB then; small here so that it rolls)
}


def commit(coordinator: GroupCoordinator, group: str, offsets: dict[int, int]) -> None:
    assert coordinator.commit_offsets(
        group_id=group, generation_id=-1, member_id="", group_instance_id=None,
        offsets=[("t", p, o, -1, f"m{o}") for p, o in offsets.items()],
    ) == [0] * len(offsets)  # fmt: skip


def test_the_offsets_topic_is_created_as_kafka_creates_it(tmp_path: Path) -> None:
    """cleanup.policy=compact, offsets.topic.segment.bytes, compression.type=producer; the
    coordinator's batches compressed with offsets.topic.compression.codec."""
    from sluice.protocol import records as rec

    manager = open_manager(tmp_path)
    try:
        store = OffsetsStore(
            manager,
            1,
            ReplicaAppender(ReplicaManager(manager, 0), 5000),
            segment_bytes=2048,
            compression=rec.COMPRESSION_GZIP,
        )
        store.write(0, [offset_commit_record("g", "t", 0, OffsetAndMetadata(1, -1, "", 5))], -1)
        assert manager.topic_overrides(OFFSETS_TOPIC) == {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "retention.ms": "-1",
            "retention.bytes": "-1",
            "segment.bytes": "2048",
        }
        log_ = manager.get_log(OFFSETS_TOPIC, 0)
        assert log_ is not None and log_.config.compact and log_.config.segment_bytes == 2048
        info = log_.read(0, 1 << 20, Isolation.LOG_END)
        assert info.slice is not None
        ((_pos, header, _view),) = list(rec.iter_batches(info.slice.read_bytes()))
        assert header.attributes & 0x07 == rec.COMPRESSION_GZIP
        assert [r.value for r in store.replay() if isinstance(r, OffsetRecord)] == [
            OffsetAndMetadata(1, -1, "", 5)
        ]
    finally:
        manager.close()
    with pytest.raises(ValueError):
        GroupConfig.from_properties({"offsets.topic.compression.codec": "5"})


async def test_an_older_delete_offsets_topic_is_switched_to_compact_at_load(tmp_path: Path) -> None:
    """A data dir from an older Sluice: __consumer_offsets with cleanup.policy=delete. The
    coordinator's load switches it to compact (other overrides kept), logs it once, and loses
    nothing; a second start finds nothing to do."""
    from structlog.testing import capture_logs

    manager = open_manager(tmp_path)
    try:
        manager.create_topic(OFFSETS_TOPIC, 1, OLD_OFFSETS_CONFIG)
        coordinator = GroupCoordinator(store_for(manager, 1), GroupConfig())
        coordinator.load()
        # (the load under test switched it already; put the old policy back to watch it)
        manager.alter_topic_config(OFFSETS_TOPIC, OLD_OFFSETS_CONFIG)
        for i in range(50):
            commit(coordinator, "old", {0: i, 1: 100 + i})
        coordinator.shutdown()
    finally:
        manager.close()
    for start in range(2):
        manager = open_manager(tmp_path)
        try:
            assert manager.topic_config(OFFSETS_TOPIC).compact == (start == 1)
            coordinator = GroupCoordinator(store_for(manager, 1), GroupConfig())
            with capture_logs() as logs:
                coordinator.load()
            switched = [e for e in logs if "switched to cleanup.policy=compact" in e["event"]]
            assert len(switched) == (1 if start == 0 else 0)
            assert manager.topic_overrides(OFFSETS_TOPIC) == {
                **OLD_OFFSETS_CONFIG,
                "cleanup.policy": "compact",
            }
            assert manager.topic_config(OFFSETS_TOPIC).compact
            log_ = manager.get_log(OFFSETS_TOPIC, 0)
            assert log_ is not None and log_.config.compact
            fetched = {p: v.offset for _t, p, v in coordinator.fetch_offsets("old", None) if v}
            assert fetched == {0: 49, 1: 149}
            coordinator.shutdown()
        finally:
            manager.close()


async def test_committed_offsets_survive_many_commits_cleanings_and_restarts(
    tmp_path: Path,
) -> None:
    """Group offsets are never lost: thousands of commits of a few partitions over small
    segments, the log manager's cleaner compacting __consumer_offsets between rounds, a
    restart after each round: every group's latest offsets (and deletions) come back, and
    the partition stays bounded by the live keys."""
    from sluice.server.storage.log_config import CleanerConfig

    def manager_with_cleaner() -> LogManager:
        manager = LogManager(
            tmp_path / "data",
            LogConfig(min_cleanable_dirty_ratio=0.0),
            cleaner_config=CleanerConfig(),
        )
        manager.open()
        return manager

    expected: dict[str, dict[int, int]] = {}
    sizes = []
    for round_ in range(4):
        manager = manager_with_cleaner()
        try:
            store = OffsetsStore(
                manager, 2, ReplicaAppender(ReplicaManager(manager, 0), 5000), segment_bytes=4096
            )
            coordinator = GroupCoordinator(store, GroupConfig())
            coordinator.load()
            for group, offsets in expected.items():  # what the earlier rounds left
                got = {p: v.offset for _t, p, v in coordinator.fetch_offsets(group, None) if v}
                assert got == offsets, (round_, group)
            for i in range(300):
                group = f"g{i % 5}"
                offsets = {p: round_ * 1000 + i for p in range(3)}
                commit(coordinator, group, offsets)
                expected[group] = offsets
            if round_ == 2:  # a group deleted: its tombstones must win over its offsets
                assert coordinator.delete_groups(["g4"]) == [0]
                del expected["g4"]
            assert manager.cleaner is not None
            cleaned = await manager.run_cleaner()
            assert cleaned >= 1, f"round {round_}: nothing cleaned"
            logs = [manager.get_log(OFFSETS_TOPIC, p) for p in range(2)]
            sizes.append(sum(log_.size_in_bytes for log_ in logs if log_ is not None))
            coordinator.shutdown()
        finally:
            manager.close()
    manager = manager_with_cleaner()
    try:
        coordinator = GroupCoordinator(store_for(manager, 2), GroupConfig())
        coordinator.load()
        for group in ("g0", "g1", "g2", "g3", "g4"):
            got = {p: v.offset for _t, p, v in coordinator.fetch_offsets(group, None) if v}
            assert got == expected.get(group, {}), group
        coordinator.shutdown()
    finally:
        manager.close()
    # 1,200 commits of 15 keys (~57 KB a round uncleaned): bounded, per partition, by its
    # active segment (never cleaned) and one cleaned segment.
    assert max(sizes) < 2 * 2 * 4096, sizes


def test_the_log_cleaner_keeps_what_replay_restores(tmp_path: Path) -> None:
    """__consumer_offsets is compacted by the log cleaner: replaying the cleaned partition
    gives every key's latest value (a deleted offset's tombstone too, until its horizon),
    with the superseded records gone."""
    from sluice.server.storage.log_cleaner import Cleaner, log_to_clean
    from sluice.server.storage.log_config import CleanerConfig

    manager = open_manager(tmp_path)
    try:
        store = store_for(manager, 1)
        for i in range(30):
            store.write(
                0, [offset_commit_record("g", "t", i % 3, OffsetAndMetadata(i, -1, "", i))], -1
            )
            if i % 10 == 9:
                log_ = manager.get_log(OFFSETS_TOPIC, 0)
                assert log_ is not None
                log_.roll()
        store.write(0, [offset_commit_record("g", "t", 2, None)], -1)  # offset deleted
        log_ = manager.get_log(OFFSETS_TOPIC, 0)
        assert log_ is not None
        log_.roll()
        log_.update_high_watermark(log_.log_end_offset)

        def latest() -> dict[int, int | None]:
            state: dict[int, int | None] = {}
            for r in store.replay():
                if isinstance(r, OffsetRecord):
                    state[r.partition] = r.value.offset if r.value else None
            return state

        before = latest()
        ltc = log_to_clean(log_, None, 0)
        Cleaner(CleanerConfig()).clean(log_, ltc.first_dirty, ltc.first_uncleanable, 0)
        assert latest() == before == {0: 27, 1: 28, 2: None}
        assert len(list(store.replay())) == 3
    finally:
        manager.close()


async def test_pending_txn_offsets_outlive_expiry(
    tmp_path: Path,
) -> None:
    """A group whose last offsets expire is kept while a transaction's offsets are pending for
    it (Kafka's ``hasOffsets``). (The log cleaner, which keeps ``__consumer_offsets`` bounded,
    never cleans past the last stable offset: see ``test_log_cleaner_transactions.py``.)"""
    manager = open_manager(tmp_path)
    now = [1_000_000]
    try:
        config = GroupConfig(offsets_retention_ms=1000, offsets_retention_check_interval_ms=10**9)
        coordinator = GroupCoordinator(store_for(manager, 1), config, clock=lambda: now[0])
        coordinator.load()
        plain = {"group_id": "g", "generation_id": -1, "member_id": "", "group_instance_id": None}
        assert coordinator.commit_offsets(**plain, offsets=[("t", 0, 5, -1, "")]) == [0]
        codes = coordinator.txn_commit_offsets(
            **plain, producer_id=77, producer_epoch=0, offsets=[("t", 1, 9, -1, "")]
        )
        assert codes == [0]
        assert [(t, p) for t, p, _ in coordinator.fetch_offsets("g", None)] == [("t", 0)]
        log_ = manager.get_log("__consumer_offsets", 0)
        assert log_ is not None and log_.first_unstable_offset == 1  # the txn batch
        now[0] += 2000
        assert coordinator.expire_offsets() == 1
        assert "g" in coordinator.groups  # kept: offsets pending in a transaction
        assert coordinator.complete_transaction(77, 0, commit=True) == 1
        assert dict(((t, p), v.offset) for t, p, v in coordinator.fetch_offsets("g", None)
                    if v is not None)[("t", 1)] == 9  # fmt: skip
        coordinator.shutdown()
    finally:
        manager.close()
