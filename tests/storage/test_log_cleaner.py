"""The log cleaner (sluice.server.storage.log_cleaner) against a simple model of a compacted
topic: random keyed writes, tombstones, rolls and cleanings; after each cleaning the latest
value of every key is what the model says, nothing is deleted too early, superseded records
below the cleaned offset are gone, offsets strictly increase and every file passes
``dump-log --verify``. Plus the pieces: the offset map, segment grouping, the empty batches
kept for producers, the dirty-ratio choice, the checkpoint."""

from __future__ import annotations

import bisect
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.protocol import records as rec
from sluice.server.storage.dump_log import verify_partition
from sluice.server.storage.log import Isolation, Log
from sluice.server.storage.log_cleaner import (
    Cleaner,
    LogCleaner,
    OffsetMap,
    SourceSegment,
    group_segments_by_size,
    log_to_clean,
)
from sluice.server.storage.log_config import CleanerConfig, LogConfig

NOW = 1_700_000_000_000
RETENTION = 10_000  # delete.retention.ms of the tests


class Clock:
    def __init__(self, now: int = NOW) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def compacted(**overrides: object) -> LogConfig:
    base = {
        "cleanup_policy": "compact",
        "segment_bytes": 1024,
        "delete_retention_ms": RETENTION,
        "min_cleanable_dirty_ratio": 0.0,
        "file_delete_delay_ms": 0,
    }
    base.update(overrides)
    return LogConfig(**base)  # type: ignore[arg-type]


def open_log(directory: Path, clock: Clock, **overrides: object) -> Log:
    return Log.open(directory, compacted(**overrides), clock=clock)


def write(log: Log, pairs: list[tuple[bytes, bytes | None]], ts: int, **kw: object) -> None:
    log.append_as_leader(rec.build_batch([(ts, k, v) for k, v in pairs], **kw))


def records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record, reading like a follower (to LEO)."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    position = log.log_start_offset
    for _ in range(10_000):
        info = log.read(position, 1 << 20, Isolation.LOG_END)
        if info.slice is None:
            return out
        last = position - 1
        for _pos, header, view in rec.iter_batches(info.slice.read_bytes()):
            for r in rec.decode_batch(view).records:
                if r.offset >= position:
                    out.append((r.offset, r.key, r.value))
            last = header.last_offset
        position = last + 1
    raise AssertionError("read loop did not terminate")


def clean(log: Log, cleaner: Cleaner, checkpoint: int | None, now: int) -> int:
    ltc = log_to_clean(log, checkpoint, now)
    return cleaner.clean(log, ltc.first_dirty, ltc.first_uncleanable, now)


# ---------------------------------------------------------------- the model


def rewritten(offset: int, bases: list[int], end: int) -> bool:
    """Whether a cleaning up to ``end`` rewrites the segment holding ``offset`` (``bases``: the
    segments before it): every segment below the map's end is (Kafka's doClean), and a
    tombstone kept in a rewritten batch gets the batch's delete horizon, mapped or not."""
    return bases[bisect.bisect_right(bases, offset) - 1] < end


