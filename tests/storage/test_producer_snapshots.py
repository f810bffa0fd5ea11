"""Producer snapshots as Kafka keeps them: one at every segment roll (named by the new
segment's base offset), each producer's timestamp that of its last batch, recovery from the
newest one at or below the log end, and deleted with their segments."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from crc32c import crc32c
from structlog.testing import capture_logs

from sluice.protocol import records as rec
from sluice.server.storage.log import Log
from sluice.server.storage.log_cleaner import Cleaner, log_to_clean
from sluice.server.storage.log_config import CleanerConfig, LogConfig
from sluice.server.storage.producer_state import (
    EMPTY_SNAPSHOT,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
    java_hash_map_order,
    snapshot_files,
    snapshot_path,
)

CONFIG = LogConfig(segment_bytes=300, file_delete_delay_ms=0)
ENTRY = struct.Struct(">qhiqiqiq")  # Kafka's ProducerSnapshot v1 entry


def batch(ts: int, pid: int = -1, seq: int = -1, count: int = 1, key: bytes = b"k") -> bytes:
    return rec.build_batch(
        [(ts, key, b"v" * 40)] * count, producer_id=pid, producer_epoch=0, base_sequence=seq
    )


def offsets(directory: Path) -> list[int]:
    return [offset for offset, _ in snapshot_files(directory)]


def state_below(log: Log, end: int) -> bytes:
    """The snapshot of the producer state replayed from the log's batches below ``end``."""
    headers = [h for s in log.segments for _, h in s.batches() if h.base_offset < end]
    return encode_snapshot(ProducerStateManager.rebuild(headers))


def test_every_roll_writes_the_state_at_the_new_base_with_last_batch_timestamps(
    tmp_path: Path,
) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    try:
        seqs = {7: 0, 8: 0}
        for i in range(12):
            pid = 7 if i % 3 else 8
            log.append_as_leader(batch(1_000 + i, pid, seqs[pid], count=2))
            seqs[pid] += 2
            log.append_as_leader(batch(5_000 + i))  # a plain batch: no producer state
        bases = [s.base_offset for s in log.segments]
        assert len(bases) > 3
        assert offsets(log.directory) == bases[1:]
        for base in bases[1:]:
            data = snapshot_path(log.directory, base).read_bytes()
            assert data == state_below(log, base)
        # The last snapshot's entries, field by field: timestamps are the last batches' max
        # timestamps (not the time of the roll).
        last = snapshot_path(log.directory, bases[-1]).read_bytes()
        below = [h for s in log.segments for _, h in s.batches() if h.base_offset < bases[-1]]
        entries = {e[0]: e for e in ENTRY.iter_unpack(last[10:])}
        for pid in (7, 8):
            h = [h for h in below if h.producer_id == pid][-1]
            assert entries[pid] == (
                pid, 0, h.base_sequence + 1, h.last_offset, 1, h.max_timestamp, -1, -1
            )  # fmt: skip
        assert struct.unpack(">hI", last[:6]) == (1, crc32c(last[6:]))
    finally:
        log.close()
    assert offsets(log.directory) == [*bases[1:], log.log_end_offset]


