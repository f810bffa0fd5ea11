"""The security room's broker keys (Kafka's names): listeners' security protocols, TLS, SASL,
the authorizer. Declared here, apart from the broker's ``Config`` that collects them, so that
what reads them below the config -- the TLS contexts, the SASL authenticator, the authorizer,
the network layer's listeners -- defaults from the declaration instead of repeating it.
"""

from __future__ import annotations

import re

from sluice.server.config_def import (
    BOOLEAN,
    HIGH,
    INT,
    LONG,
    LOW,
    MEDIUM,
    PASSWORD,
    STRING,
    ConfigDef,
    boolean,
    int_in,
    string,
)
from sluice.server.security.listeners import SecurityProtocol

#: A listener's name (``listeners``, ``listener.security.protocol.map``).
LISTENER_NAME = re.compile(r"[A-Za-z0-9_]+")


def _protocol_map(text: str) -> tuple[tuple[str, str], ...]:
    """``listener.security.protocol.map``: ``NAME:PROTOCOL,...`` (Kafka's form)."""
    pairs: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, colon, protocol = item.partition(":")
        if not colon or not LISTENER_NAME.fullmatch(name.strip()):
            raise ValueError(f"{item!r} is not LISTENER_NAME:SECURITY_PROTOCOL")
        pairs[name.strip().upper()] = SecurityProtocol.parse(protocol).value
    return tuple(pairs.items())


def _security_protocol(text: str) -> str:
    return SecurityProtocol.parse(text).value


def _listener_name(text: str) -> str:
    text = text.strip()
    if not LISTENER_NAME.fullmatch(text):
        raise ValueError(f"{text!r} is not a listener name")
    return text.upper()