op = st.one_of(
    st.tuples(
        st.just("write"),
        st.lists(
            st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"]),
                      st.one_of(st.none(), st.binary(min_size=1, max_size=40))),
            min_size=1,
            max_size=6,
        ),
        st.sampled_from([0, 1, 4]),
    ),
    st.tuples(st.just("roll")),
    st.tuples(st.just("clean"), st.integers(0, 2 * RETENTION), st.booleans()),
)  # fmt: skip


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(op, min_size=1, max_size=40), map_keys=st.sampled_from([2, 5, 1000]))
def test_cleaning_matches_the_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list, map_keys: int
) -> None:
    directory = tmp_path_factory.mktemp("model") / "t-0"
    clock = Clock()
    log = open_log(directory, clock)
    # map_keys small: the dirty section does not fit the map, cleanings go in several passes.
    cleaner = Cleaner(
        CleanerConfig(dedupe_buffer_size=24 * map_keys, dedupe_buffer_load_factor=1.0)
    )
    latest: dict[bytes, tuple[int, bytes | None]] = {}  # the model: key -> (offset, value)
    horizon: dict[int, int] = {}  # tombstone offset -> delete horizon, once a cleaning set it
    checkpoint: int | None = None
    ts = NOW
    for step in ops:
        if step[0] == "write":
            ts += 1
            start = log.log_end_offset
            write(log, step[1], ts, compression=step[2])
            for i, (key, value) in enumerate(step[1]):
                latest[key] = (start + i, value)
        elif step[0] == "roll":
            log.roll()
        else:
            clock.now += step[1]
            committed = (
                log.log_end_offset if step[2] else (log.log_start_offset + log.log_end_offset) // 2
            )
            log.update_high_watermark(committed)
            before = records(log)
            bases = [seg.base_offset for seg in log.segments]
            ltc = log_to_clean(log, checkpoint, clock.now)
            rewrote = ltc.first_uncleanable > ltc.first_dirty
            checkpoint = end = cleaner.clean(log, ltc.first_dirty, ltc.first_uncleanable, clock.now)

            after = records(log)
            offsets = [o for o, _, _ in after]
            assert offsets == sorted(set(offsets)), "offsets must strictly increase"
            assert set(after) <= set(before), "cleaning only removes records"
            # The latest record of every key is kept, tombstones until their horizon.
            present = {o: (k, v) for o, k, v in after}
            for key, (offset, value) in latest.items():
                if value is not None:
                    assert present.get(offset) == (key, value)
                    continue
                was_set = offset in horizon
                if rewrote and rewritten(offset, bases, end) and offset in present and not was_set:
                    horizon[offset] = clock.now + RETENTION  # this cleaning set it
                if clock.now < horizon.get(offset, clock.now + 1):
                    assert present.get(offset) == (key, None), "tombstone removed too early"
                elif was_set and rewrote and offset < end:  # mapped again, past its horizon
                    assert offset not in present, "tombstone kept past its horizon"
            # Below the cleaned offset every key holds at most one record: compaction happened.
            below = [k for o, k, _ in after if o < end]
            assert len(below) == len(set(below))
            # Committed records only supersede: nothing at or above HW was used to remove one.
            assert (
                end <= max(committed, log.log_start_offset) or end <= log.segments[-1].base_offset
            )
            assert verify_partition(directory) == []
    final = records(log)
    log.close()
    assert verify_partition(directory) == []
    # What the cleaner wrote survives a restart (with recovery) unchanged.
    reopened = Log.open(directory, compacted(), clock=clock, had_clean_shutdown=False)
    assert records(reopened) == final
    reopened.close()


# ---------------------------------------------------------------- pieces


def test_offset_map_keeps_the_last_offset_per_key_by_md5() -> None:
    m = OffsetMap(24 * 10)
    assert (m.slots, m.size, m.latest_offset) == (10, 0, -1)
    m.put(b"k", 3)
    m.put(b"j", 4)
    m.put(b"k", 7)
    assert (m.get(b"k"), m.get(b"j"), m.get(b"x")) == (7, 4, -1)
    assert (m.size, m.latest_offset, m.utilization) == (2, 7, 0.2)
    m.clear()
    assert (m.size, m.latest_offset, m.get(b"k")) == (0, -1, -1)


def _source(base: int, size: int, index: int = 0) -> SourceSegment:
    return SourceSegment(base, 0, size, index, index, 0, None, None)  # type: ignore[arg-type]


def test_group_segments_by_size_is_kafkas() -> None:
    segs = [_source(0, 400), _source(10, 400), _source(20, 400), _source(30, 0), _source(40, 900)]
    groups = group_segments_by_size(segs, 1000, 10_000, 50)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 10], [20, 30], [40]]
    # index bytes bound the groups too
    idx = [_source(0, 1, 60), _source(10, 1, 60), _source(20, 1, 60)]
    assert [len(g) for g in group_segments_by_size(idx, 1000, 100, 30)] == [1, 1, 1]
    # relative offsets must fit int32
    far = [_source(0, 1), _source(2**31, 1)]
    assert [len(g) for g in group_segments_by_size(far, 1000, 1000, 2**31 + 10)] == [1, 1]


