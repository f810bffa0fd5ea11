"""One TCP connection to one broker: framing, correlation ids, pipelining, version negotiation.

A :class:`Connection` wraps asyncio streams around the sans-I/O codec of :mod:`protocol.framing`
(``encode_request`` / ``decode_response``; there is no second codec in the client). Requests are
pipelined: :meth:`Connection.request` writes the frame at once and awaits a future that the
connection's single reader task resolves when the response with the same correlation id
arrives. Kafka answers the requests of one connection in order, so a response whose id is not
the oldest in flight is a protocol violation and closes the connection.

On :meth:`Connection.open` the client sends ApiVersions (v3, stepping down to what the broker
lists if it answers UNSUPPORTED_VERSION, KIP-511) and keeps, per API, the highest version both
sides implement (:meth:`Connection.version`). Callers never pick versions themselves.

When the connection breaks, every request in flight fails with
:class:`client.errors.KafkaConnectionError` (retriable); the owner (:class:`client.cluster.Cluster`)
opens a new one on next use. All methods run on the event loop that opened the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
from collections import OrderedDict
from typing import Any

from protocol import messages
from protocol.errors import ProtocolError, for_code
from protocol.framing import SUPPORTED_VERSIONS, decode_response, encode_request
from protocol.schema import Message

from .errors import KafkaConnectionError, KafkaTimeoutError, UnsupportedVersionError

__all__ = ["CLIENT_SOFTWARE_NAME", "CLIENT_SOFTWARE_VERSION", "Connection"]

CLIENT_SOFTWARE_NAME = "sluice-python"
CLIENT_SOFTWARE_VERSION = "0.1.0"

API_VERSIONS = messages.ApiVersions.key
_SIZE = struct.Struct(">i")
# A response larger than this is treated as garbage (Kafka's client has no limit by default,
# but a 2 GiB "frame" from a confused peer should not become a 2 GiB allocation).
MAX_RESPONSE_SIZE = 1 << 30


class Connection:
    """A pipelined request/response channel to one broker.

    Build with ``await Connection.open(host, port, client_id=...)``; then
    ``await conn.request(api_key, body)`` returns the decoded response body (a
    :class:`protocol.schema.Message`). ``expect_response=False`` is for Produce with acks=0, which
    the broker never answers. ``close()`` fails whatever is still in flight.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        host: str,
        port: int,
        client_id: str | None,
        request_timeout_ms: int,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self._reader = reader
        self._writer = writer
        self._correlation = itertools.count(1)
        # correlation id -> (future, api_key, api_version), in send order
        self._in_flight: OrderedDict[int, tuple[asyncio.Future[Message], int, int]] = OrderedDict()
        self._versions: dict[int, int] = {}
        self._closed: BaseException | None = None
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())

    # --- lifecycle ---------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        client_id: str | None = "sluice",
        connect_timeout_ms: int = 10_000,
        request_timeout_ms: int = 30_000,
    ) -> Connection:
        """Connect and negotiate API versions. Raises :class:`KafkaConnectionError`."""
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port), connect_timeout_ms / 1000
            )
        except (OSError, TimeoutError) as exc:
            raise KafkaConnectionError(f"cannot connect to {host}:{port}: {exc}") from exc
        conn = cls(
            reader,
            writer,
            host=host,
            port=port,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
        )
        try:
            await conn._negotiate_versions()
        except BaseException:
            conn.close()
            raise
        return conn

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._in_flight)

    def close(self, reason: BaseException | None = None) -> None:
        """Close the socket; fail every request in flight with ``reason`` (idempotent)."""
        if self._closed is not None:
            return
        self._closed = reason or KafkaConnectionError(f"connection to {self} closed")
        self._writer.close()
        if self._read_task is not asyncio.current_task():
            self._read_task.cancel()
        pending, self._in_flight = self._in_flight, OrderedDict()
        for fut, _, _ in pending.values():
            if not fut.done():
                fut.set_exception(self._closed)
                fut.exception()  # retrieved: a caller that timed out no longer awaits it

    async def wait_closed(self) -> None:
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await self._writer.wait_closed()
        with contextlib.suppress(asyncio.CancelledError):
            await self._read_task

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    # --- versions ----------------------------------------------------------------------------

    async def _negotiate_versions(self) -> None:
        ours_lo, ours_hi = SUPPORTED_VERSIONS[API_VERSIONS]
        version = ours_hi
        body = messages.ApiVersionsRequest(
            client_software_name=CLIENT_SOFTWARE_NAME,
            client_software_version=CLIENT_SOFTWARE_VERSION,
        )
        response = await self._send(API_VERSIONS, version, body, True)
        if response.error_code == 35:  # UNSUPPORTED_VERSION: the body lists what it has (v0)
            theirs = {k.api_key: k.max_version for k in response.api_keys}
            version = min(theirs.get(API_VERSIONS, 0), ours_hi)
            if version < ours_lo:
                raise UnsupportedVersionError("broker supports no ApiVersions version we speak")
            response = await self._send(API_VERSIONS, version, body, True)
        if response.error_code:
            raise for_code(response.error_code)("ApiVersions failed")
        for entry in response.api_keys:
            ours = SUPPORTED_VERSIONS.get(entry.api_key)
            if ours is None:
                continue
            lo, hi = max(ours[0], entry.min_version), min(ours[1], entry.max_version)
            if lo <= hi:
                self._versions[entry.api_key] = hi

    def version(self, api_key: int) -> int:
        """The highest version of ``api_key`` both this client and the broker implement."""
        try:
            return self._versions[api_key]
        except KeyError:
            name = messages.APIS[api_key].name if api_key in messages.APIS else str(api_key)
            raise UnsupportedVersionError(
                f"broker {self} implements no version of {name} that this client speaks"
            ) from None

    @property
    def versions(self) -> dict[int, int]:
        """``{api_key: negotiated version}``."""
        return dict(self._versions)

    # --- requests ----------------------------------------------------------------------------

    async def request(
        self,
        api_key: int,
        body: Message,
        *,
        version: int | None = None,
        expect_response: bool = True,
        timeout_ms: int | None = None,
    ) -> Any:
        """Send one request and return the decoded response body (None without a response).

        ``version`` defaults to the negotiated one. Raises :class:`KafkaConnectionError` if the
        connection breaks and :class:`KafkaTimeoutError` after ``timeout_ms`` (default: the
        connection's ``request_timeout_ms``; a timed-out connection is closed, because the
        response it may still send would desynchronise the pipeline).
        """
        if version is None:
            version = self.version(api_key)
        return await self._send(api_key, version, body, expect_response, timeout_ms)

    async def _send(
        self,
        api_key: int,
        version: int,
        body: Message,
        expect_response: bool,
        timeout_ms: int | None = None,
    ) -> Any:
        if self._closed is not None:
            raise KafkaConnectionError(f"connection to {self} is closed") from self._closed
        correlation = next(self._correlation) & 0x7FFFFFFF
        frame = encode_request(api_key, version, correlation, self.client_id, body)
        fut: asyncio.Future[Message] | None = None
        if expect_response:
            fut = asyncio.get_running_loop().create_future()
            self._in_flight[correlation] = (fut, api_key, version)
        try:
            self._writer.write(frame)
            await self._writer.drain()
        except (OSError, RuntimeError) as exc:
            broken = KafkaConnectionError(f"write to {self} failed: {exc}")
            self.close(broken)
            raise broken from exc
        if fut is None:
            return None
        timeout = (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            error = KafkaTimeoutError(f"no response from {self} within {timeout:.3g}s")
            self.close(error)
            raise error from None

    async def _read_loop(self) -> None:
        reader = self._reader
        try:
            while True:
                head = await reader.readexactly(4)
                (size,) = _SIZE.unpack(head)
                if not 4 <= size <= MAX_RESPONSE_SIZE:
                    raise ProtocolError(f"response size {size} out of range")
                frame = await reader.readexactly(size)
                (correlation,) = _SIZE.unpack_from(frame, 0)
                if not self._in_flight:
                    raise ProtocolError(f"unexpected response (correlation id {correlation})")
                oldest = next(iter(self._in_flight))
                if correlation != oldest:
                    raise ProtocolError(f"response correlation id {correlation}, expected {oldest}")
                fut, api_key, version = self._in_flight.pop(correlation)
                try:
                    _, body = decode_response(api_key, version, memoryview(frame))
                except ProtocolError as exc:
                    if not fut.done():
                        fut.set_exception(exc)
                    raise
                if not fut.done():
                    fut.set_result(body)
        except asyncio.CancelledError:
            raise
        except (asyncio.IncompleteReadError, OSError) as exc:
            self.close(KafkaConnectionError(f"connection to {self} lost: {exc!r}"))
        except ProtocolError as exc:
            self.close(KafkaConnectionError(f"bad response from {self}: {exc}"))
