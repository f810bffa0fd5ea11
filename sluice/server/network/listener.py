"""What a connection needs to know of its listener's security: its name, TLS principal mapping,
and how to start a SASL login. Built once per listener by ``Server`` from the config; shared by
the listener's connections.

The principal of a connection (``RequestContext.principal``, Kafka's ``KafkaPrincipal``):

* PLAINTEXT, and SSL without a client certificate: ``User:ANONYMOUS``;
* SSL with a certificate (``ssl.client.auth=required|requested``): ``User:`` + the subject's
  distinguished name mapped by ``ssl.principal.mapping.rules``
  (:func:`sluice.server.security.tls.ssl_principal`);
* SASL_PLAINTEXT / SASL_SSL: ``User:<name>`` once the login completes (a SASL_SSL client
  certificate does not make the principal, as in Kafka).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.server.security.config import default
from sluice.server.security.tls import ANONYMOUS, SslPrincipalMapper, ssl_principal

if TYPE_CHECKING:
    from sluice.server.security.authenticator import SaslServerAuthenticator

__all__ = ["ListenerSecurity"]


@dataclass(frozen=True)
class ListenerSecurity:
    """One listener's security (see the module docstring). ``sasl`` builds a connection's
    authenticator from its peer's name (None: no SASL on this listener)."""

    name: str = "PLAINTEXT"
    tls: bool = False
    principal_mapper: SslPrincipalMapper | None = None
    sasl: Callable[[str], SaslServerAuthenticator] | None = None
    #: ``connection.failed.authentication.delay.ms``
    failed_authentication_delay_ms: int = default("connection.failed.authentication.delay.ms")

    def principal(self, ssl_object: Any) -> str:
        """The principal before any SASL login: from the client certificate on TLS listeners
        without SASL, else ``User:ANONYMOUS``. Raises for a DN no mapping rule applies to
        (Kafka fails the connection the same way)."""
        if self.sasl is not None or not self.tls or ssl_object is None:
            return ANONYMOUS
        return ssl_principal(ssl_object.getpeercert(binary_form=True), self.principal_mapper)
