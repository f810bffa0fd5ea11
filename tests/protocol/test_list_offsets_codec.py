"""ListOffsets (API 2) v5-9: our codec against frames built by hand from Kafka 3.9's
``ListOffsetsRequest.json`` / ``ListOffsetsResponse.json``.

v6 makes the API flexible (compact strings and arrays: unsigned varint length + 1, a tagged-field
section, empty here, at the end of every struct and of the message; request header v2, response
header v1); v7-9 change no field, only what the timestamp may say: -3 max timestamp (KIP-734),
-4 earliest local (KIP-405), -5 latest tiered (KIP-1005). Layouts, v4+:

* request: ``replica_id: int32, isolation_level: int8, topics: [name, partitions: [
  partition_index: int32, current_leader_epoch: int32, timestamp: int64]]``
* response: ``throttle_time_ms: int32, topics: [name, partitions: [partition_index: int32,
  error_code: int16, timestamp: int64, offset: int64, leader_epoch: int32]]``

(kafka-python's classes check every version with random messages in ``test_protocol_golden.py``;
these are fixed bytes that a reviewer can read.)
"""

from __future__ import annotations

import pytest

from sluice.protocol import framing
from sluice.protocol import messages as m

from .wire import i16, i32, i64, s16

Req = m.ListOffsetsRequest
Resp = m.ListOffsetsResponse
FLEXIBLE = [6, 7, 8, 9]


def compact_string(s: str) -> bytes:
    return bytes([len(s) + 1]) + s.encode()  # lengths < 127: one varint byte


def array(version: int, n: int) -> bytes:
    return bytes([n + 1]) if version >= 6 else i32(n)


def string(version: int, s: str) -> bytes:
    return compact_string(s) if version >= 6 else s16(s)


def tags(version: int) -> bytes:
    return b"\x00" if version >= 6 else b""


def request_bytes(version: int) -> bytes:
    out = i32(-1) + b"\x01" + array(version, 1) + string(version, "orders") + array(version, 3)
    for partition, timestamp in ((0, -3), (1, -4), (2, -5)):
        out += i32(partition) + i32(7) + i64(timestamp) + tags(version)
    return out + tags(version) + tags(version)


def request() -> m.ListOffsetsRequest:
    return Req(
        replica_id=-1,
        isolation_level=1,
        topics=[Req.ListOffsetsTopic(name="orders", partitions=[
            Req.ListOffsetsPartition(partition_index=p, current_leader_epoch=7, timestamp=ts)
            for p, ts in ((0, -3), (1, -4), (2, -5))
        ])],
    )  # fmt: skip


def response_bytes(version: int) -> bytes:
    out = i32(0) + array(version, 1) + string(version, "orders") + array(version, 1)
    out += i32(0) + i16(0) + i64(1_700_000_000_090) + i64(4) + i32(3) + tags(version)
    return out + tags(version) + tags(version)


def response() -> m.ListOffsetsResponse:
    return Resp(
        throttle_time_ms=0,
        topics=[Resp.ListOffsetsTopicResponse(name="orders", partitions=[
            Resp.ListOffsetsPartitionResponse(partition_index=0, error_code=0,
                                              timestamp=1_700_000_000_090, offset=4,
                                              leader_epoch=3),
        ])],
    )  # fmt: skip


def test_declared_versions() -> None:
    api = m.ListOffsets
    assert (api.key, api.min_version, api.max_version) == (2, 1, 9)
    assert not api.is_flexible(5) and all(api.is_flexible(v) for v in FLEXIBLE)
    assert framing.SUPPORTED_VERSIONS[2] == framing.ADVERTISED_VERSIONS[2] == (1, 9)


@pytest.mark.parametrize("version", [5, *FLEXIBLE])
def test_request_bytes(version: int) -> None:
    schema = m.ListOffsets.request
    wire = request_bytes(version)
    assert schema.encode(request(), version) == wire
    decoded, end = schema.decode(wire, version)
    assert end == len(wire)
    assert [p.timestamp for p in decoded.topics[0].partitions] == [-3, -4, -5]
    assert decoded.isolation_level == 1


@pytest.mark.parametrize("version", [5, *FLEXIBLE])
def test_response_bytes(version: int) -> None:
    schema = m.ListOffsets.response
    wire = response_bytes(version)
    assert schema.encode(response(), version) == wire
    decoded, end = schema.decode(wire, version)
    assert end == len(wire)
    part = decoded.topics[0].partitions[0]
    assert (part.offset, part.timestamp, part.leader_epoch) == (4, 1_700_000_000_090, 3)


@pytest.mark.parametrize("version", FLEXIBLE)
def test_flexible_frames_use_header_v2_and_v1(version: int) -> None:
    # Request header v2: the client id keeps its int16 length, then an empty tag section.
    header = i16(2) + i16(version) + i32(42) + s16("java") + b"\x00"
    frame = framing.encode_request(2, version, 42, "java", request())
    assert frame == i32(len(header) + len(request_bytes(version))) + header + request_bytes(version)
    got = framing.decode_request(frame[4:])
    assert (got.header.api_version, got.body.topics[0].partitions[0].timestamp) == (version, -3)
    # Response header v1: the correlation id, then an empty tag section.
    wire = b"".join(bytes(p) for p in framing.encode_response(got.header, response()))
    assert wire == i32(5 + len(response_bytes(version))) + i32(42) + b"\x00" + response_bytes(
        version
    )
