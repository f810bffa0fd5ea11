"""SASL on the ZooKeeper link, configured the way a Kafka broker's is: a JAAS file.

A Kafka broker (a JVM) logs in to ZooKeeper with SASL when the JAAS file named by the system
property ``java.security.auth.login.config`` has a ``Client`` section (Kafka's
``JaasUtils.isZkSaslEnabled``); Kafka has no broker key for it. Operators pass the property in
``KAFKA_OPTS``, which Kafka's start scripts hand to the JVM::

    export KAFKA_OPTS="-Djava.security.auth.login.config=/etc/kafka/kafka_server_jaas.conf"

    // /etc/kafka/kafka_server_jaas.conf
    Client {
        org.apache.zookeeper.server.auth.DigestLoginModule required
        username="kafka"
        password="kafka-secret";
    };

Sluice reads the same environment variable and file, so a deployment's settings carry over:
from the ``-D`` options of ``KAFKA_OPTS`` it takes

* ``java.security.auth.login.config``: the JAAS file (unset: no SASL);
* ``zookeeper.sasl.clientconfig``: the section to use (default ``Client``); a file without it
  means no SASL, as in Kafka;
* ``zookeeper.sasl.client``: ``false`` turns SASL off; with the section present that is
  Kafka's error (a contradiction), so it is refused here too;
* ``zookeeper.sasl.client.username``: ZooKeeper's service name (default ``zookeeper``; the
  DIGEST-MD5 ``digest-uri`` is ``<service>/zk-sasl-md5``, ZooKeeper's fixed realm).

ZooKeeper's client logs in with DIGEST-MD5 when the login module leaves no Kerberos principal
(``DigestLoginModule``: its username and password) and with GSSAPI otherwise; Sluice speaks
DIGEST-MD5 only (kazoo with ``pure-sasl``) and refuses a Kerberos module by name. A wrong
password fails the start clearly (:class:`sluice.server.zk.errors.ZkAuthFailedError`).

With ``zookeeper.set.acl=true`` the znodes a SASL-authenticated broker creates are ACL'd to its
identity ``sasl:<username>`` by ZooKeeper's ``auth`` scheme (:func:`sluice.server.zk.client.
secure_acl`, Kafka's ``ZkData.defaultAcls``).

Pure parsing, no I/O but reading the JAAS file, no kazoo import.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "JaasEntry",
    "ZkSasl",
    "jvm_system_properties",
    "parse_jaas",
    "zookeeper_sasl",
]

#: Kafka's ``JaasUtils`` names (ZooKeeper's ``ZKClientConfig`` / ``Environment``).
JAVA_LOGIN_CONFIG = "java.security.auth.login.config"
ZK_SASL_CLIENT = "zookeeper.sasl.client"
ZK_LOGIN_CONTEXT_NAME = "zookeeper.sasl.clientconfig"
ZK_SASL_SERVICE = "zookeeper.sasl.client.username"
#: The environment variable Kafka's start scripts pass to the JVM.
KAFKA_OPTS = "KAFKA_OPTS"
DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"


@dataclass(frozen=True, slots=True)
class ZkSasl:
    """The broker's SASL login to ZooKeeper (DIGEST-MD5)."""

    username: str
    password: str = field(repr=False)
    #: ZooKeeper's service name (``zookeeper.sasl.client.username``).
    service: str = "zookeeper"
    #: Where it came from, for logs and errors: ``<file> section <name>``.
    source: str = ""
    mechanism: str = "DIGEST-MD5"

    def kazoo_options(self) -> dict[str, str]:
        """kazoo's ``sasl_options``."""
        return {
            "mechanism": self.mechanism,
            "username": self.username,
            "password": self.password,
            "service": self.service,
        }


@dataclass(frozen=True, slots=True)
class JaasEntry:
    """One login module line of a JAAS section: ``<module> <flag> key="value" ...;``."""

    module: str
    flag: str
    options: dict[str, str] = field(repr=False)


def jvm_system_properties(opts: str) -> dict[str, str]:
    """The ``-Dkey=value`` options of a JVM command line (``KAFKA_OPTS``), shell-quoted as a
    shell would split them; a bare ``-Dkey`` is ``""``. Other options are ignored."""
    props: dict[str, str] = {}
    for token in shlex.split(opts):
        if token.startswith("-D") and len(token) > 2:
            key, _, value = token[2:].partition("=")
            props[key] = value
    return props


