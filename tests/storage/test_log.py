"""Log: append/read/offsets, HW rules, retention, ListOffsets, rolling, against real files."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.protocol import records as rec
from sluice.protocol.errors import (
    CorruptMessage,
    InvalidRecord,
    MessageTooLarge,
    OffsetOutOfRange,
    RecordListTooLarge,
    UnsupportedCompressionType,
)
from sluice.server.storage.log import Isolation, Log
from sluice.server.storage.log_config import LogConfig


class Clock:
    """A settable millisecond clock."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def batch(values: list[bytes], timestamp: int = 1_000, **kw: int) -> bytes:
    """A producer batch (baseOffset 0) of one record per value, timestamps ``timestamp + i``."""
    return rec.build_batch([(timestamp + i, None, v) for i, v in enumerate(values)], **kw)


def served(log: Log, start: int, isolation: Isolation = Isolation.HIGH_WATERMARK) -> list[int]:
    """Offsets of every record readable from ``start`` by repeated reads (like a consumer)."""
    offsets: list[int] = []
    position = start
    for _ in range(10_000):
        info = log.read(position, 1 << 20, isolation)
        if info.slice is None:
            return offsets
        records = [r for _, r in rec.iter_records(info.slice.read_bytes())]
        offsets.extend(r.offset for r in records if r.offset >= position)
        position = records[-1].offset + 1
    raise AssertionError("read loop did not terminate")


def open_log(tmp_path: Path, clock: Clock | None = None, **config: object) -> Log:
    return Log.open(tmp_path / "topic-a-0", LogConfig(**config), clock=clock or Clock())  # type: ignore[arg-type]


def all_values(log: Log, start: int = 0) -> Iterator[tuple[int, bytes | None]]:
    info = log.read(start, 1 << 30, Isolation.LOG_END)
    while info.slice is not None:
        last = start
        for _, r in rec.iter_records(info.slice.read_bytes()):
            if r.offset >= start:
                yield r.offset, r.value
            last = r.offset
        start = last + 1
        info = log.read(start, 1 << 30, Isolation.LOG_END)


# ---------------------------------------------------------------------------- append / read


def test_append_assigns_offsets_from_leo_and_read_returns_them(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert (log.topic, log.partition) == ("topic-a", 0)
    a = log.append_as_leader(batch([b"a", b"b", b"c"]), leader_epoch=7)
    b = log.append_as_leader(batch([b"d"]))
    assert (a.first_offset, a.last_offset, a.record_count) == (0, 2, 3)
    assert (b.first_offset, b.last_offset) == (3, 3)
    assert a.log_append_time == -1
    assert a.max_timestamp == 1_002 and a.offset_of_max_timestamp == 2
    assert log.log_end_offset == 4
    assert log.high_watermark == 0  # append does not move HW
    assert log.read(0, 1000).slice is None  # consumers see nothing below HW yet
    assert log.maybe_increment_high_watermark(log.log_end_offset)
    assert list(all_values(log)) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    stored = log.read(0, 1000).slice
    assert stored is not None
    first = rec.parse_header(stored.read_bytes())
    assert first.base_offset == 0 and first.partition_leader_epoch == 7
    # Offsets in the middle of a batch return the whole batch; the consumer skips.
    info = log.read(1, 1000)
    assert info.slice is not None and info.slice.first_offset == 0
    assert (info.high_watermark, info.log_start_offset, info.log_end_offset) == (4, 0, 4)
    log.close()


def test_multi_batch_append_and_compressed_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    data = batch([b"x", b"y"]) + batch([b"z"], compression=rec.COMPRESSION_GZIP)
    info = log.append_as_leader(data)
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 2, 3)
    assert info.valid_bytes == len(data)
    log.maybe_increment_high_watermark(3)
    assert list(all_values(log)) == [(0, b"x"), (1, b"y"), (2, b"z")]
    log.close()


