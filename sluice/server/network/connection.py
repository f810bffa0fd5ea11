"""One protocol object per client connection: framing, in-order processing, backpressure, sending.

Life of a connection (all on the event loop thread)::

    data_received -> FrameReader.feed -> complete frames appended to ``_frames``
    worker task:  frame -> decode_request -> Handlers.handle -> encode_response -> send
                  (one request at a time, so responses leave strictly in request order — Kafka
                  mutes a channel the same way until its response is sent)

Backpressure. Reading pauses (``transport.pause_reading()``) while either

* ``queued.max.requests`` frames wait unanswered, or
* the transport's write buffer is above ``sluice.connection.max.unsent.bytes`` (the transport
  calls :meth:`pause_writing`; the worker also waits before sending the next response),

and resumes when both are below their marks, so a client that floods requests or never reads its
responses holds at most about those amounts of memory. A response is never put into the buffer
whole: bytes parts are small (headers), and record slices are either sendfile'd (zero copy) or
copied in chunks of a quarter of the bound, each after the buffer drained below the high mark.
A connection closed while its worker waits to write ends quietly (no write to a closed transport).

Bad input. A frame above ``socket.request.max.bytes`` (seen in its size prefix, before the body
arrives), a header or body that does not parse, or an API key/version we do not serve closes the
connection after the responses already due are sent (ApiVersions with an unknown version instead
gets the v0 ``UNSUPPORTED_VERSION`` answer the protocol defines). Each case logs one structured
line and bumps a ``connections.closed.<reason>`` counter; nothing stored is touched.

Limits (:mod:`sluice.server.network.quotas`). A connection over ``max.connections.per.ip`` or
``max.connections`` is closed in :meth:`connection_made`, before anything is read or counted as
open. Over ``sluice.quota.requests.per.second`` or a client quota (``ClientQuotas``: the
request's loop time, a Produce's size, a consumer Fetch's response size, by the principal and
client id) a response carries ``throttle_time_ms`` (the largest earned) and the worker waits that
long before taking the next request (Kafka mutes the channel the same way); frames keep queuing
meanwhile, up to ``queued.max.requests``. A consumer Fetch over ``consumer_byte_rate`` is sent
with its records too (counted, then muted like a Produce), not answered empty as Kafka's
``getThrottledResponse`` does: :class:`~sluice.server.network.quotas.ClientQuotas` says why.
A connection with nothing read or written for
``connections.max.idle.ms`` and no request in hand is closed (``Server`` checks).

Zero-copy Fetch. ``encode_response`` returns the response as parts: bytes, plus each Fetch
partition's records as the storage layer's ``FetchSlice`` (fileno/position/size). With
``sluice.fetch.zero.copy=true`` the bytes parts go through the transport; before a slice the
worker waits until the transport's buffer is empty, then ``os.sendfile``s the slice straight to
the socket (uvloop transports do not implement ``loop.sendfile``), waiting for writability on a
dup of the socket fd when the kernel buffer is full (uvloop refuses ``add_writer`` on an fd a
transport owns). Otherwise each slice is copied with ``read_bytes()`` and written like any bytes.

Security (:mod:`sluice.server.network.listener`). A connection knows its listener: on TLS
listeners asyncio completes the handshake before :meth:`connection_made` (a plaintext client on a
TLS port never reaches this object), and the client certificate gives the principal. On SASL
listeners every frame goes to the connection's ``SaslServerAuthenticator`` until the login
completes (the frame reader's limit meanwhile is ``sasl.server.max.receive.size``): it answers
ApiVersions, SaslHandshake and SaslAuthenticate and fails anything else. Until then reading
pauses while a login step is pending (Kafka reads one receive at a time before
authentication), so a client not logged in holds at most one frame and one read. A failed
login stops reading; its answer and the close wait ``connection.failed.authentication.delay.ms``
(Kafka delays both; only that connection's worker waits). PLAIN's PBKDF2 check (milliseconds)
runs in the default executor, off the event loop. Once logged in, the principal goes into the
worker's ``RequestContext``; with ``connections.max.reauth.ms`` a request after the session's
end closes the connection, and a SaslHandshake starts KIP-368 re-authentication on the same
connection.
Zero-copy is impossible over TLS (the kernel does not encrypt): Fetch takes the copy path there.

Measurements behind this design, and the alternatives measured and rejected: ``bench/NOTES.md``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import functools
import os
import socket
import struct
from time import monotonic, perf_counter
from typing import TYPE_CHECKING, Any, cast

from sluice.protocol import messages as m
from sluice.protocol.errors import ProtocolError
from sluice.protocol.framing import (
    FrameReader,
    FrameTooLarge,
    UnsupportedVersionError,
    decode_request,
    encode_response,
)
from sluice.server.logging import get_logger
from sluice.server.network.listener import ListenerSecurity
from sluice.server.network.quotas import FETCH as FETCH_QUOTA
from sluice.server.network.quotas import PRODUCE as PRODUCE_QUOTA
from sluice.server.network.quotas import REQUEST as REQUEST_QUOTA
from sluice.server.network.request import (
    CLOSE_CONNECTION,
    REQUEST_CONTEXT,
    RequestContext,
    RequestHandler,
    java_host_address,
)
from sluice.server.security.notifications import sanitize

if TYPE_CHECKING:
    from sluice.server.metrics.metrics import Metrics
    from sluice.server.network.quotas import ClientQuotas, ConnectionQuotas, RequestQuota
    from sluice.server.security.authenticator import SaslServerAuthenticator, Step

log = get_logger("sluice.connection")

_BYTES_LIKE = (bytes, bytearray, memoryview)  # a tuple: isinstance with a union is slower
#: APIs whose handlers count their responses' error codes themselves, on paths they walk anyway
#: (the others' responses are walked by ``Metrics.count_errors``).
_COUNT_OWN_ERRORS = frozenset({m.Produce.key, m.Fetch.key})
#: Bounds of the chunk the copy path reads a record slice in (a quarter of the unsent bound).
_MIN_COPY_CHUNK = 64 * 1024
_MAX_COPY_CHUNK = 1024 * 1024
_FETCH = m.Fetch.key
_PRODUCE = m.Produce.key
#: Broker-to-broker APIs, never throttled (Kafka exempts cluster actions from request quotas).
_CLUSTER_ACTIONS = frozenset({m.ControlledShutdown.key})
_API_KEY = struct.Struct(">h")
_SASL_HANDSHAKE = m.SaslHandshake.key
_PLAINTEXT = ListenerSecurity()
#: Kafka's Sanitizer.sanitize of principal names (a few per broker: cached).
_sanitized = functools.lru_cache(maxsize=1024)(sanitize)


class Connection(asyncio.Protocol):
    """Protocol object for one client TCP connection. Created by ``Server``; not reused."""

    def __init__(
        self,
        handlers: RequestHandler,
        metrics: Metrics,
        *,
        max_frame_size: int,
        max_queued_requests: int,
        max_unsent_bytes: int,
        zero_copy: bool,
        registry: set[Connection],
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        connection_quotas: ConnectionQuotas | None = None,
        request_quota: RequestQuota | None = None,
        client_quotas: ClientQuotas | None = None,
        listener: ListenerSecurity | None = None,
    ) -> None:
        self._handlers = handlers
        self._listener = listener or _PLAINTEXT
        self._max_frame_size = max_frame_size
        self._principal = "User:ANONYMOUS"
        self._auth: SaslServerAuthenticator | None = None
        self._metrics = metrics
        self._reader = FrameReader(max_frame_size)
        self._max_queued = max_queued_requests
        self._max_unsent = max_unsent_bytes
        self._zero_copy = zero_copy
        self._registry = registry
        self._sndbuf = send_buffer_bytes
        self._rcvbuf = receive_buffer_bytes
        self._frames: collections.deque[memoryview] = collections.deque()
        self._frame_ready = asyncio.Event()
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._transport: asyncio.Transport | None = None
        self._worker: asyncio.Task[None] | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._closing = False  # no more frames accepted; worker drains what is queued, then closes
        self._unmute = asyncio.Event()  # set when closing: a throttle's mute ends at once
        self._busy = False  # a request is being handled right now
        self._dup_fd: int | None = None  # dup of the socket fd, polled for writability
        self._writable: asyncio.Future[None] | None = None
        self._peer: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd = -1  # the socket's fd, for os.sendfile (valid while _transport is set)
        self._connection_quotas = connection_quotas
        self._request_quota = request_quota
        self._client_quotas = client_quotas
        self._quota_ip: str | None = None  # the address counted by connection_quotas
        self._last_active = monotonic()  # the last read or write (connections.max.idle.ms)

    # --- asyncio.Protocol callbacks --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport implements asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        transport = self._transport
        self._peer = transport.get_extra_info("peername")
        self._loop = asyncio.get_running_loop()
        listener = self._listener
        try:
            self._principal = listener.principal(transport.get_extra_info("ssl_object"))
        except Exception as exc:  # a certificate no ssl.principal.mapping.rules rule maps
            log.warning("closing connection", reason="ssl_principal", peer=self._peer,
                        listener=listener.name, error=str(exc))  # fmt: skip
            self._metrics.inc("connections.closed.ssl_principal")
            self._closing = True
            self._transport = None
            transport.close()
            return
        if listener.sasl is not None:
            self._auth = listener.sasl(str(self._peer))
            self._reader.max_frame_size = self._auth.max_receive_size
        quotas = self._connection_quotas
        if quotas is not None:
            ip = self._peer[0] if isinstance(self._peer, tuple) and self._peer else ""
            refused = quotas.acquire(ip)
            if refused is not None:
                self._metrics.inc(f"connections.refused.{refused}")
                self._closing = True
                self._transport = None  # never registered: connection_lost has nothing to undo
                transport.close()
                return
            self._quota_ip = ip
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._fd = sock.fileno()
            # Kafka's socket.send/receive.buffer.bytes; -1 keeps the kernel's autotuning.
            with contextlib.suppress(OSError):
                if self._sndbuf > 0:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._sndbuf)
                if self._rcvbuf > 0:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._rcvbuf)
        # High watermark = our unsent-bytes bound; resume at a quarter of it.
        transport.set_write_buffer_limits(high=self._max_unsent, low=self._max_unsent // 4)
        self._registry.add(self)
        self._metrics.inc("connections.accepted")
        self._metrics.set("connections.active", len(self._registry))
        self._worker = self._loop.create_task(self._run())

    def connection_lost(self, exc: Exception | None) -> None:
        if self._worker is None:  # refused in connection_made
            return
        if self._quota_ip is not None and self._connection_quotas is not None:
            self._connection_quotas.release(self._quota_ip)
            self._quota_ip = None
        self._registry.discard(self)
        self._metrics.inc("connections.closed")
        self._metrics.set("connections.active", len(self._registry))
        self._begin_close()
        self._frames.clear()
        self._can_write.set()  # let a worker blocked on writing notice the close
        if self._worker is not None and not self._worker.done() and not self._busy:
            self._worker.cancel()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)  # a worker waiting to sendfile sees the close
        if self._dup_fd is not None:
            with contextlib.suppress(OSError, ValueError):
                asyncio.get_running_loop().remove_writer(self._dup_fd)
            with contextlib.suppress(OSError):
                os.close(self._dup_fd)
            self._dup_fd = None
        self._transport = None

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._last_active = monotonic()
        try:
            self._reader.feed(data)
            while (frame := self._reader.next_frame()) is not None:
                # The reader hands over ownership of each frame (no copy; Produce records
                # decode as slices of it).
                self._frames.append(frame)
        except FrameTooLarge as exc:
            if self._auth is not None and self._auth.authenticating:
                self._auth.frame_too_large(exc.size)  # logs the failed login
                self._metrics.inc("connections.failed_authentication")
            self._bad_input("frame_too_large", exc)
            return
        except ProtocolError as exc:
            self._bad_input("bad_frame", exc)
            return
        if self._frames:
            self._frame_ready.set()
        self._update_reading()

    def eof_received(self) -> bool | None:
        # Client half-closed: answer what it already sent, then close (return False = close
        # our side once the worker is done; the worker closes the transport itself).
        self._begin_close()
        # (asyncio's TLS transports cannot stay half-open: they close after this)
        return None if self._listener.tls else True

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._can_write.clear()
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._can_write.set()
        self._update_reading()

    # --- control used by Server ------------------------------------------------------------------

    def stop_reading_requests(self) -> None:
        """Graceful shutdown: accept no new frame; answer the queued ones, then close."""
        self._begin_close()
        if self._transport is not None and not self._reading_paused:
            with contextlib.suppress(RuntimeError):
                self._transport.pause_reading()
            self._reading_paused = True

    async def wait_idle(self) -> None:
        """Until no request is being handled and none is queued."""
        if self._worker is not None:
            await asyncio.wait({self._worker})

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def idle_for(self, now: float) -> float:
        """Seconds since the last byte read or written; 0 while a request is handled or
        queued (a long-polling Fetch is not idle)."""
        if self._busy or self._frames:
            return 0.0
        return now - self._last_active

    def close_idle(self) -> None:
        """Close for ``connections.max.idle.ms`` (Kafka's Selector closes idle channels)."""
        transport = self._transport
        if transport is None or self._closing:
            return
        log.info("closing connection", reason="idle", peer=self._peer,
                 idle_s=round(monotonic() - self._last_active, 3))  # fmt: skip
        self._metrics.inc("connections.closed.idle")
        self._begin_close()
        transport.close()

    @property
    def authenticating(self) -> bool:
        """A SASL login (or KIP-368 re-authentication) is under way on this connection."""
        return self._auth is not None and self._auth.authenticating

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet handled: queued frames and a partial one."""
        return sum(len(frame) for frame in self._frames) + self._reader.buffered

    # --- internals -------------------------------------------------------------------------------

    def _begin_close(self) -> None:
        """Accept no more frames: the worker drains what is queued, then closes. A throttle's
        mute ends at once: Kafka closes a muted channel at shutdown without waiting out its
        throttle, and a closing connection has nobody left to hold back."""
        self._closing = True
        self._frame_ready.set()
        self._unmute.set()

    async def _mute(self, throttle_ms: int) -> None:
        """KIP-219: take no next request for the throttle time, unless the connection closes."""
        if self._closing:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(throttle_ms / 1000):
                await self._unmute.wait()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self._closing:
            return
        full = len(self._frames) >= self._max_queued or self._writing_paused
        auth = self._auth
        if auth is not None and auth.authenticating and (self._frames or self._busy):
            # Kafka reads one receive at a time until the login completes: while a login
            # step is pending nothing more is read, so a client not logged in holds at most
            # one frame of sasl.server.max.receive.size and one read.
            full = True
        if full and not self._reading_paused:
            transport.pause_reading()
            self._reading_paused = True
            self._metrics.inc("connections.backpressure")
        elif not full and self._reading_paused:
            transport.resume_reading()
            self._reading_paused = False

    def _bad_input(self, reason: str, exc: BaseException | str) -> None:
        """Log, count, and close after already-queued requests are answered."""
        log.warning("closing connection", reason=reason, peer=self._peer, error=str(exc))
        self._metrics.inc(f"connections.closed.{reason}")
        self._begin_close()
        if self._transport is not None and not self._reading_paused:
            self._transport.pause_reading()
            self._reading_paused = True

    async def _run(self) -> None:
        # The worker task's own context: handlers of this connection's requests see its peer.
        peer = self._peer
        # Kafka's InetAddress.toString ("/127.0.0.1", "/0:0:0:0:0:0:0:1"): ACL hosts match it
        host = f"/{java_host_address(peer[0])}" if isinstance(peer, tuple) and peer else ""
        REQUEST_CONTEXT.set(
            RequestContext(
                client_host=host, principal=self._principal, listener_name=self._listener.name
            )
        )
        try:
            while True:
                while not self._frames:
                    if self._closing:
                        return
                    self._frame_ready.clear()
                    await self._frame_ready.wait()
                frame = self._frames.popleft()
                self._busy = True
                self._update_reading()
                try:
                    keep_going = await self._process(frame)
                finally:
                    self._busy = False
                if self._auth is not None:
                    self._update_reading()  # a login step done: read the next frame
                if not keep_going:
                    return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("connection worker failed", peer=self._peer)
            self._metrics.inc("connections.closed.internal_error")
        finally:
            transport = self._transport
            if transport is not None and not transport.is_closing():
                transport.close()

    async def _process(self, frame: memoryview) -> bool:
        """Handle one frame; False = close the connection."""
        auth = self._auth
        if auth is not None:
            if auth.authenticating:
                return await self._authenticate(auth, frame)
            if auth.session_expired():
                # Kafka's expired-session close: the client reconnects (and logs in again).
                log.info("closing connection", reason="session_expired", peer=self._peer,
                         principal=auth.principal)  # fmt: skip
                self._metrics.inc("connections.closed.session_expired")
                return False
            if len(frame) >= 2 and _API_KEY.unpack_from(frame)[0] == _SASL_HANDSHAKE:
                step = auth.begin_reauthentication(frame)
                if step is not None:
                    return await self._sasl_step(auth, step)
        try:
            request = decode_request(frame)
        except UnsupportedVersionError as exc:
            response = self._handlers.unsupported_version(exc)
            if response is None:
                self._bad_input("unsupported_version", exc)
                return False
            await self._send(response)
            return True
        except ProtocolError as exc:
            self._bad_input("bad_request", exc)
            return False
        if not self._handlers.serves(request.header.api_key):
            # Declared in the codec but not advertised (no handler yet): like an unknown API.
            self._bad_input("unsupported_version", f"API {request.header.api_key} not served")
            return False
        metrics = self._metrics
        metrics.inc("requests")
        api_key = request.header.api_key
        started = perf_counter()
        body = self._handlers.dispatch(request.header, request.body)
        loop_time = perf_counter() - started  # what the handler ran on the loop
        if asyncio.iscoroutine(body):
            body = await body
        throttle_ms = 0
        if self._request_quota is not None:
            throttle_ms = self._throttle_ms(request.header, request.body)
        client_quotas, quota_user = self._client_quotas, ""
        if client_quotas is not None and client_quotas.active:
            quota_user = self._quota_user()
            throttle_ms = max(throttle_ms, self._client_throttle_ms(
                client_quotas, request.header, request.body, len(frame), loop_time, quota_user
            ))  # fmt: skip
        if body is None:  # e.g. Produce with acks=0: no response at all
            metrics.request_latency[api_key].observe(perf_counter() - started)
            if throttle_ms:
                await self._mute(throttle_ms)
            return True
        if body is CLOSE_CONNECTION:
            metrics.inc("connections.closed.acks0_error")
            return False
        if api_key not in _COUNT_OWN_ERRORS:
            metrics.count_errors(api_key, body)
        if self._transport is None:
            return False
        if throttle_ms and hasattr(body, "throttle_time_ms"):
            body.throttle_time_ms = throttle_ms
        parts = encode_response(request.header, body)
        if client_quotas is not None and client_quotas.active and api_key == _FETCH:
            fetch_ms = self._fetch_throttle_ms(client_quotas, request, parts, quota_user)
            if fetch_ms > throttle_ms:  # sent with its data, then muted (module docstring)
                throttle_ms = body.throttle_time_ms = fetch_ms
                parts = encode_response(request.header, body)
        await self._send(parts)
        # Kafka's TotalTimeMs ends when the response is sent; ours when the transport (or
        # sendfile) has it: a response parked behind a full write buffer counts its wait.
        metrics.request_latency[api_key].observe(perf_counter() - started)
        if throttle_ms:
            # Muted for the throttle time (KIP-219): the next request waits in the queue.
            await self._mute(throttle_ms)
        return True

    async def _authenticate(self, auth: SaslServerAuthenticator, frame: memoryview) -> bool:
        """One frame of a SASL login; False = close."""
        from sluice.server.security.authenticator import SaslState

        data = bytes(frame)
        # The PLAIN token -- in a SaslAuthenticate request, or raw after a v0 handshake --
        # costs a PBKDF2 of the password: milliseconds, off the event loop (a client not yet
        # logged in must not be able to stall every other connection with wrong passwords).
        plain_login = auth.mechanism == "PLAIN" and auth.state is SaslState.AUTHENTICATE
        if plain_login:
            assert self._loop is not None
            step = await self._loop.run_in_executor(None, auth.receive, data)
        else:
            step = auth.receive(data)
        return await self._sasl_step(auth, step)

    async def _sasl_step(self, auth: SaslServerAuthenticator, step: Step) -> bool:
        """Write the authenticator's answer; apply its outcome. False = close."""
        transport = self._transport
        if transport is None:
            return False
        if step.close:
            self._closing = True
            if not self._reading_paused:
                transport.pause_reading()
                self._reading_paused = True
            if step.failed is not None:
                self._metrics.inc("connections.failed_authentication")
                delay_ms = self._listener.failed_authentication_delay_ms
                if delay_ms > 0:
                    # Kafka delays the answer and the close (the Selector's
                    # DelayedAuthenticationFailureClose): a password guesser learns the outcome
                    # no sooner. Only this connection's worker waits.
                    await asyncio.sleep(delay_ms / 1000)
                    transport = self._transport
                    if transport is None:  # the client gave up meanwhile
                        return False
            if step.send:
                transport.writelines(step.send)
            return False
        if step.send:
            transport.writelines(step.send)
            self._last_active = monotonic()
        if step.authenticated:
            assert auth.principal is not None
            self._reader.max_frame_size = self._max_frame_size
            REQUEST_CONTEXT.set(
                dataclasses.replace(REQUEST_CONTEXT.get(), principal=auth.principal)
            )
            self._metrics.inc("connections.authenticated")
        else:
            self._reader.max_frame_size = auth.max_frame_size or self._max_frame_size
        return True

    def _throttle_ms(self, header: Any, body: Any) -> int:
        """Count this request against its client id's rate; the throttle time it earned."""
        api_key = header.api_key
        if api_key in _CLUSTER_ACTIONS or (api_key == _FETCH and body.replica_id >= 0):
            return 0
        quota = self._request_quota
        assert quota is not None
        throttle_ms = quota.record(header.client_id or "", monotonic())
        if throttle_ms:
            self._metrics.inc("requests.throttled")
            self._metrics.inc("requests.throttle_time_ms", throttle_ms)
        return throttle_ms

    def _quota_user(self) -> str:
        """The principal's name as a quota entity names it (Kafka's ``Sanitizer.sanitize`` of
        ``KafkaPrincipal.getName``)."""
        principal = REQUEST_CONTEXT.get().principal
        return _sanitized(principal.partition(":")[2] or principal)

    def _client_throttle_ms(
        self, quotas: ClientQuotas, header: Any, body: Any, size: int, loop_s: float, user: str
    ) -> int:
        """Client quotas (``quotas.ClientQuotas``): the request's time, and a Produce's bytes."""
        api_key = header.api_key
        if api_key in _CLUSTER_ACTIONS or (api_key == _FETCH and body.replica_id >= 0):
            return 0
        now = monotonic()
        client_id = header.client_id or ""
        throttle_ms = quotas.record(REQUEST_QUOTA, user, client_id, loop_s, now)
        if api_key == _PRODUCE:
            throttle_ms = max(throttle_ms, quotas.record(PRODUCE_QUOTA, user, client_id, size, now))
        if throttle_ms:
            self._metrics.inc("requests.throttled")
            self._metrics.inc("requests.throttle_time_ms", throttle_ms)
        return throttle_ms

    def _fetch_throttle_ms(
        self, quotas: ClientQuotas, request: Any, parts: list[Any], user: str
    ) -> int:
        """A consumer Fetch's response bytes against ``consumer_byte_rate``: counted, and the
        throttle time they earned (the response is still sent whole)."""
        if request.body.replica_id >= 0:
            return 0
        size = sum(len(p) if isinstance(p, _BYTES_LIKE) else p.size for p in parts)
        now = monotonic()
        client_id = request.header.client_id or ""
        throttle_ms = quotas.record(FETCH_QUOTA, user, client_id, size, now)
        if throttle_ms:
            self._metrics.inc("requests.throttled")
            self._metrics.inc("requests.throttle_time_ms", throttle_ms)
        return throttle_ms

    async def _writable_transport(self) -> asyncio.Transport | None:
        """The transport once its buffer is below the high watermark; None if it closed
        meanwhile (a slow reader that gave up: nothing more to send, and nothing to log)."""
        if not self._can_write.is_set():
            await self._can_write.wait()
        transport = self._transport
        if transport is None or transport.is_closing():
            return None
        return transport

    async def _send(self, parts: list[Any]) -> None:
        transport = await self._writable_transport()
        if transport is None:
            return
        self._last_active = monotonic()
        pending: list[bytes | bytearray | memoryview] = []
        for part in parts:
            if isinstance(part, _BYTES_LIKE):
                pending.append(part)
                continue
            if part.size == 0:
                continue
            if pending:
                transport.writelines(pending)
                pending = []
            if self._zero_copy:
                await self._sendfile(part)
            else:
                await self._copy(part)
            if self._transport is None or transport.is_closing():
                return
        if pending:
            transport.writelines(pending)

    async def _copy(self, piece: Any) -> None:
        """Copy ``piece`` (a FetchSlice) into the transport in chunks, each written only once
        the buffer is below the high watermark: a slow reader's connection holds at most about
        ``max_unsent`` + one chunk, however large the response (reading it whole held up to
        ``fetch.max.bytes`` per connection: 8 slow readers took a broker from 44 to 569 MB)."""
        chunk = max(_MIN_COPY_CHUNK, min(_MAX_COPY_CHUNK, self._max_unsent // 4))
        position, end = piece.position, piece.position + piece.size
        while position < end:
            transport = await self._writable_transport()
            if transport is None:
                return
            size = min(chunk, end - position)
            data = piece.read_range(position, size)
            if len(data) < size:  # file truncated underneath us: the framing is lost
                log.warning("copy hit end of file", peer=self._peer, missing=end - position)
                transport.abort()
                return
            transport.write(data)
            position += size

    async def _wait_write_buffer_empty(self, transport: asyncio.Transport) -> None:
        if transport.get_write_buffer_size() == 0:
            return
        self._metrics.inc("fetch.sendfile_waits")
        # Make the transport call resume_writing() exactly when its buffer reaches 0.
        self._can_write.clear()
        transport.set_write_buffer_limits(high=0, low=0)
        if transport.get_write_buffer_size() == 0:
            self._can_write.set()
        try:
            await self._can_write.wait()
        finally:
            if self._transport is not None:
                transport.set_write_buffer_limits(high=self._max_unsent, low=self._max_unsent // 4)

    async def _sendfile(self, piece: Any) -> None:
        """Send ``piece`` (file, position, size) with os.sendfile after the buffered bytes."""
        transport = self._transport
        assert transport is not None
        if transport.get_write_buffer_size():
            await self._wait_write_buffer_empty(transport)
            if self._transport is None:
                return
        out_fd = self._fd
        loop = self._loop
        if out_fd < 0 or loop is None or transport.is_closing():
            return  # (an aborted transport's fd is closed: its number may be reused)
        in_fd = piece.file.fileno()
        position, remaining = piece.position, piece.size
        while remaining > 0:
            try:
                sent = os.sendfile(out_fd, in_fd, position, remaining)
            except BlockingIOError:
                self._metrics.inc("fetch.sendfile_eagain")
                await self._wait_socket_writable(loop, out_fd)
                if self._transport is None or transport.is_closing():
                    return
                continue
            except OSError as exc:
                log.info("sendfile failed", peer=self._peer, error=str(exc))
                transport.abort()
                return
            if sent == 0:  # file shorter than the slice (truncated underneath us): framing is lost
                log.warning("sendfile hit end of file", peer=self._peer, missing=remaining)
                transport.abort()
                return
            position += sent
            remaining -= sent
        self._metrics.inc("fetch.sendfile_bytes", piece.size)

    async def _wait_socket_writable(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        if self._dup_fd is None:
            self._dup_fd = os.dup(fd)
        dup = self._dup_fd
        fut: asyncio.Future[None] = loop.create_future()
        self._writable = fut

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        loop.add_writer(dup, ready)
        try:
            await fut
        finally:
            self._writable = None
            if self._dup_fd == dup:
                with contextlib.suppress(OSError, ValueError):
                    loop.remove_writer(dup)
