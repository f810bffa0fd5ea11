"""ProducerStateManager against a reference of Kafka's sequence rules (no I/O)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.protocol.errors import (
    DuplicateSequenceNumber,
    InvalidProducerEpoch,
    OutOfOrderSequenceNumber,
)
from sluice.protocol.records import BatchHeader
from sluice.server.storage.producer_state import (
    INT32_MAX,
    BatchMetadata,
    ProducerStateManager,
    last_sequence,
)


def header(pid: int, epoch: int, seq: int, count: int = 1, base_offset: int = 0) -> BatchHeader:
    return BatchHeader(
        base_offset=base_offset,
        batch_length=100,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=0,
        last_offset_delta=count - 1,
        base_timestamp=0,
        max_timestamp=0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        record_count=count,
    )


def append(ps: ProducerStateManager, h: BatchHeader, offset: int) -> BatchMetadata | None:
    dup = ps.check([h])
    if dup is None:
        ps.update(h, offset)
    return dup


def test_in_order_duplicates_and_gaps() -> None:
    ps = ProducerStateManager()
    assert append(ps, header(7, 0, 0, 3), 10) is None  # seqs 0-2 at offsets 10-12
    assert append(ps, header(7, 0, 3, 2), 20) is None  # seqs 3-4 at 20-21
    # A resend of either batch is a duplicate: the original offsets come back.
    assert ps.check([header(7, 0, 0, 3)]) == BatchMetadata(0, 2, 10, 12)
    assert ps.check([header(7, 0, 3, 2)]) == BatchMetadata(3, 4, 20, 21)
    with pytest.raises(OutOfOrderSequenceNumber):
        ps.check([header(7, 0, 6)])  # gap: 5 is missing
    with pytest.raises(OutOfOrderSequenceNumber):
        ps.check([header(7, 0, 4, 2)])  # overlaps the last batch
    # An unknown producer may start at any sequence (Kafka 3.x: it may have expired, or its
    # batches may all have been deleted), but a known one's new epoch must start at 0.
    assert ps.check([header(8, 0, 1)]) is None
    # A new epoch restarts at 0; a gap in the new epoch is still a gap.
    with pytest.raises(OutOfOrderSequenceNumber):
        ps.check([header(7, 1, 5)])
    assert append(ps, header(7, 1, 0), 30) is None
    with pytest.raises(InvalidProducerEpoch):
        ps.check([header(7, 0, 5)])  # the old epoch is fenced
    # Non-idempotent batches are not checked.
    assert ps.check([header(-1, -1, -1)]) is None


def test_old_sequences_beyond_the_cache_are_duplicate_sequence_errors() -> None:
    ps = ProducerStateManager()
    for i in range(8):
        assert append(ps, header(1, 0, i), 100 + i) is None
    assert ps.check([header(1, 0, 7)]) == BatchMetadata(7, 7, 107, 107)
    assert ps.check([header(1, 0, 3)]) == BatchMetadata(3, 3, 103, 103)  # 5 retained: 3..7
    with pytest.raises(DuplicateSequenceNumber):
        ps.check([header(1, 0, 2)])


def test_several_batches_of_one_append_are_checked_in_order() -> None:
    ps = ProducerStateManager()
    ps.update(header(1, 0, 0), 0)
    assert ps.check([header(1, 0, 1, 2), header(1, 0, 3, 2)]) is None
    with pytest.raises(OutOfOrderSequenceNumber):
        ps.check([header(1, 0, 1, 2), header(1, 0, 4)])


def test_an_unknown_producers_append_is_not_sequence_checked_within_its_epoch() -> None:
    """Kafka 3.x's ``checkSequence`` for a producer without an entry: every batch of its
    epoch in the append is taken (the current entry has no epoch); a batch of another epoch
    in the same append is checked against the first one's, as for a known producer."""
    ps = ProducerStateManager()
    assert ps.check([header(2, 3, 7, 2), header(2, 3, 12)]) is None  # a gap: not checked
    with pytest.raises(OutOfOrderSequenceNumber):
        ps.check([header(2, 3, 7), header(2, 4, 1)])  # a new epoch starts at 0
    assert ps.check([header(2, 3, 7), header(2, 4, 0)]) is None
    with pytest.raises(InvalidProducerEpoch):
        ps.check([header(2, 3, 7), header(2, 2, 0)])


