"""Shared test fixtures. Keep this small.

``make_batch`` builds a valid RecordBatch v2 with ``protocol.records.RecordBatchBuilder``; for
batches the builder does not make (offset gaps inside a batch, as compaction leaves) it encodes
the records itself (uncompressed, CRC via ``protocol.records.compute_crc``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

import pytest

from protocol.records import (
    ATTR_TIMESTAMP_TYPE_MASK,
    CRC_OFFSET,
    HEADER,
    RecordBatchBuilder,
    compute_crc,
)
from protocol.varint import encode_varint, encode_varlong

MakeBatch = Callable[..., bytes]


def build_batch(
    base_offset: int,
    timestamps: Sequence[int],
    values: Sequence[bytes] | None = None,
    *,
    offset_deltas: Sequence[int] | None = None,
    log_append_time: bool = False,
    compression: int = 0,
    partition_leader_epoch: int = 0,
) -> bytes:
    """A v2 batch with one record per timestamp (null key, ``values[i]`` or b"v<i>")."""
    count = len(timestamps)
    if count == 0:
        raise ValueError("a batch needs at least one record")
    if offset_deltas is None:
        builder = RecordBatchBuilder(
            compression=compression,
            base_offset=base_offset,
            timestamp_type=1 if log_append_time else 0,
            partition_leader_epoch=partition_leader_epoch,
        )
        for i, ts in enumerate(timestamps):
            builder.append(ts, None, values[i] if values is not None else b"v%d" % i)
        return builder.build()
    if compression:
        raise ValueError("hand-encoded batches are uncompressed")
    deltas = list(offset_deltas)
    base_timestamp = timestamps[0]
    records = bytearray()
    for i, ts in enumerate(timestamps):
        value = values[i] if values is not None else b"v%d" % i
        body = (
            b"\x00"  # attributes
            + encode_varlong(ts - base_timestamp)
            + encode_varint(deltas[i])
            + encode_varint(-1)  # null key
            + encode_varint(len(value))
            + value
            + encode_varint(0)  # no headers
        )
        records += encode_varint(len(body)) + body
    attributes = ATTR_TIMESTAMP_TYPE_MASK if log_append_time else 0
    batch = bytearray(
        HEADER.pack(
            base_offset,
            HEADER.size - 12 + len(records),
            partition_leader_epoch,
            2,
            0,  # crc, filled below
            attributes,
            deltas[-1],
            base_timestamp,
            max(timestamps),
            -1,
            -1,
            -1,
            count,
        )
    )
    batch += records
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch))
    return bytes(batch)


@pytest.fixture(scope="session")
def make_batch() -> MakeBatch:
    return build_batch