def test_a_producers_last_batch_stays_as_an_empty_batch(tmp_path: Path) -> None:
    """Superseded records of an idempotent producer go, but its last batch stays (header only),
    so its sequence survives a restart that rebuilds producer state from the headers."""
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock)
    write(log, [(b"k", b"1")], NOW, producer_id=9, producer_epoch=0, base_sequence=0)
    write(log, [(b"k", b"2"), (b"k", b"3")], NOW, producer_id=9, producer_epoch=0, base_sequence=1)
    write(log, [(b"k", b"4")], NOW)  # supersedes everything the producer wrote
    log.roll()
    write(log, [(b"z", b"x")], NOW)
    log.update_high_watermark(log.log_end_offset)
    end = clean(log, Cleaner(CleanerConfig()), None, NOW)
    assert end == 4
    assert records(log) == [(3, b"k", b"4"), (4, b"z", b"x")]
    headers = [h for s in log.segments for _, h in s.batches()]
    assert [(h.base_offset, h.last_offset, h.record_count, h.base_sequence) for h in headers] == [
        (1, 2, 0, 1),  # the producer's last batch: empty, sequences 1..2 kept
        (3, 3, 1, -1),
        (4, 4, 1, -1),
    ]
    log.close()
    reopened = Log.open(tmp_path / "t-0", compacted(), clock=clock, had_clean_shutdown=False)
    state = reopened.producer_state().producers[9]
    assert (state.epoch, state.last_seq) == (0, 2)
    write(reopened, [(b"k", b"5")], NOW, producer_id=9, producer_epoch=0, base_sequence=3)
    reopened.close()


def test_tombstones_stay_until_their_delete_horizon(tmp_path: Path) -> None:
    """KIP-534: the first cleaning that keeps a tombstone stamps its batch with the horizon
    now + delete.retention.ms; a cleaning before it keeps the tombstone, one after removes it
    (and the value it deleted is gone since the first)."""
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock)
    cleaner = Cleaner(CleanerConfig())
    write(log, [(b"k", b"1")], NOW)
    write(log, [(b"k", None)], NOW)
    checkpoint = None
    for step, now in enumerate((NOW, NOW + RETENTION - 1, NOW + RETENTION)):
        log.roll()
        write(log, [(b"x%d" % step, b"v")], NOW)  # something dirty to clean
        log.update_high_watermark(log.log_end_offset)
        clock.now = now
        checkpoint = clean(log, cleaner, checkpoint, now)
        keys = [(o, k, v) for o, k, v in records(log) if k == b"k"]
        if now < NOW + RETENTION:
            assert keys == [(1, b"k", None)]
            (header,) = (h for _, h in log.segments[0].batches() if h.base_offset == 1)
            assert rec.delete_horizon_ms(header) == NOW + RETENTION
        else:
            assert keys == []
    assert [o for o, _, _ in records(log)] == [2, 3, 4]
    log.close()
    assert verify_partition(tmp_path / "t-0") == []


