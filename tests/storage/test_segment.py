"""LogSegment: append, sparse indexing, reads, truncation, rolling (Kafka's LogSegmentTest)."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.protocol.records import iter_batches, parse_header
from sluice.server.storage.index import OFFSET_ENTRY, TIME_ENTRY, InvalidIndexAppendError
from sluice.server.storage.segment import (
    FetchSlice,
    LogSegment,
    SegmentOffsetOverflowError,
    random_segment_jitter,
    segment_paths,
)

MakeBatch = Callable[..., bytes]  # the conftest fixture


def open_segment(directory: Path, base_offset: int = 0, **kw: int) -> LogSegment:
    kw.setdefault("index_interval_bytes", 1)
    kw.setdefault("max_index_size", 1000 * 8 * 12)
    return LogSegment.open(directory, base_offset, now_ms=0, **kw)  # type: ignore[arg-type]


def append(seg: LogSegment, batch: bytes) -> None:
    header = parse_header(batch)
    seg.append(header.last_offset, header.max_timestamp, header.last_offset, batch)


def slice_offsets(fetched: FetchSlice) -> list[tuple[int, int]]:
    """(base offset, last offset) of every whole batch in the slice."""
    data = fetched.read_bytes()
    assert len(data) == fetched.size
    return [
        (h.base_offset, h.last_offset) for _, h, _ in iter_batches(data, allow_partial_tail=True)
    ]


def test_files_named_like_kafka(tmp_path: Path) -> None:
    seg = open_segment(tmp_path, 133)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "00000000000000000133.index",
        "00000000000000000133.log",
        "00000000000000000133.timeindex",
    ]
    # Preallocated to max_index_size rounded down to the entry size.
    assert (tmp_path / names[0]).stat().st_size == 96000
    assert (tmp_path / names[2]).stat().st_size == 96000
    seg.close()
    # Trimmed on close.
    assert (tmp_path / names[0]).stat().st_size == 0
    assert (tmp_path / names[2]).stat().st_size == 0


def test_read_empty_segment_returns_none(tmp_path: Path) -> None:
    seg = open_segment(tmp_path, 40)
    assert seg.read(40, 300) is None
    assert seg.read_next_offset() == 40
    seg.close()


def test_read_before_inside_and_after_batches(tmp_path: Path, make_batch: MakeBatch) -> None:
    seg = open_segment(tmp_path, 40)
    batches = [make_batch(40, [1, 2, 3]), make_batch(43, [4, 5]), make_batch(50, [6])]  # gap 45-49
    for b in batches:
        append(seg, b)
    total = sum(len(b) for b in batches)
    # Before the segment's first offset: the first batch.
    assert slice_offsets(seg.read(0, total)) == [(40, 42), (43, 44), (50, 50)]  # type: ignore[arg-type]
    # Inside a batch: the whole batch containing it.
    got = seg.read(41, total)
    assert got is not None and got.first_offset == 40 and got.position == 0
    got = seg.read(44, total)
    assert got is not None and got.first_offset == 43 and got.position == len(batches[0])
    # In the gap: the next batch.
    got = seg.read(46, total)
    assert got is not None and got.first_offset == 50
    assert got.read_bytes() == batches[2]
    # After the last batch.
    assert seg.read(51, total) is None
    assert seg.read_next_offset() == 51
    seg.close()


def test_read_size_limits(tmp_path: Path, make_batch: MakeBatch) -> None:
    seg = open_segment(tmp_path)
    b1, b2 = make_batch(0, [1] * 10, [b"x" * 100] * 10), make_batch(10, [2])
    append(seg, b1)
    append(seg, b2)
    # max_size smaller than the first batch: a partial slice, or the whole batch with
    # min_one_message.
    got = seg.read(0, 10)
    assert got is not None and got.size == 10
    got = seg.read(0, 10, min_one_message=True)
    assert got is not None and got.read_bytes() == b1
    # max_position bounds the slice (the Log passes the high watermark's position).
    got = seg.read(0, 10_000, max_position=len(b1))
    assert got is not None and got.read_bytes() == b1
    got = seg.read(0, 10_000, max_position=len(b1), min_one_message=True)
    assert got is not None and got.size == len(b1)
    got = seg.read(0, 0)
    assert got is not None and got.size == 0 and got.read_bytes() == b""
    with pytest.raises(ValueError):
        seg.read(0, -1)
    seg.close()


def test_sparse_index_first_batch_never(tmp_path: Path, make_batch: MakeBatch) -> None:
    seg = open_segment(tmp_path, index_interval_bytes=200)
    positions = []
    offset = 0
    position = 0
    for i in range(30):
        batch = make_batch(offset, [1000 + i, 1000 + i], [b"y" * 30, b"z" * 30])
        positions.append((offset + 1, position))
        append(seg, batch)
        offset += 2
        position += len(batch)
    # Reference model of the rule: index a batch when > 200 bytes were written since the last
    # entry before it; the first batch never.
    expected = []
    since = 0
    for last_offset, pos in positions:
        if since > 200:
            expected.append((last_offset, pos))
            since = 0
        since += positions[1][1]  # every batch has the same size
    got = [seg.offset_index.entry_at(i) for i in range(seg.offset_index.entries)]
    assert [(e.offset, e.position) for e in got] == expected
    assert expected and expected[0][1] > 0
    # Time index follows the same entries with the max timestamp so far.
    times = [seg.time_index.entry_at(i) for i in range(seg.time_index.entries)]
    assert [t.offset for t in times] == [o for o, _ in expected]
    # Every offset reads back from the right batch through the index.
    for target in range(offset):
        got_slice = seg.read(target, 10)
        assert got_slice is not None and got_slice.first_offset == target - target % 2
    seg.close()


def test_translate_reads_one_header_when_the_next_entry_holds_the_offset(
    tmp_path: Path, make_batch: MakeBatch
) -> None:
    """A fetch at a batch's base offset: the floor index entry is the batch before it (entries
    name a batch's last offset), the next entry is the wanted batch itself. Its header alone
    answers; the floor batch's header is not read. With a gap or an unindexed batch in between,
    the scan from the floor entry still finds the right batch."""
    seg = open_segment(tmp_path, index_interval_bytes=1)  # every batch but the first indexed
    layout = [(0, 3), (3, 3), (10, 3), (13, 3)]  # (base offset, count): offsets 6-9 missing
    positions = {}
    for base, count in layout:
        positions[base] = seg.size
        append(seg, make_batch(base, [1000 + i for i in range(count)], [b"v"] * count))
    reads: list[int] = []
    real_read = seg._read_header

    def counting(position: int, end: int) -> object:
        reads.append(position)
        return real_read(position, end)

    seg._read_header = counting  # type: ignore[method-assign]
    for target, (base, _) in [(3, layout[1]), (13, layout[3]), (14, layout[3])]:
        seg._headers.clear()
        reads.clear()
        found = seg.translate_offset(target)
        assert found is not None and (found.base_offset, found.position) == (
            base,
            positions[base],
        )
        assert reads == [positions[base]]
    # Offsets 6-9 are a gap: the next entry's batch (10-12) starts above the target, scan.
    for target in (6, 9, 10):
        seg._headers.clear()
        found = seg.translate_offset(target)
        assert found is not None and found.base_offset == 10
    # starting_position beyond the next entry's batch: the scan starts there, as before.
    assert seg.translate_offset(3, positions[10]).base_offset == 10  # type: ignore[union-attr]
    seg.close()


def test_max_timestamp_tracking(tmp_path: Path, make_batch: MakeBatch) -> None:
    seg = open_segment(tmp_path)
    append(seg, make_batch(0, [100, 300]))
    append(seg, make_batch(2, [200]))
    append(seg, make_batch(3, [300]))  # equal: not strictly greater, keeps offset 1
    assert (seg.max_timestamp_so_far, seg.offset_of_max_timestamp_so_far) == (300, 1)
    assert seg.largest_timestamp == 300
    seg.close()


def test_largest_timestamp_falls_back_to_mtime(tmp_path: Path) -> None:
    seg = open_segment(tmp_path)
    seg.last_modified_ms = 123_000
    assert seg.largest_timestamp == 123_000
    seg.close()


def test_append_offset_overflow_raises(tmp_path: Path, make_batch: MakeBatch) -> None:
    seg = open_segment(tmp_path)
    with pytest.raises(SegmentOffsetOverflowError):
        append(seg, make_batch(2**31, [1]))
    assert seg.size == 0
    seg.close()


def test_should_roll_on_size_and_offset_overflow(tmp_path: Path, make_batch: MakeBatch) -> None:
    seg = open_segment(tmp_path, 100)
    batch = make_batch(100, [1])
    kw = dict(max_timestamp_in_messages=1, now_ms=0, segment_ms=10**9)
    assert not seg.should_roll(
        messages_size=len(batch), max_offset_in_messages=100, segment_bytes=len(batch), **kw
    )
    append(seg, batch)
    # Would not fit.
    assert seg.should_roll(
        messages_size=len(batch), max_offset_in_messages=101, segment_bytes=2 * len(batch) - 1, **kw
    )
    assert not seg.should_roll(
        messages_size=len(batch), max_offset_in_messages=101, segment_bytes=2 * len(batch), **kw
    )
    # Offset does not fit relative int32.
    assert seg.should_roll(
        messages_size=1, max_offset_in_messages=100 + 2**31, segment_bytes=10**9, **kw
    )
    assert not seg.should_roll(
        messages_size=1, max_offset_in_messages=100 + 2**31 - 1, segment_bytes=10**9, **kw
    )
    seg.close()


def test_should_roll_when_index_full(tmp_path: Path, make_batch: MakeBatch) -> None:
    # Room for 4 offset entries (32 bytes) and 2 time entries + the reserved one (36 bytes).
    seg = open_segment(tmp_path, max_index_size=36, index_interval_bytes=1)
    assert seg.offset_index.max_entries == 4 and seg.time_index.max_entries == 3

    def rolls() -> bool:
        return seg.should_roll(
            messages_size=1,
            max_timestamp_in_messages=0,
            max_offset_in_messages=0,
            now_ms=0,
            segment_bytes=10**9,
            segment_ms=10**9,
        )

    append(seg, make_batch(0, [10]))
    append(seg, make_batch(1, [11]))  # index entry 1 (both indexes)
    assert not rolls()
    append(seg, make_batch(2, [12]))  # entry 2: the time index keeps its last slot -> full
    assert seg.time_index.entries == 2 and seg.time_index.is_full()
    assert rolls()
    seg.on_becoming_inactive()
    # The final entry used the reserved slot; the files are trimmed.
    assert seg.time_index.entries == 2  # max timestamp 12 already indexed at offset 2
    assert Path(seg.offset_index.path).stat().st_size == 2 * OFFSET_ENTRY.size
    assert Path(seg.time_index.path).stat().st_size == 2 * TIME_ENTRY.size
    seg.close()


def test_time_roll_uses_record_timestamps_and_jitter(tmp_path: Path, make_batch: MakeBatch) -> None:
    segment_ms = 1000
    jitter = 300
    seg = open_segment(tmp_path, rolling_jitter_ms=jitter)

    def rolls(ts: int, now_ms: int = 0) -> bool:
        return seg.should_roll(
            messages_size=1,
            max_timestamp_in_messages=ts,
            max_offset_in_messages=1,
            now_ms=now_ms,
            segment_bytes=10**9,
            segment_ms=segment_ms,
        )

    # Empty segment never rolls on time.
    assert not rolls(10**12)
    append(seg, make_batch(0, [5000]))
    # Wall clock does not matter once the first batch has a timestamp.
    assert not rolls(5000 + segment_ms - jitter, now_ms=10**12)
    assert rolls(5000 + segment_ms - jitter + 1)
    seg.close()


def test_time_roll_without_timestamps(tmp_path: Path, make_batch: MakeBatch) -> None:
    seg = LogSegment.open(tmp_path, 0, index_interval_bytes=1, max_index_size=800, now_ms=1000)
    append(seg, make_batch(0, [-1]))

    def rolls(now_ms: int) -> bool:
        return seg.should_roll(
            messages_size=1,
            max_timestamp_in_messages=-1,
            max_offset_in_messages=1,
            now_ms=now_ms,
            segment_bytes=10**9,
            segment_ms=500,
        )

    assert not rolls(1500)
    assert rolls(1501)
    seg.close()


def test_random_segment_jitter_bounds() -> None:
    rng = random.Random(7)
    assert random_segment_jitter(0, 1000, rng) == 0
    draws = {random_segment_jitter(50, 1000, rng) for _ in range(500)}
    assert draws <= set(range(50)) and len(draws) > 25
    # Bounded by segment.ms too.
    assert {random_segment_jitter(10_000, 10, rng) for _ in range(200)} <= set(range(10))


def _append_many(seg: LogSegment, make_batch: MakeBatch, count: int) -> list[bytes]:
    batches = []
    for i in range(count):
        b = make_batch(seg.base_offset + 2 * i, [1000 + 2 * i, 1001 + 2 * i])
        append(seg, b)
        batches.append(b)
    return batches


@pytest.mark.parametrize("interval", [1, 150, 10_000])
def test_truncate_to_every_offset(tmp_path: Path, make_batch: MakeBatch, interval: int) -> None:
    """Covers the three index cases: below the first entry, between entries, above the last."""
    for target in range(50, 50 + 2 * 12 + 2):
        directory = tmp_path / f"{interval}-{target}"
        directory.mkdir()
        seg = open_segment(directory, 50, index_interval_bytes=interval)
        batches = _append_many(seg, make_batch, 12)
        before = seg.offset_index.entries
        keep = [b for b in batches if parse_header(b).last_offset < target]
        removed = seg.truncate_to(target)
        assert removed == sum(map(len, batches)) - sum(map(len, keep))
        assert seg.size == sum(map(len, keep))
        assert Path(seg.log_path).read_bytes() == b"".join(keep)
        # Index entries at or above the removed batches are gone, the others stay.
        entries = [seg.offset_index.entry_at(i) for i in range(seg.offset_index.entries)]
        assert all(e.position < seg.size for e in entries)
        assert all(e.offset < target for e in entries)
        assert seg.offset_index.entries <= before
        for i in range(seg.time_index.entries):
            assert seg.time_index.entry_at(i).offset < target
        expected_next = parse_header(keep[-1]).next_offset if keep else 50
        assert seg.read_next_offset() == expected_next
        # The segment is active again: appends continue and index as before.
        assert seg.offset_index.max_entries * 8 == seg.max_index_size - seg.max_index_size % 8
        append(seg, make_batch(expected_next, [5000]))
        got = seg.read(expected_next, 1000)
        assert got is not None and got.first_offset == expected_next
        assert seg.max_timestamp_so_far == 5000
        seg.close()


def test_truncate_restores_max_timestamp(tmp_path: Path, make_batch: MakeBatch) -> None:
    seg = open_segment(tmp_path, index_interval_bytes=150)
    _append_many(seg, make_batch, 10)  # timestamps 1000..1019
    seg.truncate_to(7)  # keeps batches [0,1] [2,3] [4,5]; drops [6,7] onward
    assert (seg.max_timestamp_so_far, seg.offset_of_max_timestamp_so_far) == (1005, 5)
    seg.truncate_to(0)
    assert seg.size == 0
    seg.close()


def test_find_offset_by_timestamp(tmp_path: Path, make_batch: MakeBatch) -> None:
    seg = open_segment(tmp_path, 10, index_interval_bytes=100)
    # Timestamps not monotonic inside batches.
    append(seg, make_batch(10, [100, 90, 120]))
    append(seg, make_batch(13, [110, 130]))
    append(seg, make_batch(15, [125, 140, 135]))
    records = [
        (100, 10),
        (90, 11),
        (120, 12),
        (110, 13),
        (130, 14),
        (125, 15),
        (140, 16),
        (135, 17),
    ]

    def reference(ts: int, start: int) -> tuple[int, int] | None:
        for t, o in records:
            if t >= ts and o >= start:
                return (t, o)
        return None

    for ts in range(80, 150, 3):
        for start in (0, 10, 12, 14, 16, 18):
            got = seg.find_offset_by_timestamp(ts, start)
            assert (tuple(got) if got else None) == reference(ts, start), (ts, start)
    seg.close()


def test_find_offset_by_timestamp_log_append_time(tmp_path: Path, make_batch: MakeBatch) -> None:
    seg = open_segment(tmp_path)
    append(seg, make_batch(0, [5, 5, 5], log_append_time=True))
    assert seg.find_offset_by_timestamp(4) == (5, 0)
    assert seg.find_offset_by_timestamp(5, 1) == (5, 1)
    assert seg.find_offset_by_timestamp(6) is None
    seg.close()


@pytest.mark.parametrize("compression", [0, 1, 2, 3, 4])
def test_find_offset_by_timestamp_compressed(
    tmp_path: Path, make_batch: MakeBatch, compression: int
) -> None:
    seg = open_segment(tmp_path)
    append(seg, make_batch(0, [10, 30, 20], compression=compression))
    append(seg, make_batch(3, [25, 40], compression=compression))
    assert seg.find_offset_by_timestamp(15) == (30, 1)
    assert seg.find_offset_by_timestamp(15, 2) == (20, 2)
    assert seg.find_offset_by_timestamp(26, 2) == (40, 4)
    assert seg.find_offset_by_timestamp(41) is None
    seg.close()


def test_offset_gaps_inside_a_batch(tmp_path: Path, make_batch: MakeBatch) -> None:
    """Compaction leaves batches whose records skip offsets; reads go by batch last offset."""
    seg = open_segment(tmp_path)
    first = make_batch(0, [1, 2, 3], offset_deltas=[0, 4, 9])
    append(seg, first)
    append(seg, make_batch(10, [4]))
    got = seg.read(5, 1000)
    assert got is not None and got.first_offset == 0 and got.position == 0
    got = seg.read(10, 1000)
    assert got is not None and got.first_offset == 10 and got.position == len(first)
    assert seg.find_offset_by_timestamp(2, 3) == (2, 4)
    assert seg.read_next_offset() == 11
    seg.close()


def test_reopen_indexes_like_uninterrupted(tmp_path: Path, make_batch: MakeBatch) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    batches = [make_batch(i, [1000 + i], [b"p" * 40]) for i in range(40)]
    seg_a = open_segment(a, index_interval_bytes=250)
    for batch in batches:
        append(seg_a, batch)
    seg_a.close()
    seg_b = open_segment(b, index_interval_bytes=250)
    for batch in batches[:17]:
        append(seg_b, batch)
    seg_b.close()
    seg_b = open_segment(b, index_interval_bytes=250)
    seg_b.sanity_check()
    assert seg_b.max_timestamp_so_far == 1016
    for batch in batches[17:]:
        assert not seg_b.should_roll(
            messages_size=len(batch),
            max_timestamp_in_messages=0,
            max_offset_in_messages=40,
            now_ms=0,
            segment_bytes=10**9,
            segment_ms=10**9,
        )
        append(seg_b, batch)
    seg_b.close()
    log_a, index_a, time_a = segment_paths(a, 0)
    log_b, index_b, time_b = segment_paths(b, 0)
    assert log_a.read_bytes() == log_b.read_bytes()
    assert index_a.read_bytes() == index_b.read_bytes()
    # The close in between added its final entry (1016 -> 16) to b's time index; otherwise equal.
    entries_a = set(TIME_ENTRY.iter_unpack(time_a.read_bytes()))
    entries_b = set(TIME_ENTRY.iter_unpack(time_b.read_bytes()))
    assert entries_b - entries_a == {(1016, 16)}
    assert entries_a <= entries_b


def test_rename_to_deleted_keeps_slices_readable(tmp_path: Path, make_batch: MakeBatch) -> None:
    seg = open_segment(tmp_path, 5)
    batch = make_batch(5, [1])
    append(seg, batch)
    fetched = seg.read(5, 1000)
    assert fetched is not None
    seg.rename_to_deleted()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000005.index.deleted",
        "00000000000000000005.log.deleted",
        "00000000000000000005.timeindex.deleted",
    ]
    assert seg.has_suffix(".deleted")
    assert fetched.read_bytes() == batch
    seg.delete()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError):
        fetched.file.fileno()


def test_flush_and_close_idempotent(tmp_path: Path, make_batch: MakeBatch) -> None:
    seg = open_segment(tmp_path)
    append(seg, make_batch(0, [1]))
    seg.flush()
    seg.close()
    seg.close()
    reopened = open_segment(tmp_path)
    assert reopened.size == len(make_batch(0, [1]))
    assert reopened.read_next_offset() == 1
    reopened.close()


def test_append_refuses_unindexable_batches(tmp_path: Path, make_batch: MakeBatch) -> None:
    # 16 bytes: two offset-index slots, one time-index slot (the reserved one): full at once.
    seg = open_segment(tmp_path, max_index_size=16)
    append(seg, make_batch(0, [1]))  # the first batch is never indexed
    size = seg.size
    with pytest.raises(InvalidIndexAppendError):
        append(seg, make_batch(1, [2]))
    assert seg.size == size and Path(seg.log_path).stat().st_size == size
    seg.close()
    other = open_segment(tmp_path / "..", 7)
    append(other, make_batch(7, [1]))
    append(other, make_batch(8, [2]))  # indexed: last offset 8
    size = other.size
    with pytest.raises(InvalidIndexAppendError):
        append(other, make_batch(8, [3]))  # a caller bug: offsets not increasing
    assert other.size == size
    other.close()


def test_resize_indexes_sets_new_max(tmp_path: Path, make_batch: MakeBatch) -> None:
    seg = open_segment(tmp_path, max_index_size=800)
    append(seg, make_batch(0, [1]))
    append(seg, make_batch(1, [2]))
    seg.on_becoming_inactive()
    assert seg.offset_index.length == 8
    seg.resize_indexes(1600)
    assert seg.offset_index.length == 1600 and seg.time_index.length == 1596
    assert seg.max_index_size == 1600
    append(seg, make_batch(2, [3]))
    assert seg.offset_index.entries == 2
    seg.close()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_segment_descriptors_are_bounded_and_released(tmp_path: Path) -> None:
    def held() -> int:
        """Descriptors on this test's files only: a full run's other threads open and close
        their own at any time."""
        count = 0
        for fd in Path("/proc/self/fd").iterdir():
            try:
                count += str(fd.readlink()).startswith(str(tmp_path))
            except OSError:  # closed meanwhile
                continue
        return count

    before = held()
    segments = [open_segment(tmp_path, 10 * i) for i in range(20)]
    # The .log, plus one per index map where CPython's mmap keeps a dup (before 3.13).
    per_segment = 1 if sys.version_info >= (3, 13) else 3
    assert held() - before == 20 * per_segment
    for seg in segments:
        seg.close()
    assert held() == before


@settings(max_examples=40, deadline=None)
@given(
    shapes=st.lists(
        st.tuples(
            st.integers(1, 5),  # records in the batch
            st.integers(0, 4),  # offset gap before the batch
            st.integers(0, 80),  # value size
            st.integers(-50, 50),  # timestamp step (may go backwards)
        ),
        min_size=1,
        max_size=40,
    ),
    interval=st.sampled_from([0, 1, 100, 300, 5000]),
    data=st.data(),
)
def test_reads_match_reference_model(
    tmp_path_factory: pytest.TempPathFactory,
    make_batch: MakeBatch,
    shapes: list[tuple[int, int, int, int]],
    interval: int,
    data: st.DataObject,
) -> None:
    """Random batches vs. a list model: read, translate_offset, find_offset_by_timestamp,
    truncate_to and recover all agree with the obvious answers."""
    directory = tmp_path_factory.mktemp("model")
    seg = open_segment(directory, 1000, index_interval_bytes=interval)
    model: list[tuple[int, int, int, bytes]] = []  # (base, last, position, bytes)
    records: list[tuple[int, int]] = []  # (offset, timestamp)
    offset, ts, position = 1000, 10_000, 0
    for count, gap, value_size, step in shapes:
        offset += gap
        stamps = [ts + step * i for i in range(count)]
        ts += step * count + 1
        batch = make_batch(offset, stamps, [b"v" * value_size] * count)
        append(seg, batch)
        model.append((offset, offset + count - 1, position, batch))
        records += [(offset + i, t) for i, t in enumerate(stamps)]
        position += len(batch)
        offset += count
    end = offset
    for target in data.draw(st.lists(st.integers(990, end + 3), max_size=25)):
        holder = next((m for m in model if m[1] >= target), None)
        got = seg.read(target, 1)
        if holder is None:
            assert got is None and seg.translate_offset(target) is None
        else:
            assert got is not None and (got.first_offset, got.position) == (holder[0], holder[2])
            whole = seg.read(target, 10**6)
            assert whole is not None
            assert whole.read_bytes() == b"".join(m[3] for m in model if m[1] >= target)
    for target_ts in data.draw(st.lists(st.integers(9_000, ts + 10), max_size=10)):
        start = data.draw(st.integers(990, end + 1))
        expected = next(((t, o) for o, t in records if t >= target_ts and o >= start), None)
        found = seg.find_offset_by_timestamp(target_ts, start)
        assert (tuple(found) if found else None) == expected
    cut = data.draw(st.integers(990, end + 1))
    kept = [m for m in model if m[1] < cut]
    seg.truncate_to(cut)
    assert Path(seg.log_path).read_bytes() == b"".join(m[3] for m in kept)
    assert seg.read_next_offset() == (kept[-1][1] + 1 if kept else 1000)
    seg.on_becoming_inactive()
    files = [p.read_bytes() for p in segment_paths(directory, 1000)]
    assert seg.recover() == 0
    seg.close()
    # Recovery rebuilds what truncation left: the same log and offset index (an offset entry
    # names its own batch, so truncation keeps exactly the entries of the kept batches). Time
    # entries made while indexing a removed batch may survive truncation when they point at an
    # earlier offset, so the time index is only checked for validity.
    rebuilt = [p.read_bytes() for p in segment_paths(directory, 1000)]
    assert rebuilt[:2] == files[:2]
    starts = {m[2]: m[1] for m in kept}
    for relative, pos in OFFSET_ENTRY.iter_unpack(rebuilt[1]):
        assert starts[pos] == 1000 + relative
    stamps_by_offset = dict(records)
    for timestamp, relative in TIME_ENTRY.iter_unpack(rebuilt[2]):
        assert 1000 + relative < cut
        assert max(t for o, t in records if o <= 1000 + relative) == timestamp
        assert stamps_by_offset.get(1000 + relative, timestamp) <= timestamp
