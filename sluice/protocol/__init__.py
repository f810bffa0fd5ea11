"""Sluice's sans-I/O Kafka protocol: RecordBatch codec, message schemas and framing.

Request/response codec in one example (this docstring is run as a doctest)::

    >>> from sluice.protocol import decode_request, encode_request, encode_response, decode_response
    >>> from sluice.protocol import messages as m

Client side: encode a request frame (int32 size prefix included).

    >>> frame = encode_request(0, 8, 7, "my-client", m.ProduceRequest(
    ...     acks=-1, timeout_ms=30000, topic_data=[m.ProduceRequest.TopicProduceData(
    ...         name="events", partition_data=[
    ...             m.ProduceRequest.PartitionProduceData(index=0, records=b"<batch>")])]))

Broker side: ``FrameReader`` splits the stream, ``decode_request`` parses one frame (without
its size prefix); Produce ``records`` are memoryview slices of the frame.

    >>> reader = FrameReader()
    >>> reader.feed(frame)
    >>> request = decode_request(reader.next_frame())
    >>> request.header.api_key, request.header.api_version, request.header.correlation_id
    (0, 8, 7)
    >>> bytes(request.body.topic_data[0].partition_data[0].records)
    b'<batch>'

A handler builds the response object (omitted fields take Kafka's defaults; fields the
request's version does not have are dropped when encoding) and the broker encodes it for the
request's version: a list of parts, bytes plus any Fetch records objects with a ``size``.

    >>> R = m.ProduceResponse
    >>> response = R(responses=[R.TopicProduceResponse(name="events", partition_responses=[
    ...     R.PartitionProduceResponse(index=0, error_code=0, base_offset=42)])])
    >>> parts = encode_response(request.header, response)

Client side again: strip the size prefix and decode.

    >>> correlation_id, body = decode_response(0, 8, parts[0][4:])
    >>> correlation_id, body.responses[0].partition_responses[0].base_offset
    (7, 42)
"""

from . import messages
from .framing import (
    ADVERTISED_VERSIONS,
    DEFAULT_MAX_FRAME_SIZE,
    SUPPORTED_VERSIONS,
    FrameReader,
    FrameTooLarge,
    Request,
    RequestHeader,
    ResponseHeader,
    UnsupportedVersionError,
    api_versions_response,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    frame_size,
    unsupported_version_response,
)
from .schema import Message
from .structs import TopicPartition
from .types import RecordsPart

__all__ = [
    "ADVERTISED_VERSIONS",
    "DEFAULT_MAX_FRAME_SIZE",
    "SUPPORTED_VERSIONS",
    "FrameReader",
    "FrameTooLarge",
    "Message",
    "RecordsPart",
    "Request",
    "RequestHeader",
    "ResponseHeader",
    "TopicPartition",
    "UnsupportedVersionError",
    "api_versions_response",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "frame_size",
    "messages",
    "unsupported_version_response",
]