def test_last_timestamp_survives_a_restart(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    log.append_as_leader(batch(1_234_567, 5, 0))
    log.append_as_leader(batch(2_345_678, 6, 0))
    assert log.producer_state().producers[6].last_timestamp == 2_345_678
    log.close()
    for clean in (True, False):
        # A clock within producer.id.expiration.ms of the batches: not expired at the load.
        reopened = Log.open(
            tmp_path / "t-0", CONFIG, had_clean_shutdown=clean, clock=lambda: 3_000_000
        )
        try:
            producers = reopened.producer_state().producers
            assert {p: e.last_timestamp for p, e in producers.items()} == {
                5: 1_234_567,
                6: 2_345_678,
            }
        finally:
            reopened.close()


def test_a_log_without_producers_writes_empty_snapshots_also_after_a_restart(
    tmp_path: Path,
) -> None:
    assert struct.pack(">hIi", 1, crc32c(b"\0\0\0\0"), 0) == EMPTY_SNAPSHOT
    log = Log.open(tmp_path / "t-0", CONFIG)
    for i in range(6):
        log.append_as_leader(batch(i))
    first = [s.base_offset for s in log.segments][1:]
    assert first and offsets(log.directory) == first
    log.close()
    assert offsets(log.directory) == [*first, log.log_end_offset]
    log = Log.open(tmp_path / "t-0", CONFIG)
    try:
        for i in range(6):
            log.append_as_leader(batch(i))
        bases = [s.base_offset for s in log.segments]
        assert set(bases[1:]) <= set(offsets(log.directory))
        assert len(bases) > len(first) + 2
        for offset, path in snapshot_files(log.directory):
            assert path.read_bytes() == EMPTY_SNAPSHOT, offset
    finally:
        log.close()


def test_recovery_starts_from_the_newest_snapshot_at_or_below_the_log_end(
    tmp_path: Path,
) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    seq = 0
    for i in range(10):
        log.append_as_leader(batch(i, 3, seq))
        seq += 1
    bases = [s.base_offset for s in log.segments]
    log.close()
    directory = log.directory
    snapshot_path(directory, log.log_end_offset).unlink()  # as if the close never ran
    # Producer 99 is only in the second-newest snapshot, producer 98 only in the newest:
    # the load must take the newest and replay the log after it.
    for base, fake in ((bases[-2], 99), (bases[-1], 98)):
        state = decode_snapshot(snapshot_path(directory, base).read_bytes())
        state.producers[fake] = type(state.producers[3])(fake, 1)
        state.producers[fake].last_timestamp = 0
        snapshot_path(directory, base).write_bytes(encode_snapshot(state))
    reopened = Log.open(
        directory,
        CONFIG,
        had_clean_shutdown=False,
        recovery_point=bases[-2],
        clock=lambda: 3_000_000,  # within producer.id.expiration.ms: nothing expired
    )
    try:
        producers = reopened.producer_state().producers
        assert 98 in producers and 99 not in producers
        assert producers[3].last_seq == seq - 1  # replayed past the snapshot
        assert reopened.append_as_leader(batch(99, 3, seq)).first_offset == 10
    finally:
        reopened.close()


def test_retention_and_delete_records_remove_the_snapshots_of_deleted_segments(
    tmp_path: Path,
) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=300, file_delete_delay_ms=0,
                                               retention_ms=-1))  # fmt: skip
    try:
        for i in range(12):
            log.append_as_leader(batch(i, 4, i))
        bases = [s.base_offset for s in log.segments]
        log.maybe_increment_high_watermark(log.log_end_offset)
        cut = bases[3] + 1  # inside the fourth segment
        log.delete_records(cut)
        log.delete_old_segments()
        assert log.segments[0].base_offset == bases[3]
        # Kafka keeps snapshots only from the first segment on: this one's base too.
        assert offsets(log.directory) == bases[3:]
        log.truncate_fully_and_start_at(100)  # a follower restarting at its leader's start
        assert offsets(log.directory) == []
        assert log.producer_state().producers == {}
    finally:
        log.close()


def test_cleaning_removes_the_snapshots_of_the_segments_it_merged(tmp_path: Path) -> None:
    config = LogConfig(
        cleanup_policy="compact",
        segment_bytes=300,
        min_cleanable_dirty_ratio=0.0,
        file_delete_delay_ms=0,
    )
    log = Log.open(tmp_path / "t-0", config)
    try:
        for i in range(16):
            log.append_as_leader(batch(i, 4, i, key=b"k%d" % (i % 2)))
            log.roll()  # small segments: the cleaning merges them
        log.update_high_watermark(log.log_end_offset)
        before = [s.base_offset for s in log.segments]
        ltc = log_to_clean(log, None, 0)
        Cleaner(CleanerConfig()).clean(log, ltc.first_dirty, ltc.first_uncleanable, 0)
        after = [s.base_offset for s in log.segments]
        assert len(after) < len(before)  # segments were merged
        assert offsets(log.directory) == [b for b in after if b > 0]
        # What is left still recovers the producer: its last batch was kept.
        state = decode_snapshot(snapshot_path(log.directory, after[-1]).read_bytes())
        assert state.producers[4].last_seq == 15
    finally:
        log.close()


