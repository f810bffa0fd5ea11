"""OffsetIndex / TimeIndex (Kafka's OffsetIndexTest, TimeIndexTest): format, floor lookups against a
reference model, invariants, truncation, trimming, reopening and corruption detection."""

from __future__ import annotations

import bisect
import io
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.server.storage.index import (
    OFFSET_ENTRY,
    TIME_ENTRY,
    CorruptIndexError,
    IndexOffsetOverflowError,
    InvalidIndexAppendError,
    OffsetIndex,
    OffsetPosition,
    TimeIndex,
    TimestampOffset,
    _data_end,
)
from sluice.server.storage.vfs import OSVFS

BASE = 45


def floor(keys: list[int], target: int) -> int:
    """Reference: index of the largest key <= target, -1 if none."""
    return bisect.bisect_right(keys, target) - 1


def random_offsets(rng: random.Random, count: int, base: int) -> list[int]:
    offsets, current = [], base
    for _ in range(count):
        current += rng.randint(1, 7)
        offsets.append(current)
    return offsets


def test_format_is_big_endian_relative(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "a.index", BASE, 80)
    index.append(BASE + 3, 100)
    index.append(BASE + 2**31 - 1, 2**31 - 1)
    index.close()
    assert (tmp_path / "a.index").read_bytes() == (
        b"\x00\x00\x00\x03\x00\x00\x00\x64" + b"\x7f\xff\xff\xff\x7f\xff\xff\xff"
    )
    times = TimeIndex(tmp_path / "a.timeindex", BASE, 120)
    times.maybe_append(1_600_000_000_000, BASE + 3)
    times.close()
    assert (tmp_path / "a.timeindex").read_bytes() == TIME_ENTRY.pack(1_600_000_000_000, 3)
    assert (tmp_path / "a.timeindex").read_bytes() == bytes.fromhex("00000174876e8000 00000003")


def test_preallocated_to_rounded_max_size(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 0, 1001)
    assert index.length == 1000 and index.max_entries == 125 and index.entries == 0
    times = TimeIndex(tmp_path / "x.timeindex", 0, 1001)
    assert times.length == 996 and times.max_entries == 83
    with pytest.raises(ValueError):
        OffsetIndex(tmp_path / "y.index", 0, 7)
    index.close()
    times.close()


@pytest.mark.parametrize("count", [0, 1, 2, 100, 1023, 1024, 1025, 3000])
def test_random_lookup_against_reference(tmp_path: Path, count: int) -> None:
    """Kafka's randomLookupTest: sizes around the warm-section boundary (1024 offset entries,
    682 time entries), every target in range, compared with a bisect model."""
    rng = random.Random(count)
    offsets = random_offsets(rng, count, BASE)
    positions = sorted(rng.sample(range(1, 10 * count + 2), count))
    index = OffsetIndex(tmp_path / "r.index", BASE, 8 * (count + 1))
    for offset, position in zip(offsets, positions, strict=True):
        index.append(offset, position)
    times = TimeIndex(tmp_path / "r.timeindex", BASE, 12 * (count + 2))
    timestamps = random_offsets(rng, count, 1_000)
    for ts, offset in zip(timestamps, offsets, strict=True):
        times.maybe_append(ts, offset)
    targets = list(range(BASE - 2, (offsets[-1] if offsets else BASE) + 3))
    if count > 200:
        targets = rng.sample(targets, 400) + offsets[-5:] + offsets[:5]
    for target in targets:
        slot = floor(offsets, target)
        expected = OffsetPosition(offsets[slot], positions[slot]) if slot >= 0 else None
        assert index.lookup(target) == (expected or OffsetPosition(BASE, 0))
        following = (
            OffsetPosition(offsets[slot + 1], positions[slot + 1]) if slot + 1 < count else None
        )
        assert index.lookup_with_next(target) == (expected or OffsetPosition(BASE, 0), following)
    ts_range = range(990, (timestamps[-1] if timestamps else 1000) + 3)
    ts_targets = rng.sample(ts_range, min(300, len(ts_range)))
    for target in ts_targets + timestamps[-3:]:
        slot = floor(timestamps, target)
        expected_t = TimestampOffset(timestamps[slot], offsets[slot]) if slot >= 0 else None
        assert times.lookup(target) == (expected_t or TimestampOffset(-1, BASE))
    index.close()
    times.close()


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.integers(1, 2**20), max_size=1200),
    targets=st.lists(st.integers(-5, 2**31), max_size=30),
)
def test_lookup_property(
    tmp_path_factory: pytest.TempPathFactory, gaps: list[int], targets: list[int]
) -> None:
    directory = tmp_path_factory.mktemp("prop")
    offsets, current = [], 0
    for gap in gaps:
        current += gap
        if current > 2**31 - 1:
            break
        offsets.append(current)
    index = OffsetIndex(directory / "p.index", 0, 8 * max(1, len(offsets)))
    for i, offset in enumerate(offsets):
        index.append(offset, i + 1)
    assert index.entries == len(offsets)
    for target in targets + offsets[-2:] + [o - 1 for o in offsets[:2]]:
        slot = floor(offsets, target)
        expected = OffsetPosition(offsets[slot], slot + 1) if slot >= 0 else OffsetPosition(0, 0)
        assert index.lookup(target) == expected
        following = OffsetPosition(offsets[slot + 1], slot + 2) if slot + 1 < len(offsets) else None
        assert index.lookup_with_next(target) == (expected, following)
    index.close()


