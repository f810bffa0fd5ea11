"""TLS for listeners and the inter-broker client from Kafka's ``ssl.*`` keys, and the principal
of a client certificate (Kafka's ``SslPrincipalMapper``).

Keys (Kafka's names and defaults):

* ``ssl.keystore.location`` / ``ssl.keystore.type`` (``PEM`` or ``PKCS12``; without a type the
  file's content decides) / ``ssl.keystore.password`` (PKCS#12) / ``ssl.key.password`` (an
  encrypted PEM private key). A PEM keystore holds the private key and the certificate chain.
  JKS is Java's own format: convert it (``keytool -importkeystore -deststoretype PKCS12``).
* ``ssl.truststore.location`` / ``ssl.truststore.type`` / ``ssl.truststore.password``: the CA
  certificates trusted for peers (PEM bundle or PKCS#12); none given: the system's CAs.
* KIP-651's PEM in the configuration itself: ``ssl.keystore.key`` with
  ``ssl.keystore.certificate.chain``, and ``ssl.truststore.certificates``.
* ``ssl.client.auth``: ``none`` (default), ``requested`` (a certificate is asked for and
  verified if sent), ``required`` (the handshake fails without one) -- listeners only.
* ``ssl.enabled.protocols`` (default ``TLSv1.2,TLSv1.3``): the versions allowed.
* ``ssl.cipher.suites``: IANA suite names as Java takes them
  (``TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384``) or OpenSSL names; they restrict TLS 1.2 and
  below. OpenSSL's TLS 1.3 suites cannot be narrowed through Python's ``ssl`` and stay enabled.
* ``ssl.endpoint.identification.algorithm`` (default ``https``; empty disables): the
  inter-broker client checks the broker's host name against its certificate.

The PKCS#12 and encrypted-key paths read the key with ``cryptography`` and hand OpenSSL a PEM
copy in a private (0600) temporary file that is deleted right after loading (``ssl`` loads
certificate chains from files only).

Principals: an authenticated TLS client is ``User:<name>``, ``<name>`` being the subject's
distinguished name in RFC 2253 form (``CN=app,OU=eng,O=Acme,C=US``, Java's
``X500Principal.getName()``) mapped by ``ssl.principal.mapping.rules``: comma-separated
``RULE:<regex>/<replacement>/[L|U]`` (the first rule whose regex matches the whole DN wins;
``$1`` refers to a group; L/U lower/upper-cases the result) and ``DEFAULT`` (the DN itself, the
default rule set). A client without a certificate is ``User:ANONYMOUS``.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .config import default
from .errors import SecurityError

if TYPE_CHECKING:
    from cryptography import x509

# ``cryptography`` (~30 ms and several MB to import) is imported where a keystore, truststore or
# client certificate is read, so a broker with only PLAINTEXT listeners never loads it.

__all__ = [
    "ANONYMOUS",
    "SslPrincipalMapper",
    "TlsConfigError",
    "client_context",
    "distinguished_name",
    "server_context",
    "ssl_principal",
]

ANONYMOUS = "User:ANONYMOUS"
#: What a listener or client without the key gets: the declared defaults.
DEFAULT_PROTOCOLS: str = default("ssl.enabled.protocols")
_DEFAULT_CLIENT_AUTH: str = default("ssl.client.auth")
_DEFAULT_ENDPOINT_IDENTIFICATION: str = default("ssl.endpoint.identification.algorithm")
_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


class TlsConfigError(SecurityError, ValueError):
    """An ``ssl.*`` setting that cannot be used; the message names the key."""


def _get(config: Mapping[str, str], key: str, default: str | None = None) -> str | None:
    value = config.get(key)
    if value is None:
        return default
    value = str(value).strip()
    return value if value else default


# --- key material -------------------------------------------------------------------------------


def _read(path: str, key: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"{key}: cannot read {path}: {exc.strerror}") from exc


def _store_type(config: Mapping[str, str], prefix: str, data: bytes) -> str:
    declared = _get(config, f"{prefix}.type")
    if declared is None:
        return "PEM" if b"-----BEGIN" in data else "PKCS12"
    kind = declared.upper()
    if kind == "JKS":
        raise TlsConfigError(
            f"{prefix}.type=JKS is not supported: convert the store with keytool "
            "-importkeystore -deststoretype PKCS12, or use PEM"
        )
    if kind not in ("PEM", "PKCS12"):
        raise TlsConfigError(f"{prefix}.type: expected PEM or PKCS12, got {declared}")
    return kind


def _password(config: Mapping[str, str], key: str) -> bytes | None:
    value = _get(config, key)
    return value.encode() if value is not None else None


@contextlib.contextmanager
def _private_pem(data: bytes) -> Iterator[str]:
    """``data`` in a temporary file only the owner can read, deleted on exit."""
    fd, path = tempfile.mkstemp(prefix="sluice-key-", suffix=".pem")
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
        os.close(fd)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _load_keystore(ctx: ssl.SSLContext, config: Mapping[str, str]) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    location = _get(config, "ssl.keystore.location")
    inline_key = _get(config, "ssl.keystore.key")
    if inline_key is not None:  # KIP-651: PEM in the config itself
        chain_text = _get(config, "ssl.keystore.certificate.chain") or ""
        location = "ssl.keystore.key"
        data = (inline_key + "\n" + chain_text).encode()
        kind = "PEM"
    elif location is None:
        raise TlsConfigError("ssl.keystore.location (or ssl.keystore.key) is required for TLS")
    else:
        data = _read(location, "ssl.keystore.location")
        kind = _store_type(config, "ssl.keystore", data)
    if kind == "PKCS12":
        try:
            key, cert, extra = pkcs12.load_key_and_certificates(
                data, _password(config, "ssl.keystore.password")
            )
        except ValueError as exc:
            raise TlsConfigError(
                f"ssl.keystore.location: cannot open the PKCS#12 store {location} "
                f"(wrong ssl.keystore.password?): {exc}"
            ) from exc
        if key is None or cert is None:
            raise TlsConfigError(f"ssl.keystore.location: {location} holds no private key entry")
        chain = [cert, *extra]
    else:
        key_password = _password(config, "ssl.key.password")
        try:
            key = serialization.load_pem_private_key(data, key_password)
        except (ValueError, TypeError) as exc:
            raise TlsConfigError(
                f"ssl.keystore.location: cannot read the private key in {location} "
                f"(wrong or missing ssl.key.password?): {exc}"
            ) from exc
        chain = x509.load_pem_x509_certificates(data) if b"CERTIFICATE-----" in data else []
        if not chain:
            raise TlsConfigError(f"ssl.keystore.location: {location} holds no certificate")
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ) + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)
    with _private_pem(pem) as path:
        try:
            ctx.load_cert_chain(path)
        except ssl.SSLError as exc:
            raise TlsConfigError(f"ssl.keystore.location: {location}: {exc}") from exc


def _load_truststore(ctx: ssl.SSLContext, config: Mapping[str, str], purpose: ssl.Purpose) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    location = _get(config, "ssl.truststore.location")
    inline = _get(config, "ssl.truststore.certificates")  # KIP-651
    if location is None and inline is None:
        ctx.load_default_certs(purpose)
        return
    if inline is not None:
        location, data = "ssl.truststore.certificates", inline.encode()
    else:
        assert location is not None
        data = _read(location, "ssl.truststore.location")
    if inline is None and _store_type(config, "ssl.truststore", data) == "PKCS12":
        try:
            _, cert, extra = pkcs12.load_key_and_certificates(
                data, _password(config, "ssl.truststore.password")
            )
        except ValueError as exc:
            raise TlsConfigError(f"ssl.truststore.location: cannot open {location}: {exc}") from exc
        certs = [c for c in (cert, *extra) if c is not None]
    else:
        certs = x509.load_pem_x509_certificates(data) if b"CERTIFICATE-----" in data else []
    if not certs:
        raise TlsConfigError(f"ssl.truststore.location: {location} holds no certificate")
    ctx.load_verify_locations(cadata="".join(
        c.public_bytes(serialization.Encoding.PEM).decode() for c in certs
    ))  # fmt: skip


def _set_protocols(ctx: ssl.SSLContext, config: Mapping[str, str]) -> None:
    text = _get(config, "ssl.enabled.protocols", DEFAULT_PROTOCOLS) or DEFAULT_PROTOCOLS
    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [n for n in names if n not in _VERSIONS]
    if unknown or not names:
        raise TlsConfigError(
            f"ssl.enabled.protocols: unknown {unknown or text!r} (known: {', '.join(_VERSIONS)})"
        )
    versions = sorted(_VERSIONS[n] for n in names)
    ctx.minimum_version = versions[0]
    ctx.maximum_version = versions[-1]


_IANA = re.compile(r"^TLS_(?:(?P<kx>[A-Z0-9_]+?)_WITH_)?(?P<cipher>[A-Z0-9_]+)$")


def openssl_cipher_name(name: str) -> str:
    """An IANA suite name (``TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384``) in OpenSSL's spelling
    (``ECDHE-RSA-AES256-GCM-SHA384``); an OpenSSL name is returned as is."""
    match = _IANA.match(name)
    if match is None:
        return name
    if match.group("kx") is None:
        return name  # a TLS 1.3 suite: OpenSSL uses the IANA name
    kx = match.group("kx").replace("_", "-")
    cipher = match.group("cipher")
    cipher = re.sub(r"AES_(\d+)", r"AES\1", cipher)
    cipher = cipher.replace("_CBC_SHA256", "_SHA256").replace("_CBC_SHA384", "_SHA384")
    cipher = cipher.replace("_CBC_SHA", "_SHA").replace(
        "CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305"
    )
    cipher = cipher.replace("_", "-")
    return cipher if kx == "RSA" else f"{kx}-{cipher}"


def _set_ciphers(ctx: ssl.SSLContext, config: Mapping[str, str]) -> None:
    text = _get(config, "ssl.cipher.suites")
    if text is None:
        return
    tls12 = []
    for name in (n.strip() for n in text.split(",")):
        if not name:
            continue
        if name.startswith("TLS_") and "_WITH_" not in name:
            continue  # a TLS 1.3 suite: always enabled by OpenSSL, nothing to set
        tls12.append(openssl_cipher_name(name))
    if not tls12:
        return
    try:
        ctx.set_ciphers(":".join(tls12))
    except ssl.SSLError as exc:
        raise TlsConfigError(f"ssl.cipher.suites: none usable in {text!r}: {exc}") from exc
    available = {c["name"] for c in ctx.get_ciphers()}
    missing = [n for n in tls12 if n not in available]
    if missing:
        raise TlsConfigError(f"ssl.cipher.suites: not available in this OpenSSL: {missing}")


def server_context(config: Mapping[str, str]) -> ssl.SSLContext:
    """The context of a TLS listener (SSL or SASL_SSL) from its ``ssl.*`` keys."""
    auth = (_get(config, "ssl.client.auth") or _DEFAULT_CLIENT_AUTH).lower()
    if auth not in _CLIENT_AUTH:
        raise TlsConfigError(f"ssl.client.auth: expected none, requested or required, got {auth}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_protocols(ctx, config)
    _set_ciphers(ctx, config)
    _load_keystore(ctx, config)
    ctx.verify_mode = _CLIENT_AUTH[auth]
    if auth != "none":
        _load_truststore(ctx, config, ssl.Purpose.CLIENT_AUTH)
    return ctx


def client_context(config: Mapping[str, str]) -> ssl.SSLContext:
    """The context of a TLS client (inter-broker, our tools): verifies the broker against the
    truststore, checks its host name unless ``ssl.endpoint.identification.algorithm`` is
    empty, and presents the keystore's certificate if one is configured (mTLS)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    algorithm = config.get(
        "ssl.endpoint.identification.algorithm", _DEFAULT_ENDPOINT_IDENTIFICATION
    )
    algorithm = str(algorithm).strip().lower() if algorithm is not None else ""
    if algorithm not in ("https", ""):
        raise TlsConfigError(
            f"ssl.endpoint.identification.algorithm: expected https or empty, got {algorithm}"
        )
    ctx.check_hostname = algorithm == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    _set_protocols(ctx, config)
    _set_ciphers(ctx, config)
    _load_truststore(ctx, config, ssl.Purpose.SERVER_AUTH)
    if _get(config, "ssl.keystore.location") or _get(config, "ssl.keystore.key"):
        _load_keystore(ctx, config)
    return ctx


