"""Primitive types of the Kafka protocol: readers and writers used by the schema engine.

Every field of every request and response is one of these types (names as in Kafka's
``clients/src/main/resources/common/message/*.json``):

==========  ===============================  ======================================================
type        classic (non-flexible) encoding  compact (flexible-version) encoding
==========  ===============================  ======================================================
bool        int8, 0 = false                  same
int8..64    big-endian two's complement      same
uint16      big-endian unsigned              same
float64     IEEE 754 big-endian              same
uuid        16 bytes                         same
string      int16 length + UTF-8, -1 = null  uvarint (length + 1) + UTF-8, 0 = null
bytes       int32 length + bytes, -1 = null  uvarint (length + 1) + bytes, 0 = null
records     as bytes                         as compact bytes
[]T         int32 count + items, -1 = null  uvarint (count + 1) + items, 0 = null
tagged      --                               uvarint count, then (uvarint tag, uvarint size,
                                             value) in ascending tag order
==========  ===============================  ======================================================

Readers take ``(buf, pos)`` and return ``(value, next_pos)``. ``buf`` may be ``bytes``,
``bytearray`` or ``memoryview``; the ``records`` readers return a ``memoryview`` slice of ``buf``
without copying when ``buf`` is a memoryview (the Produce hot path). Malformed input raises
:class:`~sluice.protocol.errors.ProtocolError` naming what was being read and the byte position; no
``IndexError``, ``struct.error`` or ``UnicodeDecodeError`` escapes.

Writers append to a ``bytearray``. This module is sans-I/O and holds no state.
"""

from __future__ import annotations

import base64
import binascii
import struct
import uuid
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from .errors import ProtocolError
from .varint import Buffer, decode_unsigned_varint, encode_unsigned_varint

__all__ = [
    "BOOL",
    "FLOAT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "ONE_UUID",
    "UINT16",
    "ZERO_UUID",
    "Buffer",
    "RecordsPart",
    "parse_versions",
    "random_uuid",
    "uuid_from_str",
    "uuid_to_str",
]

# One struct per fixed-width type; the schema engine also builds combined structs for runs of
# consecutive fixed-width fields.
INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
FLOAT64 = struct.Struct(">d")
BOOL = struct.Struct(">?")

#: struct format character and default of each fixed-width type.
FIXED_FORMATS: dict[str, str] = {
    "bool": "?",
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "float64": "d",
}

ZERO_UUID = uuid.UUID(int=0)
#: Kafka's ``Uuid.ONE_UUID`` (= ``METADATA_TOPIC_ID``): reserved, never a topic's id.
ONE_UUID = uuid.UUID(int=1)


def uuid_to_str(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes without padding (22 chars),
    the form of topic ids and cluster ids in ZooKeeper, ``partition.metadata``,
    ``meta.properties`` and every tool's output."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def uuid_from_str(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString``; ``ValueError`` if ``text`` is not a base64 UUID."""
    if len(text) > 24:
        raise ValueError(f"{text[:24]!r}...: longer than a base64 UUID")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{text!r}: not URL-safe base64") from exc
    if len(raw) != 16:
        raise ValueError(f"{text!r}: {len(raw)} bytes, a UUID has 16")
    return uuid.UUID(bytes=raw)


def random_uuid() -> uuid.UUID:
    """Kafka's ``Uuid.randomUuid``: a random (version 4) id that is neither reserved (zero,
    one) nor printed with a leading ``-`` (a command line would take it for an option)."""
    while True:
        value = uuid.uuid4()
        if value not in (ZERO_UUID, ONE_UUID) and not uuid_to_str(value).startswith("-"):
            return value


NULL_INT16 = b"\xff\xff"
NULL_INT32 = b"\xff\xff\xff\xff"


@runtime_checkable
class RecordsPart(Protocol):
    """A ``records`` value that is not in memory, e.g. the server's ``FetchSlice``.

    The encoder writes its length prefix (``size``) and then emits the object itself as a
    separate part of the encoded frame, so the server can ``sendfile`` it without copying.
    """

    @property
    def size(self) -> int: ...  # read-only, so a frozen dataclass (FetchSlice) is one


def parse_versions(spec: str) -> tuple[int, int] | None:
    """Parse a Kafka version range: ``"3+"``, ``"0-7"``, ``"5"`` or ``"none"`` (-> None).

    The upper bound of an open range is 32767 (the largest int16 version).
    """
    spec = spec.strip()
    if spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), 0x7FFF
    if "-" in spec:
        lo, hi = spec.split("-", 1)
        return int(lo), int(hi)
    return int(spec), int(spec)


