"""One TCP connection to one broker: framing, correlation ids, pipelining, version negotiation.

A :class:`Connection` puts an asyncio transport under the sans-I/O codec of
:mod:`sluice.protocol.framing` (``encode_request`` / ``decode_response``; there is no second
codec in the client). Requests are pipelined: :meth:`Connection.request` writes the frame at
once and awaits a future that is resolved when the response with the same correlation id
arrives. Kafka answers the requests of one connection in order, so a response whose id is not
the oldest in flight is a protocol violation and closes the connection.

Responses are read by :class:`_ResponseReader`, an ``asyncio.BufferedProtocol``: small frames
are cut out of one reusable receive buffer, and a big one (a Fetch response) is received
straight into a buffer of its own size, so its bytes are copied once, by the kernel (against the
asyncio streams it replaced: ``bench/NOTES.md``).

Every wait is bounded with ``asyncio.timeout``, never ``asyncio.wait_for``: on Python 3.11,
``wait_for`` returns the result when its caller is cancelled just as the result arrives, and
the cancellation is lost (the whole client follows this rule).

On :meth:`Connection.open` the client sends ApiVersions (v3, stepping down to what the broker
lists if it answers UNSUPPORTED_VERSION, KIP-511) and keeps, per API, the highest version both
sides implement (:meth:`Connection.version`). Callers never pick versions themselves.

When the connection breaks, every request in flight fails with
:class:`sluice.net.errors.KafkaConnectionError` (retriable); the owner
(:class:`sluice.client.cluster.Cluster`) opens a new one on next use. All methods run on the
event loop that opened the connection.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import struct
from collections import OrderedDict
from time import monotonic
from typing import Literal, TypeVar, cast, overload

from sluice.net.errors import KafkaConnectionError, KafkaTimeoutError, UnsupportedVersionError
from sluice.net.security import ClientSecurity, authenticate
from sluice.protocol import messages
from sluice.protocol.errors import ProtocolError, for_code
from sluice.protocol.framing import SUPPORTED_VERSIONS, decode_response, encode_request
from sluice.protocol.schema import Message, RequestMessage, ResponseMessage

__all__ = ["CLIENT_SOFTWARE_NAME", "CLIENT_SOFTWARE_VERSION", "Connection"]

CLIENT_SOFTWARE_NAME = "sluice-python"
CLIENT_SOFTWARE_VERSION = "0.1.0"

API_VERSIONS = messages.ApiVersions.key
_SIZE = struct.Struct(">i")
_R = TypeVar("_R", bound=ResponseMessage)
# A response larger than this is treated as garbage (Kafka's client has no limit by default,
# but a 2 GiB "frame" from a confused peer should not become a 2 GiB allocation).
MAX_RESPONSE_SIZE = 1 << 30
# The reusable receive buffer of a connection, and the frame size from which a response still
# arriving is received into a buffer of its own (below it, it is copied out once it is whole).
_RECEIVE_BUFFER = 256 * 1024
_OWN_BUFFER_FROM = 64 * 1024


class Connection:
    """A pipelined request/response channel to one broker.

    Build with ``await Connection.open(host, port, client_id=...)``; then
    ``await conn.request(api_key, body)`` returns the decoded response body, typed by the
    request's class (a ``FetchRequest`` gives a ``FetchResponse``). ``expect_response=False`` is
    for Produce with acks=0, which the broker never answers. ``close()`` fails whatever is still
    in flight.
    """

    def __init__(
        self,
        transport: asyncio.Transport,
        reader: _ResponseReader,
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
        self._transport = transport
        self._reader = reader
        self._correlation = itertools.count(1)
        # correlation id -> (future, api_key, api_version), in send order
        self._in_flight: OrderedDict[int, tuple[asyncio.Future[Message], int, int]] = OrderedDict()
        self._versions: dict[int, int] = {}
        self._closed: BaseException | None = None
        # KIP-368: when to log in again (monotonic; None: never), and the login under way
        self._security: ClientSecurity | None = None
        self._reauth_at: float | None = None
        self._reauthenticating: asyncio.Future[None] | None = None
        reader.attach(self)

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
        security: ClientSecurity | None = None,
    ) -> Connection:
        """Connect (in TLS and logged in with SASL as ``security`` says) and negotiate API
        versions. Raises :class:`KafkaConnectionError`, or the broker's SASL error."""
        loop = asyncio.get_running_loop()
        tls = security.ssl_context if security is not None else None
        server_hostname = None
        if tls is not None:
            server_hostname = security.server_hostname if security is not None else None
            server_hostname = server_hostname or host
        try:
            async with asyncio.timeout(connect_timeout_ms / 1000):
                transport, reader = await loop.create_connection(
                    _ResponseReader, host, port, ssl=tls, server_hostname=server_hostname
                )
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            raise KafkaConnectionError(f"cannot connect to {host}:{port}: {exc}") from exc
        conn = cls(
            transport,
            reader,
            host=host,
            port=port,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
        )
        try:
            await conn._negotiate_versions()
            if security is not None and security.sasl_mechanism is not None:
                async with asyncio.timeout(request_timeout_ms / 1000):
                    lifetime_ms = await authenticate(conn, security)
                if security.reauthenticate:
                    conn._security = security
                    conn._schedule_reauthentication(lifetime_ms)
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
        # Graceful: bytes still buffered (e.g. acks=0 Produce requests, which have no response
        # to wait for) are flushed before the socket closes; wait_closed bounds that.
        self._transport.close()
        self._reader.release_writers()
        pending, self._in_flight = self._in_flight, OrderedDict()
        for fut, _, _ in pending.values():
            if not fut.done():
                fut.set_exception(self._closed)
                fut.exception()  # retrieved: a caller that timed out no longer awaits it

    async def wait_closed(self) -> None:
        """Wait until the socket is closed (after :meth:`close` or a lost connection). A peer
        that does not take the bytes still buffered gets ``request_timeout_ms``; then the
        connection is aborted."""
        lost = self._reader.lost
        try:
            async with asyncio.timeout(self.request_timeout_ms / 1000):
                await asyncio.shield(lost)
        except TimeoutError:
            self._transport.abort()
            await asyncio.shield(lost)

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
        response = await self.request(API_VERSIONS, body, version=version)
        if response.error_code == 35:  # UNSUPPORTED_VERSION: the body lists what it has (v0)
            theirs = {k.api_key: k.max_version for k in response.api_keys}
            version = min(theirs.get(API_VERSIONS, 0), ours_hi)
            if version < ours_lo:
                raise UnsupportedVersionError("broker supports no ApiVersions version we speak")
            response = await self.request(API_VERSIONS, body, version=version)
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

    @overload
    async def request(
        self,
        api_key: int,
        body: RequestMessage[_R],
        *,
        version: int | None = None,
        expect_response: Literal[True] = True,
        timeout_ms: int | None = None,
    ) -> _R: ...

    @overload
    async def request(
        self,
        api_key: int,
        body: RequestMessage[_R],
        *,
        version: int | None = None,
        expect_response: bool,
        timeout_ms: int | None = None,
    ) -> _R | None: ...

    async def request(
        self,
        api_key: int,
        body: RequestMessage[_R],
        *,
        version: int | None = None,
        expect_response: bool = True,
        timeout_ms: int | None = None,
    ) -> _R | None:
        """Send one request and return the decoded response body (None without a response).

        ``version`` defaults to the negotiated one. Raises :class:`KafkaConnectionError` if the
        connection breaks and :class:`KafkaTimeoutError` after ``timeout_ms`` (default: the
        connection's ``request_timeout_ms``; a timed-out connection is closed, because the
        response it may still send would desynchronise the pipeline).
        """
        if self._reauth_at is not None and monotonic() >= self._reauth_at:
            await self._reauthenticate()
        elif self._reauthenticating is not None:
            await asyncio.shield(self._reauthenticating)
        if version is None:
            version = self.version(api_key)
        response = await self._send(api_key, version, body, expect_response, timeout_ms)
        # The response class is the one of ``api_key``, which encode_request has checked to be
        # the API of ``body``'s class, i.e. ``_R``.
        return cast("_R | None", response)

    async def _exchange(self, api_key: int, body: RequestMessage[_R]) -> _R:
        """A request of the SASL login itself: never waits for a re-authentication."""
        response = await self._send(api_key, self.version(api_key), body, True)
        return cast("_R", response)

    def _schedule_reauthentication(self, lifetime_ms: int) -> None:
        """Log in again at 85-95 % of the session (Kafka's client: the same window)."""
        if lifetime_ms <= 0:
            self._reauth_at = None
            return
        self._reauth_at = monotonic() + lifetime_ms / 1000 * random.uniform(0.85, 0.95)

    async def _reauthenticate(self) -> None:
        """KIP-368: wait for the requests in flight, then log in again; others wait meanwhile.
        A failed re-authentication closes the connection (its owner opens a new one)."""
        security = self._security
        assert security is not None
        self._reauth_at = None
        done = asyncio.get_running_loop().create_future()
        self._reauthenticating = done
        try:
            pending = [fut for fut, _, _ in self._in_flight.values()]
            if pending:
                await asyncio.wait(pending, timeout=self.request_timeout_ms / 1000)
            async with asyncio.timeout(self.request_timeout_ms / 1000):
                lifetime_ms = await authenticate(self, security)
            self._schedule_reauthentication(lifetime_ms)
        except Exception as exc:
            error = KafkaConnectionError(f"re-authentication with {self} failed: {exc}")
            self.close(error)
            raise error from exc
        finally:
            self._reauthenticating = None
            done.set_result(None)

    async def _send(
        self,
        api_key: int,
        version: int,
        body: Message,
        expect_response: bool,
        timeout_ms: int | None = None,
    ) -> Message | None:
        if self._closed is not None:
            raise KafkaConnectionError(f"connection to {self} is closed") from self._closed
        correlation = next(self._correlation) & 0x7FFFFFFF
        frame = encode_request(api_key, version, correlation, self.client_id, body)
        fut: asyncio.Future[Message] | None = None
        if expect_response:
            fut = asyncio.get_running_loop().create_future()
            self._in_flight[correlation] = (fut, api_key, version)
        try:
            self._transport.write(frame)
        except (OSError, RuntimeError) as exc:
            broken = KafkaConnectionError(f"write to {self} failed: {exc}")
            self.close(broken)
            raise broken from exc
        timeout = (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000
        if self._reader.paused is not None:
            # The transport's buffer is above its high mark: wait until it drains, the
            # connection closes, or the request's time is up (a broker that stopped reading).
            try:
                async with asyncio.timeout(timeout):
                    await self._reader.wait_drained()
            except TimeoutError:
                error = KafkaTimeoutError(f"request to {self} not sent within {timeout:.3g}s")
                self.close(error)
                raise error from None
        if fut is None:
            if self._closed is not None:
                raise KafkaConnectionError(f"write to {self} failed") from self._closed
            return None
        # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the result when the
        # caller is cancelled just as the response arrives, swallowing the cancellation (a
        # Consumer.stop() then waited forever for its fetcher; tests/test_client_connection.py).
        # shield: a cancelled caller leaves the request in flight, answered and dropped in order.
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(fut)
        except TimeoutError:
            error = KafkaTimeoutError(f"no response from {self} within {timeout:.3g}s")
            self.close(error)
            raise error from None

    def _on_frame(self, frame: memoryview) -> None:
        """One response frame (without its size prefix) from the reader, in arrival order."""
        (correlation,) = _SIZE.unpack_from(frame, 0)
        if not self._in_flight:
            raise ProtocolError(f"unexpected response (correlation id {correlation})")
        oldest = next(iter(self._in_flight))
        if correlation != oldest:
            raise ProtocolError(f"response correlation id {correlation}, expected {oldest}")
        fut, api_key, version = self._in_flight.pop(correlation)
        try:
            _, body = decode_response(api_key, version, frame)
        except Exception as exc:
            # A ProtocolError, or (a codec bug) anything else: the request fails either way,
            # never left pending, and the connection closes.
            error = exc if isinstance(exc, ProtocolError) else ProtocolError(repr(exc))
            if not fut.done():
                fut.set_exception(error)
            if error is exc:
                raise
            raise error from exc
        if not fut.done():
            fut.set_result(body)

    def _on_bad_frame(self, exc: ProtocolError) -> None:
        self.close(KafkaConnectionError(f"bad response from {self}: {exc}"))

    def _on_lost(self, exc: BaseException | None) -> None:
        detail = f": {exc!r}" if exc is not None else " (closed by the broker)"
        self.close(KafkaConnectionError(f"connection to {self} lost{detail}"))


class _ResponseReader(asyncio.BufferedProtocol):
    """Protocol of one client connection: splits the byte stream into response frames.

    Frames (``int32 size`` + ``size`` bytes) are received into a reusable buffer of
    :data:`_RECEIVE_BUFFER` bytes. Every frame handed to :meth:`Connection._on_frame` is a
    buffer of its own, because decoded responses keep slices of it (a Fetch response's records
    are views of the frame): a frame received whole in the shared buffer is copied out; one of
    :data:`_OWN_BUFFER_FROM` bytes or more that is still arriving gets its own buffer, which
    the kernel then writes directly (the part already received is copied once). A size outside
    ``4..`` :data:`MAX_RESPONSE_SIZE` or a response that does not decode closes the
    connection.

    Write flow control: :attr:`paused` is a future while the transport's buffer is above its
    high-water mark; it completes when the buffer drains or the connection is lost.
    """

    def __init__(self) -> None:
        self._conn: Connection | None = None
        self._buffer = bytearray(_RECEIVE_BUFFER)
        self._view = memoryview(self._buffer)
        self._start = 0  # first unconsumed byte in _buffer
        self._end = 0  # end of received bytes in _buffer
        self._big: bytearray | None = None  # a frame being received into its own buffer
        self._big_filled = 0
        self.paused: asyncio.Future[None] | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def attach(self, conn: Connection) -> None:
        self._conn = conn

    # -- receiving --

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return memoryview(self._big)[self._big_filled :]
        if self._end == len(self._buffer):
            # Only a partial frame left at the end (under _OWN_BUFFER_FROM bytes, or it would
            # have a buffer of its own): move it to the front. Copied out first: a bytearray
            # slice assignment from a view of itself is a memcpy, undefined if they overlap.
            pending = self._end - self._start
            self._buffer[:pending] = self._view[self._start : self._end].tobytes()
            self._start, self._end = 0, pending
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        try:
            if self._big is not None:
                self._big_filled += nbytes
                if self._big_filled < len(self._big):
                    return
                frame, self._big = self._big, None
                self._deliver(memoryview(frame))
                return
            self._end += nbytes
            self._cut_frames()
        except ProtocolError as exc:
            if self._conn is not None:
                self._conn._on_bad_frame(exc)

    def _cut_frames(self) -> None:
        view = self._view
        while self._end - self._start >= 4:
            start = self._start
            (size,) = _SIZE.unpack_from(view, start)
            if not 4 <= size <= MAX_RESPONSE_SIZE:
                raise ProtocolError(f"response size {size} out of range")
            body = start + 4
            if self._end - body >= size:
                self._start = body + size
                self._deliver(memoryview(view[body : body + size].tobytes()))
                continue
            if size >= _OWN_BUFFER_FROM:
                # A big frame (a Fetch response): the rest goes straight into its own buffer.
                received = self._end - body
                big = bytearray(size)
                big[:received] = view[body : self._end]
                self._big, self._big_filled = big, received
                self._start = self._end = 0
            return
        if self._start == self._end:
            self._start = self._end = 0

    def _deliver(self, frame: memoryview) -> None:
        conn = self._conn
        if conn is None:
            raise ProtocolError("response before the connection was set up")
        if conn.closed:
            return
        conn._on_frame(frame)

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost reports it

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        if self.paused is not None and not self.paused.done():
            self.paused.set_result(None)
        if self._conn is not None:
            self._conn._on_lost(exc)

    # -- flow control of writes --

    def pause_writing(self) -> None:
        if self.paused is None:
            self.paused = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        paused, self.paused = self.paused, None
        if paused is not None and not paused.done():
            paused.set_result(None)

    def release_writers(self) -> None:
        """Wake whoever waits in :meth:`wait_drained` (the connection is closing)."""
        self.resume_writing()

    async def wait_drained(self) -> None:
        paused = self.paused
        if paused is not None:
            await asyncio.shield(paused)