def test_append_rejects_bad_entries(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "b.index", BASE, 16)
    index.append(BASE + 5, 10)
    with pytest.raises(InvalidIndexAppendError):
        index.append(BASE + 5, 20)  # not strictly increasing
    with pytest.raises(InvalidIndexAppendError):
        index.append(BASE + 4, 20)
    with pytest.raises(IndexOffsetOverflowError):
        index.append(BASE + 2**31, 20)
    with pytest.raises(IndexOffsetOverflowError):
        index.relative_offset(BASE - 1)
    index.append(BASE + 6, 20)
    assert index.is_full()
    with pytest.raises(InvalidIndexAppendError):
        index.append(BASE + 7, 30)
    assert index.entries == 2 and index.last_offset == BASE + 6
    index.close()


def test_time_index_append_rules(tmp_path: Path) -> None:
    times = TimeIndex(tmp_path / "t.timeindex", BASE, 12 * 4)
    assert times.last_entry == TimestampOffset(-1, BASE)
    times.maybe_append(100, BASE + 1)
    times.maybe_append(100, BASE + 2)  # same timestamp: ignored
    assert times.entries == 1
    with pytest.raises(InvalidIndexAppendError):
        times.maybe_append(99, BASE + 3)  # timestamp going backwards
    with pytest.raises(InvalidIndexAppendError):
        times.maybe_append(200, BASE)  # offset going backwards
    times.maybe_append(200, BASE + 1)  # equal offset, bigger timestamp: allowed (Kafka)
    times.maybe_append(300, BASE + 5)
    # Four slots; the last is reserved for the roll entry.
    assert times.is_full()
    with pytest.raises(InvalidIndexAppendError):
        times.maybe_append(400, BASE + 6)
    times.maybe_append(400, BASE + 6, skip_full_check=True)
    assert times.entries == 4 and times.last_entry == TimestampOffset(400, BASE + 6)
    with pytest.raises(InvalidIndexAppendError):
        times.maybe_append(500, BASE + 7, skip_full_check=True)
    times.close()


