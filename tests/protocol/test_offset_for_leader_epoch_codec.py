"""OffsetForLeaderEpoch (API 23) v0-3: our codec against frames built by hand from Kafka's
``OffsetForLeaderEpochRequest.json`` / ``OffsetForLeaderEpochResponse.json``.

The layouts, field by field (all big-endian, classic encoding, no tagged fields before v4):

* request v0/v1: ``topics: [topic: string16, partitions: [partition: int32, leader_epoch: int32]]``
* request v2: each partition adds ``current_leader_epoch: int32`` before ``leader_epoch``
* request v3: ``replica_id: int32`` before ``topics`` (absent before v3: Kafka reads -2)
* response v0: ``topics: [topic, partitions: [error_code: int16, partition: int32,
  end_offset: int64]]``
* response v1: ``leader_epoch: int32`` before ``end_offset`` (absent in v0: -1)
* response v2/v3: ``throttle_time_ms: int32`` before ``topics``

(kafka-python's and aiokafka's own classes check the same versions with random messages in
``test_protocol_golden.py``; these are fixed bytes that a reviewer can read.)
"""

from __future__ import annotations

import pytest

from sluice.protocol import framing
from sluice.protocol import messages as m

from .wire import i16, i32, i64, s16

Req = m.OffsetForLeaderEpochRequest
Resp = m.OffsetForLeaderEpochResponse


def request(version: int) -> m.OffsetForLeaderEpochRequest:
    return Req(
        replica_id=-1,
        topics=[
            Req.OffsetForLeaderTopic(
                topic="orders",
                partitions=[
                    Req.OffsetForLeaderPartition(partition=0, current_leader_epoch=7,
                                                 leader_epoch=5),
                    Req.OffsetForLeaderPartition(partition=3, current_leader_epoch=-1,
                                                 leader_epoch=0),
                ],
            ),
            Req.OffsetForLeaderTopic(topic="x", partitions=[]),
        ],
    )  # fmt: skip


def request_bytes(version: int) -> bytes:
    out = i32(-1) if version >= 3 else b""  # replica_id
    out += i32(2) + s16("orders") + i32(2)
    for partition, current, epoch in ((0, 7, 5), (3, -1, 0)):
        out += i32(partition)
        out += i32(current) if version >= 2 else b""
        out += i32(epoch)
    return out + s16("x") + i32(0)


def response() -> m.OffsetForLeaderEpochResponse:
    return Resp(
        throttle_time_ms=12,
        topics=[
            Resp.OffsetForLeaderTopicResult(
                topic="orders",
                partitions=[
                    Resp.EpochEndOffset(error_code=0, partition=0, leader_epoch=4,
                                        end_offset=1234),
                    Resp.EpochEndOffset(error_code=74, partition=3, leader_epoch=-1,
                                        end_offset=-1),
                ],
            )
        ],
    )  # fmt: skip


def response_bytes(version: int) -> bytes:
    out = i32(12) if version >= 2 else b""  # throttle_time_ms
    out += i32(1) + s16("orders") + i32(2)
    for code, partition, epoch, end in ((0, 0, 4, 1234), (74, 3, -1, -1)):
        out += i16(code) + i32(partition)
        out += i32(epoch) if version >= 1 else b""
        out += i64(end)
    return out


def test_declared_versions_and_key() -> None:
    api = m.OffsetForLeaderEpoch
    assert (api.key, api.name, api.min_version, api.max_version) == (
        23, "OffsetForLeaderEpoch", 0, 3,
    )  # fmt: skip
    assert not any(api.is_flexible(v) for v in range(4)) and api.is_flexible(4)
    assert m.APIS[23] is api
    assert framing.SUPPORTED_VERSIONS[23] == framing.ADVERTISED_VERSIONS[23] == (0, 3)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_request_bytes(version: int) -> None:
    schema = m.OffsetForLeaderEpoch.request
    wire = request_bytes(version)
    assert schema.encode(request(version), version) == wire
    decoded, end = schema.decode(wire, version)
    assert end == len(wire)
    part = decoded.topics[0].partitions[0]
    assert (decoded.topics[0].topic, part.partition, part.leader_epoch) == ("orders", 0, 5)
    # Fields a version does not carry decode to Kafka's defaults: replica_id -2 (the debugging
    # id) before v3, current_leader_epoch -1 (no fencing) before v2.
    assert decoded.replica_id == (-1 if version >= 3 else -2)
    assert part.current_leader_epoch == (7 if version >= 2 else -1)
    assert decoded.topics[1].partitions == []


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_response_bytes(version: int) -> None:
    schema = m.OffsetForLeaderEpoch.response
    wire = response_bytes(version)
    assert schema.encode(response(), version) == wire
    decoded, end = schema.decode(wire, version)
    assert end == len(wire)
    ok, fenced = decoded.topics[0].partitions
    assert (ok.error_code, ok.partition, ok.end_offset) == (0, 0, 1234)
    assert ok.leader_epoch == (4 if version >= 1 else -1)
    assert (fenced.error_code, fenced.partition, fenced.end_offset) == (74, 3, -1)
    assert decoded.throttle_time_ms == (12 if version >= 2 else 0)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_framed_request_and_response(version: int) -> None:
    # Request header v1 (API 23 has no flexible version below 4), then the body.
    header = i16(23) + i16(version) + i32(99) + s16("rdkafka")
    frame = framing.encode_request(23, version, 99, "rdkafka", request(version))
    assert frame == i32(len(header) + len(request_bytes(version))) + header + request_bytes(version)
    got = framing.decode_request(frame[4:])
    assert (got.header.api_key, got.header.api_version, got.header.correlation_id) == (
        23, version, 99,
    )  # fmt: skip
    assert got.body.topics[0].partitions[1].partition == 3
    # Response header v0: the correlation id only.
    parts = framing.encode_response(got.header, response())
    wire = b"".join(bytes(p) for p in parts)
    assert wire == i32(4 + len(response_bytes(version))) + i32(99) + response_bytes(version)
    correlation, body = framing.decode_response(23, version, wire[4:])
    assert correlation == 99 and body.topics[0].partitions[0].end_offset == 1234


def test_v4_is_not_implemented() -> None:
    header = i16(23) + i16(4) + i32(1) + s16("c") + b"\x00"
    with pytest.raises(framing.UnsupportedVersionError):
        framing.decode_request(header + b"\x01\x00")
