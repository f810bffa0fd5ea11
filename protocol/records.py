"""RecordBatch v2 (magic 2): the unit of storage and of the wire.

Sans-I/O: bytes in, typed values out. Layout (all integers big-endian)::

    baseOffset            int64    ┐ LOG_OVERHEAD (12 bytes): not covered by the CRC, so a broker
    batchLength           int32    ┘ can assign offsets by rewriting baseOffset in place
    partitionLeaderEpoch  int32      not CRC-covered either: the leader stamps it
    magic                 int8     = 2
    crc                   uint32   CRC-32C of attributes .. end of batch
    attributes            int16    see ATTR_* below
    lastOffsetDelta       int32
    baseTimestamp         int64
    maxTimestamp          int64
    producerId            int64    -1 when not idempotent
    producerEpoch         int16
    baseSequence          int32
    recordCount           int32
    records               ...      compressed as one block when the codec bits are non-zero

This module's *stable surface* (used by server/ and client/): ``HEADER``, the ``*_OFFSET``
constants, ``ATTR_*``, :class:`BatchHeader`, :func:`parse_header`, :func:`iter_batches`,
:func:`compute_crc`, :func:`set_base_offset`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from crc32c import crc32c

from .errors import CorruptRecordError

MAGIC_V2 = 2

# The whole 61-byte header as one struct; one comment per field, positions derived below.
HEADER = struct.Struct(
    ">q"  # baseOffset
    "i"  # batchLength: bytes after this field
    "i"  # partitionLeaderEpoch
    "b"  # magic
    "I"  # crc (CRC-32C, unsigned)
    "h"  # attributes
    "i"  # lastOffsetDelta
    "q"  # baseTimestamp
    "q"  # maxTimestamp
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordCount
)
HEADER_SIZE = HEADER.size  # 61
assert HEADER_SIZE == 61

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
LOG_OVERHEAD = 12  # baseOffset + batchLength: what batchLength does not count
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # the CRC covers everything from here to the end of the batch
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORD_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

# batchLength counts from partitionLeaderEpoch: the smallest legal value is a header with no records.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE_MASK = 0x08  # 0 CreateTime, 1 LogAppendTime
ATTR_TRANSACTIONAL_MASK = 0x10
ATTR_CONTROL_MASK = 0x20
ATTR_DELETE_HORIZON_MASK = 0x40

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1

_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fixed 61-byte header of one batch, as parsed (no validation beyond the structure)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, length prefix included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & ATTR_TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL_MASK)


def parse_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the batch header at ``position``. Raises :class:`CorruptRecordError` if fewer than
    61 bytes are there, the magic is not 2, or batchLength is below the header size."""
    if len(buf) - position < HEADER_SIZE:
        raise CorruptRecordError(
            f"batch header needs {HEADER_SIZE} bytes, {len(buf) - position} present",
            field="header",
            position=position,
        )
    header = BatchHeader(*HEADER.unpack_from(buf, position))
    if header.magic != MAGIC_V2:
        raise CorruptRecordError(
            f"unsupported magic {header.magic}", field="magic", position=position + MAGIC_OFFSET
        )
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batchLength {header.batch_length} below the minimum {MIN_BATCH_LENGTH}",
            field="batchLength",
            position=position + LENGTH_OFFSET,
        )
    return header


def iter_batches(
    buf: bytes | bytearray | memoryview, *, allow_partial_tail: bool = False
) -> Iterator[tuple[int, BatchHeader, memoryview]]:
    """Split a buffer of back-to-back batches by their length prefix, without copying.

    Yields ``(position, header, batch_view)``. A truncated last batch raises
    :class:`CorruptRecordError`, unless ``allow_partial_tail`` (a Fetch response may end with a
    partial batch cut at max_bytes), in which case iteration stops before it.
    """
    view = memoryview(buf)
    end = len(view)
    position = 0
    while position < end:
        if end - position < HEADER_SIZE:
            if allow_partial_tail:
                return
            raise CorruptRecordError(
                f"truncated batch: {end - position} bytes left, header needs {HEADER_SIZE}",
                field="header",
                position=position,
            )
        if allow_partial_tail:
            # Peek at the length before insisting on a full, valid header.
            (length,) = struct.unpack_from(">i", view, position + LENGTH_OFFSET)
            if length >= MIN_BATCH_LENGTH and position + LOG_OVERHEAD + length > end:
                return
        header = parse_header(view, position)
        stop = position + header.size
        if stop > end:
            raise CorruptRecordError(
                f"truncated batch: batchLength {header.batch_length} but only "
                f"{end - position - LOG_OVERHEAD} bytes follow",
                field="batchLength",
                position=position + LENGTH_OFFSET,
            )
        yield position, header, view[position:stop]
        position = stop


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    """CRC-32C over attributes .. end: what the ``crc`` field must hold.

    The CRC skips baseOffset, batchLength and partitionLeaderEpoch on purpose: those are the
    fields a broker rewrites (offset assignment, leader epoch) without touching the records.
    """
    return crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:])


def verify_crc(batch: bytes | bytearray | memoryview, position: int = 0) -> None:
    """Raise :class:`CorruptRecordError` unless the batch's stored CRC matches its bytes."""
    (stored,) = _U32.unpack_from(batch, CRC_OFFSET)
    actual = compute_crc(batch)
    if stored != actual:
        raise CorruptRecordError(
            f"CRC mismatch: stored {stored:#010x}, computed {actual:#010x}",
            field="crc",
            position=position + CRC_OFFSET,
        )


def set_base_offset(batch: bytearray | memoryview, base_offset: int) -> None:
    """Rewrite baseOffset in place (offset assignment); the CRC stays valid."""
    _I64.pack_into(batch, BASE_OFFSET_OFFSET, base_offset)