_JAAS_TOKEN = re.compile(
    r"""\s+|//[^\n]*|/\*.*?\*/|(?P<q>"(?:[^"\\]|\\.)*")|(?P<p>[{};=])|(?P<w>[^\s{};="]+)""",
    re.DOTALL,
)


def _jaas_tokens(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        match = _JAAS_TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"JAAS file: unexpected {text[pos : pos + 20]!r}")
        pos = match.end()
        if match["q"] is not None:  # keep the quotes: a quoted value is never punctuation
            tokens.append(match["q"])
        elif match["p"] is not None or match["w"] is not None:
            tokens.append(match[0])
    return tokens


def _unquote(token: str) -> str:
    if token.startswith('"'):
        return re.sub(r"\\(.)", r"\1", token[1:-1])
    return token


def parse_jaas(text: str) -> dict[str, list[JaasEntry]]:
    """A JAAS login configuration (``com.sun.security.auth.login.ConfigFile``'s syntax):
    ``Name { module flag key=value ...; ... };`` sections, ``//`` and ``/* */`` comments.
    Raises ValueError naming what is wrong."""
    tokens = _jaas_tokens(text)
    sections: dict[str, list[JaasEntry]] = {}
    i = 0

    def take() -> str:
        nonlocal i
        if i >= len(tokens):
            raise ValueError("JAAS file: unexpected end (a missing '}' or ';'?)")
        i += 1
        return tokens[i - 1]

    def expect(what: str) -> None:
        token = take()
        if token != what:
            raise ValueError(f"JAAS file: expected {what!r}, found {token!r}")

    while i < len(tokens):
        name = _unquote(take())
        expect("{")
        entries: list[JaasEntry] = []
        while (token := take()) != "}":
            module, flag = token, take()
            if flag.lower() not in ("required", "requisite", "sufficient", "optional"):
                raise ValueError(f"JAAS file: section {name}: {module} has no valid flag ({flag})")
            options: dict[str, str] = {}
            while (key := take()) != ";":
                expect("=")
                options[key] = _unquote(take())
            entries.append(JaasEntry(module, flag.lower(), options))
        expect(";")
        sections[name] = entries
    return sections


def zookeeper_sasl(env: Mapping[str, str]) -> ZkSasl | None:
    """The broker's SASL login to ZooKeeper from ``env``'s ``KAFKA_OPTS`` (module docstring),
    None without one. Raises ValueError for a file that cannot be read or parsed, a section
    with no usable login, or ``zookeeper.sasl.client=false`` with the section present."""
    props = jvm_system_properties(env.get(KAFKA_OPTS, ""))
    location = props.get(JAVA_LOGIN_CONFIG)
    if not location:
        return None
    section = props.get(ZK_LOGIN_CONTEXT_NAME, "Client")
    path = Path(location)
    try:
        sections = parse_jaas(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"Exception while loading ZooKeeper JAAS login context {system_config(props)}: {exc}"
        ) from None
    entries = sections.get(section)
    if entries is None:
        return None
    if props.get(ZK_SASL_CLIENT, "true").strip().lower() != "true":
        raise ValueError(
            f"JAAS configuration is present, but system property {ZK_SASL_CLIENT} is set to "
            f"false, which disables SASL in the ZooKeeper client {system_config(props)}"
        )
    source = f"{location} section {section}"
    for entry in entries:
        if entry.module != DIGEST_LOGIN_MODULE:
            raise ValueError(
                f"{source}: login module {entry.module} is not supported on the ZooKeeper link "
                f"(Sluice logs in to ZooKeeper with DIGEST-MD5: {DIGEST_LOGIN_MODULE})"
            )
        if "username" not in entry.options or "password" not in entry.options:
            raise ValueError(f'{source}: {entry.module} needs username="..." password="..."')
        return ZkSasl(
            username=entry.options["username"],
            password=entry.options["password"],
            service=props.get(ZK_SASL_SERVICE) or "zookeeper",
            source=source,
        )
    raise ValueError(f"{source}: no login module")


def system_config(props: Mapping[str, str]) -> str:
    """Kafka's ``JaasUtils.zkSecuritySysConfigString``, for errors."""
    return (
        f"[{JAVA_LOGIN_CONFIG}={props.get(JAVA_LOGIN_CONFIG)}, "
        f"{ZK_SASL_CLIENT}={props.get(ZK_SASL_CLIENT, 'default:true')}, "
        f"{ZK_LOGIN_CONTEXT_NAME}={props.get(ZK_LOGIN_CONTEXT_NAME, 'default:Client')}]"
    )
