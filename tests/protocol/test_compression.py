"""sluice.protocol.compression: round trips, the exact wire framing Kafka clients expect,
garbage."""

from __future__ import annotations

import gzip
import os
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.protocol import compression
from sluice.protocol.errors import CorruptRecordError, ProtocolError

CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "data", [b"", b"x", b"abc" * 1000, os.urandom(100_000)], ids=["empty", "one", "rep", "random"]
)
def test_round_trip(codec: int, data: bytes) -> None:
    packed = compression.compress(codec, data)
    assert compression.decompress(codec, packed) == data
    # bytearray / memoryview inputs are accepted too (the builder hands in a bytearray)
    packed = compression.compress(codec, bytearray(data))
    assert compression.decompress(codec, memoryview(packed)) == data


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=3000))
def test_round_trip_property(codec: int, data: bytes) -> None:
    assert compression.decompress(codec, compression.compress(codec, data)) == data


def test_gzip_is_a_standard_gzip_stream() -> None:
    packed = compression.compress(compression.GZIP, b"hello" * 50)
    assert packed[:2] == b"\x1f\x8b"
    assert gzip.decompress(packed) == b"hello" * 50
    # several concatenated members (some producers flush per block) decode as one
    two = gzip.compress(b"ab") + gzip.compress(b"cd")
    assert compression.decompress(compression.GZIP, two) == b"abcd"


def test_snappy_writes_xerial_framing_in_32k_blocks() -> None:
    data = os.urandom(32 * 1024) + b"z" * 100
    packed = compression.compress(compression.SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    # walk the blocks by hand: two of them, the first holding exactly 32 KiB of input
    pos, blocks = 16, []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert pos == len(packed)
    assert [len(b) for b in blocks] == [32 * 1024, 100]
    assert b"".join(blocks) == data


def test_snappy_reads_raw_blocks_too() -> None:
    data = b"librdkafka writes raw snappy " * 40
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert compression.decompress(compression.SNAPPY, raw) == data


def test_lz4_is_a_frame_with_independent_blocks_and_no_content_checksum() -> None:
    packed = compression.compress(compression.LZ4, b"q" * 200_000)
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic (little-endian 0x184D2204)
    flg = packed[4]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # block independence: Kafka's Java reader decodes blocks one by one
    assert not flg & 0x04  # no content checksum
    assert not flg & 0x09  # no content size, no dictionary id
    # block checksums (0x10) may be present: Kafka's reader verifies them when the flag is set
    assert packed[5] == 0x40  # BD: 64 KiB maximum block size, what Kafka's writer uses
    assert compression.decompress(compression.LZ4, packed) == b"q" * 200_000


def test_zstd_is_a_standard_frame() -> None:
    packed = compression.compress(compression.ZSTD, b"zz" * 100)
    assert packed[:4] == b"\x28\xb5\x2f\xfd"
    assert bytes(cramjam.zstd.decompress(packed)) == b"zz" * 100


@pytest.mark.parametrize("codec", [5, 6, 7, -1, 8])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(CorruptRecordError) as info:
        compression.compress(codec, b"x")
    assert info.value.field == "attributes"
    with pytest.raises(CorruptRecordError) as info:
        compression.decompress(codec, b"x")
    assert info.value.field == "attributes"


@pytest.mark.parametrize("codec", CODECS[1:])
def test_garbage_is_a_corrupt_record(codec: int) -> None:
    with pytest.raises(CorruptRecordError) as info:
        compression.decompress(codec, b"\x01\x02garbage that is not compressed\xff" * 3)
    assert info.value.field == "records"


@pytest.mark.parametrize("codec", CODECS[1:])
def test_truncated_stream_is_a_corrupt_record(codec: int) -> None:
    packed = compression.compress(codec, os.urandom(5000))
    with pytest.raises(CorruptRecordError) as info:
        compression.decompress(codec, packed[: len(packed) // 2])
    assert info.value.field == "records"


def test_xerial_block_length_overrun_and_truncation() -> None:
    packed = compression.compress(compression.SNAPPY, b"abc" * 100)
    bad = packed[:16] + struct.pack(">i", 10_000) + packed[20:]
    with pytest.raises(CorruptRecordError) as info:
        compression.decompress(compression.SNAPPY, bad)
    assert (info.value.field, info.value.position) == ("records", 16)
    with pytest.raises(CorruptRecordError):
        compression.decompress(compression.SNAPPY, packed[:18])  # half a block length
    with pytest.raises(CorruptRecordError):
        compression.decompress(compression.SNAPPY, struct.pack(">i", -5).join([packed[:16], b""]))


@settings(max_examples=150, deadline=None)
@given(codec=st.sampled_from(CODECS[1:]), data=st.binary(max_size=200))
def test_fuzz_decompress_raises_only_corrupt_record(codec: int, data: bytes) -> None:
    try:
        compression.decompress(codec, data)
    except ProtocolError as exc:
        assert isinstance(exc, CorruptRecordError)


@settings(max_examples=150, deadline=None)
@given(
    codec=st.sampled_from([compression.SNAPPY]),
    tail=st.binary(max_size=100),
)
def test_fuzz_xerial_framed_garbage(codec: int, tail: bytes) -> None:
    # garbage after a valid xerial header exercises our own framing code, not just cramjam's
    try:
        compression.decompress(codec, compression.XERIAL_HEADER + tail)
    except CorruptRecordError as exc:
        assert exc.field == "records"