def test_keyless_records_go_and_the_last_batch_of_a_cleaning_stays_empty(tmp_path: Path) -> None:
    """Records without a key (written before the topic became compacted) are removed; the
    cleaning's last batch stays as an empty batch so the offset it ended at does (Kafka's
    RETAIN_EMPTY for ``batch.nextOffset == upperBoundOffsetOfCleaningRound``)."""
    clock = Clock()
    log = Log.open(tmp_path / "t-0", LogConfig(file_delete_delay_ms=0), clock=clock)
    write(log, [(None, b"a")], NOW)
    write(log, [(None, b"b")], NOW)
    log.roll()
    log.update_config(compacted())
    write(log, [(b"k", b"v")], NOW)
    log.update_high_watermark(log.log_end_offset)
    cleaner = Cleaner(CleanerConfig())
    assert cleaner.clean(log, 0, 2, NOW) == 2
    headers = [
        (h.base_offset, h.last_offset, h.record_count) for s in log.segments for _, h in s.batches()
    ]
    assert headers == [(1, 1, 0), (2, 2, 1)]
    assert records(log) == [(2, b"k", b"v")]
    log.close()
    assert verify_partition(tmp_path / "t-0") == []
    # dump-log shows the cleaned segment: the empty batch keeps its offsets.
    from sluice.server.storage.dump_log import dump_file

    lines = list(dump_file(log.segments[0].log_path, print_data_log=True))
    assert any(line.startswith("baseOffset: 1 lastOffset: 1 count: 0 ") for line in lines)


def test_the_dirtiest_log_past_its_ratio_is_chosen(tmp_path: Path) -> None:
    clock = Clock()
    logs = {}
    for name, segments in (("a", 4), ("b", 6), ("c", 4)):
        log = open_log(tmp_path / f"{name}-0", clock, min_cleanable_dirty_ratio=0.4)
        for i in range(segments):
            write(log, [(b"k%d" % (i % 2), b"v" * 100)], NOW)
            log.roll()
        log.update_high_watermark(log.log_end_offset)
        logs[name] = log
    manager = LogCleaner(tmp_path, CleanerConfig(), clock=clock)
    manager._checkpoints.update({("a", 0): 2, ("c", 0): 3})  # ratios 0.5 and 0.25; b: 1.0
    chosen = manager.grab_filthiest_log(logs.values())
    assert chosen is not None and chosen.log is logs["b"]
    assert chosen.cleanable_ratio == 1.0 and manager.max_dirty_ratio == 1.0
    again = manager.grab_filthiest_log(logs.values())  # b is in progress: the next dirtiest
    assert again is not None and again.log is logs["a"] and again.cleanable_ratio == 0.5
    assert manager.grab_filthiest_log(logs.values()) is None  # c: 0.25 is below 0.4
    assert manager.max_dirty_ratio == 0.25
    for log in logs.values():
        log.close()


def test_max_compaction_lag_forces_a_cleaning_below_the_ratio(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(
        tmp_path / "t-0", clock, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=1000
    )
    write(log, [(b"k", b"v")], NOW - 500)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    manager = LogCleaner(tmp_path, CleanerConfig(), clock=clock)
    ltc = log_to_clean(log, 0, NOW)
    assert not ltc.needs_compaction_now and manager.grab_filthiest_log([log]) is not None
    manager.in_progress.clear()
    # with a checkpoint at the dirty start the ratio is 1.0 anyway; make it look clean-heavy
    write(log, [(b"k", b"w" * 500)], NOW)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    ltc = log_to_clean(log, 1, NOW + 2000)
    assert ltc.needs_compaction_now
    log.close()


def test_min_compaction_lag_and_the_high_watermark_bound_the_dirty_section(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock, min_compaction_lag_ms=1000)
    for i, age in enumerate((5000, 1000, 999, 0)):  # Kafka: too young iff ts > now - lag
        write(log, [(b"k", b"%d" % i)], NOW - age)
        log.roll()
    log.update_high_watermark(log.log_end_offset)
    assert log_to_clean(log, None, NOW).first_uncleanable == 2  # segment 2 is too young
    log.update_high_watermark(1)
    assert log_to_clean(log, None, NOW).first_uncleanable == 1
    log.close()


def test_an_open_transaction_bounds_the_dirty_section(tmp_path: Path) -> None:
    """Kafka's cleanableOffsets: the last stable offset bounds cleaning, so a record of a
    transaction that may still abort never supersedes a committed one."""
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock)
    write(log, [(b"k", b"committed")], NOW)  # 0
    txn = {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0, "is_transactional": True}
    write(log, [(b"k", b"open")], NOW, **txn)  # 1: its transaction still open
    log.roll()
    write(log, [(b"other", b"x")], NOW)  # 2, active segment
    log.update_high_watermark(log.log_end_offset)
    assert (log.high_watermark, log.last_stable_offset) == (3, 1)
    assert log_to_clean(log, None, NOW).first_uncleanable == 0  # the segment holding the LSO
    clean(log, Cleaner(CleanerConfig()), None, NOW)
    assert (0, b"k", b"committed") in records(log)
    log.close()