def _truncated(what: str, pos: int, need: int, buf: Buffer) -> ProtocolError:
    return ProtocolError(
        f"{what} at byte {pos} needs {need} bytes, only {max(len(buf) - pos, 0)} left"
    )


# --------------------------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------------------------


def read_fixed(st: struct.Struct, what: str, buf: Buffer, pos: int) -> tuple[Any, int]:
    """Read one fixed-width value (used for lone fields; runs are unpacked in one call)."""
    try:
        return st.unpack_from(buf, pos)[0], pos + st.size
    except struct.error:
        raise _truncated(what, pos, st.size, buf) from None


def read_uuid(buf: Buffer, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    if end > len(buf):
        raise _truncated("uuid", pos, 16, buf)
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


def _read_int32_len(buf: Buffer, pos: int, what: str) -> tuple[int, int]:
    try:
        return INT32.unpack_from(buf, pos)[0], pos + 4
    except struct.error:
        raise _truncated(f"{what} length", pos, 4, buf) from None


def _read_compact_len(buf: Buffer, pos: int) -> tuple[int, int]:
    """Compact length: uvarint holding length + 1; returns -1 for null."""
    raw, pos = decode_unsigned_varint(buf, pos)
    return raw - 1, pos


def _utf8(buf: Buffer, start: int, n: int, what: str) -> str:
    end = start + n
    if end > len(buf):
        raise _truncated(what, start, n, buf)
    try:
        return str(buf[start:end], "utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"{what} at byte {start} is not valid UTF-8: {exc.reason}") from None


# The classic readers below are on every request's path: they inline the length read instead of
# calling helpers (a Python call costs about as much as the rest of the function).
_I16 = INT16.unpack_from
_I32 = INT32.unpack_from


def read_string(buf: Buffer, pos: int) -> tuple[str, int]:
    try:
        n = _I16(buf, pos)[0]
    except struct.error:
        raise _truncated("string length", pos, 2, buf) from None
    if n < 0:
        raise ProtocolError(f"non-nullable string is null at byte {pos}")
    start = pos + 2
    end = start + n
    if end > len(buf):
        raise _truncated("string", start, n, buf)
    try:
        return str(buf[start:end], "utf-8"), end
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"string at byte {start} is not valid UTF-8: {exc.reason}") from None


def read_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    try:
        n = _I16(buf, pos)[0]
    except struct.error:
        raise _truncated("string length", pos, 2, buf) from None
    if n < 0:
        if n != -1:
            raise ProtocolError(f"string length {n} at byte {pos}")
        return None, pos + 2
    start = pos + 2
    end = start + n
    if end > len(buf):
        raise _truncated("string", start, n, buf)
    try:
        return str(buf[start:end], "utf-8"), end
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"string at byte {start} is not valid UTF-8: {exc.reason}") from None


def read_compact_string(buf: Buffer, pos: int) -> tuple[str, int]:
    start = pos
    n, pos = _read_compact_len(buf, pos)
    if n < 0:
        raise ProtocolError(f"non-nullable compact string is null at byte {start}")
    return _utf8(buf, pos, n, "compact string"), pos + n


def read_compact_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    n, pos = _read_compact_len(buf, pos)
    if n < 0:
        return None, pos
    return _utf8(buf, pos, n, "compact string"), pos + n


def _slice(buf: Buffer, start: int, n: int, what: str) -> Buffer:
    end = start + n
    if end > len(buf):
        raise _truncated(what, start, n, buf)
    return buf[start:end]


