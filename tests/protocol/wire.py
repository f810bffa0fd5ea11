"""Hand-built wire values for the golden-bytes tests (big-endian, Kafka's classic encodings)."""

from __future__ import annotations

import struct


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def s16(s: str) -> bytes:
    """A classic string: int16 length, UTF-8 bytes."""
    return i16(len(s)) + s.encode()