def test_sequence_wraps_after_int32_max() -> None:
    ps = ProducerStateManager()
    h = header(1, 0, 0)
    ps.update(h, 0)
    ps.producers[1].batches.append(BatchMetadata(INT32_MAX - 1, INT32_MAX, 1, 2))
    assert last_sequence(header(1, 0, INT32_MAX - 1, 4)) == 1
    assert ps.check([header(1, 0, 0, 2)]) is None  # INT32_MAX -> 0 is in sequence


def test_rebuild_from_headers_matches_live_state() -> None:
    live = ProducerStateManager()
    written = []
    offset = 0
    for pid, seq, count in [(1, 0, 2), (2, 0, 1), (1, 2, 3), (2, 1, 1), (1, 5, 1)]:
        h = header(pid, 0, seq, count)
        assert append(live, h, offset) is None
        written.append(h._replace(base_offset=offset))
        offset += count
    rebuilt = ProducerStateManager.rebuild([*written, header(-1, -1, -1, 4, offset)])
    assert {p: list(e.batches) for p, e in rebuilt.producers.items()} == {
        p: list(e.batches) for p, e in live.producers.items()
    }


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4), st.booleans()), max_size=40))
def test_random_resends_never_duplicate(ops: list[tuple[int, int, bool]]) -> None:
    """A reference model: each producer writes batches in order and sometimes resends its
    previous batch; the log must hold each sequence exactly once, in order."""
    ps = ProducerStateManager()
    next_seq = {0: 0, 1: 0, 2: 0}
    last: dict[int, BatchHeader] = {}
    log: list[tuple[int, int]] = []  # (pid, seq) per offset
    for pid, count, resend in ops:
        if resend and pid in last:
            h = last[pid]
            dup = ps.check([h])
            assert dup is not None and dup.first_seq == h.base_sequence
            assert log[dup.first_offset] == (pid, h.base_sequence)
            continue
        h = header(pid, 0, next_seq[pid], count)
        assert append(ps, h, len(log)) is None
        log.extend((pid, next_seq[pid] + i) for i in range(count))
        next_seq[pid] += count
        last[pid] = h
    for pid in next_seq:
        assert [s for p, s in log if p == pid] == list(range(next_seq[pid]))


def _batch(pid: int, seq: int, n: int, epoch: int = 0) -> bytes:
    """A batch timestamped now: its producer is not expired when a restart loads it from a
    snapshot (``producer.id.expiration.ms``)."""
    from sluice.protocol.records import RecordBatchBuilder

    now = time.time_ns() // 1_000_000
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    for i in range(n):
        b.append(now + i, None, b"v%d" % (seq + i))
    return b.build()


def test_log_append_dedups_rebuilds_at_open_and_after_truncation(tmp_path: Path) -> None:
    from sluice.server.storage.log import Log
    from sluice.server.storage.log_config import LogConfig

    config = LogConfig(segment_bytes=200)  # several segments: the rebuild walks them all
    log = Log.open(tmp_path / "t-0", config)
    try:
        assert log.append_as_leader(_batch(5, 0, 2)).first_offset == 0
        log.append_as_leader(build_plain())  # a non-idempotent batch in between: offset 2
        assert log.append_as_leader(_batch(5, 2, 3)).first_offset == 3
        dup = log.append_as_leader(_batch(5, 2, 3))
        assert (dup.first_offset, dup.last_offset, dup.record_count) == (3, 5, 0)
        assert log.log_end_offset == 6
        with pytest.raises(OutOfOrderSequenceNumber):
            log.append_as_leader(_batch(5, 9, 1))
        assert log.log_end_offset == 6 and len(log.segments) > 1
        rolled = [s.base_offset for s in log.segments[1:]]
    finally:
        log.close()
    # Each roll wrote a snapshot at the new segment's base offset, the clean close one at the
    # log end offset (Kafka's names).
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.snapshot")) == [
        f"{offset:020d}.snapshot" for offset in sorted({*rolled, 6})
    ]
    log = Log.open(tmp_path / "t-0", config)
    try:
        # A snapshot keeps each producer's last batch (as Kafka's): its resend is recognised
        # with the original offsets, an older one gets DUPLICATE_SEQUENCE_NUMBER.
        dup = log.append_as_leader(_batch(5, 2, 3))
        assert (dup.first_offset, log.log_end_offset) == (3, 6)
        with pytest.raises(DuplicateSequenceNumber):
            log.append_as_leader(_batch(5, 0, 2))
        assert log.truncate_to(3)  # drops sequences 2-4 (offsets 3-5) and the snapshots
        assert sorted(p.name for p in (tmp_path / "t-0").glob("*.snapshot")) == [
            f"{offset:020d}.snapshot" for offset in rolled if offset <= 3
        ]
        assert log.append_as_leader(_batch(5, 2, 3)).first_offset == 3  # not a duplicate now
    finally:
        log.close()


