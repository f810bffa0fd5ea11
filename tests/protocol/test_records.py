"""sluice.protocol.records: golden bytes, round trips, every malformed-input class, fuzzing."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.protocol import errors
from sluice.protocol.errors import CorruptRecordError, ProtocolError
from sluice.protocol.records import (
    ATTR_CONTROL_MASK,
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    MAGIC_OFFSET,
    RECORD_COUNT_OFFSET,
    RECORDS_OFFSET,
    Record,
    RecordBatchBuilder,
    build_batch,
    compute_crc,
    decode_batch,
    decode_batch_columns,
    iter_records,
    kafka_error_for,
    set_base_offset,
    stamp_log_append_time,
    validate_batch,
)
from sluice.protocol.varint import encode_varint, encode_varlong

MAX = 1 << 30
CODECS = [0, 1, 2, 3, 4]


def fix_crc(batch: bytes | bytearray) -> bytes:
    """The batch with a correct CRC, so that a test reaches the checks behind the CRC."""
    buf = bytearray(batch)
    struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf))
    return bytes(buf)


def patch(batch: bytes, offset: int, fmt: str, value: int, *, crc: bool = True) -> bytes:
    buf = bytearray(batch)
    struct.pack_into(fmt, buf, offset, value)
    return fix_crc(buf) if crc else bytes(buf)


def raw_record(
    body_fields: bytes, *, length: int | None = None, length_bytes: bytes | None = None
) -> bytes:
    """A record from its fields after the length prefix (length computed unless given)."""
    if length_bytes is None:
        length_bytes = encode_varint(len(body_fields) if length is None else length)
    return length_bytes + body_fields


def fields(
    *,
    ts: int = 0,
    od: int = 0,
    key: bytes | None = None,
    value: bytes | None = b"v",
    headers: bytes = b"\x00",
) -> bytes:
    out = b"\x00" + encode_varlong(ts) + encode_varint(od)
    for item in (key, value):
        out += encode_varint(-1) if item is None else encode_varint(len(item)) + item
    return out + headers


def wrap(records: bytes, *, count: int, last_delta: int | None = None, codec: int = 0) -> bytes:
    """A batch around hand-made records bytes, with a valid CRC."""
    if last_delta is None:
        last_delta = count - 1
    header = HEADER.pack(
        0, 49 + len(records), -1, 2, 0, codec, last_delta, 10, 10, -1, -1, -1, count
    )
    return fix_crc(header + records)


# --- golden bytes -------------------------------------------------------------------------


GOLDEN = bytes.fromhex(
    "0000000000000000"  # baseOffset 0
    "0000003a"  # batchLength 58 = 49 + 9 bytes of records
    "ffffffff"  # partitionLeaderEpoch -1
    "02"  # magic 2
    "233dad44"  # crc (CRC-32C of the rest; also checked with kafka-python below)
    "0000"  # attributes: no compression, CreateTime, not transactional, not control
    "00000000"  # lastOffsetDelta 0
    "00000000000003e8"  # baseTimestamp 1000
    "00000000000003e8"  # maxTimestamp 1000
    "ffffffffffffffff"  # producerId -1
    "ffff"  # producerEpoch -1
    "ffffffff"  # baseSequence -1
    "00000001"  # recordCount 1
    "10"  # record length 8 (zigzag 16)
    "00"  # attributes
    "00"  # timestampDelta 0
    "00"  # offsetDelta 0
    "01"  # keyLength -1 (null)
    "04"  # valueLength 2
    "6869"  # "hi"
    "00"  # headerCount 0
)


def test_golden_bytes_build() -> None:
    builder = RecordBatchBuilder()
    builder.append(1000, None, b"hi")
    assert len(builder) == 1
    assert builder.size_in_bytes == len(GOLDEN)
    assert builder.build() == GOLDEN


def test_golden_bytes_decode() -> None:
    decoded = decode_batch(GOLDEN)
    h = decoded.header
    assert (h.base_offset, h.batch_length, h.magic, h.crc, h.record_count) == (
        0,
        58,
        2,
        0x233DAD44,
        1,
    )
    assert (h.base_timestamp, h.max_timestamp, h.last_offset, h.size) == (1000, 1000, 0, 70)
    assert decoded.records == [Record(0, 1000, None, b"hi", ())]


def test_golden_headers_record() -> None:
    # record with key "k", value null, header ("é", b"") and ("n", null), timestamp delta -1
    builder = RecordBatchBuilder()
    builder.append(50, b"a", b"b")
    builder.append(49, b"k", None, [("é", b""), ("n", None)])
    batch = builder.build()
    second = bytes.fromhex(
        "1c"  # length 14
        "00"  # attributes
        "01"  # timestampDelta -1
        "02"  # offsetDelta 1
        "026b"  # key "k"
        "01"  # value null
        "04"  # 2 headers
        "04c3a9"  # key "é" (2 UTF-8 bytes)
        "00"  # value b""
        "026e"  # key "n"
        "01"  # value null
    )
    assert batch.endswith(second)
    decoded = decode_batch(batch)
    assert decoded.header.base_timestamp == 50 and decoded.header.max_timestamp == 50
    assert decoded.records[1] == Record(1, 49, b"k", None, (("é", b""), ("n", None)))


# --- round trips --------------------------------------------------------------------------

nullable = st.none() | st.binary(max_size=300)
header_st = st.tuples(st.text(max_size=10), nullable)
record_st = st.tuples(
    st.integers(min_value=0, max_value=2**42),
    nullable,
    nullable,
    st.lists(header_st, max_size=3).map(tuple),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(record_st, min_size=1, max_size=30),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(min_value=0, max_value=2**40),
)
def test_round_trip(
    records: list[tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]],
    codec: int,
    base_offset: int,
) -> None:
    batch = build_batch(records, compression=codec, base_offset=base_offset)
    decoded = decode_batch(batch)
    assert decoded.header.compression == codec
    assert decoded.header.record_count == len(records)
    assert decoded.header.base_timestamp == records[0][0]
    assert decoded.header.max_timestamp == max(r[0] for r in records)
    assert decoded.records == [
        Record(base_offset + i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(records)
    ]
    # the broker accepts it (after offset 0 is what a client sends) with every depth
    set_to_zero = bytearray(batch)
    set_base_offset(set_to_zero, 0)
    for deep in (None, True, False):
        assert validate_batch(set_to_zero, max_batch_size=MAX, deep=deep).record_count == len(
            records
        )
    # Record values go back through the builder unchanged
    assert build_batch(decoded.records, compression=codec, base_offset=base_offset) == batch


@pytest.mark.parametrize("codec", CODECS)
def test_producer_fields_and_flags_are_preserved(codec: int) -> None:
    batch = build_batch(
        [(5, b"k", b"v"), (6, None, None)],
        compression=codec,
        base_offset=7,
        producer_id=123456789012,
        producer_epoch=3,
        base_sequence=2**31 - 1,
        is_transactional=True,
        partition_leader_epoch=9,
    )
    h = decode_batch(batch).header
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (123456789012, 3, 2**31 - 1)
    assert (h.partition_leader_epoch, h.base_offset, h.last_offset) == (9, 7, 8)
    assert h.is_transactional and not h.is_control and h.compression == codec
    control = build_batch([(1, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], is_control=True)
    assert decode_batch(control).header.is_control


def test_log_append_time_stamping() -> None:
    batch = bytearray(build_batch([(100, None, b"a"), (300, None, b"b")]))
    stamp_log_append_time(batch, 999_000)
    decoded = decode_batch(batch)  # CRC was recomputed, or this would raise
    assert decoded.header.timestamp_type == 1 and decoded.header.max_timestamp == 999_000
    assert decoded.header.base_timestamp == 100
    assert [r.timestamp for r in decoded.records] == [999_000, 999_000]
    with pytest.raises(TypeError):
        stamp_log_append_time(memoryview(bytes(batch)), 1)


def test_builder_log_append_time_and_errors() -> None:
    batch = build_batch([(5, None, b"x")], timestamp_type=1)
    assert decode_batch(batch).header.timestamp_type == 1
    with pytest.raises(ValueError):
        RecordBatchBuilder().build()
    with pytest.raises(ValueError):
        RecordBatchBuilder(compression=5)
    with pytest.raises(ValueError):
        RecordBatchBuilder(timestamp_type=2)
    with pytest.raises(ValueError):
        build_batch([(0, None, b"x"), (2**64, None, b"y")])


def test_large_values_and_many_records() -> None:
    big = bytes(range(256)) * 100  # 25.6 kB: multi-byte length varints
    records = [(i, str(i).encode(), big if i % 1000 == 0 else b"v") for i in range(10_000)]
    decoded = decode_batch(build_batch(records, compression=4))
    assert len(decoded.records) == 10_000
    assert decoded.records[9999].offset == 9999 and decoded.records[9999].key == b"9999"
    assert decoded.records[1000].value == big


def test_iter_records_over_back_to_back_batches_and_partial_tail() -> None:
    a = build_batch([(1, None, b"a"), (2, None, b"b")], base_offset=0)
    b = build_batch([(3, None, b"c")], base_offset=2, compression=2)
    got = [(h.base_offset, r.offset, r.value) for h, r in iter_records(a + b + b[:30])]
    assert got == [(0, 0, b"a"), (0, 1, b"b"), (2, 2, b"c")]
    with pytest.raises(CorruptRecordError):
        list(iter_records(a + b + b[:30], allow_partial_tail=False))
    # a bad CRC in the second batch is reported at its absolute position
    bad = bytearray(a + b)
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError) as info:
        list(iter_records(bad))
    assert (info.value.field, info.value.position) == ("crc", len(a) + CRC_OFFSET)


# --- malformed input: each class, its field, position and Kafka error -----------------------

VALID = build_batch([(10, b"key", b"value", [("h", b"x")]), (11, None, b"v2")])


def error_of(
    batch: bytes, *, deep: bool | None = True, from_client: bool = True
) -> CorruptRecordError:
    with pytest.raises(CorruptRecordError) as info:
        validate_batch(batch, max_batch_size=MAX, deep=deep, from_client=from_client)
    return info.value


def test_valid_batch_is_accepted() -> None:
    header = validate_batch(VALID, max_batch_size=MAX, deep=True)
    assert header.record_count == 2


@pytest.mark.parametrize(
    ("batch", "field", "position", "kafka"),
    [
        (VALID[:60], "header", 0, errors.CorruptMessage),
        (b"", "header", 0, errors.CorruptMessage),
        (
            patch(VALID, MAGIC_OFFSET, ">b", 1, crc=False),
            "magic",
            MAGIC_OFFSET,
            errors.InvalidRecord,
        ),
        (
            patch(VALID, LENGTH_OFFSET, ">i", 48),
            "batchLength",
            LENGTH_OFFSET,
            errors.CorruptMessage,
        ),
        (
            patch(VALID, LENGTH_OFFSET, ">i", -1),
            "batchLength",
            LENGTH_OFFSET,
            errors.CorruptMessage,
        ),
        (VALID[:-1], "batchLength", LENGTH_OFFSET, errors.CorruptMessage),
        (VALID + b"\x00", "batchLength", LENGTH_OFFSET, errors.CorruptMessage),
        (patch(VALID, CRC_OFFSET, ">I", 0, crc=False), "crc", CRC_OFFSET, errors.CorruptMessage),
        (
            patch(VALID, ATTRIBUTES_OFFSET, ">h", 5),
            "attributes",
            ATTRIBUTES_OFFSET,
            errors.UnsupportedCompressionType,
        ),
        (patch(VALID, 0, ">q", 42, crc=False), "baseOffset", 0, errors.InvalidRecord),
        (
            patch(VALID, ATTRIBUTES_OFFSET, ">h", ATTR_CONTROL_MASK),
            "isControl",
            ATTRIBUTES_OFFSET,
            errors.InvalidRecord,
        ),
        (
            patch(VALID, LAST_OFFSET_DELTA_OFFSET, ">i", 5),
            "lastOffsetDelta",
            LAST_OFFSET_DELTA_OFFSET,
            errors.InvalidRecord,
        ),
        (
            patch(patch(VALID, RECORD_COUNT_OFFSET, ">i", 0), LAST_OFFSET_DELTA_OFFSET, ">i", -1),
            "recordCount",
            RECORD_COUNT_OFFSET,
            errors.InvalidRecord,
        ),
    ],
    ids=[
        "short-header",
        "empty",
        "magic",
        "batchLength-small",
        "batchLength-negative",
        "truncated",
        "trailing",
        "crc",
        "codec5",
        "baseOffset",
        "control-from-client",
        "lastOffsetDelta",
        "zero-records",
    ],
)
def test_header_level_errors(
    batch: bytes, field: str, position: int, kafka: type[errors.KafkaError]
) -> None:
    for deep in (False, None, True):
        exc = error_of(batch, deep=deep)
        assert (exc.field, exc.position) == (field, position)
        assert kafka_error_for(exc) is kafka


def test_too_large() -> None:
    with pytest.raises(CorruptRecordError) as info:
        validate_batch(VALID, max_batch_size=len(VALID) - 1)
    assert info.value.field == "batchSize"
    assert kafka_error_for(info.value) is errors.MessageTooLarge
    assert validate_batch(VALID, max_batch_size=len(VALID)).record_count == 2


def test_record_count_impossible_for_the_bytes_is_caught_shallow() -> None:
    bad = patch(patch(VALID, RECORD_COUNT_OFFSET, ">i", 1000), LAST_OFFSET_DELTA_OFFSET, ">i", 999)
    assert error_of(bad, deep=False).field == "recordCount"


def test_from_broker_relaxes_client_rules() -> None:
    moved = patch(VALID, 0, ">q", 42, crc=False)
    assert validate_batch(moved, max_batch_size=MAX, from_client=False).base_offset == 42
    # a compacted batch: offsets 0..4, only 2 records left, last delta 3
    compacted = wrap(raw_record(fields(od=0)) + raw_record(fields(od=3)), count=2, last_delta=4)
    validate_batch(compacted, max_batch_size=MAX, from_client=False, deep=True)
    assert [r.offset for r in decode_batch(compacted).records] == [0, 3]
    assert error_of(compacted).field == "lastOffsetDelta"
    assert error_of(patch(VALID, RECORD_COUNT_OFFSET, ">i", 3), from_client=False).field == (
        "recordCount"
    )


GOOD = raw_record(fields())


@pytest.mark.parametrize(
    ("batch", "field", "position"),
    [
        # truncated varint: the record length's continuation bit runs off the end
        (wrap(b"\x80", count=1), "record.length", RECORDS_OFFSET),
        (wrap(GOOD + b"\xff\xff", count=2), "record.length", RECORDS_OFFSET + len(GOOD)),
        # a varint longer than 5 bytes
        (wrap(b"\xff\xff\xff\xff\xff\x01" + b"\x00" * 5, count=1), "record.length", RECORDS_OFFSET),
        (
            wrap(raw_record(fields(), length=-3) + b"\x00" * 8, count=1),
            "record.length",
            RECORDS_OFFSET,
        ),
        (wrap(raw_record(fields(), length=200), count=1), "record.length", RECORDS_OFFSET),
        # fields take more or fewer bytes than the record length says
        (
            wrap(raw_record(fields() + b"\x00", length=len(fields()) + 1), count=1),
            "record.length",
            61,
        ),
        # recordCount says more records than there are, or fewer
        (wrap(GOOD, count=2), "recordCount", RECORDS_OFFSET + len(GOOD)),
        (wrap(GOOD + raw_record(fields(od=1)), count=1), "recordCount", RECORDS_OFFSET + len(GOOD)),
        # record too short to hold its attributes / timestamp
        (wrap(b"\x00", count=1), "record.attributes", RECORDS_OFFSET + 1),
        (wrap(raw_record(b"\x00"), count=1), "record.timestampDelta", RECORDS_OFFSET + 2),
        # offsetDeltas must be 0.. increasing up to lastOffsetDelta
        (wrap(raw_record(fields(od=1)), count=1), "record.offsetDelta", RECORDS_OFFSET + 3),
        (wrap(GOOD + GOOD, count=2), "record.offsetDelta", RECORDS_OFFSET + len(GOOD) + 3),
        (wrap(raw_record(fields(od=-1)), count=1), "record.offsetDelta", RECORDS_OFFSET + 3),
        # negative and overrunning key/value lengths
        (
            wrap(raw_record(b"\x00\x00\x00" + encode_varint(-2) + b"\x01\x00"), count=1),
            "record.keyLength",
            RECORDS_OFFSET + 4,
        ),
        (
            wrap(raw_record(b"\x00\x00\x00" + encode_varint(50) + b"ab\x01\x00"), count=1),
            "record.keyLength",
            RECORDS_OFFSET + 4,
        ),
        (
            wrap(raw_record(b"\x00\x00\x00\x01" + encode_varint(9) + b"ab\x00"), count=1),
            "record.valueLength",
            RECORDS_OFFSET + 5,
        ),
        # headers: negative count, null key, bad UTF-8 key, overrunning value
        (
            wrap(raw_record(fields(headers=encode_varint(-1))), count=1),
            "record.headerCount",
            61 + 7,
        ),
        (
            wrap(raw_record(fields(headers=b"\x02\x01\x00")), count=1),
            "record.headerKeyLength",
            61 + 8,
        ),
        (
            wrap(raw_record(fields(headers=b"\x02\x04\xc3\x28\x00")), count=1),
            "record.headerKey",
            61 + 8,
        ),
        (
            wrap(raw_record(fields(headers=b"\x02\x02h\x10ab")), count=1),
            "record.headerValueLength",
            61 + 10,
        ),
        (
            wrap(raw_record(fields(headers=b"\x7e\x02h\x00")), count=1),
            "record.headerCount",
            61 + 7,
        ),
        # a varint beyond int32
        (
            wrap(raw_record(b"\x00\x00" + b"\xff\xff\xff\xff\x7f" + b"\x01\x01\x00"), count=1),
            "record.offsetDelta",
            RECORDS_OFFSET + 3,
        ),
    ],
    ids=[
        "truncated-varint",
        "truncated-varint-second",
        "varint-too-long",
        "negative-length",
        "length-overrun",
        "length-mismatch",
        "count-too-high",
        "count-too-low",
        "no-attributes",
        "no-timestamp",
        "offsetDelta-start",
        "offsetDelta-repeat",
        "offsetDelta-negative",
        "key-negative",
        "key-overrun",
        "value-overrun",
        "headers-negative",
        "header-key-null",
        "header-key-utf8",
        "header-value-overrun",
        "headers-count-huge",
        "varint-int32-range",
    ],
)
def test_record_level_errors(batch: bytes, field: str, position: int) -> None:
    with pytest.raises(CorruptRecordError) as info:
        decode_batch(batch)
    assert (info.value.field, info.value.position) == (field, position)
    assert kafka_error_for(info.value) is errors.InvalidRecord
    with pytest.raises(CorruptRecordError) as info:
        list(iter_records(batch))
    assert (info.value.field, info.value.position) == (field, position)
    # validate_batch: the same, unless its cheap guard "recordCount minimal records cannot fit
    # in the bytes present" fires first (on these tiny hand-made records it may)
    exc = error_of(batch, deep=True)
    assert (exc.field, exc.position) in ((field, position), ("recordCount", RECORD_COUNT_OFFSET))
    assert kafka_error_for(exc) is errors.InvalidRecord
    # the shallow check passes over record damage (header and CRC are fine), unless the
    # count is impossible for the bytes present
    if field != "recordCount":
        try:
            validate_batch(batch, max_batch_size=MAX, deep=False)
        except CorruptRecordError as exc2:
            assert exc2.field == "recordCount"


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_damage(codec: int) -> None:
    from sluice.protocol import compression

    garbage = wrap(b"\x00not compressed at all" * 3, count=1, codec=codec)
    for deep in (None, True):
        exc = error_of(garbage, deep=deep)
        assert (exc.field, exc.position) == ("records", RECORDS_OFFSET)
        assert kafka_error_for(exc) is errors.CorruptMessage
    # the default skips nothing for compressed batches; deep=False skips decompression
    assert validate_batch(garbage, max_batch_size=MAX, deep=False).compression == codec
    # well compressed, but the record framing inside is bad: the default skim catches it, with
    # positions in the decompressed data
    short = wrap(compression.compress(codec, GOOD), count=2, codec=codec)
    exc = error_of(short, deep=None)
    assert (exc.field, exc.position) == ("recordCount", len(GOOD))
    assert "decompressed" in str(exc)
    # framing fine, a field inside bad (offsetDelta repeated): only deep=True walks that far
    inner = wrap(compression.compress(codec, GOOD + GOOD), count=2, codec=codec)
    assert validate_batch(inner, max_batch_size=MAX).record_count == 2
    exc = error_of(inner, deep=True)
    assert (exc.field, exc.position) == ("record.offsetDelta", len(GOOD) + 3)
    assert "decompressed" in str(exc)


def test_kafka_error_for_unknown_field() -> None:
    assert kafka_error_for(CorruptRecordError("x")) is errors.CorruptMessage


# --- fuzzing ------------------------------------------------------------------------------

SAMPLES = [
    build_batch([(i, b"k" * i, b"v" * (i * 3), [(f"h{i}", b"x")]) for i in range(5)], compression=c)
    for c in CODECS
]


def _only_protocol_errors(data: bytes | bytearray) -> None:
    for call in (
        lambda: decode_batch(data),
        lambda: validate_batch(data, max_batch_size=MAX, deep=True),
        lambda: validate_batch(data, max_batch_size=MAX, deep=None, from_client=False),
        lambda: list(iter_records(data)),
        lambda: list(iter_records(data, allow_partial_tail=False)),
    ):
        # anything but CorruptRecordError / ProtocolError (IndexError, struct.error,
        # UnicodeDecodeError, a codec's own exception) fails the test
        with contextlib.suppress(ProtocolError):
            call()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_random_bytes(data: bytes) -> None:
    _only_protocol_errors(data)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=150))
def test_fuzz_random_records_behind_a_valid_header(records: bytes) -> None:
    # random record bytes with a correct CRC: this gets past the header checks into the walk
    for count in (1, 3):
        _only_protocol_errors(wrap(records, count=count))


@settings(max_examples=300, deadline=None)
@given(
    sample=st.sampled_from(SAMPLES),
    flips=st.lists(
        st.tuples(st.integers(min_value=0), st.integers(0, 255)), min_size=1, max_size=4
    ),
    cut=st.none() | st.integers(min_value=0),
    recompute_crc=st.booleans(),
)
def test_fuzz_mutated_valid_batches(
    sample: bytes, flips: list[tuple[int, int]], cut: int | None, recompute_crc: bool
) -> None:
    buf = bytearray(sample)
    for where, byte in flips:
        buf[where % len(buf)] = byte
    if cut is not None:
        del buf[cut % len(buf) :]
    if recompute_crc and len(buf) >= HEADER_SIZE:
        buf = bytearray(fix_crc(buf))
    _only_protocol_errors(buf)


# Uncompressed batches for the walk comparison: small fields (one-byte varints) and fields
# whose lengths and deltas take two and three varint bytes (the fast walk inlines two).
WALK_SAMPLES = [
    SAMPLES[0],
    build_batch(
        [
            (1000 * i, b"k" * (60 * i), b"v" * (70 * i + 9000 * (i == 2)), [("h", b"x")] * (i % 2))
            for i in range(4)
        ]
    ),
]


@settings(max_examples=300, deadline=None)
@given(
    sample=st.sampled_from(WALK_SAMPLES),
    flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=3),
    cut=st.none() | st.integers(min_value=0),
    strict=st.booleans(),
)
def test_fast_and_careful_record_walks_agree(
    sample: bytes, flips: list[tuple[int, int]], cut: int | None, strict: bool
) -> None:
    # The decoder walks records optimistically and re-walks carefully only to explain a
    # rejection: both must accept exactly the same inputs, with the same result.
    from sluice.protocol import records as r

    header = r.parse_header(sample)
    data = bytearray(sample[RECORDS_OFFSET:])
    for where, byte in flips:
        data[where % len(data)] = byte
    if cut is not None:
        del data[cut % (len(data) + 1) :]
    section = bytes(data)
    try:
        fast: list[Record] | None = list(
            map(Record, *r._decode_columns_fast(header, section, strict))
        )
    except (r._Malformed, IndexError, UnicodeDecodeError):
        fast = None
    try:
        careful: list[Record] | None = r._decode_records_careful(
            header, section, 0, "", strict_count=strict
        )
    except CorruptRecordError:
        careful = None
    assert fast == careful


@pytest.mark.parametrize("log_append_time", [False, True])
@pytest.mark.parametrize("sample", [*SAMPLES, *WALK_SAMPLES[1:]])
def test_columns_hold_the_records(sample: bytes, log_append_time: bool) -> None:
    batch = bytearray(sample)
    set_base_offset(batch, 1234)
    if log_append_time:
        stamp_log_append_time(batch, 777)
    records = decode_batch(batch).records
    columns = decode_batch_columns(batch)
    assert len(records) >= 4
    assert columns.offsets == [r.offset for r in records]
    assert columns.timestamps == [r.timestamp for r in records]
    assert columns.keys == [r.key for r in records]
    assert columns.values == [r.value for r in records]
    assert columns.headers == [r.headers for r in records]
    assert (not log_append_time) or set(columns.timestamps) == {777}


@settings(max_examples=100, deadline=None)
@given(
    sample=st.sampled_from(SAMPLES),
    where=st.integers(min_value=0),
    byte=st.integers(0, 255),
)
def test_columns_fail_like_records(sample: bytes, where: int, byte: int) -> None:
    # the same checks: a damaged batch (CRC fixed up) fails both ways with the same field/position
    buf = bytearray(sample)
    buf[RECORDS_OFFSET + where % (len(buf) - RECORDS_OFFSET)] = byte
    buf = bytearray(fix_crc(buf))
    outcomes: list[tuple[str | None, int | None, str] | None] = []
    for decode in (decode_batch, decode_batch_columns):
        try:
            decode(buf)
            outcomes.append(None)
        except CorruptRecordError as exc:
            outcomes.append((exc.field, exc.position, str(exc)))
    assert outcomes[0] == outcomes[1]


@settings(max_examples=150, deadline=None)
@given(
    records=st.binary(max_size=120),
    codec=st.sampled_from(CODECS[1:]),
    count=st.integers(min_value=1, max_value=4),
)
def test_fuzz_random_records_inside_valid_compression(
    records: bytes, codec: int, count: int
) -> None:
    # decompresses fine, so the default validation's framing skim and the walks see garbage
    from sluice.protocol import compression

    batch = wrap(compression.compress(codec, records), count=count, codec=codec)
    _only_protocol_errors(batch)
    try:
        validate_batch(batch, max_batch_size=MAX)
    except CorruptRecordError as exc:
        assert exc.field == "recordCount" or (exc.field or "").startswith("record.")


@settings(max_examples=60, deadline=None)
@given(records=st.lists(record_st, min_size=1, max_size=5))
def test_max_record_size_bounds_what_append_adds(
    records: list[tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]],
) -> None:
    builder = RecordBatchBuilder()
    for ts, key, value, headers in records:
        before = builder.size_in_bytes
        builder.append(ts, key, value, headers)
        added = builder.size_in_bytes - before
        assert added <= RecordBatchBuilder.max_record_size(key, value, headers)
        assert added >= 7 + len(key or b"") + len(value or b"")


def test_producer_state_set_at_drain_and_rebuild() -> None:
    builder = RecordBatchBuilder(compression=2)
    builder.append(1, b"k", b"v")
    first = decode_batch(builder.build())
    builder.producer_id, builder.producer_epoch, builder.base_sequence = 42, 0, 100
    second = decode_batch(builder.build())
    assert (first.header.producer_id, first.header.base_sequence) == (-1, -1)
    assert (second.header.producer_id, second.header.base_sequence) == (42, 100)
    assert first.records == second.records


# ---------------------------------------------------------------- cleaner output (retained_batch)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    codec=st.sampled_from(CODECS),
    log_append_time=st.booleans(),
    timestamps=st.lists(st.integers(0, 10**12), min_size=1, max_size=12),
    keep=st.lists(st.booleans(), min_size=12, max_size=12),
    horizon=st.one_of(st.none(), st.integers(0, 10**13)),
    producer=st.booleans(),
)
def test_retained_batch_keeps_offsets_timestamps_and_header_fields(
    codec: int,
    log_append_time: bool,
    timestamps: list[int],
    keep: list[bool],
    horizon: int | None,
    producer: bool,
) -> None:
    """A cleaned batch is the original with some records gone: same base offset, same last
    offset (the producer's last sequence), every kept record as it was; it decodes and passes
    the broker's deep validation of stored batches."""
    from sluice.protocol.records import delete_horizon_ms, parse_header, retained_batch

    records = [
        (ts, b"k%d" % i, None if i % 3 == 2 else b"v%d" % i, [("h", b"%d" % i)])
        for i, ts in enumerate(timestamps)
    ]
    original = bytearray(
        build_batch(
            records,
            compression=codec,
            timestamp_type=1 if log_append_time else 0,
            producer_id=7 if producer else -1,
            producer_epoch=2 if producer else -1,
            base_sequence=40 if producer else -1,
            partition_leader_epoch=5,
        )
    )
    set_base_offset(original, 1000)
    if log_append_time:
        stamp_log_append_time(original, 123456)
    header = parse_header(original)
    decoded = decode_batch(original).records
    kept = [r for r, k in zip(decoded, keep, strict=False) if k]
    cleaned = retained_batch(header, kept, delete_horizon_ms=horizon)
    new = validate_batch(cleaned, max_batch_size=MAX, from_client=False, deep=True)
    assert (new.base_offset, new.last_offset_delta) == (1000, header.last_offset_delta)
    assert new.record_count == len(kept)
    assert (new.producer_id, new.producer_epoch, new.base_sequence) == (
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
    )
    assert new.partition_leader_epoch == 5
    assert new.timestamp_type == header.timestamp_type
    assert decode_batch(cleaned).records == kept
    if kept:
        assert new.compression == codec
        assert delete_horizon_ms(new) == horizon
        expected_max = 123456 if log_append_time else max(r.timestamp for r in kept)
        assert new.max_timestamp == expected_max
    else:  # Kafka's empty batch: header only, the original maxTimestamp
        assert len(cleaned) == HEADER_SIZE
        assert (new.compression, new.base_timestamp) == (0, -1)
        assert new.max_timestamp == header.max_timestamp
        assert delete_horizon_ms(new) is None
