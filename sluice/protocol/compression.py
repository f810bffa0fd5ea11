"""Compression codecs of RecordBatch v2 (attributes bits 0-2), sans-I/O.

When a batch is compressed, everything after its 61-byte header (the records) is one compressed
block; the header itself is never compressed. The codecs, and the exact byte format each Kafka
client writes and reads:

===== ====== ===================================================================================
 id   name   wire format
===== ====== ===================================================================================
 0    none   the records as they are
 1    gzip   RFC 1952 gzip stream (Java: GZIPOutputStream). Several members may follow each other.
 2    snappy the Java client writes snappy-java's *xerial* block framing (below); librdkafka and
             some other clients write one *raw* snappy block. Readers must accept both.
 3    lz4    the standard LZ4 frame format (for magic >= 1, KIP-57) with independent blocks: the
             Java reader decodes each block on its own, so linked blocks would not round-trip.
             64 KiB blocks, no content size or checksum; cramjam always adds block checksums
             (FLG 0x70), which the Java reader verifies and librdkafka's lz4f accepts.
 4    zstd   a standard zstd frame
 5-7  --     not assigned: :class:`CorruptRecordError` (``field="attributes"``); the broker
             answers UNSUPPORTED_COMPRESSION_TYPE (76)
===== ====== ===================================================================================

Xerial snappy framing (snappy-java ``SnappyOutputStream``)::

    header   16 bytes   0x82 'S' 'N' 'A' 'P' 'P' 'Y' 0x00, int32 version = 1, int32 compatible = 1
    blocks   repeated   int32 compressedLength (big-endian), then that many bytes of raw snappy,
                        each block holding at most 32 KiB of uncompressed input

We *write* xerial framing, byte for byte what the Java producer writes, so a Sluice-built
segment looks like a Kafka one; every consumer reads it (the Java client through snappy-java,
librdkafka through its snappy-java framing support, kafka-python/aiokafka by detecting the
header). We *read* both forms, telling them apart by the 8-byte magic. That is unambiguous: a
raw block starts with the varint of its uncompressed length (0x82 'S' would read as 10626)
followed by its first element, and 'N' (0x4E) is a copy tag, which cannot open a valid stream
(nothing to copy from yet).

All the work is done by ``cramjam`` (one well-kept Rust package for every codec, also used by
aiokafka) and the standard library's gzip; this module only adds the framing and turns every
codec's own exception types into :class:`CorruptRecordError` with ``field="records"``.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Callable

import cramjam

from .errors import CorruptRecordError

Buffer = bytes | bytearray | memoryview

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES: dict[int, str] = {
    NONE: "none",
    GZIP: "gzip",
    SNAPPY: "snappy",
    LZ4: "lz4",
    ZSTD: "zstd",
}

# Compression levels Kafka uses by default (KIP-390): gzip 6 (Deflater default), lz4 9, zstd 3.
GZIP_LEVEL = 6
LZ4_LEVEL = 9
ZSTD_LEVEL = 3

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, compatible version 1
XERIAL_BLOCK_SIZE = 32 * 1024  # snappy-java's default: uncompressed bytes per block
_BLOCK_LENGTH = struct.Struct(">i")


def _check_codec(codec: int) -> None:
    if codec not in CODEC_NAMES:
        raise CorruptRecordError(f"unknown compression codec {codec}", field="attributes")


def _gzip_compress(data: Buffer, level: int = GZIP_LEVEL) -> bytes:
    # mtime=0: the output depends on the input only (reproducible batches, golden tests).
    return gzip.compress(data, compresslevel=level, mtime=0)


def _snappy_compress(data: Buffer, _level: int = 0) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: Buffer) -> bytes:
    view = memoryview(data)
    if bytes(view[: len(XERIAL_MAGIC)]) != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    if len(view) < len(XERIAL_HEADER):
        raise CorruptRecordError(
            "truncated xerial snappy header", field="records", position=len(view)
        )
    parts = []
    position = len(XERIAL_HEADER)  # version fields are not checked: snappy-java ignores them too
    end = len(view)
    while position < end:
        if end - position < _BLOCK_LENGTH.size:
            raise CorruptRecordError(
                "truncated xerial snappy block length", field="records", position=position
            )
        (length,) = _BLOCK_LENGTH.unpack_from(view, position)
        position += _BLOCK_LENGTH.size
        if length < 0 or position + length > end:
            raise CorruptRecordError(
                f"xerial snappy block length {length} overruns the {end - position} bytes left",
                field="records",
                position=position - _BLOCK_LENGTH.size,
            )
        parts.append(bytes(cramjam.snappy.decompress_raw(view[position : position + length])))
        position += length
    return b"".join(parts)


def _lz4_compress(data: Buffer, level: int = LZ4_LEVEL) -> bytes:
    # Independent blocks and no content checksum: what Kafka's own KafkaLZ4BlockOutputStream
    # writes and what every Kafka reader accepts (KIP-57).
    compressor = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
    compressor.compress(data if isinstance(data, bytes) else bytes(data))  # wants bytes
    return bytes(compressor.finish())


def _zstd_compress(data: Buffer, level: int = ZSTD_LEVEL) -> bytes:
    return bytes(cramjam.zstd.compress(data, level=level))


_COMPRESSORS: dict[int, Callable[[Buffer, int], bytes]] = {
    GZIP: _gzip_compress,
    SNAPPY: _snappy_compress,
    LZ4: _lz4_compress,
    ZSTD: _zstd_compress,
}

#: The level each codec uses unless told otherwise (snappy has none).
DEFAULT_LEVELS: dict[int, int] = {GZIP: GZIP_LEVEL, SNAPPY: 0, LZ4: LZ4_LEVEL, ZSTD: ZSTD_LEVEL}

_DECOMPRESSORS: dict[int, Callable[[Buffer], bytes]] = {
    GZIP: gzip.decompress,
    SNAPPY: _snappy_decompress,
    LZ4: lambda data: bytes(cramjam.lz4.decompress(data)),
    ZSTD: lambda data: bytes(cramjam.zstd.decompress(data)),
}


def compress(codec: int, data: Buffer, level: int | None = None) -> bytes:
    """Compress the records section of a batch with ``codec`` (0-4); 0 returns ``data`` as bytes.

    ``level`` is the codec's level (a topic's ``compression.<codec>.level``, validated there);
    None: Kafka's default level of the codec."""
    _check_codec(codec)
    if codec == NONE:
        return bytes(data)
    return _COMPRESSORS[codec](data, DEFAULT_LEVELS[codec] if level is None else level)


def decompress(codec: int, data: Buffer) -> bytes:
    """Decompress a batch's records section. Garbage raises :class:`CorruptRecordError`
    (``field="records"``, position relative to ``data`` when known); an unknown codec raises it
    with ``field="attributes"``."""
    _check_codec(codec)
    if codec == NONE:
        return bytes(data)
    try:
        return _DECOMPRESSORS[codec](data)
    except CorruptRecordError:
        raise
    except Exception as exc:
        # Each library has its own error types (zlib.error, gzip.BadGzipFile, EOFError,
        # cramjam.DecompressionError, ...): whatever they raise on garbage is a corrupt batch.
        raise CorruptRecordError(
            f"{CODEC_NAMES[codec]} decompression failed: {exc}", field="records"
        ) from exc
