"""Producer state with transactions (Kafka's ProducerAppendInfo / ProducerStateManager rules)
and the ``.txnindex`` file (Kafka's TransactionIndex / AbortedTxn), without a Log."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from sluice.protocol.errors import (
    InvalidProducerEpoch,
    InvalidTxnState,
    TransactionCoordinatorFenced,
)
from sluice.protocol.records import (
    ATTR_CONTROL_MASK,
    ATTR_TRANSACTIONAL_MASK,
    BatchHeader,
    EndTxnMarker,
)
from sluice.server.storage.index import CorruptIndexError
from sluice.server.storage.producer_state import (
    CompletedTxn,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
)
from sluice.server.storage.txn_index import ABORTED_TXN_SIZE, AbortedTxn, TransactionIndex


def header(
    pid: int, epoch: int, seq: int, offset: int, count: int = 1, *, txn: bool = True
) -> BatchHeader:
    return BatchHeader(
        base_offset=offset,
        batch_length=100,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=ATTR_TRANSACTIONAL_MASK if txn else 0,
        last_offset_delta=count - 1,
        base_timestamp=0,
        max_timestamp=0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        record_count=count,
    )


def marker_header(pid: int, epoch: int, offset: int) -> BatchHeader:
    return header(pid, epoch, -1, offset)._replace(
        attributes=ATTR_TRANSACTIONAL_MASK | ATTR_CONTROL_MASK
    )


def write(ps: ProducerStateManager, h: BatchHeader) -> None:
    assert ps.check([h]) is None
    ps.update(h, h.base_offset)


def end(
    ps: ProducerStateManager, pid: int, epoch: int, offset: int, commit: bool, coord: int = 0
) -> CompletedTxn | None:
    ps.check_marker(pid, epoch, coord)
    completed = ps.update(marker_header(pid, epoch, offset), offset, EndTxnMarker(commit, coord))
    if completed is not None:
        ps.complete_txn(completed)
    return completed


def test_ongoing_transactions_in_offset_order_and_the_first_unstable_offset() -> None:
    ps = ProducerStateManager()
    write(ps, header(1, 0, 0, 10, 2))  # txn of 1 from 10
    write(ps, header(2, 0, 0, 12))  # txn of 2 from 12
    write(ps, header(1, 0, 2, 13))  # same txn of 1
    assert ps.ongoing == {10: 1, 12: 2}
    assert ps.producers[1].current_txn_first_offset == 10
    assert ps.first_unstable_offset() == 10
    completed = ps.update(marker_header(1, 0, 14), 14, EndTxnMarker(False, 0))
    assert completed == CompletedTxn(1, 10, 14, True)
    assert ps.last_stable_offset(completed) == 12  # producer 2's transaction is still open
    ps.complete_txn(completed)
    # Complete but not replicated: it still holds the first unstable offset.
    assert ps.first_unstable_offset() == 10
    ps.on_high_watermark_updated(14)  # the marker at 14 is not below HW yet
    assert ps.first_unstable_offset() == 10
    ps.on_high_watermark_updated(15)
    assert ps.first_unstable_offset() == 12 == ps.first_undecided_offset()
    done = end(ps, 2, 0, 15, commit=True)
    assert done == CompletedTxn(2, 12, 15, False)
    ps.on_high_watermark_updated(16)
    assert ps.first_unstable_offset() is None and ps.producers[2].current_txn_first_offset == -1


def test_last_stable_offset_of_a_lone_transaction_is_after_its_marker() -> None:
    ps = ProducerStateManager()
    write(ps, header(1, 0, 0, 0))
    completed = ps.update(marker_header(1, 0, 1), 1, EndTxnMarker(False, 0))
    assert completed is not None and ps.last_stable_offset(completed) == 2


def test_a_marker_without_data_completes_nothing() -> None:
    ps = ProducerStateManager()
    assert end(ps, 5, 0, 0, commit=False, coord=3) is None
    assert ps.producers[5].coordinator_epoch == 3 and not ps.ongoing
    write(ps, header(1, 0, 0, 1))
    assert end(ps, 1, 0, 2, commit=True) is not None
    assert end(ps, 1, 0, 3, commit=True) is None  # a retried marker


def test_non_transactional_write_inside_a_transaction_is_refused() -> None:
    ps = ProducerStateManager()
    write(ps, header(1, 0, 0, 0))
    with pytest.raises(InvalidTxnState):
        ps.check([header(1, 0, 1, 1, txn=False)])
    end(ps, 1, 0, 1, commit=True)
    write(ps, header(1, 0, 1, 2, txn=False))  # allowed once the transaction ended


def test_marker_epoch_checks() -> None:
    ps = ProducerStateManager()
    write(ps, header(1, 3, 0, 0))
    end(ps, 1, 3, 1, commit=True, coord=4)
    with pytest.raises(TransactionCoordinatorFenced):
        ps.check_marker(1, 3, 3)  # an older coordinator: a zombie
    with pytest.raises(InvalidProducerEpoch):
        ps.check_marker(1, 2, 4)  # an older producer epoch
    ps.check_marker(1, 3, 4)  # same epochs: fine (a retry)
    ps.check_marker(1, 4, 5)  # newer: fine
    ps.check_marker(99, 0, 0)  # an unknown producer: fine
    # A marker with a bumped producer epoch (the coordinator aborting a fenced producer's
    # transaction) moves the producer to that epoch: its old sequences are forgotten.
    write(ps, header(1, 3, 1, 2))
    assert end(ps, 1, 4, 3, commit=False, coord=5) == CompletedTxn(1, 2, 3, True)
    assert ps.producers[1].epoch == 4 and not ps.producers[1].batches


def test_snapshot_keeps_ongoing_transactions_and_coordinator_epochs() -> None:
    ps = ProducerStateManager()
    write(ps, header(1, 0, 0, 0, 3))
    write(ps, header(2, 1, 0, 3))
    end(ps, 2, 1, 4, commit=True, coord=7)
    write(ps, header(3, 0, 0, 5))
    end(ps, 9, 2, 6, commit=False, coord=8)  # a producer with only a marker
    data = encode_snapshot(ps)
    # Kafka's version-1 entry: pid, epoch, last seq, last offset, offset delta, timestamp,
    # coordinator epoch, current txn first offset.
    entry = struct.Struct(">qhiqiqiq")
    entries = {e[0]: e for e in entry.iter_unpack(data[10:])}
    assert entries[1] == (1, 0, 2, 2, 2, 0, -1, 0)
    assert entries[2] == (2, 1, 0, 3, 0, 0, 7, -1)
    assert entries[9] == (9, 2, -1, -1, 0, 0, 8, -1)
    back = decode_snapshot(data)
    assert back.ongoing == {0: 1, 5: 3}
    assert back.producers[2].coordinator_epoch == 7
    assert not back.producers[9].batches and back.producers[9].coordinator_epoch == 8
    with pytest.raises(TransactionCoordinatorFenced):
        back.check_marker(2, 1, 6)
    assert back.first_unstable_offset() == 0


def test_replay_rebuilds_transactions_and_reports_completions() -> None:
    batches = [
        (header(1, 0, 0, 0), None),
        (header(2, 0, 0, 1), None),
        (marker_header(1, 0, 2), EndTxnMarker(False, 0)),
        (header(3, 0, 0, 3, txn=False), None),
        (marker_header(2, 0, 4), EndTxnMarker(True, 0)),
        (marker_header(2, 0, 5), None),  # an empty control batch (cleaned)
    ]
    seen: list[tuple[CompletedTxn, int]] = []
    ps = ProducerStateManager().replay_batches(batches, lambda t, lso: seen.append((t, lso)))
    assert seen == [(CompletedTxn(1, 0, 2, True), 1), (CompletedTxn(2, 1, 4, False), 5)]
    assert not ps.ongoing and ps.unreplicated == {0: 2, 1: 4}
    ps.on_high_watermark_updated(5)
    assert ps.first_unstable_offset() is None


# -- .txnindex ----------------------------------------------------------------------------------


def test_txn_index_file_layout_and_search(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.txnindex"
    index = TransactionIndex(path, 100)
    assert not path.exists() and index.entries == []  # created with its first entry
    entries = [  # as a log makes them: an LSO is the first offset of the oldest open txn
        AbortedTxn(1, 90, 100, 95),
        AbortedTxn(2, 95, 110, 105),
        AbortedTxn(3, 105, 120, 121),
        AbortedTxn(4, 130, 140, 141),
    ]
    assert index.append(entries[0]) is True
    for e in entries[1:]:
        assert index.append(e) is False
    assert path.read_bytes()[:ABORTED_TXN_SIZE] == struct.pack(">hqqqq", 0, 1, 90, 100, 95)
    assert len(path.read_bytes()) == 4 * 34
    assert TransactionIndex(path, 100).entries == entries
    with pytest.raises(ValueError):
        index.append(AbortedTxn(5, 0, 140, 141))  # markers must increase
    # Kafka's collectAbortedTxns: overlap with [start, upper); stop once an LSO >= upper.
    assert index.collect(0, 95) == ([entries[0]], True)
    assert index.collect(0, 96) == ([entries[0], entries[1]], True)
    assert index.collect(101, 111) == ([entries[1], entries[2]], True)
    assert index.collect(101, 106) == ([entries[1], entries[2]], True)
    assert index.collect(101, 105) == ([entries[1]], True)
    assert index.collect(121, 200) == ([entries[3]], False)
    index.truncate_to(120)
    assert index.entries == entries[:2] and len(path.read_bytes()) == 68
    assert TransactionIndex(path, 100).entries == entries[:2]
    index.rename_to(tmp_path / "00000000000000000100.txnindex.deleted")
    assert not path.exists() and len(index) == 2
    index.delete()
    assert list(tmp_path.iterdir()) == []


def test_damaged_txn_index_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(b"\x00" * 33)
    with pytest.raises(CorruptIndexError, match="multiple"):
        TransactionIndex(path, 0).sanity_check()
    path.write_bytes(struct.pack(">hqqqq", 1, 1, 0, 5, 6))
    with pytest.raises(CorruptIndexError, match="version"):
        TransactionIndex(path, 0).sanity_check()
    path.write_bytes(struct.pack(">hqqqq", 0, 1, 0, 5, 6) * 2)
    with pytest.raises(CorruptIndexError, match="increasing"):
        TransactionIndex(path, 0).sanity_check()
    path.write_bytes(struct.pack(">hqqqq", 0, 1, 0, 5, 6))
    TransactionIndex(path, 0).sanity_check(6)
    with pytest.raises(CorruptIndexError, match="outside"):
        TransactionIndex(path, 0).sanity_check(5)
    with pytest.raises(CorruptIndexError, match="outside"):
        TransactionIndex(path, 10).sanity_check()


def test_txn_index_follows_its_segment(tmp_path: Path) -> None:
    from sluice.server.storage.segment import LogSegment

    segment = LogSegment.open(tmp_path, 100)
    assert segment.txn_index.path == tmp_path / "00000000000000000100.txnindex"
    segment.txn_index.append(AbortedTxn(1, 100, 101, 102))
    segment.change_file_suffixes("", ".swap")
    assert (tmp_path / "00000000000000000100.txnindex.swap").exists()
    segment.change_file_suffixes(".swap", "")
    segment.rename_to_deleted()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "00000000000000000100.txnindex.deleted" in names
    assert all(name.endswith(".deleted") for name in names)
    segment.delete()
    assert list(tmp_path.iterdir()) == []
    # A segment without aborts has no file: renames and deletion only change the name.
    other = LogSegment.open(tmp_path, 200)
    other.rename_to_deleted()
    assert other.txn_index.path.name == "00000000000000000200.txnindex.deleted"
    other.delete()
    assert list(tmp_path.iterdir()) == []