@pytest.mark.parametrize("cls", [OffsetIndex, TimeIndex])
def test_truncate_to_three_cases(tmp_path: Path, cls: type[OffsetIndex] | type[TimeIndex]) -> None:
    offsets = [BASE + 10 * i for i in range(1, 11)]  # 55, 65, ..., 145

    def fresh(name: str) -> OffsetIndex | TimeIndex:
        index = cls(tmp_path / name, BASE, 4096)
        for i, offset in enumerate(offsets):
            if isinstance(index, OffsetIndex):
                index.append(offset, 100 * (i + 1))
            else:
                index.maybe_append(1000 + i, offset)
        return index

    def remaining(index: OffsetIndex | TimeIndex) -> list[int]:
        return [index.entry_at(i).offset for i in range(index.entries)]

    cases = {
        BASE: [],  # below the first entry: everything goes
        55: [],  # exactly the first entry
        60: [55],  # between entries: keep the floor entry
        95: [55, 65, 75, 85],  # exact entry: it goes too
        145: offsets[:-1],
        146: offsets,  # above the last: nothing changes
        10_000: offsets,
    }
    for n, (target, expected) in enumerate(cases.items()):
        index = fresh(f"{n}")
        index.truncate_to(target)
        assert remaining(index) == expected
        assert index.last_offset == (expected[-1] if expected else BASE)
        index.close()
        # Trimmed on close to exactly the remaining entries.
        assert (tmp_path / f"{n}").stat().st_size == len(expected) * index.entry_size


def test_trim_resize_and_reextend(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "r.index", 0, 80)
    for i in range(1, 4):
        index.append(i, i * 10)
    index.trim_to_valid_size()
    assert index.length == 24 and index.is_full()
    assert (tmp_path / "r.index").stat().st_size == 24
    assert index.resize(80)
    assert not index.resize(80)
    assert index.max_entries == 10 and not index.is_full()
    index.append(4, 40)
    assert index.lookup(3) == OffsetPosition(3, 30) and index.lookup(99) == OffsetPosition(4, 40)
    index.reset()
    assert index.entries == 0 and index.length == 80
    index.close()
    assert (tmp_path / "r.index").stat().st_size == 0


def test_reopen_trimmed_counts_every_entry(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "o.index", BASE, 800)
    times = TimeIndex(tmp_path / "o.timeindex", BASE, 1200)
    for i in range(1, 21):
        index.append(BASE + i, i * 100)
        times.maybe_append(i * 7, BASE + i)
    index.close()
    times.close()
    index = OffsetIndex(tmp_path / "o.index", BASE, 800)
    times = TimeIndex(tmp_path / "o.timeindex", BASE, 1200)
    assert not index.newly_created
    assert index.entries == 20 and index.last_entry == OffsetPosition(BASE + 20, 2000)
    assert times.entries == 20 and times.last_entry == TimestampOffset(140, BASE + 20)
    index.sanity_check(full=True)
    times.sanity_check(full=True)
    index.close()
    times.close()


def test_reopen_preallocated_untrimmed_after_crash(tmp_path: Path) -> None:
    """A broker that dies leaves the active segment's indexes at their preallocated size, the
    entries followed by zeros. Reopening counts only the written entries."""
    index = OffsetIndex(tmp_path / "c.index", BASE, 8000)
    times = TimeIndex(tmp_path / "c.timeindex", BASE, 12000)
    for i in range(1, 38):
        index.append(BASE + 3 * i, i * 50)
        times.maybe_append(10 + i, BASE + 3 * i)
    index.flush()
    times.flush()
    index.close_handler()  # no trim: the "crash"
    times.close_handler()
    assert (tmp_path / "c.index").stat().st_size == 8000
    index = OffsetIndex(tmp_path / "c.index", BASE, 8000)
    times = TimeIndex(tmp_path / "c.timeindex", BASE, 12000)
    assert index.entries == 37 and index.max_entries == 1000
    assert index.last_offset == BASE + 111
    assert times.entries == 37 and times.last_entry == TimestampOffset(47, BASE + 111)
    index.sanity_check(full=True)
    times.sanity_check(full=True)
    assert index.lookup(BASE + 1000) == OffsetPosition(BASE + 111, 1850)
    index.append(BASE + 112, 1900)  # appends continue after the written prefix
    assert index.entries == 38
    # A truncation zeroes the dropped slots, so a crash after it still counts right.
    index.truncate_to(BASE + 30)
    index.close_handler()
    index = OffsetIndex(tmp_path / "c.index", BASE, 8000)
    assert index.entries == 9 and index.last_offset == BASE + 27
    index.close()
    times.close()


