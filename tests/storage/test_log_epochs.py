"""Leader epochs in the Log: leader and follower appends, the cache's load/repair/rebuild,
truncation by epoch between two real logs (KIP-101 scenarios 1 and 2, KIP-279), and a leader log
copied by follower appends being byte-identical to it."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.protocol import records as rec
from sluice.protocol.errors import CorruptMessage, OutOfOrderSequenceNumber
from sluice.server.storage.layout import LEADER_EPOCH_CHECKPOINT
from sluice.server.storage.leader_epoch import entries_from_batches, follower_truncation_offset
from sluice.server.storage.log import Isolation, Log, UnexpectedAppendOffsetError
from sluice.server.storage.log_config import LogConfig
from tests.storage.crashfs import CrashVFS

SMALL = LogConfig(segment_bytes=600, index_interval_bytes=100)


def batch(values: list[bytes], timestamp: int = 1_000, **kw: int) -> bytes:
    return rec.build_batch([(timestamp + i, None, v) for i, v in enumerate(values)], **kw)


def open_log(directory: Path, config: LogConfig = SMALL, **kw: object) -> Log:
    return Log.open(directory / "t-0", config, **kw)  # type: ignore[arg-type]


def headers(log: Log) -> list[rec.BatchHeader]:
    return [h for segment in log.segments for _, h in segment.batches()]


def batch_epochs(log: Log) -> list[tuple[int, int]]:
    """(base offset, partitionLeaderEpoch) of every batch."""
    return [(h.base_offset, h.partition_leader_epoch) for h in headers(log)]


def log_bytes(log: Log) -> bytes:
    return b"".join(s.file.pread(s.size, 0) for s in log.segments)


def assert_cache_matches_batches(log: Log) -> None:
    """The cache holds what the batch headers say, plus at most an empty term at LEO."""
    derived = entries_from_batches(headers(log), log.log_start_offset)
    cached = log.leader_epoch_cache.entries
    if len(cached) == len(derived) + 1:
        assert cached[-1].start_offset == log.log_end_offset
        cached = cached[:-1]
    assert cached == derived


def replicate(
    follower: Log, leader: Log, max_bytes: int = 1 << 20, limit: int | None = None
) -> None:
    """Fetch from the leader's LEO-bounded log into the follower until caught up (or ``limit``)."""
    target = leader.log_end_offset if limit is None else min(limit, leader.log_end_offset)
    for _ in range(10_000):
        if follower.log_end_offset >= target:
            return
        info = leader.read(follower.log_end_offset, max_bytes, Isolation.LOG_END)
        assert info.slice is not None
        data = info.slice.read_bytes()
        if limit is not None:  # whole batches below the limit only
            data = b"".join(
                bytes(b) for _, h, b in rec.iter_batches(data, allow_partial_tail=True)
                if h.last_offset < limit
            )  # fmt: skip
            if not data:
                return
        follower.append_as_follower(data)
        follower.update_high_watermark(min(info.high_watermark, follower.log_end_offset))
    raise AssertionError("replication did not converge")


def truncate_by_epoch(follower: Log, leader: Log) -> int:
    """Spec §4's exchange; returns the rounds."""
    for rounds in range(1, 50):
        latest = follower.latest_epoch
        if latest is None:
            follower.truncate_to(follower.high_watermark)
            return rounds
        epoch, end = leader.end_offset_for_epoch(latest)
        state = follower_truncation_offset(
            follower.leader_epoch_cache,
            leader_epoch=epoch,
            leader_end_offset=end,
            log_end_offset=follower.log_end_offset,
            high_watermark=follower.high_watermark,
        )
        follower.truncate_to(state.offset)
        if state.complete:
            return rounds
    raise AssertionError("truncation did not converge")


# ------------------------------------------------------------------------- leader side