async def test_a_truncation_during_the_swaps_fsync_keeps_the_checkpoint(tmp_path: Path) -> None:
    """A follower truncating while the cleaner waits for its directory fsync writes records
    again below the cleaning's end: they are dirty, so the checkpoint stays below them (else a
    tombstone among them would never delete its key's older value)."""
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock)
    write(log, [(b"K", b"v1"), (b"A", b"a")], NOW)  # 0, 1
    log.roll()
    write(log, [(b"B", b"b")], NOW)  # 2
    write(log, [(b"C", b"c")], NOW)  # 3
    log.roll()
    write(log, [(b"D", b"d")], NOW)  # 4, active
    log.update_high_watermark(log.log_end_offset)
    manager = LogCleaner(tmp_path, CleanerConfig(), clock=clock)
    log.truncated = lambda leo: manager.truncated(log.topic, log.partition, leo)
    fsync_dir = log.vfs.fsync_dir

    def truncating_fsync_dir(path: Path) -> None:  # the cleaner's, in its thread: once
        fsync_dir(path)
        if threading.current_thread() is not threading.main_thread() and not calls:
            calls.append(path)
            loop.call_soon_threadsafe(log.truncate_to, 3)
            truncated.wait(10)

    import asyncio
    import threading

    loop = asyncio.get_running_loop()
    truncated = threading.Event()
    calls: list[Path] = []
    log.vfs.fsync_dir = truncating_fsync_dir  # type: ignore[method-assign]
    original_truncate = log.truncate_to

    def truncate_to(offset: int) -> None:
        original_truncate(offset)
        truncated.set()

    log.truncate_to = truncate_to  # type: ignore[method-assign]
    try:
        assert not await manager.run_once([log])
    finally:
        log.vfs.fsync_dir = fsync_dir  # type: ignore[method-assign]
    assert log.log_end_offset == 3
    assert manager.checkpoints.get(("t", 0), 0) <= 3
    log.close()


async def test_run_once_cleans_in_a_thread_and_checkpoints(tmp_path: Path) -> None:
    clock = Clock()
    directory = tmp_path / "t-0"
    log = open_log(directory, clock)
    for i in range(20):
        write(log, [(b"k%d" % (i % 3), b"v%d" % i)], NOW)
        if i % 5 == 4:
            log.roll()
    log.update_high_watermark(log.log_end_offset)
    manager = LogCleaner(tmp_path, CleanerConfig(), clock=clock)
    assert await manager.run_once([log])
    assert manager.checkpoints[("t", 0)] == 20
    assert (tmp_path / "cleaner-offset-checkpoint").read_text() == "0\n1\nt 0 20\n"
    assert sorted(k for _, k, _ in records(log)) == [b"k0", b"k1", b"k2"]
    assert manager.cleanings == 1 and manager.bytes_read > manager.bytes_written > 0
    assert not await manager.run_once([log])  # nothing dirty now
    assert LogCleaner(tmp_path, CleanerConfig()).checkpoints == {("t", 0): 20}
    log.close()
    assert verify_partition(directory) == []


