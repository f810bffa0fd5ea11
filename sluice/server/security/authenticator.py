"""Kafka's ``SaslServerAuthenticator``: one SASL state machine per connection, sans-I/O.

The connection hands over every complete request frame (size prefix stripped) until
:attr:`SaslServerAuthenticator.complete`; each :meth:`~SaslServerAuthenticator.receive` returns a
:class:`Step`: the response frames to write (size prefixes included) and whether to close the
connection after writing them. The authenticator never touches a socket or a clock it was not
given, so tests drive it with the bytes real clients send.

States (Kafka's ``SaslState``)::

    INITIAL_REQUEST --ApiVersions--> HANDSHAKE_REQUEST --SaslHandshake--> AUTHENTICATE
          \\-------------------SaslHandshake-------------------------------/      |
                                                     SaslAuthenticate ...       v
                                                                            COMPLETE
    any failure --> FAILED (the connection closes after the step's frames)

Before authentication only ApiVersions (once, first), SaslHandshake and SaslAuthenticate are
served; any other request closes the connection without an answer ("Unexpected Kafka request of
type ... during SASL handshake"), as does a frame larger than ``sasl.server.max.receive.size``
(default 512 KiB, :attr:`max_frame_size`: the connection's frame reader must use it until
authentication completes). SaslHandshake v0 (Kafka 0.10.0 clients) is followed by raw SASL
tokens with only a size prefix; v1 by SaslAuthenticate requests.

Failures answer what Kafka answers: UNSUPPORTED_SASL_MECHANISM with the enabled mechanisms,
SASL_AUTHENTICATION_FAILED with PLAIN's messages ("Authentication failed: Invalid username or
password") or, for SCRAM, one generic message that does not tell an unknown user from a wrong
password. The answer is written and the connection closed after
``connection.failed.authentication.delay.ms`` (:attr:`Step.failed` says the close is an
authentication failure; the delay is the connection's to apply, Kafka's default 100 ms).

**Re-authentication (KIP-368).** With ``connections.max.reauth.ms`` > 0 the session lasts that
long: SaslAuthenticate v1+ tells the client ``session_lifetime_ms`` and the client
re-authenticates on the same connection before it ends, by sending SaslHandshake again. The
connection gives such a frame to :meth:`begin_reauthentication` (``None``: re-authentication
is off or was started less than a second ago, so the request goes to the handlers, which
answer ILLEGAL_SASL_STATE as ``KafkaApis`` does) and then routes frames here while
:attr:`authenticating`. Re-authentication must use the same mechanism and end with the same
principal. A request on a connection whose session has expired (:meth:`session_expired`)
closes the connection: a client too old to re-authenticate reconnects.
"""

from __future__ import annotations

import enum
import re
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sluice.protocol import messages as m
from sluice.protocol.errors import (
    IllegalSaslState,
    ProtocolError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanism,
)
from sluice.protocol.framing import (
    Request,
    UnsupportedVersionError,
    api_versions_response,
    decode_request,
    encode_response,
    unsupported_version_response,
)
from sluice.server.logging import get_logger

from .config import default
from .credentials import CredentialStore
from .errors import AuthenticationFailed, generic_failure_message
from .listeners import SUPPORTED_SASL_MECHANISMS
from .scram import SCRAM_MECHANISMS, ScramServerExchange

__all__ = [
    "DEFAULT_MAX_RECEIVE_SIZE",
    "SUPPORTED_MECHANISMS",
    "PlainServer",
    "SaslServerAuthenticator",
    "SaslState",
    "Step",
    "user_principal",
]

log = get_logger("sluice.security")

#: ``sasl.server.max.receive.size`` default.
DEFAULT_MAX_RECEIVE_SIZE: int = default("sasl.server.max.receive.size")
SUPPORTED_MECHANISMS = SUPPORTED_SASL_MECHANISMS
assert set(SCRAM_MECHANISMS) < set(SUPPORTED_MECHANISMS)
#: Kafka's ``KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS``.
MIN_REAUTH_INTERVAL = 1.0

_SIZE = struct.Struct(">i")
_API_KEY = struct.Struct(">h")


def user_principal(name: str) -> str:
    """Kafka's ``KafkaPrincipal`` string of a SASL user: ``User:<name>``."""
    return f"User:{name}"