def build_plain() -> bytes:
    from sluice.protocol.records import RecordBatchBuilder

    b = RecordBatchBuilder()
    b.append(1_000, None, b"plain")
    return b.build()


def test_snapshot_bytes_and_corruption(tmp_path: Path) -> None:
    import struct

    from crc32c import crc32c

    from sluice.server.storage.producer_state import (
        CorruptSnapshotError,
        decode_snapshot,
        encode_snapshot,
        load_latest_snapshot,
        write_snapshot,
    )

    ps = ProducerStateManager()
    ps.update(header(9, 2, 0, 3)._replace(max_timestamp=1_000), 100)  # seqs 0-2 at 100-102
    ps.update(header(9, 2, 3, 2)._replace(max_timestamp=1234), 110)  # seqs 3-4 at 110-111
    data = encode_snapshot(ps)
    # The timestamp is the last batch's max timestamp (Kafka's lastTimestamp).
    entry = struct.pack(">qhiqiqiq", 9, 2, 4, 111, 1, 1234, -1, -1)
    body = struct.pack(">i", 1) + entry
    assert data == struct.pack(">hI", 1, crc32c(body)) + body  # Kafka's layout, version 1
    back = decode_snapshot(data)
    assert list(back.producers[9].batches) == [BatchMetadata(3, 4, 110, 111)]
    assert back.producers[9].last_timestamp == 1234
    for bad in (data[:-1], data[:2] + b"\x00\x00\x00\x00" + data[6:], b"\x00\x02" + data[2:]):
        with pytest.raises(CorruptSnapshotError):
            decode_snapshot(bad)
    write_snapshot(tmp_path, 112, data)
    write_snapshot(tmp_path, 200, data, sync=False)  # the older one stays
    assert sorted(p.name for p in tmp_path.glob("*.snapshot")) == [
        "00000000000000000112.snapshot",
        "00000000000000000200.snapshot",
    ]
    found = load_latest_snapshot(tmp_path, 150)  # the one beyond the log end: deleted
    assert found is not None and found[0] == 112
    assert [p.name for p in tmp_path.glob("*.snapshot")] == ["00000000000000000112.snapshot"]
    (tmp_path / "00000000000000000112.snapshot").write_bytes(data[:-3])
    assert load_latest_snapshot(tmp_path, 150) is None  # corrupt: ignored and deleted
    assert list(tmp_path.glob("*.snapshot")) == []


def test_snapshot_keeps_producers_whose_batches_retention_deleted(tmp_path: Path) -> None:
    from sluice.server.storage.log import Log
    from sluice.server.storage.log_config import LogConfig

    config = LogConfig(segment_bytes=200, file_delete_delay_ms=0)
    log = Log.open(tmp_path / "t-0", config)
    try:
        log.append_as_leader(_batch(8, 0, 2))
        for _ in range(3):
            log.append_as_leader(build_plain())  # roll past producer 8's segment
            log.roll()
        log.maybe_increment_high_watermark(log.log_end_offset)
        log.delete_records(log.log_end_offset)
        log.delete_old_segments()
        assert log.segments[0].base_offset > 1  # producer 8's batch is gone from disk
    finally:
        log.close()
    log = Log.open(tmp_path / "t-0", config, log_start_offset=5)
    try:
        # Without the snapshot producer 8 would be unknown: any sequence would be taken.
        with pytest.raises(OutOfOrderSequenceNumber):
            log.append_as_leader(_batch(8, 3, 1))
        assert log.append_as_leader(_batch(8, 2, 1)).first_offset == 5
    finally:
        log.close()