def test_reopen_after_crash_scans_only_the_written_extents(tmp_path: Path) -> None:
    """Reopening a 10 MiB preallocated index left by a crash scans the file only up to its
    last data extent (SEEK_DATA / SEEK_HOLE: the rest is a hole, all zeros), and counts the
    same entries as a scan of the whole file would, sparse or fully written."""
    size = 10 * 1024 * 1024
    sparse = OffsetIndex(tmp_path / "s.index", BASE, size)
    for i in range(1, 600):  # more than one page of entries
        sparse.append(BASE + i, i * 10)
    sparse.flush()
    sparse.close_handler()
    vfs = OSVFS()
    file = vfs.open(tmp_path / "s.index", create=False)
    try:
        end = _data_end(file, size)
    finally:
        file.close()
    assert 599 * OFFSET_ENTRY.size <= end < size  # bounded by the data, not the file
    # The same bytes without holes: zeros written out, so the whole file is data.
    dense = tmp_path / "d.index"
    dense.write_bytes((tmp_path / "s.index").read_bytes())
    file = vfs.open(dense, create=False)
    try:
        assert _data_end(file, size) == size
    finally:
        file.close()
    for path in (tmp_path / "s.index", dense):
        index = OffsetIndex(path, BASE, size)
        assert index.entries == 599 and index.last_offset == BASE + 599
        index.close()


def test_data_end_without_a_real_descriptor_is_the_whole_file(tmp_path: Path) -> None:
    class NoFd:
        def fileno(self) -> int:
            raise io.UnsupportedOperation("no descriptor")

    assert _data_end(NoFd(), 4096) == 4096  # type: ignore[arg-type]


def test_sanity_check_wrong_length(tmp_path: Path) -> None:
    path = tmp_path / "w.index"
    path.write_bytes(OFFSET_ENTRY.pack(1, 10) + b"\x00\x01\x02")
    index = OffsetIndex(path, 0, 800)
    with pytest.raises(CorruptIndexError, match="multiple"):
        index.sanity_check()
    index.close_handler()
    path = tmp_path / "w.timeindex"
    path.write_bytes(TIME_ENTRY.pack(5, 1) + b"\x00" * 5)
    times = TimeIndex(path, 0, 800)
    with pytest.raises(CorruptIndexError):
        times.sanity_check()
    times.close_handler()


def test_sanity_check_offsets_below_base(tmp_path: Path) -> None:
    path = tmp_path / "n.index"
    path.write_bytes(OFFSET_ENTRY.pack(3, 10) + OFFSET_ENTRY.pack(-2, 20))
    index = OffsetIndex(path, 100, 800)
    with pytest.raises(CorruptIndexError, match="below the base"):
        index.sanity_check()
    index.close_handler()
    path = tmp_path / "n.timeindex"
    path.write_bytes(TIME_ENTRY.pack(5, 1) + TIME_ENTRY.pack(6, -1))
    times = TimeIndex(path, 100, 800)
    with pytest.raises(CorruptIndexError, match="below the base"):
        times.sanity_check()
    times.close_handler()


def test_sanity_check_garbage(tmp_path: Path) -> None:
    rng = random.Random(3)
    path = tmp_path / "g.timeindex"
    # Timestamps decreasing from first to last: Kafka's O(1) check catches it.
    path.write_bytes(TIME_ENTRY.pack(500, 1) + TIME_ENTRY.pack(400, 2))
    times = TimeIndex(path, 0, 800)
    with pytest.raises(CorruptIndexError, match="timestamp"):
        times.sanity_check()
    times.close_handler()
    # Random garbage: the full check finds the disorder the O(1) check may miss.
    path = tmp_path / "g.index"
    entries = [OFFSET_ENTRY.pack(rng.randint(1, 1000), rng.randint(1, 10**6)) for _ in range(50)]
    entries.append(OFFSET_ENTRY.pack(2000, 2 * 10**6))
    path.write_bytes(b"".join(entries))
    index = OffsetIndex(path, 0, 800)
    index.sanity_check()
    with pytest.raises(CorruptIndexError):
        index.sanity_check(full=True)
    index.close_handler()