def read_bytes(buf: Buffer, pos: int) -> tuple[bytes, int]:
    n, pos = _read_int32_len(buf, pos, "bytes")
    if n < 0:
        raise ProtocolError(f"non-nullable bytes are null at byte {pos - 4}")
    return bytes(_slice(buf, pos, n, "bytes")), pos + n


def read_nullable_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    n, pos = _read_int32_len(buf, pos, "bytes")
    if n < 0:
        if n != -1:
            raise ProtocolError(f"bytes length {n} at byte {pos - 4}")
        return None, pos
    return bytes(_slice(buf, pos, n, "bytes")), pos + n


def read_compact_bytes(buf: Buffer, pos: int) -> tuple[bytes, int]:
    start = pos
    n, pos = _read_compact_len(buf, pos)
    if n < 0:
        raise ProtocolError(f"non-nullable compact bytes are null at byte {start}")
    return bytes(_slice(buf, pos, n, "compact bytes")), pos + n


def read_compact_nullable_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    n, pos = _read_compact_len(buf, pos)
    if n < 0:
        return None, pos
    return bytes(_slice(buf, pos, n, "compact bytes")), pos + n


# Zero-copy hot path: ``records`` come back as a slice of the input buffer (a memoryview of the
# request frame on the broker), never copied. The slice keeps the frame alive; the caller owns it.
def read_records(buf: Buffer, pos: int) -> tuple[Buffer | None, int]:
    try:
        n = _I32(buf, pos)[0]
    except struct.error:
        raise _truncated("records length", pos, 4, buf) from None
    start = pos + 4
    if n < 0:
        if n != -1:
            raise ProtocolError(f"records length {n} at byte {pos}")
        return None, start
    end = start + n
    if end > len(buf):
        raise _truncated("records", start, n, buf)
    return buf[start:end], end


def read_compact_records(buf: Buffer, pos: int) -> tuple[Buffer | None, int]:
    n, pos = _read_compact_len(buf, pos)
    if n < 0:
        return None, pos
    return _slice(buf, pos, n, "compact records"), pos + n


def read_array_len(buf: Buffer, pos: int, nullable: bool) -> tuple[int, int]:
    """Classic array count; -1 = null (only if ``nullable``). Bounded by the bytes left."""
    try:
        n = _I32(buf, pos)[0]
    except struct.error:
        raise _truncated("array length", pos, 4, buf) from None
    pos += 4
    if 0 <= n <= len(buf) - pos:
        return n, pos
    return _check_count(buf, pos, n, nullable, 4), pos


def read_compact_array_len(buf: Buffer, pos: int, nullable: bool) -> tuple[int, int]:
    start = pos
    n, pos = _read_compact_len(buf, pos)
    return _check_count(buf, pos, n, nullable, pos - start), pos


def _check_count(buf: Buffer, pos: int, n: int, nullable: bool, width: int) -> int:
    if n < 0:
        if n != -1 or not nullable:
            raise ProtocolError(f"array count {n} at byte {pos - width}")
        return -1
    # Every element takes at least one byte, so a count beyond the bytes left is garbage; checking
    # here stops a 4-byte frame from making us allocate a billion-entry list.
    if n > len(buf) - pos:
        raise ProtocolError(
            f"array count {n} at byte {pos - width} exceeds the {len(buf) - pos} bytes left"
        )
    return n


def read_fixed_array(
    st_char: str, width: int, buf: Buffer, pos: int, n: int
) -> tuple[list[Any], int]:
    """``n`` fixed-width items (e.g. ``[]int32``) in one unpack."""
    end = pos + n * width
    if end > len(buf):
        raise _truncated("array items", pos, n * width, buf)
    return list(struct.unpack_from(f">{n}{st_char}", buf, pos)), end


Reader = Callable[[Buffer, int], tuple[Any, int]]


