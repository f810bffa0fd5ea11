"""Framing: the incremental frame splitter, request/response headers, version negotiation."""

from __future__ import annotations

import struct
import warnings
from typing import Any

import pytest

from sluice.protocol import framing
from sluice.protocol import messages as m
from sluice.protocol.errors import ProtocolError

with warnings.catch_warnings():  # kafka-python loads its schemas with a deprecated call
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.metadata import ApiVersionsResponse as KpApiVersionsResponse


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _str16(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


# ---------------------------------------------------------------------------------------------
# FrameReader
# ---------------------------------------------------------------------------------------------


def test_frame_reader_byte_at_a_time() -> None:
    stream = _frame(b"hello") + _frame(b"") + _frame(b"world!")
    reader = framing.FrameReader(100)
    frames = []
    for i in range(len(stream)):
        reader.feed(stream[i : i + 1])
        while (f := reader.next_frame()) is not None:
            frames.append(bytes(f))
    assert frames == [b"hello", b"", b"world!"]
    assert reader.buffered == 0


def test_frame_reader_many_frames_in_one_chunk_and_views_stay_valid() -> None:
    reader = framing.FrameReader(100)
    reader.feed(_frame(b"one") + _frame(b"two") + _frame(b"thr"))
    first = reader.next_frame()
    second = reader.next_frame()
    reader.feed(_frame(b"four"))  # must not disturb frames already handed out
    third = reader.next_frame()
    fourth = reader.next_frame()
    assert [bytes(x) for x in (first, second, third, fourth) if x is not None] == [
        b"one", b"two", b"thr", b"four"
    ]  # fmt: skip
    assert reader.next_frame() is None


def test_frame_reader_exact_frame_is_handed_over() -> None:
    reader = framing.FrameReader(100)
    reader.feed(_frame(b"abc"))
    frame = reader.next_frame()
    assert isinstance(frame, memoryview) and bytes(frame) == b"abc"
    reader.feed(_frame(b"xyz"))
    assert bytes(frame) == b"abc"
    assert bytes(reader.next_frame() or b"") == b"xyz"


def test_frame_too_large_is_raised_before_the_body_arrives() -> None:
    reader = framing.FrameReader(1000)
    reader.feed(b"\x00\x00")
    with pytest.raises(framing.FrameTooLarge) as info:
        reader.feed(b"\x03\xe9")  # 1001: only the prefix has been received
    assert info.value.size == 1001 and info.value.max_size == 1000
    assert isinstance(info.value, ProtocolError)
    with pytest.raises(framing.FrameTooLarge):  # the reader stays failed
        reader.next_frame()
    with pytest.raises(framing.FrameTooLarge):
        reader.feed(b"x")


def test_frame_reader_limits() -> None:
    reader = framing.FrameReader(3)
    reader.feed(_frame(b"abc"))  # exactly the limit is fine
    assert bytes(reader.next_frame() or b"") == b"abc"
    with pytest.raises(framing.FrameTooLarge):
        framing.FrameReader(10).feed(b"\xff\xff\xff\xff")  # negative size
    assert framing.FrameReader().max_frame_size == 104857600


# ---------------------------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------------------------


def test_request_header_v1_with_null_client_id() -> None:
    frame = b"\x00\x03\x00\x01\x00\x00\x00\x05\xff\xff" + b"\x00\x00\x00\x00"
    req = framing.decode_request(frame)
    assert req.header == framing.RequestHeader(3, 1, 5, None)
    assert req.api is m.Metadata
    assert req.body.topics == []


def test_request_header_v2_skips_tagged_fields() -> None:
    # ApiVersions v3, header v2 carrying an unknown tagged field (tag 3, 2 bytes).
    frame = b"\x00\x12\x00\x03\x00\x00\x00\x01" + _str16("c") + b"\x01\x03\x02zz" + b"\x01\x01\x00"
    req = framing.decode_request(frame)
    assert req.header.client_id == "c"
    assert req.body.client_software_name == "" and req.body.client_software_version == ""


@pytest.mark.parametrize(
    ("api_key", "version"),
    [(99, 0), (0, 2), (0, 9), (1, 3), (1, 14), (3, 0), (3, 13), (18, 4), (-1, 0), (22, 5)],
)
def test_unsupported_versions_carry_the_header(api_key: int, version: int) -> None:
    # Header v2 for versions in an API's flexible range (even unimplemented ones), v1 otherwise.
    api = m.APIS.get(api_key)
    flexible = api is not None and api.is_flexible(version)
    frame = struct.pack(">hhi", api_key, version, 77) + _str16("cli")
    frame += (b"\x00" if flexible else b"") + b"garbage body"
    with pytest.raises(framing.UnsupportedVersionError) as info:
        framing.decode_request(frame)
    exc = info.value
    assert isinstance(exc, ProtocolError)
    assert (exc.api_key, exc.api_version, exc.correlation_id) == (api_key, version, 77)
    assert exc.header.client_id == "cli" and exc.error_code == 35
    if api_key != 18:
        assert framing.unsupported_version_response(exc) is None


def test_api_versions_newer_than_ours_gets_a_v0_error_answer() -> None:
    # kafka-python 3 opens with ApiVersions v4, a flexible version we do not implement.
    frame = b"\x00\x12\x00\x04\x00\x00\x00\x09" + _str16("kp") + b"\x00" + b"\x03kp\x021\x00"
    with pytest.raises(framing.UnsupportedVersionError) as info:
        framing.decode_request(frame)
    parts = framing.unsupported_version_response(info.value, api_keys=[0, 1, 18])
    assert parts is not None and len(parts) == 1
    wire = parts[0]
    assert struct.unpack(">i", wire[:4])[0] == len(wire) - 4
    assert wire[4:8] == b"\x00\x00\x00\x09"  # correlation id, response header v0
    body = wire[8:]
    assert body[:2] == b"\x00\x23"  # UNSUPPORTED_VERSION
    # A client decodes it as v0 whatever version it asked for.
    theirs = KpApiVersionsResponse.decode(body, version=3)
    assert theirs.error_code == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in theirs.api_keys] == [
        (0, 0, 8), (1, 4, 13), (18, 0, 3),
    ]  # fmt: skip
    cid, ours = framing.decode_response(18, 3, wire[4:])
    assert cid == 9 and ours.error_code == 35 and len(ours.api_keys) == 3


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x00\x12\x00",  # shorter than a header
        b"\x00\x12\x00\x00\x00\x00\x00\x01\x00",  # client_id length cut
        b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x09abc",  # client_id body cut
        b"\x00\x12\x00\x00\x00\x00\x00\x01\xff\xfe",  # client_id length -2
        b"\x00\x12\x00\x03\x00\x00\x00\x01\xff\xff",  # v2 header without its tag section
        b"\x00\x03\x00\x01\x00\x00\x00\x01\xff\xff\x00\x00\x00\x01",  # topic array cut
    ],
)
def test_garbage_requests_raise_protocol_error(frame: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        framing.decode_request(frame)
    assert not isinstance(info.value, framing.UnsupportedVersionError)


def test_trailing_bytes_are_ignored_like_kafka_does() -> None:
    # librdkafka 2.16's Metadata v9 "all topics" request, as captured from confluent-kafka: the
    # null compact array (0x00) sits in a reserved int32 slot, so 3 zero bytes shift the rest.
    header = b"\x00\x03\x00\x09\x00\x00\x00\x03" + _str16("rdkafka") + b"\x00"
    req = framing.decode_request(header + bytes.fromhex("00 00 00 00 01 00 00 00"))
    assert req.body.topics is None and req.trailing_bytes == 1
    assert framing.decode_request(b"\x00\x12\x00\x00\x00\x00\x00\x01\xff\xffX").trailing_bytes == 1
    assert framing.decode_request(header + b"\x01\x00\x00\x00\x00").trailing_bytes == 0


def test_produce_records_are_views_of_the_frame() -> None:
    body = m.ProduceRequest(
        acks=1,
        timeout_ms=10,
        topic_data=[
            m.ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[m.ProduceRequest.PartitionProduceData(index=0, records=b"B" * 50)],
            )
        ],
    )
    frame = bytearray(framing.encode_request(0, 8, 1, "c", body)[4:])
    req = framing.decode_request(frame)
    records = req.body.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records.obj is frame