async def test_the_log_manager_runs_the_cleaner_and_forgets_deleted_topics(tmp_path: Path) -> None:
    from sluice.server.storage.log_manager import LogManager

    manager = LogManager(tmp_path, LogConfig(), cleaner_config=CleanerConfig(backoff_ms=10))
    manager.open()
    (log,) = manager.create_topic(
        "state",
        1,
        {"cleanup.policy": "compact", "segment.bytes": "200", "file.delete.delay.ms": "0"},
    )
    (plain,) = manager.create_topic("plain", 1, {"segment.bytes": "200"})
    for i in range(30):
        write(log, [(b"k%d" % (i % 3), b"v%d" % i)], NOW)
        write(plain, [(b"k%d" % (i % 3), b"v%d" % i)], NOW)
    for each in (log, plain):
        each.update_high_watermark(each.log_end_offset)
    assert manager.cleaner is not None
    assert await manager.run_cleaner() == 1  # only the compacted topic
    assert await manager.run_cleaner() == 0
    assert len(records(log)) < 30 and len(records(plain)) == 30
    assert ("state", 0) in manager.cleaner.checkpoints
    await manager.start()
    manager.delete_topic("state")
    assert ("state", 0) not in manager.cleaner.checkpoints
    await manager.stop()
    assert (
        LogManager(tmp_path, LogConfig(), cleaner_config=CleanerConfig(enable=False)).cleaner
        is None
    )


@pytest.mark.parametrize("change", ["truncate", "retention", "close"])
def test_a_log_changed_during_its_cleaning_keeps_its_segments(tmp_path: Path, change: str) -> None:
    """The swap (on the event loop) finds the log truncated, a replaced segment deleted, or
    the log closed since the plan: the cleaned files are removed, the log is as it was."""
    from sluice.server.storage.log_cleaner import CleaningAbortedError, plan_cleaning

    clock = Clock()
    directory = tmp_path / "t-0"
    log = open_log(directory, clock, cleanup_policy="compact,delete", retention_ms=-1)
    for i in range(12):
        write(log, [(b"k%d" % (i % 2), b"v%d" % i)], NOW)
        if i % 3 == 2:
            log.roll()
    log.update_high_watermark(log.log_end_offset)
    before = records(log)
    cleaner = Cleaner(CleanerConfig())
    ltc = log_to_clean(log, None, NOW)
    result = cleaner.write_cleaned(plan_cleaning(log, ltc.first_dirty, ltc.first_uncleanable, NOW))
    assert list(directory.glob("*.cleaned"))
    if change == "truncate":
        log.truncate_to(11)
        before = before[:-1]
    elif change == "retention":
        log.delete_records(3)
        assert log.delete_old_segments() == 1
        before = before[3:]
    else:
        log.close()
    with pytest.raises(CleaningAbortedError):
        cleaner.swap(result)
    assert not list(directory.glob("*.cleaned")) and not list(directory.glob("*.swap"))
    if change != "close":
        assert records(log) == before
        log.close()
    assert verify_partition(directory) == []


def test_the_throttler_keeps_the_average_rate() -> None:
    from sluice.server.storage.log_cleaner import Throttler

    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    throttler = Throttler(1000.0, check_interval=0.1, clock=lambda: now[0], sleep=sleep)
    for _ in range(50):
        throttler.maybe_throttle(100)  # 5000 bytes at once: 5 s at 1000 B/s
    assert sum(slept) == pytest.approx(5.0, rel=0.05)
    unthrottled = Throttler(CleanerConfig().io_max_bytes_per_second, clock=lambda: 0.0, sleep=sleep)
    unthrottled.maybe_throttle(10**12)
    assert sum(slept) == pytest.approx(5.0, rel=0.05)


async def test_a_truncation_below_the_first_dirty_offset_lowers_it(tmp_path: Path) -> None:
    """Kafka's maybeTruncateCheckpoint: records a follower writes again after truncating are
    dirty (else a value there could outlive the tombstone that deletes its key)."""
    from sluice.server.storage.log_manager import LogManager

    manager = LogManager(tmp_path, LogConfig(), cleaner_config=CleanerConfig())
    manager.open()
    (log,) = manager.create_topic("s", 1, {"cleanup.policy": "compact", "segment.bytes": "200"})
    for i in range(20):
        write(log, [(b"k%d" % (i % 4), b"v%d" % i)], NOW)
    log.update_high_watermark(log.log_end_offset)
    assert manager.cleaner is not None and await manager.run_cleaner() == 1
    first_dirty = manager.cleaner.checkpoints[("s", 0)]
    assert first_dirty > 5
    log.truncate_to(first_dirty + 3)  # above it: nothing to do
    assert manager.cleaner.checkpoints[("s", 0)] == first_dirty
    log.truncate_to(5)
    assert manager.cleaner.checkpoints[("s", 0)] == log.log_end_offset <= 5
    log.truncate_fully_and_start_at(2)
    assert manager.cleaner.checkpoints[("s", 0)] == 2
    manager.close()
    assert LogCleaner(tmp_path, CleanerConfig()).checkpoints == {("s", 0): 2}


