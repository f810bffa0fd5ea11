"""Primitive protocol types: exact encodings, round trips, and errors on malformed input."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.protocol import types as t
from sluice.protocol.errors import ProtocolError


def _w(writer: Any, value: Any) -> bytes:
    out = bytearray()
    writer(out, value)
    return bytes(out)


@pytest.mark.parametrize(
    ("writer", "value", "expected"),
    [
        (t.write_string, "ab", b"\x00\x02ab"),
        (t.write_string, "", b"\x00\x00"),
        (t.write_nullable_string, None, b"\xff\xff"),
        (t.write_compact_string, "ab", b"\x03ab"),
        (t.write_compact_nullable_string, None, b"\x00"),
        (t.write_compact_string, "", b"\x01"),
        (t.write_bytes, b"\x01\x02", b"\x00\x00\x00\x02\x01\x02"),
        (t.write_nullable_bytes, None, b"\xff\xff\xff\xff"),
        (t.write_compact_bytes, b"\x01", b"\x02\x01"),
        (t.write_compact_nullable_bytes, None, b"\x00"),
        (t.write_uuid, uuid.UUID(int=1), b"\x00" * 15 + b"\x01"),
        (t.write_string, "é", b"\x00\x02\xc3\xa9"),
    ],
)
def test_exact_encodings(writer: Any, value: Any, expected: bytes) -> None:
    assert _w(writer, value) == expected


def test_compact_length_uses_multi_byte_varint() -> None:
    data = _w(t.write_compact_string, "x" * 200)
    assert data[:2] == b"\xc9\x01"  # 201 = 0b1_1001001
    assert t.read_compact_string(data, 0) == ("x" * 200, 202)


@pytest.mark.parametrize(
    ("reader", "writer", "value"),
    [
        (t.read_string, t.write_string, "hello"),
        (t.read_nullable_string, t.write_nullable_string, None),
        (t.read_nullable_string, t.write_nullable_string, "x"),
        (t.read_compact_string, t.write_compact_string, "héllo"),
        (t.read_compact_nullable_string, t.write_compact_nullable_string, None),
        (t.read_bytes, t.write_bytes, b"\x00\xff"),
        (t.read_nullable_bytes, t.write_nullable_bytes, None),
        (t.read_compact_bytes, t.write_compact_bytes, b"abc"),
        (t.read_compact_nullable_bytes, t.write_compact_nullable_bytes, None),
        (t.read_uuid, t.write_uuid, uuid.UUID("12345678-1234-5678-1234-567812345678")),
    ],
)
def test_round_trip_with_trailing_data(reader: Any, writer: Any, value: Any) -> None:
    data = b"\x07" + _w(writer, value) + b"tail"
    got, pos = reader(data, 1)
    assert got == value
    assert data[pos:] == b"tail"


@pytest.mark.parametrize(
    ("reader", "data"),
    [
        (t.read_string, b"\x00"),  # length cut
        (t.read_string, b"\x00\x05abc"),  # body cut
        (t.read_string, b"\xff\xff"),  # null where not nullable
        (t.read_nullable_string, b"\xff\xfe"),  # -2
        (t.read_string, b"\x00\x02\xc3\x28"),  # invalid UTF-8
        (t.read_compact_string, b"\x00"),  # null
        (t.read_compact_string, b"\x05ab"),
        (t.read_compact_string, b"\x80\x80\x80\x80\x80\x01"),  # varint too long
        (t.read_compact_string, b"\x80"),  # varint cut
        (t.read_bytes, b"\x00\x00\x00\x09abc"),
        (t.read_bytes, b"\xff\xff\xff\xff"),
        (t.read_nullable_bytes, b"\x80\x00\x00\x00"),
        (t.read_compact_bytes, b"\x00"),
        (t.read_compact_nullable_bytes, b"\x09ab"),
        (t.read_records, b"\x00\x00\x01\x00ab"),
        (t.read_records, b"\xff\xff\xff\xfe"),
        (t.read_compact_records, b"\x05a"),
        (t.read_uuid, b"\x00" * 15),
    ],
)
def test_malformed_input_raises_protocol_error(reader: Any, data: bytes) -> None:
    with pytest.raises(ProtocolError, match="byte"):
        reader(data, 0)


def test_records_are_zero_copy_slices_of_the_frame() -> None:
    frame = bytearray(b"\x00\x00\x00\x03abcZ")
    view = memoryview(frame)
    records, pos = t.read_records(view, 0)
    assert isinstance(records, memoryview)
    assert records.obj is frame
    assert bytes(records) == b"abc" and pos == 7
    frame[4] = ord("X")  # shares memory with the frame: no copy was made
    assert bytes(records) == b"Xbc"
    assert t.read_records(b"\xff\xff\xff\xff", 0) == (None, 4)
    assert t.read_compact_records(b"\x00", 0) == (None, 1)


def test_array_counts() -> None:
    assert t.read_array_len(b"\x00\x00\x00\x02ab", 0, False) == (2, 4)
    assert t.read_array_len(b"\xff\xff\xff\xff", 0, True) == (-1, 4)
    assert t.read_compact_array_len(b"\x00", 0, True) == (-1, 1)
    assert t.read_compact_array_len(b"\x03xx", 0, False) == (2, 1)
    with pytest.raises(ProtocolError, match="array count -1"):
        t.read_array_len(b"\xff\xff\xff\xff", 0, False)
    with pytest.raises(ProtocolError, match="array count -1"):
        t.read_compact_array_len(b"\x00", 0, False)
    # A count larger than the bytes left is rejected before anything is allocated.
    with pytest.raises(ProtocolError, match="exceeds"):
        t.read_array_len(b"\x7f\xff\xff\xff", 0, False)
    with pytest.raises(ProtocolError):
        t.read_fixed_array("i", 4, b"\x00\x00\x00\x01\x00\x00", 0, 2)
    assert t.read_fixed_array("i", 4, b"\x00\x00\x00\x01\xff\xff\xff\xff", 0, 2) == ([1, -1], 8)


def test_fixed_reader_errors_name_the_type() -> None:
    with pytest.raises(ProtocolError, match="int64 at byte 1"):
        t.read_fixed(t.INT64, "int64", b"\x00" * 8, 1)
    assert t.read_fixed(t.INT16, "int16", b"\xff\xfe", 0) == (-2, 2)


def test_tagged_fields() -> None:
    out = bytearray()
    t.write_tagged_fields(out, [(0, b"\x01"), (5, b"\x00\x02")])
    assert bytes(out) == b"\x02\x00\x01\x01\x05\x02\x00\x02"
    known = {5: lambda buf, pos: t.read_fixed(t.INT16, "int16", buf, pos)}
    # tag 0 is unknown to this reader: skipped by its size.
    assert t.read_tagged_fields(bytes(out), 0, known) == ({5: 2}, len(out))
    assert t.read_tagged_fields(b"\x00", 0, known) == ({}, 1)
    with pytest.raises(ProtocolError, match="out of order"):
        t.read_tagged_fields(b"\x02\x05\x00\x01\x00", 0, {})
    with pytest.raises(ProtocolError, match="declares 3 bytes"):
        t.read_tagged_fields(b"\x01\x05\x03\x00\x02\x00", 0, known)
    with pytest.raises(ProtocolError):
        t.read_tagged_fields(b"\x01\x05\x09\x00", 0, known)  # size past the end
    with pytest.raises(ProtocolError):  # known value runs past its declared size
        t.read_tagged_fields(b"\x01\x05\x01\x00\x02", 0, known)


def test_records_writer_splits_out_objects_with_size() -> None:
    class Slice:
        size = 5

    out = bytearray(b"head")
    parts: list[Any] = []
    obj = Slice()
    t.write_records(out, parts, obj)
    assert parts == [b"head\x00\x00\x00\x05", obj]
    assert out == b""
    t.write_compact_records(out, parts, b"ab")
    assert out == b"\x03ab"
    out.clear()
    t.write_records(out, parts, None)
    assert out == b"\xff\xff\xff\xff"


def test_string_too_long_for_int16_length() -> None:
    with pytest.raises(ValueError, match="int16"):
        t.write_string(bytearray(), "x" * 0x8000)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("3+", (3, 0x7FFF)), ("0-7", (0, 7)), ("5", (5, 5)), ("none", None)],
)
def test_parse_versions(spec: str, expected: tuple[int, int] | None) -> None:
    assert t.parse_versions(spec) == expected


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=50), st.binary(max_size=50))
def test_compact_and_classic_round_trip(s: str, b: bytes) -> None:
    for reader, writer, value in [
        (t.read_string, t.write_string, s),
        (t.read_compact_string, t.write_compact_string, s),
        (t.read_bytes, t.write_bytes, b),
        (t.read_compact_bytes, t.write_compact_bytes, b),
    ]:
        data = _w(writer, value)
        assert reader(data, 0) == (value, len(data))
        for cut in range(len(data)):
            with pytest.raises(ProtocolError):
                reader(data[:cut], 0)