def read_tagged_fields(
    buf: Buffer, pos: int, known: dict[int, Reader]
) -> tuple[dict[int, Any], int]:
    """Read a tagged-field section; returns ``{tag: value}`` for known tags, skips unknown ones.

    Tags must be strictly increasing (Kafka rejects duplicates and disorder), and a known tag's
    value must occupy exactly its declared size.
    """
    count, pos = decode_unsigned_varint(buf, pos)
    values: dict[int, Any] = {}
    last = -1
    for _ in range(count):
        tag_pos = pos
        tag, pos = decode_unsigned_varint(buf, pos)
        size, pos = decode_unsigned_varint(buf, pos)
        if tag <= last:
            raise ProtocolError(f"tagged field {tag} at byte {tag_pos} out of order")
        last = tag
        end = pos + size
        if end > len(buf):
            raise _truncated(f"tagged field {tag}", pos, size, buf)
        reader = known.get(tag)
        if reader is not None:
            value, vend = reader(buf[:end], pos)
            if vend != end:
                raise ProtocolError(
                    f"tagged field {tag} at byte {tag_pos} declares {size} bytes, used {vend - pos}"
                )
            values[tag] = value
        pos = end
    return values, pos


# --------------------------------------------------------------------------------------------
# Writers (append to ``out``)
# --------------------------------------------------------------------------------------------


def write_uuid(out: bytearray, value: uuid.UUID) -> None:
    out += value.bytes


def write_string(out: bytearray, value: str) -> None:
    data = value.encode()
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    out += INT16.pack(len(data))
    out += data


def write_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += NULL_INT16
    else:
        write_string(out, value)


def write_compact_string(out: bytearray, value: str) -> None:
    data = value.encode()
    out += encode_unsigned_varint(len(data) + 1)
    out += data


def write_compact_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += b"\x00"
    else:
        write_compact_string(out, value)


def write_bytes(out: bytearray, value: Buffer) -> None:
    out += INT32.pack(len(value))
    out += value


def write_nullable_bytes(out: bytearray, value: Buffer | None) -> None:
    if value is None:
        out += NULL_INT32
    else:
        write_bytes(out, value)


def write_compact_bytes(out: bytearray, value: Buffer) -> None:
    out += encode_unsigned_varint(len(value) + 1)
    out += value


def write_compact_nullable_bytes(out: bytearray, value: Buffer | None) -> None:
    if value is None:
        out += b"\x00"
    else:
        write_compact_bytes(out, value)


# Zero-copy hot path (Fetch responses): a ``records`` value that is not bytes-like but has a
# ``size`` (the server's FetchSlice, a region of a segment file) is not read into memory. Its
# length prefix goes into ``out``; then ``out`` so far and the object itself are appended to
# ``parts`` and ``out`` is emptied, so the server writes the bytes parts and sendfiles the rest.
def write_records(out: bytearray, parts: list[Any], value: Any) -> None:
    if value is None:
        out += NULL_INT32
    elif isinstance(value, bytes | bytearray | memoryview):
        out += INT32.pack(len(value))
        out += value
    else:
        out += INT32.pack(value.size)
        _split(out, parts, value)


def write_compact_records(out: bytearray, parts: list[Any], value: Any) -> None:
    if value is None:
        out += b"\x00"
    elif isinstance(value, bytes | bytearray | memoryview):
        out += encode_unsigned_varint(len(value) + 1)
        out += value
    else:
        out += encode_unsigned_varint(value.size + 1)
        _split(out, parts, value)


def _split(out: bytearray, parts: list[Any], value: Any) -> None:
    if value.size:
        parts.append(bytes(out))
        parts.append(value)
        out.clear()


def write_array_len(out: bytearray, n: int) -> None:
    out += INT32.pack(n)


def write_compact_array_len(out: bytearray, n: int) -> None:
    out += encode_unsigned_varint(n + 1)


def write_tagged_fields(out: bytearray, fields: list[tuple[int, bytes | bytearray]]) -> None:
    """Write a tagged-field section from ``(tag, encoded value)`` pairs in ascending tag order."""
    out += encode_unsigned_varint(len(fields))
    for tag, data in fields:
        out += encode_unsigned_varint(tag)
        out += encode_unsigned_varint(len(data))
        out += data
