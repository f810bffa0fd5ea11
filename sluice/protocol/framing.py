"""Framing of Kafka requests and responses: size prefixes, headers, and the message codecs.

Wire format (both directions)::

    int32 size | header | body          size counts header + body

Request header v1: ``api_key int16, api_version int16, correlation_id int32, client_id
nullable string (int16 length)``; v2 (when the API version is flexible) appends a tagged-field
section; v0, used only by ControlledShutdown v0 (a broker-to-controller request), has no
client_id. Response header v0: ``correlation_id int32``; v1 (flexible versions) appends tagged
fields -- except ApiVersions responses, which always use v0 so that a client that does not know
the broker's versions can still read them.

Broker side::

    reader = FrameReader(max_frame_size)           # socket.request.max.bytes
    reader.feed(data)                              # bytes as they arrive
    while (frame := reader.next_frame()) is not None:
        try:
            request = decode_request(frame)        # Request(header, body)
        except UnsupportedVersionError as exc:     # parsed header in exc.header
            parts = unsupported_version_response(exc)   # None: close the connection
        ...
        parts = encode_response(request.header, response_body)   # list of parts to write

Client side: :func:`encode_request` and :func:`decode_response`.

Sans-I/O: nothing here touches a socket or a file. The only non-bytes objects handled are Fetch
``records`` values with a ``size`` (the server's ``FetchSlice``); :func:`encode_response` emits
them as separate parts for ``sendfile``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import messages
from .errors import ProtocolError, UnsupportedVersion
from .messages import APIS, REQUEST_HEADER, RESPONSE_HEADER
from .schema import Api, Message
from .types import INT32
from .varint import Buffer

__all__ = [
    "ADVERTISED_VERSIONS",
    "DEFAULT_MAX_FRAME_SIZE",
    "SUPPORTED_VERSIONS",
    "FrameReader",
    "FrameTooLarge",
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
    "unsupported_version_response",
]

#: Kafka's default ``socket.request.max.bytes``.
DEFAULT_MAX_FRAME_SIZE = 104_857_600

API_VERSIONS_KEY = messages.ApiVersions.key

#: ``{api_key: (min_version, max_version)}`` -- exactly the versions this codec encodes/decodes.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    key: (a.min_version, a.max_version) for key, a in sorted(APIS.items())
}

#: What the broker puts in its ApiVersions response: SUPPORTED_VERSIONS, except that Produce is
#: advertised from version 0 although only 3+ is accepted. Kafka 4 does the same (KAFKA-18659):
#: some librdkafka versions derive features from the advertised Produce range and misbehave
#: when it does not start at 0. A Produce v0-2 request still raises UnsupportedVersionError.
ADVERTISED_VERSIONS: dict[int, tuple[int, int]] = {
    key: ((0, hi) if key == messages.Produce.key else (lo, hi))
    for key, (lo, hi) in SUPPORTED_VERSIONS.items()
}

RequestHeader = REQUEST_HEADER.cls
ResponseHeader = RESPONSE_HEADER.cls

_API_KEY_VERSION = struct.Struct(">hh")
_INT16 = struct.Struct(">h")


class FrameTooLarge(ProtocolError):
    """A size prefix above the limit (or negative). Raised before any of the body is buffered."""

    def __init__(self, size: int, max_size: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the maximum of {max_size}")
        self.size = size
        self.max_size = max_size


class UnsupportedVersionError(ProtocolError):
    """A well-formed header naming an API key or version this codec does not implement.

    ``header`` is the parsed request header (so the broker can answer with the correlation id);
    ``error_code`` is UNSUPPORTED_VERSION (35). Only ApiVersions can be answered (with a v0 body,
    see :func:`unsupported_version_response`); for other APIs Kafka closes the connection.
    """

    error_code = UnsupportedVersion.code

    def __init__(self, header: Message) -> None:
        h: Any = header
        known = APIS.get(h.api_key)
        what = f"API {h.api_key} ({known.name})" if known else f"unknown API key {h.api_key}"
        super().__init__(f"{what} version {h.api_version} is not supported")
        self.header = header
        self.api_key: int = h.api_key
        self.api_version: int = h.api_version
        self.correlation_id: int = h.correlation_id


@dataclass(slots=True)
class Request:
    """A decoded request: the header (``api_key``, ``api_version``, ``correlation_id``,
    ``client_id``) and the body, an instance of e.g. :class:`messages.ProduceRequest`.

    ``trailing_bytes`` counts bytes after the body, which Kafka ignores (see decode_request).
    """

    header: Any
    body: Any
    trailing_bytes: int = 0

    @property
    def api(self) -> Api[Any, Any]:
        return APIS[self.header.api_key]


class FrameReader:
    """Incrementally splits a byte stream into frames (size prefix stripped).

    ``feed(data)`` appends bytes; ``next_frame()`` returns the next complete frame as a
    ``memoryview`` (owned by the caller, never reused by the reader) or ``None`` if more bytes
    are needed. A size prefix above ``max_frame_size`` raises :class:`FrameTooLarge` as soon as
    the 4 prefix bytes are in, before the body is buffered; the connection must then be closed
    (the reader stays in the error state).
    """

    __slots__ = ("_buf", "_error", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._error: FrameTooLarge | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf)

    def feed(self, data: Buffer) -> None:
        if self._error is not None:
            raise self._error
        self._buf += data
        if len(self._buf) >= 4:
            self._check_size()

    def _check_size(self) -> int:
        size: int = INT32.unpack_from(self._buf, 0)[0]
        if size < 0 or size > self.max_frame_size:
            self._error = FrameTooLarge(size, self.max_frame_size)
            raise self._error
        return size

    def next_frame(self) -> memoryview | None:
        if self._error is not None:
            raise self._error
        buf = self._buf
        if len(buf) < 4:
            return None
        size = self._check_size()
        end = 4 + size
        if len(buf) < end:
            return None
        if len(buf) == end:
            # Common case (one frame per read): hand over the buffer itself, no copy.
            self._buf = bytearray()
            return memoryview(buf)[4:]
        frame = buf[4:end]
        del buf[:end]  # CPython trims the front of a bytearray without moving the rest
        return memoryview(frame)


def frame_size(parts: Iterable[Any]) -> int:
    """Bytes on the wire for ``parts`` as returned by :func:`encode_response`."""
    # Not isinstance(p, RecordsPart): runtime Protocol checks cost microseconds per part.
    return sum(len(p) if isinstance(p, bytes | bytearray | memoryview) else p.size for p in parts)


def _header_versions(api: Api[Any, Any] | None, api_version: int) -> tuple[int, bool]:
    """(request header version, flexible) for a request of ``api`` at ``api_version``."""
    # Versions beyond what we implement still follow the API's flexible range (Kafka ranges are
    # open-ended), so the header of e.g. ApiVersions v4 parses as v2 and can be answered.
    if api is not None and api.is_flexible(api_version):
        return 2, True
    if api is messages.ControlledShutdown and api_version == 0:
        return 0, False  # Kafka's only request header v0: no client_id
    return 1, False


def decode_request(frame: Buffer) -> Request:
    """Decode one request frame (without its size prefix), as the broker receives it.

    Raises :class:`UnsupportedVersionError` (with the parsed header) for an API key or version
    not in :data:`SUPPORTED_VERSIONS`, and :class:`ProtocolError` for bytes that do not parse.
    Produce ``records`` are memoryview slices of ``frame`` (zero-copy); they stay valid as long
    as the caller keeps them.

    Bytes after a complete body are ignored and counted in ``Request.trailing_bytes``, as Kafka
    does (its parser never checks for leftovers). Real clients depend on it: librdkafka 2.16
    sends Metadata v9+ "all topics" requests with a null compact array written into a reserved
    int32 slot, leaving junk after the body.
    """
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    if len(buf) < 8:
        raise ProtocolError(f"request of {len(buf)} bytes is shorter than a request header")
    api_key, api_version = _API_KEY_VERSION.unpack_from(buf, 0)
    codecs = _REQUEST_DECODERS.get((api_key, api_version))
    if codecs is None:
        codecs = _request_decoders(api_key, api_version)
    header_decoder, body_decoder = codecs
    try:
        header, pos = header_decoder(buf, 0)
    except ProtocolError as exc:
        raise ProtocolError(f"request header: {exc}") from None
    if body_decoder is None:
        raise UnsupportedVersionError(header)
    body, end = body_decoder(buf, pos)
    return Request(header, body, len(buf) - end)


# (api_key, api_version) -> (header decoder, body decoder), supported versions only: saves the
# per-request lookups of the compiled codecs on the hot path.
_REQUEST_DECODERS: dict[tuple[int, int], tuple[Any, Any]] = {}


def _request_decoders(api_key: int, api_version: int) -> tuple[Any, Any]:
    api = APIS.get(api_key)
    header_version, flexible = _header_versions(api, api_version)
    header_decoder = REQUEST_HEADER.decoder(header_version, flexible)
    if api is None or not api.supports(api_version):
        return header_decoder, None  # not cached: garbage keys must not grow the dict
    codecs = (header_decoder, api.request.struct.decoder(api_version, flexible))
    _REQUEST_DECODERS[(api_key, api_version)] = codecs
    return codecs


def encode_response(header: Any, body: Message) -> list[Any]:
    """Encode a response to the request with ``header``: ``[bytes, (records object, bytes)...]``.

    The first part starts with the int32 size prefix. Every ``records`` value that is not
    bytes-like (an object with ``size``, e.g. the server's FetchSlice) is its own part, right
    after the part ending in its length prefix, so the server can sendfile it (zero-copy);
    otherwise the list is a single bytes object. The body is encoded at ``header.api_version``
    -- except an ApiVersions request at a version we do not implement, answered with v0.
    """
    key = (header.api_key, header.api_version)
    codec = _RESPONSE_ENCODERS.get(key)
    if codec is None:
        codec = _response_encoder(*key)
    cls, header_tail, encoder = codec
    if not isinstance(body, cls):
        raise TypeError(f"expected {cls.__name__}, got {type(body).__name__}")
    out = bytearray(4)  # size prefix, filled in below
    out += INT32.pack(header.correlation_id)
    out += header_tail
    parts: list[Any] = []
    encoder(body, out, parts)
    if not parts:
        INT32.pack_into(out, 0, len(out) - 4)
        return [bytes(out)]
    # parts = [bytes (begins with our 4 placeholder bytes), records object, bytes, records
    # object, ...]; ``out`` holds whatever followed the last records object.
    if out:
        parts.append(bytes(out))
    parts[0] = INT32.pack(frame_size(parts) - 4) + memoryview(parts[0])[4:]
    return parts


# (api_key, api_version) -> (response class, response header bytes after the correlation id,
# body encoder): resolved once per version instead of per response (Fetch/Produce hot path).
_RESPONSE_ENCODERS: dict[tuple[int, int], tuple[type[Message], bytes, Any]] = {}


def _response_encoder(api_key: int, api_version: int) -> tuple[type[Message], bytes, Any]:
    api = APIS[api_key]
    version = api_version
    if api.key == API_VERSIONS_KEY and not api.supports(version):
        version = 0
    api.response.check_version(version)  # ValueError for a version we do not implement
    flexible = api.is_flexible(version)
    # Response header v1 (flexible, except ApiVersions): an empty tagged-field section.
    header_tail = b"\x00" if flexible and api.key != API_VERSIONS_KEY else b""
    codec = (api.response.cls, header_tail, api.response.struct.encoder(version, flexible))
    if api.supports(api_version):  # only real versions: garbage must not grow the dict
        _RESPONSE_ENCODERS[(api_key, api_version)] = codec
    return codec


def api_versions_response(
    error_code: int = 0,
    api_keys: Iterable[int] | None = None,
    throttle_time_ms: int = 0,
) -> messages.ApiVersionsResponse:
    """An ApiVersionsResponse listing :data:`ADVERTISED_VERSIONS` (restricted to ``api_keys``,
    e.g. the keys the broker has handlers for)."""
    keys = set(ADVERTISED_VERSIONS if api_keys is None else api_keys)
    entry = messages.ApiVersionsResponse.ApiVersion
    return messages.ApiVersionsResponse(
        error_code=error_code,
        api_keys=[
            entry(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(ADVERTISED_VERSIONS.items())
            if k in keys
        ],
        throttle_time_ms=throttle_time_ms,
    )


def unsupported_version_response(
    exc: UnsupportedVersionError, api_keys: Iterable[int] | None = None
) -> list[Any] | None:
    """The answer to an unsupported request version, or None when the connection must close.

    ApiVersions at a version we do not know gets a v0 body with UNSUPPORTED_VERSION (35) and the
    supported list, so the client can retry with a version we have (librdkafka and kafka-python
    start high and step down). Any other API/version cannot be answered in a format the client
    expects; Kafka closes the connection.
    """
    if exc.api_key != API_VERSIONS_KEY:
        return None
    body = api_versions_response(UnsupportedVersion.code, api_keys)
    return encode_response(exc.header, body)


# -------------------------------------------------------------------------------------------
# Client side
# -------------------------------------------------------------------------------------------


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Message
) -> bytes:
    """Encode a request frame (size prefix included), as a client sends it."""
    api = APIS.get(api_key)
    if api is None or not api.supports(api_version):
        raise ValueError(f"API {api_key} version {api_version} is not implemented")
    header_version, flexible = _header_versions(api, api_version)
    out = bytearray(4)
    header = RequestHeader(
        api_key=api_key, api_version=api_version, correlation_id=correlation_id,
        client_id=client_id,
    )  # fmt: skip
    parts: list[Any] = []
    REQUEST_HEADER.encoder(header_version, flexible)(header, out, parts)
    api.request.encode_into(body, api_version, out, parts)
    if parts:
        raise ValueError("request records must be bytes-like")
    INT32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_response(api_key: int, api_version: int, frame: Buffer) -> tuple[int, Message]:
    """Decode a response frame (without size prefix) to a request sent at ``api_version``.

    Returns ``(correlation_id, body)``. An ApiVersions response with a non-zero error code is
    decoded as v0, the format the broker uses when it does not support the requested version.
    """
    api = APIS.get(api_key)
    if api is None or not api.supports(api_version):
        raise ValueError(f"API {api_key} version {api_version} is not implemented")
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    if len(buf) < 4:
        raise ProtocolError(f"response of {len(buf)} bytes is shorter than its header")
    flexible = api.is_flexible(api_version)
    header, pos = RESPONSE_HEADER.decoder(
        1 if flexible and api_key != API_VERSIONS_KEY else 0,
        flexible and api_key != API_VERSIONS_KEY,
    )(buf, 0)
    version = api_version
    if api_key == API_VERSIONS_KEY and len(buf) >= pos + 2 and _INT16.unpack_from(buf, pos)[0]:
        version = 0
    body, end = api.response.struct.decoder(version, api.is_flexible(version))(buf, pos)
    if end != len(buf):
        raise ProtocolError(
            f"{api.name}Response v{version}: {len(buf) - end} trailing bytes after byte {end}"
        )
    return header.correlation_id, body