def test_log_append_time_is_stamped_and_crc_recomputed(tmp_path: Path) -> None:
    clock = Clock(5_555_000)
    log = open_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(batch([b"a", b"b"], timestamp=1))
    assert info.log_append_time == 5_555_000 == info.max_timestamp
    log.maybe_increment_high_watermark(log.log_end_offset)
    fetched = log.read(0, 1000).slice
    assert fetched is not None
    decoded = rec.decode_batch(fetched.read_bytes())  # verifies the CRC
    assert decoded.header.timestamp_type == rec.TIMESTAMP_LOG_APPEND_TIME
    assert [r.timestamp for r in decoded.records] == [5_555_000, 5_555_000]
    log.close()


def _corrupt_crc(data: bytes) -> bytes:
    out = bytearray(data)
    out[-1] ^= 0xFF
    return bytes(out)


def _with_base_offset(data: bytes, offset: int) -> bytes:
    out = bytearray(data)
    rec.set_base_offset(out, offset)
    return bytes(out)


def _with_codec(data: bytes, codec: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(">h", out, rec.ATTRIBUTES_OFFSET, codec)
    struct.pack_into(">I", out, rec.CRC_OFFSET, rec.compute_crc(out))
    return bytes(out)


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b"", InvalidRecord),
        (_corrupt_crc(batch([b"a"])), CorruptMessage),
        (_with_base_offset(batch([b"a"]), 5), InvalidRecord),
        (batch([b"a"]) + b"\x00\x00\x00", CorruptMessage),
        (batch([b"a"])[:-1], CorruptMessage),
        (batch([b"a"]) + _corrupt_crc(batch([b"b"])), CorruptMessage),
        (batch([b"v" * 600]), MessageTooLarge),
        (_with_codec(batch([b"a"]), 6), UnsupportedCompressionType),
    ],
)
def test_invalid_appends_raise_and_leave_the_log_unchanged(
    tmp_path: Path, payload: bytes, error: type[Exception]
) -> None:
    log = open_log(tmp_path, max_message_bytes=500)
    log.append_as_leader(batch([b"first"]))
    log_file = log.active_segment.log_path
    before = log_file.read_bytes()
    with pytest.raises(error):
        log.append_as_leader(payload)
    assert log.log_end_offset == 1
    assert log_file.read_bytes() == before
    assert log.append_as_leader(batch([b"next"])).first_offset == 1
    log.close()


def test_request_larger_than_a_segment_is_record_list_too_large(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=200)
    with pytest.raises(RecordListTooLarge):
        log.append_as_leader(batch([b"a"]) + batch([b"b"]) + batch([b"c"]))
    assert log.log_end_offset == 0
    log.close()


# ---------------------------------------------------------------------------- HW and reads


