"""What the network layer hands the API layer with each request, and what it expects back.

The API layer sees a connection only through :class:`RequestContext` (the client's address, the
listener it came in on, and its authenticated principal, which the connection replaces when a SASL
login completes) and answers
through :class:`RequestHandler`; it never reaches into :class:`~sluice.server.network.connection.
Connection`. The context travels down in a context variable that each connection's worker task
sets once: every handler of that connection's requests runs in the worker's context, so nothing
on the per-request path pays for carrying it.
"""

from __future__ import annotations

import contextvars
import ipaddress
from dataclasses import dataclass
from typing import Any, Final, Protocol

from sluice.protocol.framing import UnsupportedVersionError

__all__ = [
    "CLOSE_CONNECTION",
    "REQUEST_CONTEXT",
    "CloseConnection",
    "RequestContext",
    "RequestHandler",
    "java_host_address",
]


def java_host_address(address: str) -> str:
    """A peer address as Java's ``InetAddress.getHostAddress`` writes it, the form Kafka's
    authorizer compares ACL hosts with and ``RequestContext`` prints: IPv6 uncompressed
    without leading zeros (``::1`` -> ``0:0:0:0:0:0:0:1``), an IPv4-mapped IPv6 address as
    the IPv4 one (Java makes it an ``Inet4Address``), a zone kept (``fe80:...%eth0``).
    Anything that is not an IP address is returned as it is."""
    text, percent, zone = address.partition("%")
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv4Address):
        return text
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    groups = ":".join(f"{int(group, 16):x}" for group in ip.exploded.split(":"))
    return groups + percent + zone


@dataclass(frozen=True, slots=True)
class RequestContext:
    """The per-connection facts a handler may use (Kafka's ``RequestContext``)."""

    #: The client's address as Kafka writes it (``InetAddress.toString``: ``"/127.0.0.1"``);
    #: empty outside a connection (in-process callers, tests).
    client_host: str = ""
    #: Kafka's ``KafkaPrincipal.toString``: ``"User:ANONYMOUS"`` on PLAINTEXT (and on SSL
    #: without a client certificate), the mapped certificate name on SSL with client auth,
    #: ``"User:<name>"`` after a SASL login.
    principal: str = "User:ANONYMOUS"
    #: The name of the listener the connection came in on (``"PLAINTEXT"``, ``"SASL_SSL"``,
    #: ``"INTERNAL"``...); Metadata answers with that listener's endpoints.
    listener_name: str = ""


_NO_CONNECTION = RequestContext()  # frozen: one shared default is safe

#: The context of the request being handled; set by each connection's worker task.
REQUEST_CONTEXT: contextvars.ContextVar[RequestContext] = contextvars.ContextVar(
    "request_context", default=_NO_CONNECTION
)


class CloseConnection:
    """The type of :data:`CLOSE_CONNECTION` (one instance)."""

    __slots__ = ()


#: A handler result meaning "send nothing and close the connection" (acks=0 produce errors).
CLOSE_CONNECTION: Final = CloseConnection()


class RequestHandler(Protocol):
    """The API layer as the connection calls it (implemented by ``sluice.server.api``)."""

    def serves(self, api_key: int) -> bool:
        """False for an API the codec knows but no handler serves (it is not advertised)."""
        ...

    def dispatch(self, header: Any, body: Any) -> Any:
        """The response body, None (send nothing), :data:`CLOSE_CONNECTION`, or a coroutine to
        await for one of those."""
        ...

    def unsupported_version(self, exc: UnsupportedVersionError) -> list[Any] | None:
        """The frame to answer a request of a version not served, None to close instead."""
        ...
