"""ControlledShutdown (API 7) v0-3: our codec against frames built by hand from Kafka's
``ControlledShutdownRequest.json`` / ``ControlledShutdownResponse.json`` (no client library has
classes for this broker-to-controller API, so these fixed bytes are the oracle).

The layouts, field by field (big-endian):

* request v0/v1: ``broker_id: int32``; v2 adds ``broker_epoch: int64`` (absent before v2: Kafka
  reads -1, "unknown"); v3 is flexible: the same fields, then an empty tagged-field section.
* response v0-2: ``error_code: int16, remaining_partitions: [topic_name: string16,
  partition_index: int32]``; v3: compact array (length + 1 as an unsigned varint), compact
  strings, a tagged-field section per struct and at the end.
* request header: v0 for request v0 -- ``api_key, api_version, correlation_id`` and **no
  client_id** (Kafka's only header v0) --, v1 for v1/v2, v2 (tagged fields) for v3. Response
  header v0, v1 (tagged fields) for v3.
"""

from __future__ import annotations

import pytest

from sluice.protocol import framing
from sluice.protocol import messages as m

from .wire import i16, i32, i64, s16

Req = m.ControlledShutdownRequest
Resp = m.ControlledShutdownResponse


def compact(s: str) -> bytes:
    return bytes([len(s) + 1]) + s.encode()  # lengths here are < 127: one varint byte


def request_bytes(version: int) -> bytes:
    out = i32(3)
    if version >= 2:
        out += i64(0x1_0000_002A)  # a czxid-like epoch beyond 32 bits
    if version >= 3:
        out += b"\x00"  # no tagged fields
    return out


def response() -> m.ControlledShutdownResponse:
    part = Resp.RemainingPartition
    return Resp(
        error_code=0,
        remaining_partitions=[
            part(topic_name="orders", partition_index=0),
            part(topic_name="x", partition_index=7),
        ],
    )


def response_bytes(version: int) -> bytes:
    items = (("orders", 0), ("x", 7))
    if version < 3:
        return i16(0) + i32(2) + b"".join(s16(t) + i32(p) for t, p in items)
    body = b"".join(compact(t) + i32(p) + b"\x00" for t, p in items)
    return i16(0) + bytes([len(items) + 1]) + body + b"\x00"


def test_declared_versions_and_key() -> None:
    api = m.ControlledShutdown
    assert (api.key, api.name, api.min_version, api.max_version) == (7, "ControlledShutdown", 0, 3)
    assert [api.is_flexible(v) for v in range(4)] == [False, False, False, True]
    assert m.APIS[7] is api
    assert framing.SUPPORTED_VERSIONS[7] == framing.ADVERTISED_VERSIONS[7] == (0, 3)


def test_not_advertised_unless_a_handler_serves_it() -> None:
    # A standalone broker has no handler for it: its ApiVersions lists only served keys.
    served = [k for k in framing.SUPPORTED_VERSIONS if k != 7]
    assert 7 not in {k.api_key for k in framing.api_versions_response(api_keys=served).api_keys}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_request_bytes(version: int) -> None:
    schema = m.ControlledShutdown.request
    wire = request_bytes(version)
    assert schema.encode(Req(broker_id=3, broker_epoch=0x1_0000_002A), version) == wire
    decoded, end = schema.decode(wire, version)
    assert end == len(wire)
    assert decoded.broker_id == 3
    assert decoded.broker_epoch == (0x1_0000_002A if version >= 2 else -1)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_response_bytes(version: int) -> None:
    schema = m.ControlledShutdown.response
    wire = response_bytes(version)
    assert schema.encode(response(), version) == wire
    decoded, end = schema.decode(wire, version)
    assert end == len(wire)
    assert decoded.error_code == 0
    assert [(p.topic_name, p.partition_index) for p in decoded.remaining_partitions] == [
        ("orders", 0),
        ("x", 7),
    ]


def test_error_response_has_no_partitions() -> None:
    schema = m.ControlledShutdown.response
    stale = Resp(error_code=77, remaining_partitions=[])
    assert schema.encode(stale, 2) == i16(77) + i32(0)
    assert schema.encode(stale, 3) == i16(77) + b"\x01" + b"\x00"


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_framed_request_and_response(version: int) -> None:
    if version == 0:
        header = i16(7) + i16(0) + i32(99)  # header v0: no client_id at all
    elif version < 3:
        header = i16(7) + i16(version) + i32(99) + s16("broker-3")
    else:
        header = i16(7) + i16(3) + i32(99) + s16("broker-3") + b"\x00"
    body = request_bytes(version)
    frame = framing.encode_request(
        7, version, 99, "broker-3", Req(broker_id=3, broker_epoch=0x1_0000_002A)
    )
    assert frame == i32(len(header) + len(body)) + header + body
    got = framing.decode_request(frame[4:])
    assert (got.header.api_key, got.header.api_version, got.header.correlation_id) == (
        7,
        version,
        99,
    )
    assert got.header.client_id == (None if version == 0 else "broker-3")
    assert got.body.broker_id == 3 and got.trailing_bytes == 0

    parts = framing.encode_response(got.header, response())
    wire = b"".join(bytes(p) for p in parts)
    tail = b"\x00" if version >= 3 else b""  # response header v1 in flexible versions
    expected = i32(99) + tail + response_bytes(version)
    assert wire == i32(len(expected)) + expected
    correlation, decoded = framing.decode_response(7, version, wire[4:])
    assert correlation == 99
    assert decoded.remaining_partitions[1].partition_index == 7


def test_v0_header_is_only_for_controlled_shutdown_v0() -> None:
    # Other APIs at version 0 keep header v1 (with a client_id).
    frame = framing.encode_request(10, 0, 5, "c", m.FindCoordinatorRequest(key="g"))
    assert frame[4:15] == i16(10) + i16(0) + i32(5) + s16("c")
    assert framing.decode_request(frame[4:]).header.client_id == "c"


def test_v4_is_not_implemented() -> None:
    header = i16(7) + i16(4) + i32(1) + s16("c") + b"\x00"
    with pytest.raises(framing.UnsupportedVersionError):
        framing.decode_request(header + i32(3) + i64(1) + b"\x00")