@pytest.mark.skipif(shutil.which("java") is None, reason="needs java")
def test_entries_follow_javas_hash_map_order(tmp_path: Path) -> None:
    """Kafka writes its ``HashMap<Long, ProducerStateEntry>`` in iteration order: the same
    producers inserted in the same order give the same bytes here (checked against a real
    java.util.HashMap, through the resizes at 13, 25 and 49 entries)."""
    keys = [1000 + 37 * i for i in range(30)] + [-1, 2**40 + 7, 2**63 - 1, 17, 33, 2**32 + 1]
    source = tmp_path / "Order.java"
    source.write_text(
        "import java.util.*;\n"
        "public class Order { public static void main(String[] a) {\n"
        " for (int n = 1; n <= a.length; n++) { Map<Long, Long> m = new HashMap<>();\n"
        "  for (int i = 0; i < n; i++) m.put(Long.parseLong(a[i]), 0L);\n"
        "  StringBuilder b = new StringBuilder();\n"
        "  for (Long k : m.keySet()) b.append(k).append(' ');\n"
        "  System.out.println(b.toString().trim()); } } }\n"
    )
    out = subprocess.run(
        ["java", str(source), *map(str, keys)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == len(keys)
    for n, line in enumerate(lines, 1):
        assert java_hash_map_order(keys[:n]) == [int(k) for k in line.split()], n


def test_a_lost_idle_snapshot_is_logged_once_and_the_log_goes_on(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    for i in range(4):
        log.append_as_leader(batch(i))
    log.close()
    log = Log.open(tmp_path / "t-0", CONFIG)
    try:
        for _offset, path in snapshot_files(log.directory):
            path.unlink()  # the snapshot the idle state was read from, gone
        rolled_before = len(log.segments)
        with capture_logs() as captured:
            for i in range(6):
                log.append_as_leader(batch(i))  # rolls: no snapshot can be written now
        assert len(log.segments) > rolled_before + 1
        warnings = [e for e in captured if e["event"] == "producer snapshot not written"]
        assert len(warnings) == 1  # then the state is unknown: no more attempts
        assert offsets(log.directory) == []
        assert log.log_end_offset == 10
    finally:
        log.close()


def test_a_snapshot_the_full_disk_refused_leaves_no_file(tmp_path: Path) -> None:
    """The roll goes on (the snapshot is an optimisation of recovery), logs it, and leaves no
    torn file at that offset for a later roll or close to take as written."""
    from sluice.server.storage.vfs import OSVFS
    from tests.storage.fullfs import FullDiskFile, FullDiskVFS

    class SnapshotsFull(FullDiskVFS):
        def open(self, path: Path, **kw: bool) -> Any:  # type: ignore[override]
            real = OSVFS.open(self, path, **kw)
            return FullDiskFile(self, real) if path.suffix == ".snapshot" else real

    vfs = SnapshotsFull()
    log = Log.open(tmp_path / "t-0", CONFIG, vfs=vfs)
    try:
        log.append_as_leader(batch(1, 5, 0))
        vfs.full = True
        with capture_logs() as captured:
            for seq in range(1, 4):
                log.append_as_leader(batch(1 + seq, 5, seq))
        assert vfs.failures and len(log.segments) > 1
        assert [e for e in captured if e["event"] == "producer snapshot not written"]
        assert offsets(log.directory) == []
        refused = [s.base_offset for s in log.segments[1:]]
        vfs.full = False
        log.append_as_leader(batch(9, 5, 4))
        log.roll()
        written = offsets(log.directory)
        assert log.log_end_offset in written and not set(refused) & set(written)
    finally:
        log.close()
