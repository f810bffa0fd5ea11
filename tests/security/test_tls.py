"""TLS contexts from Kafka's ssl.* keys over real loopback TLS connections (trustme
certificates), and client-certificate principals with Kafka's mapping rules."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from sluice.server.security.errors import SecurityError
from sluice.server.security.tls import (
    ANONYMOUS,
    SslPrincipalMapper,
    TlsConfigError,
    client_context,
    distinguished_name,
    openssl_cipher_name,
    server_context,
    ssl_principal,
)


class Certs:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ca = trustme.CA()
        self.server = self.ca.issue_cert("localhost", "127.0.0.1")
        self.client = self.ca.issue_cert("app.example", common_name="App-Client")
        self.truststore = str(self.write("ca.pem", self.ca.cert_pem.bytes()))

    def write(self, name: str, data: bytes) -> Path:
        path = self.tmp / name
        path.write_bytes(data)
        return path

    def pem_keystore(self, cert: trustme.LeafCert, name: str) -> str:
        return str(self.write(name, cert.private_key_and_cert_chain_pem.bytes()))

    def key_and_chain(self, cert: trustme.LeafCert) -> tuple[Any, list[x509.Certificate]]:
        key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), None)
        chain = [x509.load_pem_x509_certificate(b.bytes()) for b in cert.cert_chain_pems]
        return key, chain

    def encrypted_pem_keystore(self, cert: trustme.LeafCert, password: bytes) -> str:
        key, chain = self.key_and_chain(cert)
        data = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(password),
        ) + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)
        return str(self.write("encrypted.pem", data))

    def pkcs12_keystore(self, cert: trustme.LeafCert, password: bytes) -> str:
        key, chain = self.key_and_chain(cert)
        data = pkcs12.serialize_key_and_certificates(
            b"server", key, chain[0], chain[1:] or None,
            serialization.BestAvailableEncryption(password),
        )  # fmt: skip
        return str(self.write("keystore.p12", data))

    def server_config(self, **extra: str) -> dict[str, str]:
        return {"ssl.keystore.location": self.pem_keystore(self.server, "server.pem"),
                "ssl.truststore.location": self.truststore, **extra}  # fmt: skip

    def client_config(self, with_cert: bool = True, **extra: str) -> dict[str, str]:
        config = {"ssl.truststore.location": self.truststore, **extra}
        if with_cert:
            config["ssl.keystore.location"] = self.pem_keystore(self.client, "client.pem")
        return config


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return Certs(tmp_path)


Serve = Callable[[ssl.SSLContext], Any]


@pytest.fixture
async def tls_server() -> AsyncIterator[Callable[..., Any]]:
    """``await start(server_ctx, mapper=None) -> (port, results)``: a TLS echo server on
    127.0.0.1 that answers each connection with its principal; ``results`` collects the
    principal or the server-side error of each connection."""
    servers: list[asyncio.Server] = []

    async def start(
        ctx: ssl.SSLContext, mapper: SslPrincipalMapper | None = None
    ) -> tuple[int, list[str]]:
        results: list[str] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                sslobj = writer.get_extra_info("ssl_object")
                principal = ssl_principal(sslobj.getpeercert(binary_form=True), mapper)
                results.append(principal)
                writer.write(principal.encode() + b"\n")
                await writer.drain()
            except Exception as exc:  # pragma: no cover - reported through results
                results.append(f"error: {exc!r}")
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
        servers.append(server)
        return server.sockets[0].getsockname()[1], results

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


async def connect(port: int, ctx: ssl.SSLContext, hostname: str = "localhost") -> bytes:
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname=hostname), 10
    )
    try:
        return await asyncio.wait_for(reader.readline(), 10)
    finally:
        writer.close()


async def test_mutual_tls_with_principal_mapping(certs: Certs, tls_server: Any) -> None:
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=.*$/$1/L,DEFAULT")
    port, results = await tls_server(
        server_context(certs.server_config(**{"ssl.client.auth": "required"})), mapper
    )
    assert await connect(port, client_context(certs.client_config())) == b"User:app-client\n"
    assert results == ["User:app-client"]


async def test_required_client_auth_refuses_a_client_without_certificate(
    certs: Certs, tls_server: Any
) -> None:
    port, results = await tls_server(
        server_context(certs.server_config(**{"ssl.client.auth": "required"}))
    )
    try:
        line: bytes | None = await connect(port, client_context(certs.client_config(False)))
    except (ssl.SSLError, ConnectionError):
        line = None
    assert line in (None, b"")  # refused in the handshake (TLS 1.3: seen as a closed stream)
    assert results == []
    # the listener still serves a good client afterwards
    assert (await connect(port, client_context(certs.client_config()))).startswith(
        b"User:CN=App-Client"
    )


async def test_requested_client_auth_without_certificate_is_anonymous(
    certs: Certs, tls_server: Any
) -> None:
    port, _ = await tls_server(
        server_context(certs.server_config(**{"ssl.client.auth": "requested"}))
    )
    assert (
        await connect(port, client_context(certs.client_config(with_cert=False)))
        == b"User:ANONYMOUS\n"
    )


async def test_pkcs12_keystore_and_encrypted_pem_key(certs: Certs, tls_server: Any) -> None:
    p12 = {"ssl.keystore.location": certs.pkcs12_keystore(certs.server, b"storepass"),
           "ssl.keystore.type": "PKCS12", "ssl.keystore.password": "storepass"}  # fmt: skip
    port, _ = await tls_server(server_context(p12))
    assert (
        await connect(port, client_context(certs.client_config(with_cert=False)))
        == b"User:ANONYMOUS\n"
    )
    with pytest.raises(TlsConfigError, match=r"wrong ssl\.keystore\.password"):
        server_context({**p12, "ssl.keystore.password": "nope"})
    encrypted = {"ssl.keystore.location": certs.encrypted_pem_keystore(certs.server, b"keypass"),
                 "ssl.key.password": "keypass"}  # fmt: skip
    port, _ = await tls_server(server_context(encrypted))
    assert (
        await connect(port, client_context(certs.client_config(with_cert=False)))
        == b"User:ANONYMOUS\n"
    )
    with pytest.raises(TlsConfigError, match=r"ssl\.key\.password"):
        server_context({"ssl.keystore.location": encrypted["ssl.keystore.location"]})


async def test_enabled_protocols_must_overlap(certs: Certs, tls_server: Any) -> None:
    port, _ = await tls_server(
        server_context(certs.server_config(**{"ssl.enabled.protocols": "TLSv1.3"}))
    )
    old_client = client_context(
        certs.client_config(with_cert=False, **{"ssl.enabled.protocols": "TLSv1.2"})
    )
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await connect(port, old_client)


async def test_cipher_suites_by_iana_name(certs: Certs, tls_server: Any) -> None:
    suite = "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"  # trustme keys are ECDSA
    ctx = server_context(
        certs.server_config(**{"ssl.cipher.suites": suite, "ssl.enabled.protocols": "TLSv1.2"})
    )
    port, _ = await tls_server(ctx)
    client = client_context(certs.client_config(with_cert=False))
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client, server_hostname="localhost"
    )
    try:
        assert writer.get_extra_info("cipher")[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
        await reader.readline()
    finally:
        writer.close()
    with pytest.raises(TlsConfigError, match=r"ssl\.cipher\.suites"):
        server_context(certs.server_config(**{"ssl.cipher.suites": "TLS_NOPE_WITH_NOTHING"}))


async def test_host_name_verification(certs: Certs, tls_server: Any) -> None:
    port, _ = await tls_server(server_context(certs.server_config()))
    with pytest.raises(ssl.SSLCertVerificationError):
        await connect(
            port, client_context(certs.client_config(with_cert=False)), hostname="other.example"
        )
    relaxed = client_context(
        certs.client_config(with_cert=False, **{"ssl.endpoint.identification.algorithm": ""})
    )
    assert await connect(port, relaxed, hostname="other.example") == b"User:ANONYMOUS\n"


async def test_plaintext_client_on_a_tls_port(certs: Certs, tls_server: Any) -> None:
    port, results = await tls_server(server_context(certs.server_config()))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"\x00\x00\x00\x0c\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00")  # ApiVersions
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    assert answer == b"" or answer[0] == 0x15  # closed, or a TLS alert record: never a response
    writer.close()
    assert results == []
    assert (
        await connect(port, client_context(certs.client_config(with_cert=False)))
        == b"User:ANONYMOUS\n"
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "ssl.keystore.location .or ssl.keystore.key. is required"),
        ({"ssl.keystore.location": "/nonexistent/ks.pem"}, "cannot read /nonexistent/ks.pem"),
        ({"ssl.keystore.location": "x", "ssl.keystore.type": "JKS"}, "JKS is not supported"),
        ({"ssl.client.auth": "always"}, "ssl.client.auth"),
        ({"ssl.enabled.protocols": "SSLv3"}, "ssl.enabled.protocols"),
    ],
)
def test_configuration_errors_name_the_key(
    config: dict[str, str], message: str, certs: Certs
) -> None:
    if config.get("ssl.keystore.location") == "x":
        config = {**config, "ssl.keystore.location": certs.truststore}
    with pytest.raises(TlsConfigError, match=message):
        server_context(config)


def test_openssl_cipher_names() -> None:
    assert [openssl_cipher_name(n) for n in (
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        "TLS_RSA_WITH_AES_128_GCM_SHA256", "TLS_DHE_RSA_WITH_AES_128_CBC_SHA",
        "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", "ECDHE-RSA-AES128-GCM-SHA256",
    )] == [
        "ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-ECDSA-CHACHA20-POLY1305", "AES128-GCM-SHA256",
        "DHE-RSA-AES128-SHA", "ECDHE-RSA-AES128-SHA256", "ECDHE-RSA-AES128-GCM-SHA256",
    ]  # fmt: skip


# --- principal mapping (Kafka's SslPrincipalMapperTest cases) -----------------------------------


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        ",,RULE://,,,DEFAULT,,",
    ],
)
def test_valid_rules(rules: str) -> None:
    assert SslPrincipalMapper(rules).rules


@pytest.mark.parametrize(
    "rules",
    [
        "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1", "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U", "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U", "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ],
)  # fmt: skip
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(TlsConfigError, match="invalid rule"):
        SslPrincipalMapper(rules)


def test_rules_map_as_kafkas() -> None:
    mapper = SslPrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
        "DEFAULT"
    )
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert (
        mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    )
    escaped = SslPrincipalMapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert escaped.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"
    with pytest.raises(SecurityError, match="No rules apply"):
        SslPrincipalMapper("RULE:^CN=(.*)$/$1/").name("OU=x")


def test_distinguished_name_is_javas_rfc2253(certs: Certs) -> None:
    cert = x509.load_pem_x509_certificate(certs.client.cert_chain_pems[0].bytes())
    dn = distinguished_name(cert)
    ou = cert.subject.get_attributes_for_oid(x509.oid.NameOID.ORGANIZATIONAL_UNIT_NAME)[0].value
    assert dn == f"CN=App-Client,OU={ou},O=trustme v{trustme.__version__}"
    assert ssl_principal(cert.public_bytes(serialization.Encoding.DER)) == f"User:{dn}"
    assert ssl_principal(None) == ANONYMOUS


async def test_pem_in_the_configuration_itself(certs: Certs, tls_server: Any) -> None:
    """KIP-651: ssl.keystore.key + ssl.keystore.certificate.chain, ssl.truststore.certificates."""
    key, chain = certs.key_and_chain(certs.server)
    server = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.key": key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode(),
        "ssl.keystore.certificate.chain": "".join(
            c.public_bytes(serialization.Encoding.PEM).decode() for c in chain
        ),
    }
    port, _ = await tls_server(server_context(server))
    client = client_context({"ssl.truststore.certificates": certs.ca.cert_pem.bytes().decode()})
    assert await connect(port, client) == b"User:ANONYMOUS\n"