def test_leader_appends_stamp_and_assign_their_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.latest_epoch is None
    assert log.end_offset_for_epoch(0) == (-1, -1)
    log.append_as_leader(batch([b"a", b"b"]), leader_epoch=0)
    log.append_as_leader(batch([b"c"]), leader_epoch=0)
    log.assign_leader_epoch(2)  # elected at epoch 2 with LEO 3: the term starts now (KIP-279)
    assert log.leader_epoch_cache.entries == ((0, 0), (2, 3))
    assert log.end_offset_for_epoch(0) == (0, 3)
    assert log.end_offset_for_epoch(1) == (0, 3)
    assert log.end_offset_for_epoch(2) == (2, 3)
    log.append_as_leader(batch([b"d", b"e"]), leader_epoch=2)
    # Several batches in one request: one entry, at the request's first offset.
    log.append_as_leader(batch([b"f"]) + batch([b"g"]), leader_epoch=3)
    assert log.leader_epoch_cache.entries == ((0, 0), (2, 3), (3, 5))
    assert batch_epochs(log) == [(0, 0), (2, 0), (3, 2), (5, 3), (6, 3)]
    assert log.end_offset_for_epoch(3) == (3, 7)
    assert log.end_offset_for_epoch(2) == (2, 5)
    assert [log.epoch_for_offset(o) for o in range(7)] == [0, 0, 0, 2, 2, 3, 3]
    assert log.latest_epoch == 3
    # Each new term wrote the file; reopening reads it.
    text = (tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT).read_text()
    assert text == "0\n3\n0 0\n2 3\n3 5\n"
    log.close()
    again = open_log(tmp_path)
    assert again.leader_epoch_cache.entries == ((0, 0), (2, 3), (3, 5))
    again.close()


def test_duplicate_idempotent_retry_assigns_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produced = batch([b"a"], producer_id=7, producer_epoch=0, base_sequence=0)
    log.append_as_leader(produced, leader_epoch=1)
    info = log.append_as_leader(produced, leader_epoch=2)  # a retry after a leader change
    assert (info.first_offset, info.record_count) == (0, 0)
    assert log.leader_epoch_cache.entries == ((1, 0),)
    log.close()


def test_epoch_for_offset_before_any_epoch_is_minus_one(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch([b"a"]), leader_epoch=-1)  # a batch without an epoch
    assert log.latest_epoch is None
    assert log.epoch_for_offset(0) == -1
    log.close()


# ------------------------------------------------------------------------- load, repair, rebuild


def _three_terms(tmp_path: Path) -> Log:
    log = open_log(tmp_path)
    for epoch in (0, 1, 4):
        for i in range(6):
            log.append_as_leader(batch([b"v%d" % i] * 3), leader_epoch=epoch)
    return log


def test_open_trusts_a_file_that_agrees_with_the_last_batch(tmp_path: Path) -> None:
    log = _three_terms(tmp_path)
    assert len(log.segments) > 2
    log.close()
    path = tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT
    # A middle entry the batch headers do not say: the normal open reads the file and checks
    # only the last batch (cheap), so it stays; dump-log --verify is what compares them all.
    path.write_text("0\n3\n0 0\n1 20\n4 36\n")
    log = open_log(tmp_path)
    assert log.leader_epoch_cache.entries == ((0, 0), (1, 20), (4, 36))
    log.close()


@pytest.mark.parametrize(
    "damage",
    ["missing", "torn", "garbage", "wrong last epoch"],
)
def test_open_rebuilds_the_cache_from_the_batch_headers(tmp_path: Path, damage: str) -> None:
    log = _three_terms(tmp_path)
    expected = log.leader_epoch_cache.entries
    assert expected == ((0, 0), (1, 18), (4, 36))
    log.close()
    path = tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT
    if damage == "missing":
        path.unlink()
    elif damage == "torn":
        path.write_text(path.read_text()[:-3])
    elif damage == "garbage":
        path.write_bytes(b"\xff\xfe")
    else:
        path.write_text("0\n2\n0 0\n1 18\n")
    log = open_log(tmp_path)
    assert log.leader_epoch_cache.entries == expected
    assert path.read_text() == "0\n3\n0 0\n1 18\n4 36\n"
    log.close()


