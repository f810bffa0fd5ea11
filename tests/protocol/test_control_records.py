"""Transaction markers: control batches with one EndTransactionMarker record.

Golden bytes follow Kafka's documented layout (Kafka's ``implementation.html`` "Control
Batches", ``EndTransactionMarker`` / ``ControlRecordType`` in clients/.../record), and a parser
nobody here wrote (kafka-python's ``DefaultRecordBatch``) reads what we build.
"""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from sluice.protocol import records as rec
from sluice.protocol.errors import CorruptRecordError
from sluice.protocol.records import EndTxnMarker


def test_marker_batch_matches_kafkas_layout_byte_for_byte() -> None:
    batch = rec.build_end_txn_marker_batch(
        EndTxnMarker(commit=True, coordinator_epoch=5),
        producer_id=7,
        producer_epoch=2,
        timestamp=1_000,
        base_offset=42,
        partition_leader_epoch=3,
    )
    # One record: attributes 0, timestampDelta 0, offsetDelta 0, key length 4 (zigzag 8),
    # key = version 0 | type 1 (COMMIT), value length 6 (zigzag 12), value = version 0 |
    # coordinator epoch 5, no headers; 16 bytes after the length varint (zigzag 32).
    record = bytes.fromhex("2000000008000000010c00000000000500")
    assert len(record) == 17  # Kafka's CURRENT_END_TXN_SCHEMA_RECORD_SIZE
    after_crc = struct.pack(">hiqqqhii", 0x30, 0, 1_000, 1_000, 7, 2, -1, 1) + record
    expected = (
        struct.pack(">qiib", 42, 49 + len(record), 3, 2)
        + struct.pack(">I", crc32c(after_crc))
        + after_crc
    )
    assert batch == expected


@pytest.mark.parametrize("commit", [True, False])
def test_kafka_python_reads_our_marker(commit: bool) -> None:
    batch = rec.build_end_txn_marker_batch(
        EndTxnMarker(commit, 9), producer_id=1234, producer_epoch=3, timestamp=5
    )
    theirs = DefaultRecordBatch(batch)
    assert theirs.is_control_batch and theirs.is_transactional
    assert theirs.validate_crc()
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (1234, 3, -1)
    (record,) = list(theirs)
    assert (record.commit, record.abort, record.version) == (commit, not commit, 0)
    assert record.value == struct.pack(">hi", 0, 9)


@given(
    commit=st.booleans(),
    coordinator_epoch=st.integers(-(2**31), 2**31 - 1),
    producer_id=st.integers(0, 2**63 - 1),
    producer_epoch=st.integers(0, 2**15 - 1),
)
def test_marker_round_trip(
    commit: bool, coordinator_epoch: int, producer_id: int, producer_epoch: int
) -> None:
    marker = EndTxnMarker(commit, coordinator_epoch)
    batch = rec.build_end_txn_marker_batch(
        marker, producer_id=producer_id, producer_epoch=producer_epoch, timestamp=1
    )
    header = rec.parse_header(batch)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch) == (producer_id, producer_epoch)
    assert rec.end_txn_marker_of(batch) == marker
    assert marker.type_name == ("COMMIT" if commit else "ABORT")


def test_other_control_types_and_damaged_markers() -> None:
    assert rec.parse_end_txn_marker(struct.pack(">hh", 0, 5), b"x") is None  # unknown type
    assert rec.parse_end_txn_marker(b"\x00", b"") is None  # key too short: not a marker
    assert rec.parse_control_key(struct.pack(">hhh", 1, 0, 7)) == 0  # later key versions
    with pytest.raises(CorruptRecordError, match="needs 6"):
        rec.parse_end_txn_marker(struct.pack(">hh", 0, 1), b"\x00\x00\x00")
    with pytest.raises(CorruptRecordError):
        rec.parse_end_txn_marker(struct.pack(">hh", 0, 0), None)
