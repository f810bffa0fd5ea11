"""The principal a connection starts with (``sluice.server.network.listener``): anonymous on
PLAINTEXT, on SASL listeners until the login, and on TLS without a client certificate
(``ssl.client.auth=requested``); the mapped subject of a certificate otherwise."""

from __future__ import annotations

from typing import Any

import trustme
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from sluice.server.network.listener import ListenerSecurity
from sluice.server.security.tls import SslPrincipalMapper


class FakeSslObject:
    def __init__(self, der: bytes | None) -> None:
        self.der = der

    def getpeercert(self, binary_form: bool = False) -> Any:
        assert binary_form
        return self.der


def _client_der() -> bytes:
    cert = trustme.CA().issue_cert("app@example.com", common_name="app")
    pem = cert.cert_chain_pems[0].bytes()
    return x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER)


def test_the_principal_before_any_login() -> None:
    der = _client_der()
    mapper = SslPrincipalMapper("RULE:^CN=([^,]+),.*$/$1/U,DEFAULT")
    tls = ListenerSecurity("SSL", tls=True, principal_mapper=mapper)
    assert tls.principal(FakeSslObject(der)) == "User:APP"
    assert tls.principal(FakeSslObject(None)) == "User:ANONYMOUS"  # requested, none sent
    assert ListenerSecurity().principal(None) == "User:ANONYMOUS"  # PLAINTEXT
    sasl_ssl = ListenerSecurity("SASL_SSL", tls=True, principal_mapper=mapper,
                                sasl=lambda peer: None)  # type: ignore[arg-type,return-value]  # fmt: skip
    # on SASL_SSL the login makes the principal, not the certificate (as in Kafka)
    assert sasl_ssl.principal(FakeSslObject(der)) == "User:ANONYMOUS"
