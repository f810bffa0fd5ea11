"""LogSegment recovery: crash the segment at every byte of its last batch, append garbage, lose or
corrupt the indexes, tear writes through the VFS seam; recovery must leave exactly the valid
batches and indexes byte-identical to a clean append."""

from __future__ import annotations

import random
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from sluice.protocol.records import CRC_OFFSET, parse_header
from sluice.server.storage.index import CorruptIndexError
from sluice.server.storage.segment import LogSegment, segment_paths
from sluice.server.storage.vfs import OSVFS, Buffer, OSFile

MakeBatch = Callable[..., bytes]  # the conftest fixture

BASE = 100
INTERVAL = 120
MAX_INDEX = 4096


def open_segment(directory: Path, **kw: object) -> LogSegment:
    return LogSegment.open(
        directory,
        BASE,
        index_interval_bytes=INTERVAL,
        max_index_size=MAX_INDEX,
        now_ms=0,
        **kw,  # type: ignore[arg-type]
    )


def append(seg: LogSegment, batch: bytes) -> None:
    header = parse_header(batch)
    seg.append(header.last_offset, header.max_timestamp, header.last_offset, batch)


def make_batches(make_batch: MakeBatch, count: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    batches, offset = [], BASE
    for _ in range(count):
        n = rng.randint(1, 4)
        timestamps = [rng.randint(1000, 1000 + 50 * count) for _ in range(n)]
        values = [rng.randbytes(rng.randint(0, 60)) for _ in range(n)]
        batches.append(make_batch(offset, timestamps, values))
        offset += n + rng.randint(0, 3)  # offset gaps between batches (compaction, aborts)
    return batches


def clean_files(directory: Path, batches: list[bytes]) -> tuple[bytes, bytes, bytes]:
    """The three files of a segment built by appends and rolled (what recovery must rebuild)."""
    directory.mkdir()
    seg = open_segment(directory)
    for batch in batches:
        append(seg, batch)
    seg.on_becoming_inactive()
    seg.close()
    log, index, time_index = segment_paths(directory, BASE)
    return log.read_bytes(), index.read_bytes(), time_index.read_bytes()


def files_of(directory: Path) -> tuple[bytes, bytes, bytes]:
    log, index, time_index = segment_paths(directory, BASE)
    return log.read_bytes(), index.read_bytes(), time_index.read_bytes()


def test_clean_segment_recovers_to_itself(tmp_path: Path, make_batch: MakeBatch) -> None:
    batches = make_batches(make_batch, 25)
    expected = clean_files(tmp_path / "ref", batches)
    assert len(expected[1]) > 0 and len(expected[2]) > 0  # the indexes are not trivially empty
    seg = open_segment(tmp_path / "ref")
    seg.sanity_check()
    assert seg.recover() == 0
    seg.close()
    assert files_of(tmp_path / "ref") == expected


def test_tail_cut_at_every_byte_of_last_batch(tmp_path: Path, make_batch: MakeBatch) -> None:
    batches = make_batches(make_batch, 12, seed=5)
    *kept, last = batches
    expected = clean_files(tmp_path / "ref", kept)
    full = b"".join(batches)
    # The crashed segment's indexes: untrimmed, describing all batches (a torn tail may leave
    # index entries that point into or past the cut).
    crashed_dir = tmp_path / "crashed"
    crashed_dir.mkdir()
    seg = open_segment(crashed_dir)
    for batch in batches:
        append(seg, batch)
    seg.close_handlers()
    _, index_path, time_path = segment_paths(crashed_dir, BASE)
    assert index_path.stat().st_size == MAX_INDEX  # untrimmed, as after a crash
    prefix = len(full) - len(last)
    for cut in range(len(last)):
        directory = tmp_path / f"cut{cut}"
        directory.mkdir()
        log, index, time_index = segment_paths(directory, BASE)
        log.write_bytes(full[: prefix + cut])
        shutil.copyfile(index_path, index)
        shutil.copyfile(time_path, time_index)
        seg = open_segment(directory)
        assert seg.recover() == cut
        assert seg.size == prefix
        assert seg.read_next_offset() == parse_header(kept[-1]).next_offset
        seg.close()
        assert files_of(directory) == expected, f"cut at byte {cut} of the last batch"
        shutil.rmtree(directory)


def test_every_prefix_of_the_log_recovers(tmp_path: Path, make_batch: MakeBatch) -> None:
    """Coarser but wider: a cut anywhere leaves exactly the whole batches before it."""
    batches = make_batches(make_batch, 8, seed=9)
    full = b"".join(batches)
    ends = [0]
    for batch in batches:
        ends.append(ends[-1] + len(batch))
    references: dict[int, tuple[bytes, bytes, bytes]] = {}
    for cut in range(0, len(full) + 1, 7):
        whole = max(i for i, end in enumerate(ends) if end <= cut)
        if whole not in references:
            references[whole] = clean_files(tmp_path / f"ref{whole}", batches[:whole])
        directory = tmp_path / f"c{cut}"
        directory.mkdir()
        segment_paths(directory, BASE)[0].write_bytes(full[:cut])
        seg = open_segment(directory)
        assert seg.recover() == cut - ends[whole]
        seg.close()
        assert files_of(directory) == references[whole]
        shutil.rmtree(directory)


def garbage_tails(batches: list[bytes], rng: random.Random) -> list[bytes]:
    first = batches[0]
    bad_crc = bytearray(batches[1])
    bad_crc[-1] ^= 0x01  # a flipped bit in the records
    bad_stored_crc = bytearray(batches[2])
    struct.pack_into(">I", bad_stored_crc, CRC_OFFSET, 0xDEADBEEF)
    bad_magic = bytearray(batches[3])
    bad_magic[16] = 1
    huge_length = bytearray(batches[4])
    struct.pack_into(">i", huge_length, 8, 2**31 - 1)
    short_length = bytearray(batches[4])
    struct.pack_into(">i", short_length, 8, 10)
    overflow = bytearray(batches[5])
    struct.pack_into(">q", overflow, 0, BASE + 2**31)  # base offset not covered by the CRC
    return [
        rng.randbytes(1),
        rng.randbytes(60),
        rng.randbytes(5000),
        bytes(300),  # zeros: a preallocated or lost-page tail
        first,  # valid CRC, but its offsets go backwards
        bytes(bad_crc),
        bytes(bad_stored_crc),
        bytes(bad_magic),
        bytes(huge_length),
        bytes(short_length),
        bytes(overflow),
        bytes(bad_crc) + batches[6],  # a valid batch after the bad one is dropped too
    ]


def test_garbage_after_valid_batches_is_truncated(tmp_path: Path, make_batch: MakeBatch) -> None:
    batches = make_batches(make_batch, 15, seed=3)
    expected = clean_files(tmp_path / "ref", batches)
    valid = b"".join(batches)
    for n, garbage in enumerate(garbage_tails(batches, random.Random(11))):
        directory = tmp_path / f"g{n}"
        directory.mkdir()
        segment_paths(directory, BASE)[0].write_bytes(valid + garbage)
        seg = open_segment(directory)
        assert seg.recover() == len(garbage), n
        seg.close()
        assert files_of(directory) == expected, n


def test_garbage_in_the_middle_truncates_from_there(tmp_path: Path, make_batch: MakeBatch) -> None:
    batches = make_batches(make_batch, 10, seed=4)
    corrupted = bytearray(b"".join(batches))
    at = sum(len(b) for b in batches[:6]) + 70  # inside batch 6
    corrupted[at] ^= 0xFF
    expected = clean_files(tmp_path / "ref", batches[:6])
    directory = tmp_path / "mid"
    directory.mkdir()
    segment_paths(directory, BASE)[0].write_bytes(bytes(corrupted))
    seg = open_segment(directory)
    assert seg.recover() == sum(len(b) for b in batches[6:])
    seg.close()
    assert files_of(directory) == expected


def test_big_batch_is_checksummed_in_chunks(tmp_path: Path, make_batch: MakeBatch) -> None:
    big = make_batch(BASE, [5, 6], [random.Random(2).randbytes(3 * 2**20), b"x"])
    small = make_batch(BASE + 2, [7])
    directory = tmp_path / "big"
    directory.mkdir()
    segment_paths(directory, BASE)[0].write_bytes(big + small + b"\x01\x02")
    seg = open_segment(directory)
    # max_message_size below the batch size: still valid (the limit may have been lowered).
    assert seg.recover(max_message_size=1000) == 2
    assert seg.read_next_offset() == BASE + 3
    seg.close()
    broken = bytearray(big)
    broken[2 * 2**20 + 5] ^= 0x10
    segment_paths(directory, BASE)[0].write_bytes(bytes(broken) + small)
    seg = open_segment(directory)
    assert seg.recover(max_message_size=1000) == len(big) + len(small)
    seg.close()


@pytest.mark.parametrize("damage", ["delete", "wrong_length", "garbage", "past_end"])
@pytest.mark.parametrize("which", ["index", "timeindex"])
def test_damaged_index_is_detected_and_rebuilt(
    tmp_path: Path, make_batch: MakeBatch, damage: str, which: str
) -> None:
    batches = make_batches(make_batch, 20, seed=6)
    expected = clean_files(tmp_path / "ref", batches)
    directory = tmp_path / "d"
    shutil.copytree(tmp_path / "ref", directory)
    _, index_path, time_path = segment_paths(directory, BASE)
    path = index_path if which == "index" else time_path
    rng = random.Random(damage)
    if damage == "delete":
        path.unlink()
    elif damage == "wrong_length":
        path.write_bytes(path.read_bytes() + b"\x07\x07\x07")
    elif damage == "garbage":
        # Non-zero garbage whose last entry sorts below the base offset / first timestamp.
        entry = 8 if which == "index" else 12
        data = bytearray(rng.randbytes(entry * 9))
        data[-entry:] = b"\x80" + bytes(entry - 5) + b"\xff" * 4
        path.write_bytes(bytes(data))
    elif damage == "past_end":
        # Entries from a longer log (the log lost its tail but the index did not).
        if which == "index":
            path.write_bytes(path.read_bytes() + struct.pack(">ii", 10_000, 10**6))
        else:
            path.write_bytes(path.read_bytes() + struct.pack(">qi", 10**15, -5))
    seg = open_segment(directory)
    with pytest.raises(CorruptIndexError):
        seg.sanity_check()
    assert seg.recover() == 0
    seg.sanity_check()
    seg.close()
    assert files_of(directory) == expected


def test_zeroed_indexes_count_as_empty(tmp_path: Path, make_batch: MakeBatch) -> None:
    """Zeros (lost pages) are never taken for entries: the indexes read as empty, which is safe
    (lookups scan from the start), and recovery rebuilds them."""
    batches = make_batches(make_batch, 20, seed=7)
    expected = clean_files(tmp_path / "ref", batches)
    directory = tmp_path / "z"
    shutil.copytree(tmp_path / "ref", directory)
    for path in segment_paths(directory, BASE)[1:]:
        path.write_bytes(bytes(path.stat().st_size))
    seg = open_segment(directory)
    seg.sanity_check()
    assert seg.offset_index.entries == 0 and seg.time_index.entries == 0
    for batch in batches:
        header = parse_header(batch)
        got = seg.read(header.last_offset, 1)
        assert got is not None and got.first_offset == header.base_offset
    assert seg.recover() == 0
    seg.close()
    assert files_of(directory) == expected


def test_preallocated_untrimmed_indexes_reopen_after_crash(
    tmp_path: Path, make_batch: MakeBatch
) -> None:
    """The broker dies without closing: data flushed, indexes at their preallocated size."""
    batches = make_batches(make_batch, 30, seed=8)
    expected = clean_files(tmp_path / "ref", batches)
    directory = tmp_path / "crash"
    directory.mkdir()
    seg = open_segment(directory)
    for batch in batches[:20]:
        append(seg, batch)
    entries = (seg.offset_index.entries, seg.time_index.entries)
    seg.flush()
    seg.close_handlers()
    assert segment_paths(directory, BASE)[1].stat().st_size == MAX_INDEX
    seg = open_segment(directory)
    seg.sanity_check()  # usable as it is: the unwritten tail is not counted
    assert (seg.offset_index.entries, seg.time_index.entries) == entries
    for batch in batches[:20]:
        header = parse_header(batch)
        got = seg.read(header.base_offset, 1)
        assert got is not None and got.first_offset == header.base_offset
    for batch in batches[20:]:
        append(seg, batch)
    seg.on_becoming_inactive()
    seg.close()
    log, index, time_index = files_of(directory)
    assert (log, index) == expected[:2]
    # The time index is a superset: max timestamp so far was restored from its last entry.
    assert time_index == expected[2]


class TornWriteVFS(OSVFS):
    """Real files, but the N-th pwrite to a ``.log`` writes only ``keep`` bytes and raises, and
    (with ``fail_truncate``) the clean-up truncate fails too, as in a crash mid-write."""

    def __init__(self) -> None:
        self.fail_at: int | None = None
        self.keep = 0
        self.fail_truncate = False
        self.fail_fsync = False
        self.writes = 0

    def open(
        self, path: Path, *, create: bool = True, writable: bool = True, truncate: bool = False
    ) -> OSFile:
        real = super().open(path, create=create, writable=writable, truncate=truncate)
        if path.name.endswith(".log"):
            return _TornFile(self, path, real)
        return real


class _TornFile(OSFile):
    __slots__ = ("_vfs",)

    def __init__(self, vfs: TornWriteVFS, path: Path, real: OSFile) -> None:
        super().__init__(path, real.fileno())
        self._vfs = vfs

    def pwrite(self, data: Buffer, offset: int) -> None:
        vfs = self._vfs
        vfs.writes += 1
        if vfs.fail_at is not None and vfs.writes == vfs.fail_at:
            super().pwrite(memoryview(data)[: vfs.keep], offset)
            raise OSError(28, "No space left on device (injected)")
        super().pwrite(data, offset)

    def truncate(self, size: int) -> None:
        if self._vfs.fail_truncate:
            raise OSError(5, "I/O error (injected)")
        super().truncate(size)

    def fsync(self) -> None:
        if self._vfs.fail_fsync:
            raise OSError(5, "I/O error (injected)")
        super().fsync()


@pytest.mark.parametrize("keep", [0, 1, 11, 12, 60, 61, 62])
def test_failed_append_leaves_segment_unchanged(
    tmp_path: Path, make_batch: MakeBatch, keep: int
) -> None:
    vfs = TornWriteVFS()
    batches = make_batches(make_batch, 10, seed=12)
    expected = clean_files(tmp_path / "ref", batches)
    directory = tmp_path / "torn"
    directory.mkdir()
    seg = open_segment(directory, vfs=vfs)
    for batch in batches[:5]:
        append(seg, batch)
    size, entries = seg.size, seg.offset_index.entries
    vfs.fail_at, vfs.keep = vfs.writes + 1, keep
    with pytest.raises(OSError):
        append(seg, batches[5])
    assert (seg.size, seg.offset_index.entries) == (size, entries)
    assert segment_paths(directory, BASE)[0].stat().st_size == size  # torn bytes cut back
    assert seg.read(parse_header(batches[5]).base_offset, 1000) is None
    for batch in batches[5:]:  # the retry and the rest go through
        append(seg, batch)
    seg.on_becoming_inactive()
    seg.close()
    assert files_of(directory) == expected


@pytest.mark.parametrize("keep", [1, 30, 61, 100])
def test_crash_mid_append_recovers_earlier_batches(
    tmp_path: Path, make_batch: MakeBatch, keep: int
) -> None:
    vfs = TornWriteVFS()
    batches = make_batches(make_batch, 10, seed=13)
    expected = clean_files(tmp_path / "ref", batches[:7])
    directory = tmp_path / "crash"
    directory.mkdir()
    seg = open_segment(directory, vfs=vfs)
    for batch in batches[:7]:
        append(seg, batch)
    vfs.fail_at, vfs.keep, vfs.fail_truncate = vfs.writes + 1, keep, True
    with pytest.raises(OSError):
        append(seg, batches[7])
    seg.close_handlers()  # the process dies here
    torn = min(keep, len(batches[7]))
    log_path = segment_paths(directory, BASE)[0]
    assert log_path.stat().st_size == sum(map(len, batches[:7])) + torn
    seg = open_segment(directory)  # restart, real VFS
    assert seg.recover() == torn
    seg.close()
    assert files_of(directory) == expected


def test_fsync_error_propagates(tmp_path: Path, make_batch: MakeBatch) -> None:
    vfs = TornWriteVFS()
    seg = open_segment(tmp_path, vfs=vfs)
    append(seg, make_batch(BASE, [1]))
    vfs.fail_fsync = True
    with pytest.raises(OSError, match="injected"):
        seg.flush()
    vfs.fail_fsync = False
    seg.flush()
    seg.close()


def test_os_vfs_operations(tmp_path: Path) -> None:
    vfs = OSVFS()
    path = tmp_path / "f.log"
    assert not vfs.exists(path)
    f = vfs.open(path)
    f.pwrite(b"hello world", 0)
    f.pwrite(b"W", 6)
    assert f.pread(100, 0) == b"hello World" and f.size() == 11
    f.truncate(5)
    f.fsync()
    assert f.pread(100, 0) == b"hello"
    vfs.rename(path, tmp_path / "g.log")
    vfs.fsync_dir(tmp_path)
    assert vfs.listdir(tmp_path) == ["g.log"]
    assert f.pread(5, 0) == b"hello"  # the descriptor survives the rename
    vfs.set_mtime_ms(tmp_path / "g.log", 1_234_000)
    assert vfs.mtime_ms(tmp_path / "g.log") == 1_234_000
    f.close()
    f.close()
    assert f.closed
    with pytest.raises(ValueError):
        f.fileno()
    vfs.remove(tmp_path / "g.log")
    vfs.remove(tmp_path / "g.log")  # missing is fine
    with pytest.raises(FileNotFoundError):
        vfs.open(tmp_path / "g.log", create=False)
