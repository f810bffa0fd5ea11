"""RecordBatch interop with codecs nobody here wrote: kafka-python and aiokafka (both its
Cython reader/builder and its pure-Python ones).

* batches Sluice builds are read by theirs, CRC included;
* batches theirs build are read by ours unchanged (and pass the broker's validation);
for every codec each library supports in this environment (kafka-python has only gzip here: its
snappy/lz4/zstd need packages we do not install; aiokafka has all four through cramjam).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import aiokafka.codec
import pytest
from aiokafka.record import default_records as aio_default
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.protocol import compression
from sluice.protocol.records import (
    Record,
    RecordBatchBuilder,
    build_batch,
    decode_batch,
    iter_records,
    stamp_log_append_time,
    validate_batch,
)

# kafka-python's package __init__ uses importlib.resources.read_text, deprecated in 3.11; our
# pytest turns warnings into errors, so import it with that one warning silenced.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.codec
    from kafka.record.default_records import DefaultRecordBatch as KpBatch
    from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

pytestmark = pytest.mark.interop

MAX = 1 << 30
ALL = [0, 1, 2, 3, 4]
_HAS: dict[Any, list[Callable[[], bool]]] = {
    kafka.codec: [
        lambda: True,
        kafka.codec.has_gzip,
        kafka.codec.has_snappy,
        kafka.codec.has_lz4,
        kafka.codec.has_zstd,
    ],
    aiokafka.codec: [
        lambda: True,
        aiokafka.codec.has_gzip,
        aiokafka.codec.has_snappy,
        aiokafka.codec.has_lz4,
        aiokafka.codec.has_zstd,
    ],
}
KP_CODECS = [c for c in ALL if _HAS[kafka.codec][c]()]
AIO_CODECS = [c for c in ALL if _HAS[aiokafka.codec][c]()]

AIO_READERS = {
    "cython": aio_default.DefaultRecordBatch,
    "python": aio_default._DefaultRecordBatchPy,
}
AIO_BUILDERS = {
    "cython": aio_default.DefaultRecordBatchBuilder,
    "python": aio_default._DefaultRecordBatchBuilderPy,
}

Sample = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]
SAMPLE: list[Sample] = [
    (1_700_000_000_000, b"key-0", b"value-0" * 40, (("trace", b"abc"), ("é-utf8", None))),
    (1_700_000_000_005, None, b"no key", ()),
    (1_699_999_999_990, b"k2", None, (("x", b""),)),  # earlier timestamp: negative delta
    (1_700_000_000_100, b"", b"", ()),
]
SAMPLE += [
    (1_700_000_001_000 + i, str(i).encode(), bytes(range(i % 256)) * 3, ()) for i in range(200)
]


def _theirs(batch: Any) -> list[tuple[int, int, bytes | None, bytes | None, tuple[Any, ...]]]:
    out = []
    for rec in batch:
        headers = tuple((k, None if v is None else bytes(v)) for k, v in rec.headers)
        key = None if rec.key is None else bytes(rec.key)
        value = None if rec.value is None else bytes(rec.value)
        out.append((rec.offset, rec.timestamp, key, value, headers))
    return out


def _ours(records: list[Record]) -> list[tuple[int, int, bytes | None, bytes | None, Any]]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]


def _sluice_batch(codec: int, **kw: Any) -> bytes:
    return build_batch(SAMPLE, compression=codec, **kw)


# --- Sluice writes, they read ---------------------------------------------------------------


@pytest.mark.parametrize("codec", KP_CODECS)
def test_kafka_python_reads_sluice_batches(codec: int) -> None:
    batch = _sluice_batch(
        codec, base_offset=1000, producer_id=77, producer_epoch=2, base_sequence=10
    )
    theirs = KpBatch(bytearray(batch))
    assert theirs.validate_crc()
    assert (theirs.base_offset, theirs.magic, theirs.compression_type) == (1000, 2, codec)
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (77, 2, 10)
    assert theirs.max_timestamp == max(r[0] for r in SAMPLE)
    assert theirs.last_offset == 1000 + len(SAMPLE) - 1
    assert _theirs(theirs) == _ours(decode_batch(batch).records)
    assert [r[2] for r in _theirs(KpBatch(bytearray(batch)))] == [r[1] for r in SAMPLE]


@pytest.mark.parametrize("impl", sorted(AIO_READERS))
@pytest.mark.parametrize("codec", AIO_CODECS)
def test_aiokafka_reads_sluice_batches(codec: int, impl: str) -> None:
    batch = _sluice_batch(codec, base_offset=5, is_transactional=True, producer_id=9)
    theirs = AIO_READERS[impl](batch)
    assert theirs.validate_crc()
    assert theirs.compression_type == codec and theirs.is_transactional
    assert theirs.next_offset == 5 + len(SAMPLE)
    expected = [
        (5 + i, ts, key, value, tuple(headers))
        for i, (ts, key, value, headers) in enumerate(SAMPLE)
    ]
    assert _theirs(theirs) == expected


def test_aiokafka_memory_records_reads_a_stream_of_sluice_batches() -> None:
    stream = b"".join(
        build_batch([(i, None, f"v{i}".encode())], base_offset=i, compression=i % 5)
        for i in range(10)
    )
    records = AioMemoryRecords(stream)
    values = []
    while records.has_next():
        batch = records.next_batch()
        assert batch is not None and batch.validate_crc()
        values += [bytes(r.value) for r in batch]
    assert values == [f"v{i}".encode() for i in range(10)]


@pytest.mark.parametrize("impl", sorted(AIO_READERS))
def test_aiokafka_sees_log_append_time(impl: str) -> None:
    batch = bytearray(_sluice_batch(0))
    stamp_log_append_time(batch, 1_800_000_000_000)
    theirs = AIO_READERS[impl](bytes(batch))
    assert theirs.validate_crc() and theirs.timestamp_type == 1
    assert {r.timestamp for r in theirs} == {1_800_000_000_000}
    assert KpBatch(batch).validate_crc()


# --- they write, Sluice reads ---------------------------------------------------------------


def _fill(builder: Any) -> bytes:
    for offset, (ts, key, value, headers) in enumerate(SAMPLE):
        assert builder.append(offset, ts, key, value, list(headers)) is not None
    return bytes(builder.build())


@pytest.mark.parametrize("codec", KP_CODECS)
def test_sluice_reads_kafka_python_batches(codec: int) -> None:
    batch = _fill(KpBuilder(2, codec, False, 123, 4, 0, batch_size=1 << 24))
    decoded = decode_batch(batch)
    assert decoded.header.producer_id == 123 and decoded.header.producer_epoch == 4
    assert decoded.header.compression == codec
    assert _ours(decoded.records) == _theirs(KpBatch(bytearray(batch)))
    assert [(r.key, r.value, r.headers) for r in decoded.records] == [s[1:] for s in SAMPLE]
    # what the broker would do with it
    assert validate_batch(batch, max_batch_size=MAX, deep=True).record_count == len(SAMPLE)


@pytest.mark.parametrize("impl", sorted(AIO_BUILDERS))
@pytest.mark.parametrize("codec", AIO_CODECS)
def test_sluice_reads_aiokafka_batches(codec: int, impl: str) -> None:
    batch = _fill(AIO_BUILDERS[impl](2, codec, True, 55, 1, 7, 1 << 24))
    decoded = decode_batch(batch)
    h = decoded.header
    assert (h.compression, h.is_transactional, h.base_sequence) == (codec, True, 7)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded.records] == [
        (i, ts, key, value, headers) for i, (ts, key, value, headers) in enumerate(SAMPLE)
    ]
    assert validate_batch(batch, max_batch_size=MAX).record_count == len(SAMPLE)
    assert [r.value for _, r in iter_records(batch + batch[:20])] == [s[2] for s in SAMPLE]


@pytest.mark.parametrize("codec", [c for c in (2,) if c in AIO_CODECS])
def test_raw_snappy_from_other_clients(codec: int) -> None:
    # librdkafka-style raw snappy block (aiokafka can write it with xerial_compatible=False)
    inner = RecordBatchBuilder()
    for ts, key, value, headers in SAMPLE[:3]:
        inner.append(ts, key, value, headers)
    plain = inner.build()
    raw = aiokafka.codec.snappy_encode(plain[61:], xerial_compatible=False)
    assert compression.decompress(codec, raw) == plain[61:]
    assert aiokafka.codec.snappy_decode(compression.compress(codec, plain[61:])) == plain[61:]


@pytest.mark.parametrize("codec", AIO_CODECS)
def test_codec_bytes_interoperate_both_ways(codec: int) -> None:
    encode = {
        0: bytes,
        1: aiokafka.codec.gzip_encode,
        2: aiokafka.codec.snappy_encode,
        3: aiokafka.codec.lz4_encode,
        4: aiokafka.codec.zstd_encode,
    }[codec]
    decode = {
        0: bytes,
        1: aiokafka.codec.gzip_decode,
        2: aiokafka.codec.snappy_decode,
        3: aiokafka.codec.lz4_decode,
        4: aiokafka.codec.zstd_decode,
    }[codec]
    data = b"".join(bytes([i % 251]) * (i % 17) for i in range(20_000))
    assert compression.decompress(codec, encode(data)) == data
    assert decode(compression.compress(codec, data)) == data


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=2**41),
            st.none() | st.binary(max_size=50),
            st.none() | st.binary(max_size=50),
            st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2),
        ),
        min_size=1,
        max_size=10,
    ),
    codec=st.sampled_from(AIO_CODECS),
)
def test_property_both_directions_with_aiokafka(
    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    codec: int,
) -> None:
    ours = build_batch([(t, k, v, tuple(h)) for t, k, v, h in records], compression=codec)
    theirs_reader = aio_default.DefaultRecordBatch(ours)
    assert theirs_reader.validate_crc()
    assert [r[2:4] for r in _theirs(theirs_reader)] == [(k, v) for _, k, v, _ in records]
    builder = aio_default.DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 24)
    for i, (t, k, v, h) in enumerate(records):
        builder.append(i, t, k, v, h)
    decoded = decode_batch(bytes(builder.build()))
    assert [(r.timestamp, r.key, r.value, list(r.headers)) for r in decoded.records] == records