def test_open_repairs_entries_past_the_log_end_and_before_the_log_start(tmp_path: Path) -> None:
    log = _three_terms(tmp_path)
    log.close()
    path = tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT
    # Terms whose records a crash took back (6 and 7 past LEO 54; 5 empty at LEO stays).
    path.write_text("0\n6\n0 0\n1 18\n4 36\n5 54\n6 60\n7 70\n")
    log = open_log(tmp_path, log_start_offset=20)
    assert log.log_end_offset == 54
    assert log.leader_epoch_cache.entries == ((1, 20), (4, 36), (5, 54))
    assert path.read_text() == "0\n3\n1 20\n4 36\n5 54\n"
    assert log.end_offset_for_epoch(0) == (0, 20)
    log.close()


def test_a_new_partition_writes_no_file_until_its_first_term(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.close()
    assert not (tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT).exists()
    log = open_log(tmp_path)
    log.assign_leader_epoch(0)
    assert (tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n1\n0 0\n"
    log.close()
    # The empty term at LEO survives a restart: it is the current leader's.
    assert open_log(tmp_path).leader_epoch_cache.entries == ((0, 0),)


# ------------------------------------------------------------------------- log start, truncation


def test_retention_and_delete_records_move_the_first_entry(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=600, file_delete_delay_ms=0, retention_ms=-1))
    for epoch in (0, 1, 4):
        for i in range(6):
            log.append_as_leader(batch([b"v%d" % i] * 3), leader_epoch=epoch)
    log.maybe_increment_high_watermark(log.log_end_offset)
    log.delete_records(25)
    assert log.leader_epoch_cache.entries == ((1, 25), (4, 36))
    log.delete_old_segments()
    assert log.log_start_offset == 25  # segments wholly below it went, the start stays
    assert log.segments[0].base_offset <= 25
    log.delete_records(40)
    assert log.leader_epoch_cache.entries == ((4, 40),)
    assert log.end_offset_for_epoch(1) == (1, 40)
    assert_cache_matches_batches(log)
    log.close()
    assert open_log(tmp_path, log_start_offset=40).leader_epoch_cache.entries == ((4, 40),)


def test_truncate_to_trims_the_cache_and_drops_an_empty_term_at_leo(tmp_path: Path) -> None:
    log = _three_terms(tmp_path)
    log.truncate_to(40)
    assert log.log_end_offset == 39  # the batch holding 40 (39..41) went whole
    assert log.leader_epoch_cache.entries == ((0, 0), (1, 18), (4, 36))
    log.truncate_to(30)
    assert log.leader_epoch_cache.entries == ((0, 0), (1, 18))
    log.assign_leader_epoch(6)
    assert log.leader_epoch_cache.entries == ((0, 0), (1, 18), (6, 30))
    assert log.truncate_to(30) is False  # no record goes, the empty term does
    assert log.leader_epoch_cache.entries == ((0, 0), (1, 18))
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert log.leader_epoch_cache.entries == ()
    log.close()


# ------------------------------------------------------------------------- follower side


def test_follower_append_keeps_offsets_epochs_and_bytes(tmp_path: Path) -> None:
    leader = _three_terms(tmp_path / "a")
    follower = open_log(tmp_path / "b")
    replicate(follower, leader, max_bytes=500)  # fetches cut mid-batch: the tail is refetched
    assert log_bytes(follower) == log_bytes(leader)
    assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries
    assert [s.base_offset for s in follower.segments] == [s.base_offset for s in leader.segments]
    assert follower.high_watermark == 0  # the leader's HW was 0
    leader.close()
    follower.close()


def test_follower_append_refuses_what_does_not_continue_the_log(tmp_path: Path) -> None:
    leader = _three_terms(tmp_path / "a")
    follower = open_log(tmp_path / "b")
    replicate(follower, leader, limit=6)
    before = log_bytes(follower)
    behind = leader.read(3, 1 << 20, Isolation.LOG_END).slice
    assert behind is not None
    with pytest.raises(UnexpectedAppendOffsetError) as caught:
        follower.append_as_follower(behind.read_bytes())
    assert (caught.value.first_offset, caught.value.expected_offset) == (3, 6)
    # Inside one fetch, offsets going back: the second batch is not above the first.
    first = leader.read(6, 1, Isolation.LOG_END).slice
    second = leader.read(12, 1, Isolation.LOG_END).slice
    assert first is not None and second is not None
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(first.read_bytes() + first.read_bytes())
    # A flipped bit: CRC mismatch.
    corrupt = bytearray(first.read_bytes())
    corrupt[-1] ^= 1
    with pytest.raises(CorruptMessage):
        follower.append_as_follower(corrupt)
    assert log_bytes(follower) == before  # nothing was written by any of them
    assert follower.log_end_offset == 6
    # Nothing whole: nothing appended.
    info = follower.append_as_follower(first.read_bytes()[:30])
    assert (info.record_count, info.valid_bytes, follower.log_end_offset) == (0, 0, 6)
    # A gap is what a compacted leader's log has (Kafka checks only "not below"): taken.
    info = follower.append_as_follower(first.read_bytes() + second.read_bytes())
    assert (info.first_offset, info.last_offset, follower.log_end_offset) == (6, 14, 15)
    leader.close()
    follower.close()


def test_follower_keeps_producer_state_for_when_it_leads(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "a")
    follower = open_log(tmp_path / "b")
    first = batch([b"a"], producer_id=7, producer_epoch=0, base_sequence=0)
    second = batch([b"b"], producer_id=7, producer_epoch=0, base_sequence=1)
    leader.append_as_leader(first, leader_epoch=0)
    leader.append_as_leader(second, leader_epoch=0)
    replicate(follower, leader)
    follower.assign_leader_epoch(1)  # the follower takes over
    retry = follower.append_as_leader(second, leader_epoch=1)  # the producer retries
    assert (retry.first_offset, retry.record_count) == (1, 0)  # recognised: not written again
    again = follower.append_as_leader(first, leader_epoch=1)
    assert (again.first_offset, again.record_count) == (0, 0)
    with pytest.raises(OutOfOrderSequenceNumber):
        follower.append_as_leader(
            batch([b"c"], producer_id=7, producer_epoch=0, base_sequence=5), leader_epoch=1
        )
    leader.close()
    follower.close()


APPENDS = st.lists(
    st.tuples(
        st.integers(1, 4),  # records
        st.integers(0, 200),  # value size
        st.booleans(),  # new leader epoch before this append
        st.booleans(),  # idempotent producer
    ),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(APPENDS, st.integers(1, 3000), st.integers(0, 2**32 - 1))
def test_a_log_copied_by_follower_appends_is_byte_identical(
    tmp_path_factory: pytest.TempPathFactory, appends: list, max_bytes: int, seed: int
) -> None:
    root = tmp_path_factory.mktemp("copy")
    config = LogConfig(segment_bytes=1200, index_interval_bytes=150, segment_index_bytes=96)
    leader = open_log(root / "leader", config)
    follower = open_log(root / "follower", config)
    rng = random.Random(seed)
    epoch, sequence, ts = 0, 0, 1_000
    for records, size, new_epoch, idempotent in appends:
        if new_epoch:
            epoch += rng.randint(1, 3)
            leader.assign_leader_epoch(epoch)
        extra = {"producer_id": 9, "producer_epoch": 0, "base_sequence": sequence}
        leader.append_as_leader(
            batch([bytes([records]) * size] * records, ts, **(extra if idempotent else {})),
            leader_epoch=epoch,
        )
        sequence += records if idempotent else 0
        ts += rng.randint(0, 50)
        if rng.random() < 0.3:
            replicate(follower, leader, max_bytes)
    replicate(follower, leader, max_bytes)
    assert_cache_matches_batches(follower)
    assert_cache_matches_batches(leader)
    leader.close()
    follower.close()
    leader_dir, follower_dir = root / "leader" / "t-0", root / "follower" / "t-0"
    names = sorted(p.name for p in leader_dir.iterdir())
    assert names == sorted(p.name for p in follower_dir.iterdir())
    for name in names:
        if name == LEADER_EPOCH_CHECKPOINT:
            continue  # the leader's may end with an empty term (checked above)
        assert (leader_dir / name).read_bytes() == (follower_dir / name).read_bytes(), name


# ------------------------------------------------------------------------- KIP-101 and KIP-279


def test_kip101_scenario_1_hw_truncation_would_lose_m2(tmp_path: Path) -> None:
    """acks=all m1, m2; the follower has both but learnt HW 1 only; it restarts; the leader dies
    before the follower's next fetch. Truncating to HW on restart loses the acknowledged m2;
    asking the leader by epoch keeps it."""
    a = open_log(tmp_path / "a")
    b = open_log(tmp_path / "b")
    a.assign_leader_epoch(0)
    a.append_as_leader(batch([b"m1"]), leader_epoch=0)
    replicate(b, a)  # b has m1; a's HW moves to 1 once it sees b's next fetch
    a.maybe_increment_high_watermark(1)
    a.append_as_leader(batch([b"m2"]), leader_epoch=0)
    replicate(b, a)  # b has m2, but the response carried HW 1
    a.maybe_increment_high_watermark(2)  # acks=all: m2 is acknowledged now
    assert (b.log_end_offset, b.high_watermark) == (2, 1)
    b.close()
    b = open_log(tmp_path / "b", high_watermark=1, had_clean_shutdown=True)  # restart
    assert b.high_watermark == 1  # the pre-KIP-101 rule would truncate_to(1): m2 gone
    assert truncate_by_epoch(b, a) == 1
    assert b.log_end_offset == 2  # the epoch rule keeps it
    a.close()  # the leader dies; b takes over and still has m2
    b.assign_leader_epoch(1)
    b.maybe_increment_high_watermark(b.log_end_offset)
    assert [r.value for _, r in rec.iter_records(b.read(0, 1 << 20).slice.read_bytes())] == [  # type: ignore[union-attr]
        b"m1",
        b"m2",
    ]
    a = open_log(tmp_path / "a", high_watermark=2)  # a comes back as follower
    truncate_by_epoch(a, b)
    b.append_as_leader(batch([b"m3"]), leader_epoch=1)
    replicate(a, b)
    assert log_bytes(a) == log_bytes(b)
    assert a.leader_epoch_cache.entries == b.leader_epoch_cache.entries == ((0, 0), (1, 2))
    a.close()
    b.close()


def test_kip101_scenario_2_logs_never_differ_after_unflushed_loss(tmp_path: Path) -> None:
    """Both replicas lose their unflushed records in a power loss and restart in reverse
    order: b (which lost m2) leads and writes m3 at offset 1; a comes back with m2 at offset 1
    and an HW (2) that says keep it. By epoch, a finds that epoch 0 ends at 1 on the leader."""
    vfs_a, vfs_b = CrashVFS(tmp_path / "a"), CrashVFS(tmp_path / "b")
    (tmp_path / "a").mkdir(exist_ok=True)
    (tmp_path / "b").mkdir(exist_ok=True)
    a = Log.open(tmp_path / "a" / "t-0", SMALL, vfs=vfs_a)
    b = Log.open(tmp_path / "b" / "t-0", SMALL, vfs=vfs_b)
    a.assign_leader_epoch(0)
    a.append_as_leader(batch([b"m1"]), leader_epoch=0)
    replicate(b, a)
    a.flush()
    b.flush()
    a.append_as_leader(batch([b"m2"]), leader_epoch=0)
    a.flush()  # a's m2 is durable, b's copy of it is not
    replicate(b, a)
    a.maybe_increment_high_watermark(2)
    vfs_a.power_loss_image(tmp_path / "a-after")
    vfs_b.power_loss_image(tmp_path / "b-after")
    vfs_a.release()
    vfs_b.release()
    b = Log.open(tmp_path / "b-after" / "t-0", SMALL, had_clean_shutdown=False)
    assert b.log_end_offset == 1  # m2 lost
    b.assign_leader_epoch(1)  # b restarts first and leads
    b.append_as_leader(batch([b"m3"]), leader_epoch=1)
    b.maybe_increment_high_watermark(2)
    a = Log.open(tmp_path / "a-after" / "t-0", SMALL, high_watermark=2, had_clean_shutdown=False)
    assert (a.log_end_offset, a.high_watermark) == (2, 2)  # HW says: keep m2 at offset 1
    assert b.end_offset_for_epoch(0) == (0, 1)
    truncate_by_epoch(a, b)
    assert a.log_end_offset == 1
    replicate(a, b)
    assert log_bytes(a) == log_bytes(b)
    assert a.leader_epoch_cache.entries == b.leader_epoch_cache.entries == ((0, 0), (1, 1))
    a.close()
    b.close()


def test_kip279_fast_leader_changes_with_a_lagging_follower(tmp_path: Path) -> None:
    """Epoch E=1 (a) -> E+1=2 (b, which lags a's epoch-1 records) -> E+2=3 (a again, which never
    saw epoch 2). b asks for epoch 2; a answers with epoch 1 and where it ends. b knows epoch 1
    and truncates its epoch-2 record; an answer without the epoch (OffsetForLeaderEpoch v0, the
    KIP-279 bug) would have kept it, at an offset where a holds another record."""
    a = open_log(tmp_path / "a")
    b = open_log(tmp_path / "b")
    a.assign_leader_epoch(0)
    for v in (b"m0", b"m1", b"m2", b"m3"):
        a.append_as_leader(batch([v]), leader_epoch=0)
    replicate(b, a)
    a.assign_leader_epoch(1)
    a.append_as_leader(batch([b"m4"]), leader_epoch=1)
    a.append_as_leader(batch([b"m5"]), leader_epoch=1)
    replicate(b, a, limit=5)  # b lags: it has m4, not m5
    b.assign_leader_epoch(2)  # a is cut off; b leads epoch 2
    b.append_as_leader(batch([b"b6"]), leader_epoch=2)  # offset 5, where a has m5
    a.assign_leader_epoch(3)  # b is cut off at once; a leads epoch 3, never having seen 2
    # KIP-279: a's term starts at election, so it answers for epoch 2 before writing anything.
    assert a.end_offset_for_epoch(2) == (1, 6)
    a.append_as_leader(batch([b"m7"]), leader_epoch=3)
    assert follower_truncation_offset(
        b.leader_epoch_cache,
        leader_epoch=-1,
        leader_end_offset=6,
        log_end_offset=b.log_end_offset,
        high_watermark=b.high_watermark,
    ) == (6, True)  # without the epoch: keep b6 at offset 5 -> divergence
    assert truncate_by_epoch(b, a) == 1
    assert b.log_end_offset == 5
    replicate(b, a)
    assert log_bytes(b) == log_bytes(a)
    assert b.leader_epoch_cache.entries == a.leader_epoch_cache.entries == ((0, 0), (1, 4), (3, 6))
    a.close()
    b.close()


@pytest.mark.parametrize("seed", range(12))
def test_random_histories_of_two_real_logs_converge(tmp_path: Path, seed: int) -> None:
    """Elections, appends, lagging fetches and unflushed-tail losses on real logs; after every
    truncation exchange the follower's bytes are a prefix of the leader's."""
    rng = random.Random(seed)
    dirs = [tmp_path / "r0", tmp_path / "r1"]
    logs = [open_log(d) for d in dirs]
    epoch, leader, value = -1, None, 0
    for _ in range(60):
        action = rng.random()
        if leader is None or action < 0.15:
            epoch += 1
            leader = rng.randrange(2)
            logs[leader].assign_leader_epoch(epoch)
        elif action < 0.55:
            for _ in range(rng.randint(1, 3)):
                value += 1
                logs[leader].append_as_leader(batch([b"%d" % value]), leader_epoch=epoch)
        elif action < 0.9:
            f = 1 - leader
            truncate_by_epoch(logs[f], logs[leader])
            mine, theirs = log_bytes(logs[f]), log_bytes(logs[leader])
            assert theirs[: len(mine)] == mine
            replicate(logs[f], logs[leader], limit=logs[f].log_end_offset + rng.randint(1, 4))
        else:  # a crash loses the unflushed tail: cut the last segment at a batch boundary
            r = rng.randrange(2)
            log = logs[r]
            if rng.random() < 0.5:
                log.flush()
                continue
            recovery_point = log.recovery_point
            active = log.active_segment
            cuts = [p for p, h in active.batches() if h.base_offset >= recovery_point]
            log.close()
            if cuts:
                path = active.log_path
                with path.open("r+b") as f:
                    f.truncate(rng.choice(cuts))
            logs[r] = open_log(dirs[r], recovery_point=recovery_point, had_clean_shutdown=False)
            assert_cache_matches_batches(logs[r])
            if r == leader:
                leader = None
    for log in logs:
        log.close()


def test_open_after_deleted_segments_keeps_epochs_of_what_remains(tmp_path: Path) -> None:
    log = _three_terms(tmp_path)
    log.close()
    # Segment files deleted behind the log's back: the start moves to what remains.
    directory = tmp_path / "t-0"
    first = sorted(directory.glob("*.log"))[0]
    for p in directory.glob(first.stem + ".*"):
        p.unlink()
    log = open_log(tmp_path)
    assert log.leader_epoch_cache.entries[0].start_offset == log.log_start_offset
    assert_cache_matches_batches(log)
    log.close()
    shutil.rmtree(directory)


# ------------------------------------------------------------------------- rebuild by sampling


def _changes(hs: list[rec.BatchHeader]) -> list[int]:
    """Base offsets of the first batch and of each batch whose epoch differs from the last."""
    out = []
    for i, h in enumerate(hs):
        if i == 0 or h.partition_leader_epoch != hs[i - 1].partition_leader_epoch:
            out.append(h.base_offset)
    return out


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3), st.integers(0, 120)), max_size=80),
    st.booleans(),
    st.integers(1, 400),
)
def test_epoch_changes_finds_every_change_by_sampling(
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[tuple[int, int, int]],
    monotonic: bool,
    interval: int,
) -> None:
    """LogSegment.epoch_changes (bisection over the index) against the full header scan: the
    same change points when epochs never decrease (as along every log leaders and followers
    write); when they do and a sample shows it, the full scan's entries."""
    log = Log.open(
        tmp_path_factory.mktemp("sample") / "t-0",
        LogConfig(index_interval_bytes=interval, segment_bytes=1 << 20),
    )
    epoch = 0
    for bump, records, size in steps:
        epoch = epoch + bump if monotonic else (epoch + bump) % 4
        log.append_as_leader(batch([b"x" * size] * records), leader_epoch=epoch)
    [segment] = log.segments
    everything = [h for _, h in segment.batches()]
    try:
        sampled = segment.epoch_changes()
        if monotonic:
            assert [h.base_offset for h in sampled] == _changes(everything)
            assert entries_from_batches(sampled) == entries_from_batches(everything)
        elif everything and everything[-1].partition_leader_epoch < epoch_of_first(everything):
            assert sampled == everything  # the decrease is visible: full scan
    finally:
        log.close()


def epoch_of_first(hs: list[rec.BatchHeader]) -> int:
    return hs[0].partition_leader_epoch


def test_rebuild_reads_few_headers_on_a_long_single_epoch_log(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=100))
    for i in range(3000):
        log.append_as_leader(batch([b"v"]), leader_epoch=0 if i < 1000 else 3)
    [segment] = log.segments
    reads = 0
    original = segment._read_header

    def counting(position: int, end: int) -> rec.BatchHeader | None:
        nonlocal reads
        reads += 1
        return original(position, end)

    segment._read_header = counting  # type: ignore[method-assign]
    assert [h.base_offset for h in segment.epoch_changes()] == [0, 1000]
    assert reads < 60, reads  # against 3000 for a scan of every header
    log.close()