def mechanisms(text: str) -> tuple[str, ...]:
    """``sasl.enabled.mechanisms``: a list (which of them Sluice has is checked for the SASL
    listeners only: Kafka's default GSSAPI is harmless on a broker without one)."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _client_auth(text: str) -> str:
    value = text.strip().lower()
    if value not in ("none", "requested", "required"):
        raise ValueError("expected none, requested or required")
    return value


def endpoint_identification(text: str) -> str:
    """``ssl.endpoint.identification.algorithm`` (and ZooKeeper's): https or empty."""
    value = text.strip().lower()
    if value not in ("https", ""):
        raise ValueError("expected https or empty (no host name check)")
    return value


_DEFAULT_PROTOCOL_MAP = ",".join(f"{p.value}:{p.value}" for p in SecurityProtocol)

#: The ``authorizer.class.name`` values that turn ACLs on (Kafka's ZooKeeper and KRaft names).
AUTHORIZER_CLASS_NAMES = (
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
)


def _authorizer(text: str) -> str:
    value = text.strip()
    if value and value not in AUTHORIZER_CLASS_NAMES:
        raise ValueError(
            "Sluice implements Kafka's ACL authorizer only: set "
            f"{' or '.join(AUTHORIZER_CLASS_NAMES)}, or leave it empty for no authorization"
        )
    return value


def _super_users(text: str) -> tuple[str, ...]:
    """``super.users``: ``User:a;User:b`` (each ``<type>:<name>``, Kafka's syntax)."""
    users = tuple(u.strip() for u in text.split(";") if u.strip())
    for user in users:
        kind, _, name = user.partition(":")
        if not kind or not name:
            raise ValueError(f"{user!r} is not a principal (expected <type>:<name>)")
    return users


#: The authorizer's keys, listed by the broker with its identity (DescribeConfigs' order).
AUTHORIZER_CONFIG = (
    ConfigDef()
    .section("broker identity and topics")
    .define("authorizer.class.name", STRING, "", _authorizer, LOW, "Kafka's AclAuthorizer or StandardAuthorizer turns ACLs on; empty: no authorization")  # noqa: E501
    .define("super.users", STRING, "", _super_users, LOW, "principals (User:name) separated by ';' that every ACL check allows")  # noqa: E501
    .define("allow.everyone.if.no.acl.found", BOOLEAN, False, boolean, LOW, "with an authorizer: a resource with no ACL is open to everyone (true) or to super users only")  # noqa: E501
)  # fmt: skip

#: Listeners' security protocols, TLS and SASL: one listener may override each ``ssl.*`` /
#: ``sasl.*`` key as ``listener.name.<name>.<key>`` (``Config.listener_security_settings``).
SECURITY_CONFIG = (
    ConfigDef()
    .section("security")
    .define("listener.security.protocol.map", STRING, _DEFAULT_PROTOCOL_MAP, _protocol_map, LOW, "the security protocol of each listener name (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL); every ssl.*/sasl.* key below may be set for one listener as listener.name.<name lower case>.<key>")  # noqa: E501
    .define("inter.broker.listener.name", STRING, None, _listener_name, MEDIUM, "the listener brokers use to reach each other (replica fetchers, the controller); unset: the one named security.inter.broker.protocol")  # noqa: E501
    .define("security.inter.broker.protocol", STRING, "PLAINTEXT", _security_protocol, MEDIUM, "the inter-broker listener's name when inter.broker.listener.name is unset (set at most one of the two)")  # noqa: E501
    .define("ssl.keystore.location", STRING, None, string, HIGH, "the broker's private key and certificate chain: a PEM file or a PKCS#12 keystore (JKS: convert with keytool -importkeystore -deststoretype PKCS12)")  # noqa: E501
    .define("ssl.keystore.type", STRING, None, string, MEDIUM, "PEM or PKCS12 (unset: from the file's content)")  # noqa: E501
    .define("ssl.keystore.password", PASSWORD, None, string, HIGH, "the PKCS#12 keystore's password")  # noqa: E501
    .define("ssl.key.password", PASSWORD, None, string, HIGH, "the password of an encrypted private key")  # noqa: E501
    .define("ssl.truststore.location", STRING, None, string, HIGH, "the CA certificates trusted for peers (client certificates; brokers, for the inter-broker client): PEM bundle or PKCS#12; unset: the system's")  # noqa: E501
    .define("ssl.truststore.type", STRING, None, string, MEDIUM, "PEM or PKCS12 (unset: from the file's content)")  # noqa: E501
    .define("ssl.truststore.password", PASSWORD, None, string, HIGH, "the PKCS#12 truststore's password")  # noqa: E501
    .define("ssl.client.auth", STRING, "none", _client_auth, MEDIUM, "client certificates on TLS listeners: none, requested (verified when sent) or required; the certificate's name becomes the principal")  # noqa: E501
    .define("ssl.enabled.protocols", STRING, "TLSv1.2,TLSv1.3", string, MEDIUM, "the TLS versions allowed")  # noqa: E501
    .define("ssl.cipher.suites", STRING, "", string, LOW, "the TLS 1.2 cipher suites allowed (IANA or OpenSSL names; empty: OpenSSL's defaults)")  # noqa: E501
    .define("ssl.endpoint.identification.algorithm", STRING, "https", endpoint_identification, LOW, "https: the inter-broker client checks a broker's host name against its certificate; empty: not")  # noqa: E501
    .define("ssl.principal.mapping.rules", STRING, "DEFAULT", string, LOW, "RULE:<regex>/<replacement>/[L|U],...,DEFAULT: the principal name of a client certificate's distinguished name")  # noqa: E501
    .define("sasl.enabled.mechanisms", STRING, "GSSAPI", mechanisms, MEDIUM, "the SASL mechanisms SASL listeners offer: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (Kafka's default GSSAPI is not supported: set this with a SASL listener)")  # noqa: E501
    .define("sasl.mechanism.inter.broker.protocol", STRING, "GSSAPI", string, MEDIUM, "the mechanism brokers log in to each other with over a SASL inter-broker listener")  # noqa: E501
    .define("sasl.jaas.config", PASSWORD, None, string, MEDIUM, "the inter-broker client's login (set it as listener.name.<l>.<mechanism>.sasl.jaas.config): ... required username=\"broker\" password=\"...\";")  # noqa: E501
    .define("sasl.server.max.receive.size", INT, 524288, int_in(1), LOW, "largest frame accepted before a SASL login completes; a bigger one closes the connection")  # noqa: E501
    .define("connections.max.reauth.ms", LONG, 0, int_in(0), MEDIUM, "a SASL session's lifetime: clients re-authenticate on the connection before it ends, others are disconnected (0: sessions never end)")  # noqa: E501
    .define("connection.failed.authentication.delay.ms", INT, 100, int_in(0), LOW, "how long a failed login's answer and the close of its connection wait")  # noqa: E501
    .define("sluice.security.credentials.file", STRING, None, string, MEDIUM, "a standalone broker's SCRAM credentials (python -m sluice.server.security writes it); unset: users.json in the data directory. A cluster keeps them in ZooKeeper (/config/users)")  # noqa: E501
)  # fmt: skip

#: The declared default of a security key (what a reader below the config falls back to).
default = SECURITY_CONFIG.default