def test_a_follower_catches_up_from_a_compacted_leader(tmp_path: Path) -> None:
    """A follower fetching from a compacted leader gets batches with offset gaps (and empty
    batches): it takes them as they are and ends with the leader's view of every key."""
    clock = Clock()
    leader = open_log(tmp_path / "a-0", clock)
    for i in range(60):
        write(leader, [(b"k%d" % (i % 5), None if i % 11 == 10 else b"v%d" % i)], NOW)
        if i % 7 == 6:
            leader.roll()
    leader.update_high_watermark(leader.log_end_offset)
    clean(leader, Cleaner(CleanerConfig()), None, NOW)
    follower = open_log(tmp_path / "b-0", clock)
    for _ in range(1000):
        if follower.log_end_offset >= leader.log_end_offset:
            break
        info = leader.read(follower.log_end_offset, 300, Isolation.LOG_END)
        assert info.slice is not None
        follower.append_as_follower(info.slice.read_bytes())
    assert follower.log_end_offset == leader.log_end_offset
    assert records(follower) == records(leader)
    assert len(records(leader)) < 60
    follower.close()
    leader.close()
    assert verify_partition(tmp_path / "b-0") == []


def test_a_segment_deleted_before_the_thread_reads_it_aborts_the_cleaning(tmp_path: Path) -> None:
    from sluice.server.storage.log_cleaner import CleaningAbortedError, plan_cleaning

    directory = tmp_path / "t-0"
    log = open_log(directory, Clock(), cleanup_policy="compact,delete", retention_ms=-1)
    for i in range(9):
        write(log, [(b"k%d" % (i % 2), b"v%d" % i)], NOW)
        if i % 3 == 2:
            log.roll()
    log.update_high_watermark(log.log_end_offset)
    ltc = log_to_clean(log, None, NOW)
    plan = plan_cleaning(log, ltc.first_dirty, ltc.first_uncleanable, NOW)
    log.delete_records(3)
    assert log.delete_old_segments() == 1  # segment 0 is gone (file.delete.delay.ms=0)
    with pytest.raises(CleaningAbortedError):
        Cleaner(CleanerConfig()).write_cleaned(plan)
    assert not list(directory.glob("*.cleaned"))
    log.close()


async def test_an_unexpected_failure_leaves_the_partition_uncleanable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's markPartitionUncleanable: a cleaning failing for an unexpected reason is logged
    and the partition skipped from then on (not retried every backoff); an I/O error is
    retried."""
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock)
    for i in range(6):
        write(log, [(b"k", b"v%d" % i)], NOW)
        log.roll()
    log.update_high_watermark(log.log_end_offset)
    manager = LogCleaner(tmp_path, CleanerConfig(), clock=clock)

    def broken(*_args: object, **_kw: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(manager.cleaner, "write_cleaned", broken)
    assert not await manager.run_once([log])
    assert manager.uncleanable == set() and manager.grab_filthiest_log([log]) is not None
    manager.in_progress.clear()

    def buggy(*_args: object, **_kw: object) -> None:
        raise ValueError("a bug")

    monkeypatch.setattr(manager.cleaner, "write_cleaned", buggy)
    assert not await manager.run_once([log])
    assert manager.uncleanable == {("t", 0)}
    assert manager.grab_filthiest_log([log]) is None
    log.close()
