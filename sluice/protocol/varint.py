"""Variable-length integers of the Kafka protocol (protobuf encoding).

* unsigned varint: 7 bits a byte, little-endian groups, high bit = more bytes follow.
  Used by compact strings/arrays/bytes and tagged fields of flexible versions.
* signed varint / varlong: zigzag-mapped (0,-1,1,-2 -> 0,1,2,3) then unsigned. Used by records.

Decoders take a buffer and a position and return ``(value, next_position)``; malformed input
(running off the end, more than 5 / 10 bytes) raises :class:`ProtocolError` with the position.
"""

from __future__ import annotations

from .errors import ProtocolError

Buffer = bytes | bytearray | memoryview


def encode_unsigned_varint(value: int) -> bytes:
    if value < 0:
        raise ValueError(f"unsigned varint cannot hold {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_unsigned_varint(buf: Buffer, position: int, max_bytes: int = 5) -> tuple[int, int]:
    result = 0
    shift = 0
    start = position
    end = len(buf)
    while True:
        if position >= end:
            raise ProtocolError(f"varint runs past the end of the buffer at byte {start}")
        if position - start >= max_bytes:
            raise ProtocolError(f"varint longer than {max_bytes} bytes at byte {start}")
        byte = buf[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7


def zigzag_encode(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def zigzag_decode(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def encode_varint(value: int) -> bytes:
    """Signed (zigzag) varint, 32-bit range."""
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"varint out of int32 range: {value}")
    return encode_unsigned_varint(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def decode_varint(buf: Buffer, position: int) -> tuple[int, int]:
    raw, position = decode_unsigned_varint(buf, position, 5)
    return zigzag_decode(raw), position


def encode_varlong(value: int) -> bytes:
    """Signed (zigzag) varlong, 64-bit range."""
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"varlong out of int64 range: {value}")
    return encode_unsigned_varint(zigzag_encode(value) & 0xFFFFFFFFFFFFFFFF)


def decode_varlong(buf: Buffer, position: int) -> tuple[int, int]:
    raw, position = decode_unsigned_varint(buf, position, 10)
    return zigzag_decode(raw), position
