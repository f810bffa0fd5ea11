"""Sluice's sans-I/O Kafka protocol: RecordBatch codec, message schemas and framing.

Public API of the request/response codec (see :mod:`protocol.framing` for usage)::

    from protocol import FrameReader, decode_request, encode_response, messages
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
