"""The client side of Kafka's security protocols: TLS and a SASL login (PLAIN, SCRAM-SHA-256/512)
on one connection.

:class:`ClientSecurity` says how to reach a secured listener: an ``ssl.SSLContext`` (SSL and
SASL_SSL) and, for SASL_PLAINTEXT / SASL_SSL, the mechanism and the login. The connection
(:meth:`sluice.net.connection.Connection.open`) wraps the socket in TLS, negotiates API versions,
then runs :func:`authenticate`: SaslHandshake v1 and SaslAuthenticate requests, as Kafka's Java
client does (KIP-152). SCRAM's messages are scramp's client (RFC 5802/7677), not ours; PLAIN's
token is ``\\0user\\0password``.

:meth:`ClientSecurity.from_properties` reads the client keys Kafka's Java client and librdkafka
take (``security.protocol``, ``sasl.mechanism``, ``sasl.username``/``sasl.password`` or
``sasl.jaas.config``, ``ssl.ca.location`` / ``ssl.truststore.location`` (PEM),
``ssl.certificate.location`` + ``ssl.key.location`` / ``ssl.keystore.location`` (PEM),
``ssl.key.password``, ``ssl.endpoint.identification.algorithm``), so an application's existing
client properties work unchanged.

**Re-authentication (KIP-368).** When the broker answers the login with a session lifetime
(``connections.max.reauth.ms``), the connection logs in again on the same socket at 85-95 % of
it, as Kafka's Java client does: requests issued meanwhile wait, the ones in flight are answered
first (no request may be in flight during the exchange).
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.protocol import messages
from sluice.protocol.errors import for_code

if TYPE_CHECKING:
    from sluice.net.connection import Connection

__all__ = ["SASL_MECHANISMS", "ClientSecurity", "authenticate", "parse_jaas_login"]

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class ClientSecurity:
    """TLS and SASL of one client (see the module docstring). ``server_hostname`` overrides the
    name checked against the broker's certificate (default: the host connected to)."""

    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)  # never in a repr, log or traceback
    server_hostname: str | None = None
    #: KIP-368: log in again before the broker's session ends (False: behave like an older
    #: client, which the broker disconnects at the session's end).
    reauthenticate: bool = True

    def __post_init__(self) -> None:
        if self.sasl_mechanism is not None and self.sasl_mechanism not in SASL_MECHANISMS:
            raise ValueError(
                f"sasl.mechanism {self.sasl_mechanism!r} is not supported "
                f"(supported: {', '.join(SASL_MECHANISMS)})"
            )

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientSecurity | None:
        """From Kafka client properties; None for ``security.protocol=PLAINTEXT`` (the
        default). Raises ValueError for an unknown protocol or mechanism, or SASL without a
        login."""
        protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in _PROTOCOLS:
            raise ValueError(f"security.protocol {protocol!r} (known: {', '.join(_PROTOCOLS)})")
        if protocol == "PLAINTEXT":
            return None
        context = tls_client_context(props) if protocol.endswith("SSL") else None
        if not protocol.startswith("SASL"):
            return cls(ssl_context=context)
        mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
        username, password = props.get("sasl.username"), props.get("sasl.password")
        if username is None and "sasl.jaas.config" in props:
            username, password = parse_jaas_login(props["sasl.jaas.config"])
        if username is None or password is None:
            raise ValueError("SASL needs sasl.username and sasl.password (or sasl.jaas.config)")
        return cls(context, mechanism, username, password)

    def login(self) -> Generator[LoginRequest, Any, int]:
        """The client's side of a SASL login as Kafka's Java client does it (KIP-152), I/O-free:
        yields each request to send -- ``(api_key, body)``: a SaslHandshake v1, then
        SaslAuthenticate requests -- and takes each response back (``send``); returns the
        session's lifetime in ms (0: unbounded). Raises the Kafka error the broker answered
        (``SaslAuthenticationFailed`` with its message, ``UnsupportedSaslMechanism`` with the
        mechanisms it offers), or ``scramp``'s when the broker's SCRAM signature is wrong.
        Driven by :func:`authenticate` and by blocking clients (the Spark pipeline's)."""
        mechanism = self.sasl_mechanism
        assert mechanism is not None
        handshake = yield (
            messages.SaslHandshake.key,
            messages.SaslHandshakeRequest(mechanism=mechanism),
        )
        if handshake.error_code:
            offered = ", ".join(handshake.mechanisms or [])
            raise for_code(handshake.error_code)(
                f"SASL mechanism {mechanism} refused (the broker offers: {offered})"
            )
        if mechanism == "PLAIN":
            token = f"\0{self.sasl_username}\0{self.sasl_password}".encode()
            return (yield from _sasl_round(token))[1]
        import scramp

        client = scramp.ScramClient([mechanism], self.sasl_username, self.sasl_password)
        server_first, _ = yield from _sasl_round(client.get_client_first().encode())
        client.set_server_first(server_first.decode())
        server_final, lifetime = yield from _sasl_round(client.get_client_final().encode())
        client.set_server_final(server_final.decode())  # checks the broker's signature
        return lifetime


#: A request of a SASL login: ``(api_key, request body)``.
LoginRequest = tuple[int, Any]


def _sasl_round(token: bytes) -> Generator[LoginRequest, Any, tuple[bytes, int]]:
    """One SaslAuthenticate exchange: the broker's token and the session lifetime."""
    response = yield (
        messages.SaslAuthenticate.key,
        messages.SaslAuthenticateRequest(auth_bytes=token),
    )
    if response.error_code:
        raise for_code(response.error_code)(response.error_message or "SASL login failed")
    return bytes(response.auth_bytes), int(getattr(response, "session_lifetime_ms", 0) or 0)


def parse_jaas_login(text: str) -> tuple[str, str]:
    """``username`` and ``password`` of a JAAS line as Kafka writes it:
    ``org.apache.kafka.common.security.scram.ScramLoginModule required username="u"
    password="p";``. Raises ValueError when either is missing."""
    options = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_OPTION.findall(text)}
    if "username" not in options or "password" not in options:
        raise ValueError('sasl.jaas.config names no username="..." password="..."')
    return options["username"], options["password"]


def tls_client_context(props: Mapping[str, str]) -> ssl.SSLContext:
    """A verifying TLS client context from librdkafka's or the Java client's PEM keys."""
    ctx = ssl.create_default_context(
        cafile=props.get("ssl.ca.location") or props.get("ssl.truststore.location") or None
    )
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algorithm not in ("https", "none", ""):
        raise ValueError(f"ssl.endpoint.identification.algorithm {algorithm!r}: https or empty")
    ctx.check_hostname = algorithm == "https"
    cert = props.get("ssl.certificate.location") or props.get("ssl.keystore.location")
    if cert:
        ctx.load_cert_chain(
            cert,
            props.get("ssl.key.location") or None,
            password=props.get("ssl.key.password") or None,
        )
    return ctx


async def authenticate(conn: Connection, security: ClientSecurity) -> int:
    """Log in on ``conn`` with ``security``'s SASL mechanism (:meth:`ClientSecurity.login`);
    the session's lifetime in ms (0: unbounded). Sends through ``conn._exchange``: the
    requests of a re-authentication must not wait for it."""
    steps = security.login()
    api_key, body = next(steps)
    while True:
        response = await conn._exchange(api_key, body)
        try:
            api_key, body = steps.send(response)
        except StopIteration as done:
            return int(done.value)