def test_read_only_open(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "ro.index", 0, 80)
    index.append(5, 50)
    index.close()
    ro = OffsetIndex(tmp_path / "ro.index", 0, 80, writable=False)
    assert ro.lookup(7) == OffsetPosition(5, 50)
    ro.close()
    assert (tmp_path / "ro.index").read_bytes() == OFFSET_ENTRY.pack(5, 50)
    with pytest.raises(FileNotFoundError):
        OffsetIndex(tmp_path / "missing.index", 0, 80, writable=False)


def test_rename_and_delete(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "d.index", 0, 80)
    index.append(1, 8)
    index.rename_to(tmp_path / "d.index.deleted")
    assert index.lookup(1) == OffsetPosition(1, 8)  # the map survives the rename
    index.delete()
    assert list(tmp_path.iterdir()) == []


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(1, 50)),
            st.tuples(st.just("truncate_to"), st.integers(0, 3000)),
            st.tuples(st.just("crash_reopen"), st.just(0)),
            st.tuples(st.just("close_reopen"), st.just(0)),
        ),
        max_size=60,
    )
)
def test_operations_against_list_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]]
) -> None:
    """Appends, truncations, crashes (no trim) and clean reopens keep the index equal to a list."""
    directory = tmp_path_factory.mktemp("ops")
    base = 1000
    max_size = 8 * 64

    def reopen() -> tuple[OffsetIndex, TimeIndex]:
        oi = OffsetIndex(directory / "o.index", base, max_size)
        ti = TimeIndex(directory / "o.timeindex", base, max_size)
        oi.resize(max_size)  # active again
        ti.resize(max_size)
        return oi, ti

    index, times = reopen()
    model: list[tuple[int, int, int]] = []  # (offset, position, timestamp)
    for op, arg in ops:
        if op == "append":
            offset = (model[-1][0] if model else base) + arg
            if index.is_full() or times.is_full():
                continue
            position = (model[-1][1] if model else 0) + arg
            timestamp = (model[-1][2] if model else 0) + arg
            index.append(offset, position)
            times.maybe_append(timestamp, offset)
            model.append((offset, position, timestamp))
        elif op == "truncate_to":
            index.truncate_to(base + arg)
            times.truncate_to(base + arg)
            model = [m for m in model if m[0] < base + arg]
        elif op == "crash_reopen":
            index.flush()
            times.flush()
            index.close_handler()
            times.close_handler()
            index, times = reopen()
        else:
            index.close()
            times.close()
            index, times = reopen()
        assert [index.entry_at(i) for i in range(index.entries)] == [
            OffsetPosition(o, p) for o, p, _ in model
        ]
        assert [times.entry_at(i) for i in range(times.entries)] == [
            TimestampOffset(t, o) for o, _, t in model
        ]
        index.sanity_check(full=True)
        times.sanity_check(full=True)
    index.close()
    times.close()


def test_lookup_probes_few_entries_of_an_evenly_spaced_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offsets grow about linearly with the slot (an entry per index.interval.bytes), so the
    interpolation search reads a handful of entries where bisection read ~14 (both below and
    inside the warm section); the answers stay the reference's."""
    import sluice.server.storage.index as index_module

    index = OffsetIndex(tmp_path / "even.index", BASE, 8 * 3000)
    offsets = [BASE + 999 + 1000 * i for i in range(3000)]
    for i, offset in enumerate(offsets):
        index.append(offset, 110_000 * (i + 1))
    reads = [0]
    real = OFFSET_ENTRY

    class Counting:
        size = real.size

        def unpack_from(self, buf: object, offset: int = 0) -> tuple[int, int]:
            reads[0] += 1
            return real.unpack_from(buf, offset)  # type: ignore[arg-type, return-value]

    monkeypatch.setattr(index_module, "OFFSET_ENTRY", Counting())
    targets = list(range(BASE, offsets[-1] + 2, 8000)) + offsets[-700::37]
    for target in targets:
        slot = floor(offsets, target)
        expected = OffsetPosition(offsets[slot], 110_000 * (slot + 1)) if slot >= 0 else None
        assert index.lookup(target) == (expected or OffsetPosition(BASE, 0))
    assert reads[0] <= 8 * len(targets)
    index.close()