# ---------------------------------------------------------------------------------------------
# Responses
# ---------------------------------------------------------------------------------------------


class _Slice:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)


def _wire(parts: list[Any]) -> bytes:
    return b"".join(p.data if isinstance(p, _Slice) else p for p in parts)


def test_encode_response_with_several_file_slices() -> None:
    pd = m.FetchResponse.PartitionData
    slices = [_Slice(b"a" * 10), _Slice(b""), _Slice(b"c" * 7)]
    body = m.FetchResponse(
        responses=[
            m.FetchResponse.FetchableTopicResponse(
                topic="t",
                partitions=[pd(partition_index=i, records=s) for i, s in enumerate(slices)],
            )
        ]
    )
    header = framing.RequestHeader(1, 10, 5, "c")
    parts = framing.encode_response(header, body)
    # Empty slices are not worth a sendfile: only the two non-empty ones become parts. The last
    # slice ends the frame (records are the last field), so no bytes part follows it.
    assert [type(p) for p in parts] == [bytes, _Slice, bytes, _Slice]
    assert parts[1] is slices[0] and parts[3] is slices[2]
    wire = _wire(parts)
    assert framing.frame_size(parts) == len(wire)
    assert struct.unpack(">i", wire[:4])[0] == len(wire) - 4
    cid, decoded = framing.decode_response(1, 10, wire[4:])
    assert cid == 5
    got = [bytes(p.records) for p in decoded.responses[0].partitions]
    assert got == [b"a" * 10, b"", b"c" * 7]