# --- principals ---------------------------------------------------------------------------------

#: The attribute keywords Java's RFC 2253 output uses, by dotted OID (``cryptography``'s
#: ``NameOID`` names); any other attribute is ``<oid>=#<hex DER>``.
_KEYWORDS = {
    "2.5.4.3": "CN",  # COMMON_NAME
    "2.5.4.6": "C",  # COUNTRY_NAME
    "2.5.4.7": "L",  # LOCALITY_NAME
    "2.5.4.8": "ST",  # STATE_OR_PROVINCE_NAME
    "2.5.4.10": "O",  # ORGANIZATION_NAME
    "2.5.4.11": "OU",  # ORGANIZATIONAL_UNIT_NAME
    "2.5.4.9": "STREET",  # STREET_ADDRESS
    "0.9.2342.19200300.100.1.25": "DC",  # DOMAIN_COMPONENT
    "0.9.2342.19200300.100.1.1": "UID",  # USER_ID
}


def _escape(value: str) -> str:
    """RFC 2253 section 2.4 escaping."""
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def _der_value(attr: x509.NameAttribute[str | bytes]) -> str:
    raw = attr.value if isinstance(attr.value, bytes) else attr.value.encode("utf-8")
    tag = getattr(getattr(attr, "_type", None), "value", 0x0C)  # the ASN.1 string type
    length = len(raw)
    if length < 0x80:
        header = bytes([tag, length])
    else:
        size = length.to_bytes((length.bit_length() + 7) // 8, "big")
        header = bytes([tag, 0x80 | len(size)]) + size
    return "#" + (header + raw).hex()


def distinguished_name(cert: x509.Certificate) -> str:
    """The subject as Java's ``X500Principal.getName()`` (RFC 2253) writes it: RDNs last to
    first, joined by commas, no spaces."""
    rdns = []
    for rdn in reversed(list(cert.subject.rdns)):
        parts = []
        for attr in rdn:
            keyword = _KEYWORDS.get(attr.oid.dotted_string)
            if keyword is not None:
                value = attr.value if isinstance(attr.value, str) else attr.value.decode()
                parts.append(f"{keyword}={_escape(value)}")
            else:
                parts.append(f"{attr.oid.dotted_string}={_der_value(attr)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(_python_replacement(self.replacement, self.pattern.groups), dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


def _python_replacement(java: str, groups: int) -> str:
    """A Java ``replaceAll`` replacement (``$1``, ``\\$``) as a Python ``re.sub`` one; a
    reference to a group that does not exist stays literal (``escapeLiteralBackReferences``)."""
    out: list[str] = []
    i = 0
    while i < len(java):
        ch = java[i]
        if ch == "\\" and i + 1 < len(java):
            out.append(java[i + 1].replace("\\", "\\\\"))
            i += 2
        elif ch == "$" and i + 1 < len(java) and java[i + 1].isdigit():
            j = i + 1
            number = int(java[j])
            j += 1
            while j < len(java) and java[j].isdigit() and number * 10 + int(java[j]) <= groups:
                number = number * 10 + int(java[j])
                j += 1
            if number > groups:
                out.append("$" + java[i + 1 : j])
            else:
                out.append(f"\\g<{number}>")
            i = j
        else:
            out.append("\\\\" if ch == "\\" else ch)
            i += 1
    return "".join(out)


_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules`` (Kafka's ``SslPrincipalMapper``)."""

    def __init__(self, rules: str | None = None) -> None:
        text = (rules or "DEFAULT").strip()
        self.rules: list[_Rule] = []
        for match in _SPLITTER.finditer(text):
            rule = match.group(1)
            if not rule:
                continue
            parsed = re.match(_RULE, rule)  # Java's lookingAt: the first alternative that fits
            if parsed is None or parsed.end() != len(rule) or parsed.group(5) is not None:
                raise TlsConfigError(f"ssl.principal.mapping.rules: invalid rule: {rule}")
            if parsed.group(1):
                self.rules.append(_Rule(None))
                continue
            try:
                pattern = re.compile(parsed.group(2))
            except re.error as exc:
                raise TlsConfigError(
                    f"ssl.principal.mapping.rules: invalid pattern in {rule}: {exc}"
                ) from exc
            self.rules.append(_Rule(pattern, parsed.group(3), parsed.group(4)))

    def name(self, dn: str) -> str:
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise SecurityError(f"No rules apply to {dn}, rules {self.rules}")


def ssl_principal(cert_der: bytes | None, mapper: SslPrincipalMapper | None = None) -> str:
    """The principal of a TLS client from its certificate (DER, as
    ``SSLObject.getpeercert(binary_form=True)`` returns it); ``User:ANONYMOUS`` without one."""
    if not cert_der:
        return ANONYMOUS
    from cryptography import x509

    dn = distinguished_name(x509.load_der_x509_certificate(cert_der))
    return "User:" + (mapper or SslPrincipalMapper()).name(dn)