class SaslState(enum.Enum):
    INITIAL_REQUEST = "initial request"
    HANDSHAKE_REQUEST = "handshake request"
    AUTHENTICATE = "authenticate"
    REAUTH_BAD_MECHANISM = "re-authentication with another mechanism"
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(slots=True)
class Step:
    """What the connection does after one frame: write ``send`` (complete frames, in order),
    then close if ``close``. ``failed`` is the reason when the close is an authentication
    failure (delay the answer and the close by ``connection.failed.authentication.delay.ms``);
    ``authenticated`` is true on the step that completed (re-)authentication."""

    send: list[bytes] = field(default_factory=list)
    close: bool = False
    failed: str | None = None
    authenticated: bool = False


class Mechanism(Protocol):
    """The server side of one SASL mechanism exchange."""

    complete: bool
    username: str | None

    def evaluate(self, token: bytes) -> bytes: ...


class PlainServer:
    """SASL/PLAIN (RFC 4616) as Kafka's ``PlainSaslServer``, checked against the credential
    store. Every failure's message is for the client (Kafka's ``SaslAuthenticationException``)."""

    def __init__(self, credentials: CredentialStore) -> None:
        self.credentials = credentials
        self.complete = False
        self.username: str | None = None

    @staticmethod
    def _fail(message: str) -> AuthenticationFailed:
        return AuthenticationFailed(message, client_message=message)

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise self._fail("Unexpected challenge in Sasl server state COMPLETE")
        text = token.decode("utf-8", errors="replace")
        tokens = text.split("\0", 3)
        if len(tokens) != 3:
            raise self._fail(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        authzid, username, password = tokens
        if not username:
            raise self._fail("Authentication failed: username not specified")
        if not password:
            raise self._fail("Authentication failed: password not specified")
        if not self.credentials.verify_plain(username, password):
            raise self._fail("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise self._fail(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        self.username = username
        self.complete = True
        return b""


def _frame(parts: list[Any]) -> bytes:
    return b"".join(bytes(p) for p in parts)


class SaslServerAuthenticator:
    """One connection's SASL authentication (see the module docstring).

    ``enabled_mechanisms`` is ``sasl.enabled.mechanisms`` (a subset of
    :data:`SUPPORTED_MECHANISMS`), ``max_receive_size`` ``sasl.server.max.receive.size``,
    ``reauth_ms`` ``connections.max.reauth.ms`` (0: sessions never expire).
    ``api_versions(request)`` builds the broker's ApiVersions response body. ``peer`` names
    the client in logs. ``clock`` is monotonic seconds.
    """

    def __init__(
        self,
        enabled_mechanisms: Sequence[str],
        credentials: CredentialStore,
        *,
        api_versions: Callable[[Request], Any] | None = None,
        max_receive_size: int = DEFAULT_MAX_RECEIVE_SIZE,
        reauth_ms: int = 0,
        peer: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        unknown = [name for name in enabled_mechanisms if name not in SUPPORTED_MECHANISMS]
        if unknown or not enabled_mechanisms:
            raise ValueError(
                f"sasl.enabled.mechanisms: {list(enabled_mechanisms)} (supported: "
                f"{', '.join(SUPPORTED_MECHANISMS)})"
            )
        self.enabled_mechanisms = list(enabled_mechanisms)
        self.credentials = credentials
        self.max_receive_size = max_receive_size
        self.reauth_ms = reauth_ms
        self.peer = peer
        self._api_versions = api_versions or (lambda request: api_versions_response())
        self._clock = clock
        self.state = SaslState.INITIAL_REQUEST
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.session_expires: float | None = None  # clock value; None: never
        self._server: Mechanism | None = None
        self._kafka_headers = True
        self._reauthenticating = False
        self._previous: tuple[str, str] | None = None  # (mechanism, principal) before re-auth
        self._reauth_started: float | None = None

    # --- what the connection asks ----------------------------------------------------------

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    @property
    def authenticating(self) -> bool:
        """Frames go to :meth:`receive` (first authentication or a re-authentication)."""
        return self.state not in (SaslState.COMPLETE, SaslState.FAILED)

    @property
    def max_frame_size(self) -> int | None:
        """The frame limit while authenticating (``None``: the connection's own limit)."""
        return self.max_receive_size if self.authenticating else None

    def session_expired(self, now: float | None = None) -> bool:
        if self.session_expires is None:
            return False
        return (self._clock() if now is None else now) > self.session_expires

    def frame_too_large(self, size: int) -> Step:
        """A size prefix above :attr:`max_frame_size` arrived: fail, close without answer."""
        return self._failed(
            f"Failing SASL authentication due to invalid receive size ({size} > "
            f"{self.max_receive_size})"
        )

    def begin_reauthentication(self, frame: bytes | memoryview) -> Step | None:
        """A SaslHandshake on an authenticated connection: start KIP-368 re-authentication and
        return its first step, or ``None`` when the handlers must answer it instead."""
        if self.state is not SaslState.COMPLETE or self.session_expires is None:
            return None
        now = self._clock()
        if self._reauth_started is not None and now - self._reauth_started < MIN_REAUTH_INTERVAL:
            return None
        self._reauth_started = now
        assert self.mechanism is not None and self.principal is not None
        self._previous = (self.mechanism, self.principal)
        self._reauthenticating = True
        self.state = SaslState.HANDSHAKE_REQUEST
        return self.receive(frame)

    # --- frames ----------------------------------------------------------------------------

    def receive(self, frame: bytes | memoryview) -> Step:
        """One frame (size prefix stripped) while :attr:`authenticating`."""
        if not self.authenticating:
            raise RuntimeError(f"SASL frame received in state {self.state.name}")
        data = bytes(frame)
        if self.state is SaslState.REAUTH_BAD_MECHANISM:
            assert self._previous is not None
            return self._failed(
                f"SASL mechanism '{self.mechanism}' requested by client is not supported for "
                f"re-authentication of mechanism '{self._previous[0]}'"
            )
        if self.state is SaslState.AUTHENTICATE:
            if self._kafka_headers:
                return self._sasl_authenticate(data)
            return self._raw_token(data)
        return self._handshake_phase(data)

    def _handshake_phase(self, data: bytes) -> Step:
        initial = self.state is SaslState.INITIAL_REQUEST
        if len(data) < 2:
            return self._failed("Invalid request: too short for a request header")
        api_key = _API_KEY.unpack_from(data, 0)[0]
        if api_key not in (m.ApiVersions.key, m.SaslHandshake.key):
            return self._failed(
                f"Unexpected Kafka request of type {_api_name(api_key)} during SASL handshake."
            )
        try:
            request = decode_request(data)
        except UnsupportedVersionError as exc:
            parts = unsupported_version_response(exc)
            if parts is None or not initial:
                return self._failed(str(exc))
            self.state = SaslState.INITIAL_REQUEST  # the client retries a lower version
            return Step(send=[_frame(parts)])
        except ProtocolError as exc:
            if initial:  # Kafka would try GSSAPI here; Sluice has no GSSAPI
                return self._failed(
                    "Exception handling first SASL packet from client, GSSAPI is not supported "
                    f"by server ({exc})"
                )
            return self._failed(f"Invalid request: {exc}")
        if api_key == m.ApiVersions.key:
            if not initial:
                return self._failed(
                    f"Unexpected ApiVersions request received during SASL authentication "
                    f"state {self.state.name}"
                )
            self.state = SaslState.HANDSHAKE_REQUEST
            return Step(send=[_frame(encode_response(request.header, self._api_versions(request)))])
        return self._handshake(request)

    def _handshake(self, request: Request) -> Step:
        mechanism = request.body.mechanism
        mechanisms = list(self.enabled_mechanisms)
        if mechanism not in mechanisms:
            answer = m.SaslHandshakeResponse(
                error_code=UnsupportedSaslMechanism.code, mechanisms=mechanisms
            )
            return self._failed(
                f"Unsupported SASL mechanism {mechanism}",
                send=[_frame(encode_response(request.header, answer))],
            )
        self._kafka_headers = request.header.api_version >= 1
        answer = m.SaslHandshakeResponse(error_code=0, mechanisms=mechanisms)
        step = Step(send=[_frame(encode_response(request.header, answer))])
        if self._previous is not None and mechanism != self._previous[0]:
            self.mechanism = mechanism
            self.state = SaslState.REAUTH_BAD_MECHANISM
            return step
        self.mechanism = mechanism
        self._server = self._new_server(mechanism)
        self.state = SaslState.AUTHENTICATE
        return step

    def _new_server(self, mechanism: str) -> Mechanism:
        if mechanism == "PLAIN":
            return PlainServer(self.credentials)
        credentials = self.credentials
        return ScramServerExchange(
            mechanism, lambda user: credentials.scram_credential(user, mechanism)
        )

    def _sasl_authenticate(self, data: bytes) -> Step:
        api_key = _API_KEY.unpack_from(data, 0)[0] if len(data) >= 2 else -1
        if api_key != m.SaslAuthenticate.key:
            message = (
                f"Unexpected Kafka request of type {_api_name(api_key)} during SASL authentication."
            )
            send: list[bytes] = []
            if api_key == m.SaslHandshake.key:  # the one other request we can answer in kind
                try:
                    request = decode_request(data)
                    illegal = m.SaslHandshakeResponse(error_code=IllegalSaslState.code)
                    send = [_frame(encode_response(request.header, illegal))]
                except ProtocolError:
                    pass
            return self._failed(message, send=send)
        try:
            request = decode_request(data)
        except ProtocolError as exc:
            return self._failed(f"Invalid SaslAuthenticate request: {exc}")
        assert self._server is not None and self.mechanism is not None
        try:
            token = self._server.evaluate(bytes(request.body.auth_bytes))
            if self._server.complete:
                self._check_principal()
        except AuthenticationFailed as exc:
            message = exc.client_message or generic_failure_message(
                self.mechanism, self._reauthenticating
            )
            answer = m.SaslAuthenticateResponse(
                error_code=SaslAuthenticationFailed.code, error_message=message
            )
            return self._failed(str(exc), send=[_frame(encode_response(request.header, answer))])
        lifetime_ms = self._completed() if self._server.complete else 0
        answer = m.SaslAuthenticateResponse(
            error_code=0, auth_bytes=token, session_lifetime_ms=lifetime_ms
        )
        return Step(
            send=[_frame(encode_response(request.header, answer))],
            authenticated=self.complete,
        )

    def _raw_token(self, data: bytes) -> Step:
        """SaslHandshake v0: the token alone, answered with a size-prefixed token."""
        assert self._server is not None
        try:
            token = self._server.evaluate(data)
            if self._server.complete:
                self._check_principal()
        except AuthenticationFailed as exc:
            return self._failed(str(exc))  # Kafka closes without an answer here
        if self._server.complete:
            self._completed()
        return Step(send=[_SIZE.pack(len(token)) + token], authenticated=self.complete)

    def _check_principal(self) -> None:
        assert self._server is not None and self._server.username is not None
        principal = user_principal(self._server.username)
        if self._previous is not None and principal != self._previous[1]:
            before = self._previous[1].replace(":", ".", 1)
            message = (
                f"Cannot change principals during re-authentication from {before}: "
                f"{principal.replace(':', '.', 1)}"
            )
            raise AuthenticationFailed(message, client_message=message)
        self.principal = principal

    def _completed(self) -> int:
        """Authentication done: the session lifetime to tell the client (0: none)."""
        self.state = SaslState.COMPLETE
        self._reauthenticating = False
        self._previous = None
        self._server = None
        log.debug(
            "authenticated", peer=self.peer, principal=self.principal, mechanism=self.mechanism
        )
        if self.reauth_ms > 0:
            self.session_expires = self._clock() + self.reauth_ms / 1000
            return self.reauth_ms
        self.session_expires = None
        return 0

    def _failed(self, reason: str, send: list[bytes] | None = None) -> Step:
        self.state = SaslState.FAILED
        self._server = None
        log.info(
            "failed authentication",
            peer=self.peer,
            mechanism=self.mechanism,
            reason=reason,
            reauthentication=self._reauthenticating,
        )
        return Step(send=send or [], close=True, failed=reason)


def _api_name(api_key: int) -> str:
    """Kafka's ``ApiKeys`` enum name (``PRODUCE``, ``METADATA``) of a key, for messages."""
    api = m.APIS.get(api_key)
    if api is None:
        return f"UNKNOWN({api_key})"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", api.name).upper()