def test_reads_are_capped_at_hw_and_out_of_range_rules(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(5):
        log.append_as_leader(batch([b"%d" % i, b"%d'" % i]))  # offsets 2i, 2i+1
    log.update_high_watermark(6)
    assert served(log, 0) == [0, 1, 2, 3, 4, 5]
    assert served(log, 0, Isolation.LOG_END) == list(range(10))
    assert served(log, 0, Isolation.TXN_COMMITTED) == [0, 1, 2, 3, 4, 5]
    # HW inside a batch: that batch is not committed as a whole, so it is not served.
    log.update_high_watermark(7)
    assert served(log, 0) == [0, 1, 2, 3, 4, 5]
    assert log.read(7, 100).slice is None  # == HW: caught up, no error
    assert log.read(8, 100).slice is None  # between HW and LEO: empty
    assert log.read(10, 100).slice is None  # == LEO
    with pytest.raises(OffsetOutOfRange):
        log.read(11, 100)
    with pytest.raises(OffsetOutOfRange):
        log.read(11, 100, Isolation.LOG_END)
    assert log.delete_records(4) == 4
    with pytest.raises(OffsetOutOfRange):
        log.read(3, 100)
    assert served(log, 4) == [4, 5]
    log.close()


def test_high_watermark_clamping_and_monotonicity(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch([b"a"] * 10))
    assert log.update_high_watermark(100) == 10
    assert log.update_high_watermark(-5) == 0
    assert log.maybe_increment_high_watermark(4)
    assert not log.maybe_increment_high_watermark(3)
    assert log.high_watermark == 4
    with pytest.raises(ValueError):
        log.maybe_increment_high_watermark(11)
    log.delete_records(4)
    assert log.update_high_watermark(0) == 4  # never below the log start offset
    with pytest.raises(OffsetOutOfRange):
        log.delete_records(5)  # above HW
    assert log.delete_records(-1) == 4
    log.close()


class _Model:
    """Reference: the offsets a Log must hold, as plain integers."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int]] = []  # (first, last) offsets
        self.start = self.hw = self.leo = 0


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(1, 4)),
            st.tuples(st.just("hw"), st.integers(-2, 40)),
            st.tuples(st.just("inc"), st.integers(0, 40)),
            st.tuples(st.just("delete_records"), st.integers(-1, 40)),
            st.tuples(st.just("truncate"), st.integers(0, 40)),
            st.tuples(st.just("roll"), st.just(0)),
            st.tuples(st.just("retention"), st.just(0)),
            st.tuples(st.just("read"), st.integers(0, 45)),
        ),
        max_size=40,
    )
)
def test_random_operations_match_reference_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]]
) -> None:
    directory = tmp_path_factory.mktemp("model") / "m-0"
    log = Log.open(directory, LogConfig(segment_bytes=300, file_delete_delay_ms=0), clock=Clock())
    m = _Model()
    try:
        for op, arg in ops:
            if op == "append":
                info = log.append_as_leader(batch([b"r"] * arg))
                assert info.first_offset == m.leo
                m.batches.append((m.leo, m.leo + arg - 1))
                m.leo += arg
            elif op == "hw":
                assert log.update_high_watermark(arg) == min(max(arg, m.start), m.leo)
                m.hw = min(max(arg, m.start), m.leo)
            elif op == "inc":
                if arg > m.leo:
                    with pytest.raises(ValueError):
                        log.maybe_increment_high_watermark(arg)
                else:
                    assert log.maybe_increment_high_watermark(arg) == (arg > m.hw)
                    m.hw = max(m.hw, arg)
            elif op == "delete_records":
                target = m.hw if arg == -1 else arg
                if target > m.hw:
                    with pytest.raises(OffsetOutOfRange):
                        log.delete_records(arg)
                else:
                    m.start = max(m.start, target)
                    assert log.delete_records(arg) == m.start
            elif op == "truncate":
                if arg < m.leo:
                    if arg < log.segments[0].base_offset:
                        # below everything still stored: the log restarts empty at arg
                        m.batches, m.leo, m.start, m.hw = [], arg, arg, arg
                    else:
                        # the batch containing arg goes whole: LEO = its first offset
                        removed = [b for b in m.batches if b[1] >= arg]
                        m.batches = [b for b in m.batches if b[1] < arg]
                        m.leo = removed[0][0]
                        m.start = min(m.start, m.leo)
                        m.hw = min(m.hw, m.leo)
                log.truncate_to(arg)
            elif op == "roll":
                log.roll()
            elif op == "retention":
                log.delete_old_segments()
                assert log.log_start_offset >= m.start
                m.start = log.log_start_offset
                assert m.start <= m.hw
            elif op == "read":
                if arg < m.start or arg > m.leo:
                    if arg != m.hw:
                        with pytest.raises(OffsetOutOfRange):
                            log.read(arg, 1000)
                else:
                    expected = [
                        o
                        for first, last in m.batches
                        if last < m.hw
                        for o in range(first, last + 1)
                        if o >= arg
                    ]
                    assert served(log, arg) == expected
            assert log.log_start_offset <= log.high_watermark <= log.log_end_offset
            assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (
                m.start,
                m.hw,
                m.leo,
            )
    finally:
        log.close()


# ---------------------------------------------------------------------------- rolling


def test_roll_by_size_creates_real_segment_files(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400)
    size = len(batch([b"x" * 40]))
    for _ in range(12):
        log.append_as_leader(batch([b"x" * 40]))
    per_segment = 400 // size
    bases = [s.base_offset for s in log.segments]
    assert bases == list(range(0, 12, per_segment))
    names = sorted(p.name for p in (tmp_path / "topic-a-0").iterdir())
    for base in bases:
        for suffix in (".log", ".index", ".timeindex"):
            assert f"{base:020d}{suffix}" in names
    for segment in log.segments[:-1]:
        assert segment.size <= 400
        assert (tmp_path / "topic-a-0" / f"{segment.base_offset:020d}.log").stat().st_size == (
            segment.size
        )
    log.maybe_increment_high_watermark(log.log_end_offset)
    assert served(log, 0) == list(range(12))
    log.close()


def test_explicit_roll_onto_empty_active_segment_recreates_it(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch([b"a"]))
    log.roll()
    assert [s.base_offset for s in log.segments] == [0, 1]
    log.roll()  # same base offset, empty: recreated, not duplicated
    assert [s.base_offset for s in log.segments] == [0, 1]
    assert log.pending_flush_offset == 1
    log.flush(log.pending_flush_offset)
    assert log.pending_flush_offset is None and log.recovery_point == 1
    log.close()


def test_flush_messages_advances_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path, flush_messages=3)
    log.append_as_leader(batch([b"a", b"b"]))
    assert log.recovery_point == 0
    log.append_as_leader(batch([b"c"]))
    assert log.recovery_point == 3
    log.close()


# ---------------------------------------------------------------------------- retention


def _fill(log: Log, clock: Clock, count: int, first_ts: int) -> None:
    for i in range(count):
        log.append_as_leader(batch([b"v" * 30], timestamp=first_ts + i * 1000))
        log.roll()
    clock.now = first_ts + count * 1000


def test_retention_by_time_stops_at_high_watermark(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, retention_ms=10_000, file_delete_delay_ms=0)
    _fill(log, clock, 6, first_ts=1_000)  # one batch per segment, ts 1000..6000
    clock.now = 100_000  # everything expired
    log.update_high_watermark(3)
    assert log.delete_old_segments() == 3  # only segments wholly below HW
    assert log.log_start_offset == 3
    assert [s.base_offset for s in log.segments] == [3, 4, 5, 6]
    log.maybe_increment_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() == 3  # the active segment is empty: it stays
    assert [s.base_offset for s in log.segments] == [6]
    assert not list((tmp_path / "topic-a-0").glob("*.deleted"))
    assert sorted(p.name for p in (tmp_path / "topic-a-0").iterdir()) == [
        "00000000000000000006.index",
        "00000000000000000006.log",
        "00000000000000000006.snapshot",  # the roll's producer snapshot stays with its segment
        "00000000000000000006.timeindex",
        "leader-epoch-checkpoint",
    ]
    # The log start moved past every record: epoch 0 now starts there (and holds nothing yet).
    assert log.leader_epoch_cache.entries == ((0, 6),)
    with pytest.raises(OffsetOutOfRange):
        log.read(5, 100)
    log.close()


def test_retention_by_time_keeps_recent_segments(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, retention_ms=2_500, file_delete_delay_ms=0)
    _fill(log, clock, 5, first_ts=1_000)  # now = 6000; ts 1000..5000
    log.maybe_increment_high_watermark(log.log_end_offset)
    # now - ts: 5000, 4000, 3000 > 2500 (deleted); 2000, 1000 (kept)
    assert log.delete_old_segments() == 3
    assert log.log_start_offset == 3
    log.close()


def test_retention_deletes_non_empty_active_segment_after_rolling(tmp_path: Path) -> None:
    clock = Clock(50_000)
    log = open_log(tmp_path, clock, retention_ms=1_000, file_delete_delay_ms=0)
    log.append_as_leader(batch([b"old"], timestamp=1_000))
    assert log.delete_old_segments() == 0  # not committed yet
    log.maybe_increment_high_watermark(1)
    assert log.delete_old_segments() == 1
    assert [s.base_offset for s in log.segments] == [1]
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (1, 1, 1)
    assert log.append_as_leader(batch([b"new"])).first_offset == 1
    log.close()


def test_retention_by_size(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, retention_ms=-1, file_delete_delay_ms=0)
    _fill(log, clock, 6, first_ts=1_000)
    seg_size = log.segments[0].size
    log.update_high_watermark(log.log_end_offset)
    # Kafka's rule: delete while the excess is at least the oldest segment's size, so the log
    # ends up at most retention.bytes (here exactly 3 segments; 3 segments + 1 byte keeps 4).
    log.update_config(LogConfig(retention_ms=-1, retention_bytes=4 * seg_size - 1))
    assert log.delete_old_segments() == 2
    log.update_config(LogConfig(retention_ms=-1, retention_bytes=3 * seg_size))
    assert log.delete_old_segments() == 1
    assert log.size_in_bytes == 3 * seg_size
    assert log.log_start_offset == 3
    log.close()


def test_a_compact_only_log_has_no_time_or_size_retention(tmp_path: Path) -> None:
    """Kafka's deleteOldSegments: without ``delete`` in cleanup.policy only the log start
    offset deletes segments; with ``compact,delete`` retention applies as usual."""
    clock = Clock()
    compact = LogConfig(cleanup_policy="compact", retention_ms=1, retention_bytes=1)
    log = open_log(tmp_path, clock, file_delete_delay_ms=0)
    _fill(log, clock, 4, first_ts=1_000)
    log.update_config(compact)
    clock.now = 100_000
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() == 0
    log.delete_records(2)
    assert log.delete_old_segments() == 2
    log.update_config(dataclasses.replace(compact, cleanup_policy="compact,delete"))
    assert log.delete_old_segments() == 2
    log.close()


def test_retention_below_log_start_and_delayed_physical_delete(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, retention_ms=-1, file_delete_delay_ms=60_000)
    _fill(log, clock, 4, first_ts=1_000)
    log.update_high_watermark(4)
    log.delete_records(2)
    assert log.delete_old_segments() == 2
    directory = tmp_path / "topic-a-0"
    deleted = sorted(p.name for p in directory.glob("*.deleted"))
    assert deleted == [
        "00000000000000000000.index.deleted",
        "00000000000000000000.log.deleted",
        "00000000000000000000.timeindex.deleted",
        "00000000000000000001.index.deleted",
        "00000000000000000001.log.deleted",
        "00000000000000000001.timeindex.deleted",
    ]
    clock.now += 59_999
    assert log.run_delayed_deletes() == 0
    clock.now += 1
    assert log.run_delayed_deletes() == 2
    assert not list(directory.glob("*.deleted"))
    log.close()


# ---------------------------------------------------------------------------- ListOffsets


def test_fetch_offset_by_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=160)
    # Timestamps go up, except one batch that carries the max in the middle.
    log.append_as_leader(batch([b"a", b"b"], timestamp=100))  # 0,1: ts 100,101
    log.append_as_leader(batch([b"c"], timestamp=900))  # 2: 900 (max)
    log.append_as_leader(batch([b"d", b"e"], timestamp=200))  # 3,4: 200,201
    log.append_as_leader(batch([b"f"], timestamp=300))  # 5: 300
    assert len(log.segments) > 1
    log.update_high_watermark(5)

    def at(ts: int, iso: Isolation = Isolation.HIGH_WATERMARK) -> tuple[int, int] | None:
        found = log.fetch_offset_by_timestamp(ts, iso)
        return None if found is None else (found.timestamp, found.offset)

    assert at(-2) == (-1, 0)
    assert at(-1) == (-1, 5)
    assert at(-1, Isolation.LOG_END) == (-1, 6)
    assert at(-3) == (900, 2)
    assert at(0) == (100, 0)
    assert at(101) == (101, 1)
    assert at(150) == (900, 2)  # first offset with timestamp >= target
    assert at(901) is None
    assert at(300) == (900, 2)  # the first offset, not the closest timestamp
    log.update_high_watermark(2)
    assert at(900) is None  # offset 2 is not committed yet
    assert at(900, Isolation.LOG_END) == (900, 2)
    log.update_high_watermark(5)
    log.delete_records(1)
    assert at(-2) == (-1, 1)
    assert at(0) == (101, 1)
    log.close()


def test_max_timestamp_lookup_across_segments(tmp_path: Path) -> None:
    """ListOffsets -3 (KIP-734, Kafka's ``UnifiedLog.fetchOffsetByTimestamp``): the offset of
    the first record holding the log's largest timestamp -- mid-batch, in an old segment, in a
    compressed batch -- not its batch's last offset; a later tie does not move it; it holds
    after a restart (old segments' max timestamps come from their time indexes); -4 (earliest
    local) is the log start offset."""
    log = open_log(tmp_path, segment_bytes=300)

    def stamped(timestamps: list[int], **kw: int) -> bytes:
        return rec.build_batch([(ts, None, b"v" * 20) for ts in timestamps], **kw)

    log.append_as_leader(stamped([100, 110, 105]))  # 0-2
    log.append_as_leader(stamped([120, 990, 130, 125], compression=1))  # 3-6: max at 4 (gzip)
    log.append_as_leader(stamped([140, 150]))  # 7-8
    log.append_as_leader(stamped([160, 990]))  # 9-10: a tie, later
    log.append_as_leader(stamped([170]))  # 11
    assert len(log.segments) >= 3
    holder = next(s for s in log.segments if s.base_offset <= 4 < s.read_next_offset())
    assert holder is not log.segments[-1]
    log.update_high_watermark(log.log_end_offset)

    def at(ts: int) -> tuple[int, int] | None:
        found = log.fetch_offset_by_timestamp(ts)
        return None if found is None else (found.timestamp, found.offset)

    assert at(-3) == (990, 4)
    assert at(-4) == (-1, 0)
    log.update_high_watermark(4)
    assert at(-3) is None  # offset 4 is not committed yet
    log.close()

    log = open_log(tmp_path, segment_bytes=300)
    log.update_high_watermark(log.log_end_offset)
    assert at(-3) == (990, 4)
    log.delete_records(3)
    assert at(-4) == (-1, 3)
    assert at(-3) == (990, 4)
    log.delete_records(5)  # the max-timestamp record is gone: its tie is the answer now
    assert at(-3) == (990, 10)
    log.close()


def test_fetch_offset_by_timestamp_on_empty_log(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.fetch_offset_by_timestamp(-3) is None
    assert log.fetch_offset_by_timestamp(5) is None
    found = log.fetch_offset_by_timestamp(-1)
    assert found is not None and found.offset == 0
    log.close()


# ---------------------------------------------------------------------------- truncation


def test_truncate_to_removes_whole_batches_and_later_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300, file_delete_delay_ms=0)
    for i in range(8):
        log.append_as_leader(batch([b"%d" % i, b"x"]))  # offsets 2i, 2i+1
    log.update_high_watermark(16)
    segments_before = len(log.segments)
    assert segments_before > 2
    assert log.truncate_to(7)  # inside batch 6..7: the batch goes whole
    assert log.log_end_offset == 6
    assert log.high_watermark == 6
    assert len(log.segments) < segments_before
    assert served(log, 0, Isolation.LOG_END) == list(range(6))
    assert log.append_as_leader(batch([b"again"])).first_offset == 6
    assert not log.truncate_to(100)
    assert log.truncate_to(0)
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (0, 0, 0)
    log.close()


def test_closed_log_refuses_use(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.close()
    with pytest.raises(Exception, match="closed"):
        log.append_as_leader(batch([b"a"]))


def test_in_place_append_rewrites_the_callers_buffer_only_when_allowed(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch([b"first"]))
    original = batch([b"a", b"b"])
    mutable = bytearray(original)
    info = log.append_as_leader(mutable, in_place=True, leader_epoch=3)
    assert info.first_offset == 1
    header = rec.parse_header(mutable)
    assert (header.base_offset, header.partition_leader_epoch) == (1, 3)  # rewritten in place
    readonly = memoryview(original)
    log.append_as_leader(readonly, in_place=True)  # not writable: copied, caller's bytes intact
    assert bytes(readonly) == original
    copied = bytearray(original)
    log.append_as_leader(copied)  # in_place defaults to False
    assert copied == original
    log.maybe_increment_high_watermark(log.log_end_offset)
    expected = [(0, b"first")] + [(o, b"a" if o % 2 else b"b") for o in range(1, 7)]
    assert list(all_values(log)) == expected
    log.close()


def test_delete_removes_every_file_and_the_directory(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, segment_bytes=200, retention_ms=1, file_delete_delay_ms=10**6)
    for i in range(6):
        log.append_as_leader(batch([b"%d" % i * 20]))
    log.update_high_watermark(log.log_end_offset)
    clock.now += 10**9
    assert log.delete_old_segments() > 0  # leaves *.deleted files pending
    log.delete()
    assert not (tmp_path / "topic-a-0").exists()
    assert log.closed
