"""Fuzzing the request/response decoders: garbage may only ever raise ProtocolError.

The broker closes a connection on ProtocolError and must never crash (or leak IndexError,
struct.error, UnicodeDecodeError, MemoryError...) on bytes from the network.
"""

from __future__ import annotations

import contextlib
import random
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.protocol import framing
from sluice.protocol import messages as m
from sluice.protocol.errors import ProtocolError
from sluice.protocol.schema import Field, StructSchema


def all_versions() -> list[tuple[int, int]]:
    return [
        (k, v) for k, a in sorted(m.APIS.items()) for v in range(a.min_version, a.max_version + 1)
    ]


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _decode_request_only_protocol_errors(frame: bytes | bytearray) -> None:
    try:
        req = framing.decode_request(frame)
    except ProtocolError:
        return
    # Whatever decoded must be encodable again by the client side (a sane object graph).
    framing.encode_request(
        req.header.api_key, req.header.api_version, 0, req.header.client_id, req.body
    )


def _random_value(f: Field, version: int, flexible: bool, rnd: random.Random) -> Any:
    def one() -> Any:
        if f.struct is not None:
            return _random_message(f.struct, version, flexible, rnd)
        typ = f.item_type
        if typ in ("string",):
            return "".join(rnd.choice("aé€z") for _ in range(rnd.randint(0, 6)))
        if typ in ("bytes", "records"):
            return rnd.randbytes(rnd.randint(0, 20))
        if typ == "bool":
            return rnd.random() < 0.5
        if typ == "uuid":
            return uuid.UUID(int=rnd.getrandbits(128))
        if typ == "float64":  # (client quota values)
            return rnd.uniform(-1e12, 1e12)
        bits = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}[typ]
        return rnd.randrange(-(2 ** (bits - 1)), 2 ** (bits - 1))

    if f.is_nullable(version) and rnd.random() < 0.2:
        return None
    return [one() for _ in range(rnd.randint(1, 2))] if f.is_array else one()


def _random_message(s: StructSchema, version: int, flexible: bool, rnd: random.Random) -> Any:
    return s.cls(
        **{f.name: _random_value(f, version, flexible, rnd) for f in s.fields if f.present(version)}
    )


def _valid_request_frames(seed: int) -> list[bytes]:
    """One random valid request per API/version (non-empty arrays), from the declarations."""
    rnd = random.Random(seed)
    frames = []
    for key, version in all_versions():
        a = m.APIS[key]
        body = _random_message(a.request.struct, version, a.is_flexible(version), rnd)
        frames.append(framing.encode_request(key, version, rnd.randrange(2**31), "fuzz", body)[4:])
    return frames


_FRAMES = _valid_request_frames(1)


@pytest.mark.parametrize("frame", _FRAMES, ids=lambda f: f"api{f[1]}-v{f[3]}")
def test_every_truncation_of_a_valid_request(frame: bytes) -> None:
    framing.decode_request(frame)  # the whole frame is valid
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            framing.decode_request(frame[:cut])


@pytest.mark.parametrize("frame", _FRAMES, ids=lambda f: f"api{f[1]}-v{f[3]}")
def test_bit_flips_and_byte_changes_of_a_valid_request(frame: bytes) -> None:
    rnd = random.Random(len(frame))
    for _ in range(150):
        mutated = bytearray(frame)
        for _ in range(rnd.randint(1, 3)):
            pos = rnd.randrange(len(mutated))
            if rnd.random() < 0.5:
                mutated[pos] ^= 1 << rnd.randrange(8)
            else:
                mutated[pos] = rnd.choice([0x00, 0x7F, 0x80, 0xFF, rnd.randrange(256)])
        _decode_request_only_protocol_errors(mutated)


@SETTINGS
@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    _decode_request_only_protocol_errors(data)


@SETTINGS
@given(
    st.sampled_from(sorted(m.APIS)),
    st.integers(-1, 13),
    st.integers(-(2**31), 2**31 - 1),
    st.binary(max_size=200),
)
def test_random_bodies_behind_plausible_headers(
    key: int, version: int, cid: int, body: bytes
) -> None:
    # Random bytes rarely get past the header; give them a valid one so the body decoders run.
    a = m.APIS[key]
    header = struct.pack(">hhi", key, version, cid) + b"\x00\x01c"
    if a.is_flexible(version):
        header += b"\x00"
    _decode_request_only_protocol_errors(header + body)


@SETTINGS
@given(st.sampled_from(sorted(framing.SUPPORTED_VERSIONS.items())), st.binary(max_size=200))
def test_random_responses(item: tuple[int, tuple[int, int]], body: bytes) -> None:
    key, (lo, hi) = item
    for version in (lo, hi):
        with contextlib.suppress(ProtocolError):
            framing.decode_response(key, version, b"\x00\x00\x00\x01" + body)


@SETTINGS
@given(st.lists(st.binary(max_size=40), max_size=20), st.integers(0, 64))
def test_frame_reader_on_random_chunks(chunks: list[bytes], limit: int) -> None:
    reader = framing.FrameReader(limit)
    total = 0
    try:
        for chunk in chunks:
            reader.feed(chunk)
            while (frame := reader.next_frame()) is not None:
                assert len(frame) <= limit
                total += 4 + len(frame)
    except framing.FrameTooLarge as exc:
        assert exc.size > limit or exc.size < 0
        return
    assert total + reader.buffered == sum(map(len, chunks))