def test_encode_response_ending_with_a_slice() -> None:
    body = m.FetchResponse(
        responses=[
            m.FetchResponse.FetchableTopicResponse(
                topic="t", partitions=[m.FetchResponse.PartitionData(records=_Slice(b"z" * 3))]
            )
        ]
    )
    parts = framing.encode_response(framing.RequestHeader(1, 4, 1, None), body)
    assert isinstance(parts[-1], _Slice)
    wire = _wire(parts)
    assert struct.unpack(">i", wire[:4])[0] == len(wire) - 4
    assert bytes(framing.decode_response(1, 4, wire[4:])[1].responses[0].partitions[0].records) == (
        b"zzz"
    )


@pytest.mark.parametrize(
    ("key", "version"), sorted((k, v[1]) for k, v in framing.SUPPORTED_VERSIONS.items())
)
def test_client_request_and_broker_response_round_trip(key: int, version: int) -> None:
    api = m.APIS[key]
    req_body = api.request.cls()
    frame = framing.encode_request(key, version, 123, "client", req_body)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    req = framing.decode_request(frame[4:])
    assert req.header == framing.RequestHeader(key, version, 123, "client")
    assert req.body.to_dict() == req_body.to_dict()
    parts = framing.encode_response(req.header, api.response.cls())
    cid, body = framing.decode_response(key, version, parts[0][4:])
    assert cid == 123 and body.to_dict() == api.response.cls().to_dict()


def test_client_side_errors() -> None:
    with pytest.raises(ValueError, match="not implemented"):
        framing.encode_request(0, 2, 1, "c", m.ProduceRequest())
    with pytest.raises(ValueError, match="not implemented"):
        framing.decode_response(99, 0, b"\x00\x00\x00\x01")
    with pytest.raises(ProtocolError):
        framing.decode_response(3, 1, b"\x00\x00")
    with pytest.raises(ProtocolError, match="trailing"):
        framing.decode_response(12, 0, b"\x00\x00\x00\x01\x00\x00\x00")


def test_supported_and_advertised_versions() -> None:
    assert framing.SUPPORTED_VERSIONS == {
        0: (3, 8), 1: (4, 13), 2: (1, 9), 3: (1, 12), 7: (0, 3), 8: (2, 7), 9: (1, 7), 10: (0, 2),
        11: (0, 5), 12: (0, 3), 13: (0, 3), 14: (0, 3), 15: (0, 4), 16: (0, 5), 18: (0, 3),
        17: (0, 1), 19: (0, 4), 20: (0, 6), 21: (0, 1), 22: (0, 4), 23: (0, 3), 24: (0, 3),
        25: (0, 3), 26: (0, 3), 27: (0, 1),
        28: (0, 3), 29: (0, 3),
        30: (0, 3), 31: (0, 3), 32: (0, 4), 33: (0, 2), 35: (0, 4), 36: (0, 2), 37: (0, 3),
        42: (0, 1), 43: (0, 2), 44: (0, 1), 45: (0, 0), 46: (0, 0), 47: (0, 0), 48: (0, 1),
        49: (0, 1), 50: (0, 0), 51: (0, 0), 60: (0, 1), 61: (0, 0), 65: (0, 0), 66: (0, 0),
        75: (0, 0),
    }  # fmt: skip
    # Produce is advertised from v0 like Kafka 4 does (KAFKA-18659); everything else as is.
    assert framing.ADVERTISED_VERSIONS[0] == (0, 8)
    assert framing.ADVERTISED_VERSIONS[1] == (4, 13)  # v13: topics by id (KIP-516)
    assert {k: v for k, v in framing.ADVERTISED_VERSIONS.items() if k not in (0, 1)} == {
        k: v for k, v in framing.SUPPORTED_VERSIONS.items() if k not in (0, 1)
    }
    resp = framing.api_versions_response(api_keys=[18, 3])
    assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == [
        (3, 1, 12), (18, 0, 3),
    ]  # fmt: skip


def test_package_docstring_example_runs() -> None:
    import doctest

    from sluice import protocol

    result = doctest.testmod(protocol, raise_on_error=False, verbose=False)
    assert result.attempted >= 8 and result.failed == 0


def test_fetch_records_default_to_empty_not_null() -> None:
    # librdkafka fails the whole Fetch response on a null (-1) records size.
    part = m.FetchResponse.PartitionData(partition_index=0)
    assert part.records == b""
    body = m.FetchResponse(responses=[m.FetchResponse.FetchableTopicResponse(partitions=[part])])
    (wire,) = framing.encode_response(framing.RequestHeader(1, 11, 1, "c"), body)
    assert wire.endswith(b"\x00\x00\x00\x00")  # records size 0 closes the frame
