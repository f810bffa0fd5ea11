"""Broker configuration: every option, its Kafka name, its default, loaded once by the entrypoint.

Sources, later wins (like ``kafka-server-start.sh server.properties --override k=v``):

1. the defaults declared in :data:`BROKER_CONFIG` (Kafka's, except ``listeners`` and
   ``log.dirs`` which default to a local, unprivileged setup). Each key is declared once
   (:mod:`sluice.server.config_def`), by the room that reads it: the network, broker, replica
   and ZooKeeper keys here, the controller's in :mod:`sluice.server.controller.config`, the
   ``log.*`` keys by the storage layer
   (:data:`sluice.server.storage.log_config.SERVER_LOG_CONFIG`), the ``group.*`` /
   ``offsets.*`` keys in :mod:`sluice.server.group.config`; :data:`BROKER_CONFIG` collects
   them all, and the fields of :class:`Config`, DescribeConfigs' broker entries and the example
   ``config/server.properties`` (:func:`example_properties`) derive from it;
2. a Java ``.properties`` file (:func:`load_properties`: comments, ``key=value``,
   ``key: value``, ``key value``, continuation lines and ``\\uXXXX`` escapes behave exactly as in
   Java's ``Properties.load``);
3. environment variables ``SLUICE_<KEY>`` (what a container is configured with; see
   :func:`env_name`), when the caller passes the environment (the entrypoint does);
4. ``--override key=value`` arguments.

**Environment names** follow the convention of Apache's and Confluent's Kafka images (which use
``KAFKA_``): ``SLUICE_`` + the key in upper case, ``.`` written ``_``; a ``_`` that is part of
the key is written ``__`` and a ``-`` ``___``. So ``advertised.listeners`` is
``SLUICE_ADVERTISED_LISTENERS``, ``sluice.shutdown.timeout.ms`` is
``SLUICE_SLUICE_SHUTDOWN_TIMEOUT_MS``, and a key ``a_b.c`` would be ``SLUICE_A__B_C``. Only
variables that name a declared key are read; other ``SLUICE_`` variables are listed in
:attr:`Config.ignored_environment` for the entrypoint's warning, except those of Sluice's other
tools (:data:`NON_BROKER_ENV`).

Unknown keys (including Kafka keys Sluice does not use, such as ``num.network.threads``) are kept
in :attr:`Config.ignored_keys` so the entrypoint can warn once; invalid values raise
:class:`ConfigError` naming the key and the value. The ``log.*`` storage defaults are converted
(and checked together) by
:meth:`sluice.server.storage.log_config.LogConfig.from_broker_properties` (owned
by the storage layer); :meth:`Config.log_config` hands it the merged properties.

A ``Config`` is immutable; ``Server`` and the handlers read it, nobody writes it.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.server.config_def import (
    BOOLEAN,
    HIGH,
    INT,
    LONG,
    LOW,
    MEDIUM,
    NO_BOUND,
    PASSWORD,
    STRING,
    ConfigDef,
    ConfigKey,
    boolean,
    int_in,
    parse_ip_overrides,
    string,
    typed_values,
)
from sluice.server.config_def import ConfigError as ConfigError  # raised by Config.load
from sluice.server.controller.config import CONTROLLER_CONFIG
from sluice.server.crash_points import ENV as CRASH_ENV
from sluice.server.crash_points import ONCE_DIR_ENV as CRASH_ONCE_DIR_ENV
from sluice.server.group.config import GROUP_CONFIG
from sluice.server.security.config import (
    AUTHORIZER_CONFIG,
    LISTENER_NAME,
    SECURITY_CONFIG,
)
from sluice.server.security.config import endpoint_identification as _endpoint_identification
from sluice.server.security.config import mechanisms as _mechanisms
from sluice.server.security.listeners import (
    SUPPORTED_SASL_MECHANISMS,
    SecurityProtocol,
    listener_settings,
)
from sluice.server.storage.log_config import LONG_MAX, SERVER_LOG_CONFIG
from sluice.server.transaction.config import TRANSACTION_CONFIG

if TYPE_CHECKING:
    from sluice.server.storage.log_config import LogConfig


_EOL = re.compile(r"\r\n|\r|\n")
_ESCAPE = re.compile(r"\\(u.{0,4}|.)", re.DOTALL)
_HEX4 = re.compile(r"u[0-9A-Fa-f]{4}")
_SURROGATE_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")
_UNESCAPES = {"t": "\t", "n": "\n", "f": "\f", "r": "\r"}
_BLANK = " \t\f"


def load_properties(text: str) -> dict[str, str]:
    """The key-value pairs of a ``.properties`` document, as Java's ``Properties.load`` reads
    them (later keys win). Java's rules, in its ``LineReader`` / ``loadConvert`` order:

    1. natural lines end at ``\\n``, ``\\r`` or ``\\r\\n``; leading blanks (space, tab,
       form feed) are skipped; a line that is then empty, or starts with ``#`` or ``!``, is
       skipped;
    2. a line ending in an odd number of backslashes continues on the next one (whose leading
       blanks are skipped; it is never a comment);
    3. the key ends at the first unescaped ``=``, ``:`` or blank; blanks, then one ``=`` or
       ``:`` (if the key did not end at one), then blanks are skipped; the rest is the value;
    4. escapes in key and value: ``\\t \\n \\f \\r \\uXXXX``; a backslash before any
       other character stands for that character; a ``\\u`` without four hex digits is an
       error (ValueError).

    Sluice's own reader rather than a package's: the one we used brings in ``urllib`` and
    ``xml`` (~70 ms at every start); a property test holds this one to ``javaproperties``.
    """
    props: dict[str, str] = {}
    lines = _EOL.split(text)
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(_BLANK)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continued(line):
            line = line[:-1]
            if i < len(lines):
                line += lines[i].lstrip(_BLANK)
                i += 1
        if line:
            key, value = _split_key(line)
            props[_unescape(key)] = _unescape(value)
    return props


def _continued(line: str) -> bool:
    """An odd number of backslashes at the end: the line goes on."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_key(line: str) -> tuple[str, str]:
    end, n = 0, len(line)
    while end < n and line[end] not in "=: \t\f":
        end += 2 if line[end] == "\\" else 1
    end = min(end, n)
    start = end
    separator = start < n and line[start] in "=:"
    if separator:
        start += 1
    while start < n and line[start] in _BLANK:
        start += 1
    if not separator and start < n and line[start] in "=:":
        start += 1
        while start < n and line[start] in _BLANK:
            start += 1
    return line[:end], line[start:]


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text

    def one(match: re.Match[str]) -> str:
        escape = match.group(1)
        if escape[0] == "u":
            if not _HEX4.fullmatch(escape):
                raise ValueError(f"malformed \\uxxxx escape: \\{escape}")
            return chr(int(escape[1:], 16))
        return _UNESCAPES.get(escape, escape)

    decoded = _ESCAPE.sub(one, text)
    # \uD83D\uDE00 (how Java writes a character beyond the BMP) is one character
    return _SURROGATE_PAIR.sub(_join_surrogates, decoded)


def _join_surrogates(match: re.Match[str]) -> str:
    high, low = map(ord, match.group())
    return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))


@dataclass(frozen=True)
class Listener:
    """One ``NAME://host:port`` listener. ``port`` 0 = any free port (tests). Its security
    protocol is ``listener.security.protocol.map``'s (:meth:`Config.security_protocol`)."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_listeners(text: str) -> tuple[Listener, ...]:
    """``NAME://host:port[,...]`` (Kafka's ``listeners``): names unique (upper-cased, as Kafka's
    ``ListenerName.normalised``), an empty host meaning every interface."""
    listeners = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, rest = item.partition("://")
        if not sep or not LISTENER_NAME.fullmatch(name):
            raise ValueError(f"{item!r} is not NAME://host:port")
        host, colon, port_text = rest.rpartition(":")
        if not colon:
            raise ValueError(f"{item!r} has no port")
        host = host.strip("[]")  # IPv6 literal
        try:
            port = int(port_text)
        except ValueError:
            raise ValueError(f"{item!r}: port {port_text!r} is not a number") from None
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} out of range")
        listeners.append(Listener(name.upper(), host, port))
    if not listeners:
        raise ValueError("no listener given")
    names = [lst.name for lst in listeners]
    if len(set(names)) != len(names):
        raise ValueError(f"each listener must have a different name, listeners: {text}")
    return tuple(listeners)


def _pem_store(text: str) -> str:
    """``zookeeper.ssl.*store.type``: the ZooKeeper link (kazoo, Python's ssl) reads PEM."""
    value = text.strip().upper()
    if value != "PEM":
        raise ValueError(
            "the ZooKeeper link reads PEM files only (convert a JKS or PKCS12 store with keytool "
            "-importkeystore and openssl pkcs12)"
        )
    return value


@dataclass(frozen=True)
class MetricsListener:
    """Where the Prometheus endpoint serves: ``http://host:port[/path]`` (path ``/metrics``)."""

    host: str
    port: int
    path: str = "/metrics"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{self.path}"


def parse_metrics_listener(text: str) -> MetricsListener | None:
    """``http://host:port[/path]`` (port 0 = any free port); empty = no endpoint."""
    from urllib.parse import urlsplit

    text = text.strip()
    if not text:
        return None
    parts = urlsplit(text)
    if parts.scheme != "http":
        raise ValueError(f"{text!r} is not http://host:port (only http is served)")
    try:
        port = parts.port
    except ValueError as exc:  # not a number, or out of range
        raise ValueError(f"{text!r}: bad port ({exc})") from None
    if not parts.hostname or port is None:
        raise ValueError(f"{text!r} is not http://host:port: host and port are required")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"{text!r}: only http://host:port[/path] is allowed")
    path = parts.path or "/metrics"
    return MetricsListener(parts.hostname, port, path)


def _rack(text: str) -> str | None:
    """``broker.rack``: empty means none (Kafka's ``Option(rack).filter(_.nonEmpty)``)."""
    return text.strip() or None


RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def _replica_selector(text: str) -> str | None:
    """``replica.selector.class``: Kafka's RackAwareReplicaSelector or nothing; Sluice runs no
    user classes, so any other name is refused rather than ignored."""
    name = text.strip()
    if not name:
        return None
    if name != RACK_AWARE_REPLICA_SELECTOR:
        raise ValueError(f"Sluice implements only {RACK_AWARE_REPLICA_SELECTOR}")
    return name


def _zookeeper_connect(text: str) -> str:
    """``host:port[,host:port...][/chroot]`` as Kafka takes it (checked, returned unchanged)."""
    text = text.strip()
    hosts, slash, chroot = text.partition("/")
    if slash and (not chroot or chroot.endswith("/")):
        raise ValueError(f"chroot {'/' + chroot!r} must be a path like /kafka, without a final /")
    for item in hosts.split(","):
        host, colon, port = item.strip().rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ValueError(f"{item.strip()!r} is not host:port")
    return text


def _log_dirs(text: str) -> str:
    dirs = [d.strip() for d in text.split(",") if d.strip()]
    if len(dirs) != 1:
        raise ValueError("Sluice uses exactly one data directory")
    return dirs[0]


#: Every broker key: this room's (network, broker, replica, ZooKeeper, storage lifecycle), the
#: controller's, the security room's, the storage layer's ``log.*``, the group and transaction
#: coordinators', in the order of
#: DescribeConfigs and of the example file. One line per key:
#: ``define(name, type, default, validator, importance, doc)``.
BROKER_CONFIG = (
    ConfigDef()
    .section("network")
    .define("listeners", STRING, "PLAINTEXT://127.0.0.1:9092", parse_listeners, HIGH, "where the broker listens: NAME://host:port,... one per listener name (port 0 = any free port)")  # noqa: E501
    .define("advertised.listeners", STRING, None, parse_listeners, HIGH, "what Metadata tells clients of each listener to connect to; a listener not named here advertises its listeners entry")  # noqa: E501
    .define("socket.request.max.bytes", INT, 104857600, int_in(1), HIGH, "largest request frame; a bigger one closes the connection before its body is read")  # noqa: E501
    # Kafka: 102400 for both buffers; the kernel's autotuning fetches ~2x faster on loopback
    .define("socket.send.buffer.bytes", INT, -1, int_in(-1), HIGH, "SO_SNDBUF of client connections (-1: the OS default, with autotuning)")  # noqa: E501
    .define("socket.receive.buffer.bytes", INT, -1, int_in(-1), HIGH, "SO_RCVBUF of client connections (-1: the OS default, with autotuning)")  # noqa: E501
    .define("queued.max.requests", INT, 500, int_in(1), HIGH, "per connection: unanswered requests before the broker stops reading from it")  # noqa: E501
    .define("connections.max.idle.ms", LONG, 600000, int_in(-1), MEDIUM, "close client connections idle (nothing read or written, no request being handled) this long (-1: never)")  # noqa: E501
    .define("sluice.connection.max.unsent.bytes", INT, 4194304, int_in(1), MEDIUM, "per connection: bytes buffered for a slow reader; above it sending and reading wait")  # noqa: E501
    .define("fetch.max.bytes", INT, 57671680, int_in(1024), MEDIUM, "largest Fetch response; a request asking more gets this (its first batch may exceed it)")  # noqa: E501
    .define("sluice.fetch.zero.copy", BOOLEAN, True, boolean, LOW, "send Fetch record bytes with os.sendfile (true) or copy them through Python (false)")  # noqa: E501
    .define("sluice.shutdown.timeout.ms", INT, 10000, int_in(0), MEDIUM, "graceful shutdown: how long in-flight requests may take before connections close")  # noqa: E501
    .define("sluice.metrics.listener", STRING, None, parse_metrics_listener, MEDIUM, "Prometheus endpoint, http://host:port (path /metrics); unset or empty: none")  # noqa: E501
    .section("limits a client can exhaust; 2147483647 (Kafka's Int.MaxValue) is no bound")
    .define("max.connections.per.ip", INT, NO_BOUND, int_in(0), MEDIUM, "open connections from one address; more are closed when accepted")  # noqa: E501
    .define("max.connections.per.ip.overrides", STRING, "", parse_ip_overrides, MEDIUM, "host:count,... : max.connections.per.ip for the addresses (or host names) named")  # noqa: E501
    .define("max.connections", INT, NO_BOUND, int_in(0), MEDIUM, "open connections in all; more are closed when accepted")  # noqa: E501
    .define("sluice.quota.requests.per.second", INT, NO_BOUND, int_in(1), MEDIUM, "requests per second per client id; above it responses carry throttle_time_ms and the connection waits that long")  # noqa: E501
    .define("quota.window.num", INT, 11, int_in(2), LOW, "samples the request rate is measured over")  # noqa: E501
    .define("quota.window.size.seconds", INT, 1, int_in(1), LOW, "length of one request-rate sample (also the longest throttle)")  # noqa: E501
    .define("sluice.max.topics", INT, NO_BOUND, int_in(1), MEDIUM, "topics in all (internal ones included); creating more is POLICY_VIOLATION")  # noqa: E501
    .define("sluice.max.partitions", INT, NO_BOUND, int_in(1), MEDIUM, "partitions of all topics (internal ones included); more is POLICY_VIOLATION")  # noqa: E501
    .define("sluice.max.partitions.per.topic", INT, 10000, int_in(1), MEDIUM, "partitions of one topic; more is INVALID_PARTITIONS")  # noqa: E501
    .section("broker identity and topics")
    .include(AUTHORIZER_CONFIG)
    .define("node.id", INT, 0, int_in(0), HIGH, "this broker's id (in Metadata)")
    .define("broker.id", INT, None, int_in(-1), HIGH, "Kafka's old name for node.id; node.id wins")
    .define("broker.rack", STRING, None, _rack, MEDIUM, "this broker's rack (e.g. us-east-1d): new topics spread their replicas over racks (Kafka's rack-aware assignment), shown in Metadata")  # noqa: E501
    .define("num.partitions", INT, 1, int_in(1), MEDIUM, "partitions of an auto-created topic or CreateTopics with num_partitions -1")  # noqa: E501
    .define("default.replication.factor", INT, 1, int_in(1), MEDIUM, "replicas of an auto-created topic or CreateTopics with replication_factor -1 (standalone: only 1)")  # noqa: E501
    .define("auto.create.topics.enable", BOOLEAN, True, boolean, HIGH, "create a topic on Metadata/Produce for an unknown name")  # noqa: E501
    .define("delete.topic.enable", BOOLEAN, True, boolean, HIGH, "allow DeleteTopics")
    .section("cluster (ZooKeeper mode); without zookeeper.connect the broker is standalone")
    .define("zookeeper.connect", STRING, None, _zookeeper_connect, HIGH, "host:port[,host:port...][/chroot] of the ZooKeeper ensemble; unset: standalone broker")  # noqa: E501
    .define("zookeeper.session.timeout.ms", INT, 18000, int_in(1), HIGH, "ZooKeeper session timeout: how long a dead broker keeps its registration")  # noqa: E501
    .define("zookeeper.connection.timeout.ms", INT, None, int_in(1), HIGH, "how long to wait for a ZooKeeper connection (unset: the session timeout)")  # noqa: E501
    .define("zookeeper.set.acl", BOOLEAN, False, boolean, MEDIUM, "create znodes readable by anyone but writable only by this broker's ZooKeeper identity (its SASL user or TLS client certificate), the credentials' only by it (Kafka's secure ACLs)")  # noqa: E501
    .define("zookeeper.ssl.client.enable", BOOLEAN, False, boolean, MEDIUM, "reach ZooKeeper over TLS (its secureClientPort), with the zookeeper.ssl.* keys")  # noqa: E501
    .define("zookeeper.ssl.keystore.location", STRING, None, string, MEDIUM, "the broker's key and certificate chain for ZooKeeper's client authentication (PEM)")  # noqa: E501
    .define("zookeeper.ssl.keystore.password", PASSWORD, None, string, MEDIUM, "the password of the keystore's private key")  # noqa: E501
    .define("zookeeper.ssl.keystore.type", STRING, None, _pem_store, MEDIUM, "PEM (unset: PEM)")
    .define("zookeeper.ssl.truststore.location", STRING, None, string, MEDIUM, "the CA certificates ZooKeeper's certificate must chain to (PEM; unset: the system's)")  # noqa: E501
    .define("zookeeper.ssl.truststore.password", PASSWORD, None, string, MEDIUM, "not needed for a PEM truststore (accepted)")  # noqa: E501
    .define("zookeeper.ssl.truststore.type", STRING, None, _pem_store, MEDIUM, "PEM (unset: PEM)")
    .define("zookeeper.ssl.endpoint.identification.algorithm", STRING, "HTTPS", _endpoint_identification, LOW, "HTTPS: check ZooKeeper's host name against its certificate; empty: not")  # noqa: E501
    .define("replica.selector.class", STRING, None, _replica_selector, MEDIUM, "KIP-392: org.apache.kafka.common.replica.RackAwareReplicaSelector sends a consumer that sets client.rack to a replica in its rack; unset: consumers read from leaders (followers still serve a consumer that fetches from them)")  # noqa: E501
    .define("replica.lag.time.max.ms", LONG, 30000, int_in(1), HIGH, "a follower not caught up for this long leaves the ISR")  # noqa: E501
    .define("replica.fetch.wait.max.ms", INT, 500, int_in(0), MEDIUM, "how long a follower's fetch waits at the leader for new data")  # noqa: E501
    .define("replica.fetch.min.bytes", INT, 1, int_in(1), MEDIUM, "bytes a follower's fetch waits for")  # noqa: E501
    .define("replica.fetch.max.bytes", INT, 1048576, int_in(0), MEDIUM, "bytes per partition a follower fetches at once (at least one batch)")  # noqa: E501
    .define("replica.fetch.response.max.bytes", INT, 10485760, int_in(0), MEDIUM, "bytes per follower fetch response (at least one batch)")  # noqa: E501
    .define("replica.fetch.backoff.ms", INT, 1000, int_in(0), MEDIUM, "pause before a follower retries after a fetch error")  # noqa: E501
    .define("replica.socket.timeout.ms", INT, 30000, int_in(1), HIGH, "how long a follower waits for a fetch answer before reconnecting")  # noqa: E501
    .define("leader.replication.throttled.rate", LONG, LONG_MAX, int_in(0), MEDIUM, "leader-throttled replicas: bytes/s sent to followers outside the ISR (set dynamically)")  # noqa: E501
    .define("follower.replication.throttled.rate", LONG, LONG_MAX, int_in(0), MEDIUM, "follower-throttled replicas: bytes/s fetched while not caught up (set dynamically)")  # noqa: E501
    .define("replication.quota.window.num", INT, 11, int_in(1), LOW, "samples the replication throttles' rates are measured over")  # noqa: E501
    .define("replication.quota.window.size.seconds", INT, 1, int_in(1), LOW, "length of one replication-throttle sample")  # noqa: E501
    .include(CONTROLLER_CONFIG)
    .section("cluster: controlled shutdown")
    .define("controlled.shutdown.enable", BOOLEAN, True, boolean, MEDIUM, "on SIGTERM, move leadership away before stopping")  # noqa: E501
    .define("controlled.shutdown.max.retries", INT, 3, int_in(0), MEDIUM, "controlled shutdown attempts before stopping anyway")  # noqa: E501
    .define("controlled.shutdown.retry.backoff.ms", LONG, 5000, int_in(0), MEDIUM, "pause between controlled shutdown attempts")  # noqa: E501
    .section("storage (log.dirs is the broker's; the other log.* keys are the topics' defaults)")
    .define("log.dirs", STRING, None, _log_dirs, HIGH, "the data directory (exactly one)")
    .define("log.dir", STRING, "./data", _log_dirs, HIGH, "used when log.dirs is not set")
    .define("log.retention.check.interval.ms", LONG, 300000, int_in(1), MEDIUM, "how often retention runs")  # noqa: E501
    .define("log.flush.scheduler.interval.ms", LONG, LONG_MAX, int_in(0), HIGH, "how often the flush check runs (unset: every second, which also flushes rolled segments)")  # noqa: E501
    .define("sluice.log.open.files.max", INT, None, int_in(1), MEDIUM, "segment files kept open at once; the least recently read old segments are closed beyond it (unset: the open-file limit less a quarter of it, or 64 if more)")  # noqa: E501
    .define("log.flush.offset.checkpoint.interval.ms", INT, 60000, int_in(0), HIGH, "how often recovery points are checkpointed")  # noqa: E501
    .include(SECURITY_CONFIG)
    .include(SERVER_LOG_CONFIG)
    .include(GROUP_CONFIG)
    .include(TRANSACTION_CONFIG)
    # Kafka's SocketServer.ReconfigurableConfigs that Sluice has (applied to ConnectionQuotas).
    .dynamic("max.connections.per.ip", "max.connections.per.ip.overrides", "max.connections")
    # Kafka's DynamicConfig.Broker (ReplicationQuotaManager's rates).
    .dynamic("leader.replication.throttled.rate", "follower.replication.throttled.rate")
    # Kafka's DynamicProducerStateManagerConfig (the logs' shared ProducerStateManagerConfig).
    .dynamic("producer.id.expiration.ms")
)  # fmt: skip

#: The ``ssl.*`` keys and the inter-broker login: no field of :class:`Config`; each listener
#: reads them through :meth:`Config.listener_security_settings` (with its overrides).
TLS_KEYS = frozenset(
    key.name
    for key in BROKER_CONFIG
    if key.name.startswith("ssl.") or key.name == "sasl.jaas.config"
)

#: The declared keys, as the option table (DescribeConfigs' order).
OPTIONS: tuple[ConfigKey, ...] = tuple(BROKER_CONFIG)
OPTIONS_BY_KEY: dict[str, ConfigKey] = {o.name: o for o in OPTIONS}

#: The prefix of the environment variables that set broker keys (module docstring).
ENV_PREFIX = "SLUICE_"
#: ``SLUICE_`` variables of Sluice's other tools, not broker keys: not warned about.
NON_BROKER_ENV = frozenset(
    {"SLUICE_BOOTSTRAP_SERVER", "SLUICE_ZOOKEEPER_CLASSPATH", CRASH_ENV, CRASH_ONCE_DIR_ENV}
)
_ENV_SEPARATORS = {"_": ".", "__": "_", "___": "-"}


def env_name(key: str) -> str:
    """The environment variable that sets ``key``: ``advertised.listeners`` ->
    ``SLUICE_ADVERTISED_LISTENERS`` (``_`` in a key doubles, ``-`` triples)."""
    # Split at ``-`` first: its ``___`` must not be doubled like a key's own ``_``.
    parts = key.split("-")
    return ENV_PREFIX + "___".join(p.replace("_", "__").replace(".", "_") for p in parts).upper()


def key_from_env(name: str) -> str | None:
    """The key a ``SLUICE_`` variable names (the inverse of :func:`env_name`); None for a
    variable without the prefix or with a run of more than three ``_``."""
    if not name.startswith(ENV_PREFIX) or len(name) == len(ENV_PREFIX):
        return None
    rest = name[len(ENV_PREFIX) :]
    if "____" in rest or rest.startswith("_") or rest.endswith("_"):
        return None
    return re.sub("_{1,3}", lambda run: _ENV_SEPARATORS[run.group()], rest).lower()


def properties_from_env(environ: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """``({key: value}, ignored variable names)`` from ``SLUICE_*`` variables: the declared keys
    they name, and the variables that name none (those of :data:`NON_BROKER_ENV` left out)."""
    props: dict[str, str] = {}
    ignored: list[str] = []
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or name in NON_BROKER_ENV:
            continue
        key = key_from_env(name)
        # listener.name.<l>.<key>: a per-listener security setting (Config.listener_settings)
        if key is not None and (key in OPTIONS_BY_KEY or key.startswith("listener.name.")):
            props[key] = value
        else:
            ignored.append(name)
    return props, tuple(sorted(ignored))


_setting = BROKER_CONFIG.setting


@dataclass(frozen=True)
class Config:
    """Every broker option, typed: a field per key of :data:`BROKER_CONFIG` this room reads
    (the keys of storage and groups are read by those rooms from :attr:`properties`). Build
    with :meth:`load` (or ``Config()`` for all defaults)."""

    listeners: tuple[Listener, ...] = _setting("listeners")
    advertised_listeners: tuple[Listener, ...] | None = _setting("advertised.listeners")
    socket_request_max_bytes: int = _setting("socket.request.max.bytes")
    socket_send_buffer_bytes: int = _setting("socket.send.buffer.bytes")
    socket_receive_buffer_bytes: int = _setting("socket.receive.buffer.bytes")
    queued_max_requests: int = _setting("queued.max.requests")
    max_unsent_bytes: int = _setting("sluice.connection.max.unsent.bytes")
    connections_max_idle_ms: int = _setting("connections.max.idle.ms")
    fetch_max_bytes: int = _setting("fetch.max.bytes")
    fetch_zero_copy: bool = _setting("sluice.fetch.zero.copy")
    shutdown_timeout_ms: int = _setting("sluice.shutdown.timeout.ms")
    metrics_listener: MetricsListener | None = _setting("sluice.metrics.listener")  # noqa: RUF009
    max_connections_per_ip: int = _setting("max.connections.per.ip")
    max_connections_per_ip_overrides: tuple[tuple[str, int], ...] = _setting(
        "max.connections.per.ip.overrides"
    )
    max_connections: int = _setting("max.connections")
    quota_requests_per_second: int = _setting("sluice.quota.requests.per.second")
    quota_window_num: int = _setting("quota.window.num")
    quota_window_size_seconds: int = _setting("quota.window.size.seconds")
    max_topics: int = _setting("sluice.max.topics")
    max_partitions: int = _setting("sluice.max.partitions")
    max_partitions_per_topic: int = _setting("sluice.max.partitions.per.topic")
    authorizer_class_name: str = _setting("authorizer.class.name")
    super_users: tuple[str, ...] = _setting("super.users")
    allow_everyone_if_no_acl_found: bool = _setting("allow.everyone.if.no.acl.found")
    node_id: int = _setting("node.id")
    broker_rack: str | None = _setting("broker.rack")
    num_partitions: int = _setting("num.partitions")
    default_replication_factor: int = _setting("default.replication.factor")
    auto_create_topics_enable: bool = _setting("auto.create.topics.enable")
    delete_topic_enable: bool = _setting("delete.topic.enable")
    zookeeper_connect: str | None = _setting("zookeeper.connect")
    zookeeper_session_timeout_ms: int = _setting("zookeeper.session.timeout.ms")
    zookeeper_connection_timeout_ms: int | None = _setting("zookeeper.connection.timeout.ms")
    zookeeper_set_acl: bool = _setting("zookeeper.set.acl")
    zookeeper_ssl_client_enable: bool = _setting("zookeeper.ssl.client.enable")
    zookeeper_ssl_keystore_location: str | None = _setting("zookeeper.ssl.keystore.location")
    zookeeper_ssl_keystore_password: str | None = _setting("zookeeper.ssl.keystore.password")
    zookeeper_ssl_keystore_type: str | None = _setting("zookeeper.ssl.keystore.type")
    zookeeper_ssl_truststore_location: str | None = _setting("zookeeper.ssl.truststore.location")
    zookeeper_ssl_truststore_password: str | None = _setting("zookeeper.ssl.truststore.password")
    zookeeper_ssl_truststore_type: str | None = _setting("zookeeper.ssl.truststore.type")
    zookeeper_ssl_endpoint_identification_algorithm: str = _setting(
        "zookeeper.ssl.endpoint.identification.algorithm"
    )
    replica_lag_time_max_ms: int = _setting("replica.lag.time.max.ms")
    replica_selector_class: str | None = _setting("replica.selector.class")
    replica_fetch_wait_max_ms: int = _setting("replica.fetch.wait.max.ms")
    replica_fetch_min_bytes: int = _setting("replica.fetch.min.bytes")
    replica_fetch_max_bytes: int = _setting("replica.fetch.max.bytes")
    replica_fetch_response_max_bytes: int = _setting("replica.fetch.response.max.bytes")
    replica_fetch_backoff_ms: int = _setting("replica.fetch.backoff.ms")
    replica_socket_timeout_ms: int = _setting("replica.socket.timeout.ms")
    #: (the dynamic broker configs override these: ``Server._apply_replication_throttles``)
    leader_replication_throttled_rate: int = _setting("leader.replication.throttled.rate")
    follower_replication_throttled_rate: int = _setting("follower.replication.throttled.rate")
    replication_quota_window_num: int = _setting("replication.quota.window.num")
    replication_quota_window_size_seconds: int = _setting("replication.quota.window.size.seconds")
    auto_leader_rebalance_enable: bool = _setting("auto.leader.rebalance.enable")
    leader_imbalance_check_interval_seconds: int = _setting(
        "leader.imbalance.check.interval.seconds"
    )
    leader_imbalance_per_broker_percentage: int = _setting("leader.imbalance.per.broker.percentage")
    controlled_shutdown_enable: bool = _setting("controlled.shutdown.enable")
    controlled_shutdown_max_retries: int = _setting("controlled.shutdown.max.retries")
    controlled_shutdown_retry_backoff_ms: int = _setting("controlled.shutdown.retry.backoff.ms")
    #: ``log.dirs``; unset, ``log.dir`` (whose default this is)
    log_dirs: str = dataclasses.field(
        default=BROKER_CONFIG.default("log.dir"), metadata={"config": "log.dirs", "scale": 1}
    )
    log_retention_check_interval_ms: int = _setting("log.retention.check.interval.ms")
    log_flush_scheduler_interval_ms: int = _setting("log.flush.scheduler.interval.ms")
    log_checkpoint_interval_ms: int = _setting("log.flush.offset.checkpoint.interval.ms")
    log_open_files_max: int | None = _setting("sluice.log.open.files.max")
    producer_id_expiration_check_interval_ms: int = _setting(
        "producer.id.expiration.check.interval.ms"
    )
    listener_security_protocol_map: tuple[tuple[str, str], ...] = _setting(
        "listener.security.protocol.map"
    )
    inter_broker_listener_name: str | None = _setting("inter.broker.listener.name")
    security_inter_broker_protocol: str = _setting("security.inter.broker.protocol")
    sasl_enabled_mechanisms: tuple[str, ...] = _setting("sasl.enabled.mechanisms")
    sasl_mechanism_inter_broker_protocol: str = _setting("sasl.mechanism.inter.broker.protocol")
    sasl_server_max_receive_size: int = _setting("sasl.server.max.receive.size")
    connections_max_reauth_ms: int = _setting("connections.max.reauth.ms")
    connection_failed_authentication_delay_ms: int = _setting(
        "connection.failed.authentication.delay.ms"
    )
    credentials_file: str | None = _setting("sluice.security.credentials.file")
    #: every key explicitly given (file + overrides), as text; log.* keys are read from here.
    #: Not in the repr: it may hold passwords (``ssl.key.password``, ``sasl.jaas.config``).
    properties: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: keys given that Sluice does not know or does not use (the entrypoint warns about them).
    ignored_keys: tuple[str, ...] = ()
    #: ``SLUICE_`` environment variables that name no broker key (the entrypoint warns).
    ignored_environment: tuple[str, ...] = ()
    #: the keys set from the environment (logged by the entrypoint, without their values).
    environment_keys: tuple[str, ...] = ()

    @property
    def listener(self) -> Listener:
        return self.listeners[0]

    @property
    def advertised_listener(self) -> Listener:
        """What Metadata advertises on the first listener (:meth:`advertised_endpoints`)."""
        return self.advertised_endpoints()[0]

    def advertised_endpoints(self) -> tuple[Listener, ...]:
        """Each listener as Metadata advertises it, in ``listeners`` order: its
        ``advertised.listeners`` entry, else itself (0.0.0.0 / :: / empty -> 127.0.0.1)."""
        given = {lst.name: lst for lst in self.advertised_listeners or ()}
        out = []
        for lst in self.listeners:
            advertised = given.get(lst.name)
            if advertised is None:
                host = lst.host if lst.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
                advertised = Listener(lst.name, host, lst.port)
            out.append(advertised)
        return tuple(out)

    def security_protocol(self, listener_name: str) -> SecurityProtocol:
        """The security protocol of a listener (``listener.security.protocol.map``)."""
        return SecurityProtocol(dict(self.listener_security_protocol_map)[listener_name])

    @property
    def inter_broker_listener(self) -> str:
        """The listener brokers reach each other on: ``inter.broker.listener.name``, else the
        one named ``security.inter.broker.protocol`` (Kafka's rule)."""
        return self.inter_broker_listener_name or self.security_inter_broker_protocol

    def listener_security_settings(self, listener_name: str) -> dict[str, str]:
        """The ``ssl.*`` / ``sasl.*`` settings of one listener, as text: the declared defaults,
        the keys given, then ``listener.name.<listener>.`` overrides (Kafka's
        ``valuesWithPrefixOverride``)."""
        merged = {
            key.name: key.default
            for key in BROKER_CONFIG
            if key.group == "security" and key.default is not None
        }
        merged.update(self.properties)
        return listener_settings(merged, listener_name)

    def sasl_mechanisms(self, listener_name: str) -> tuple[str, ...]:
        """``sasl.enabled.mechanisms`` of a listener (its override, else the broker's)."""
        return _mechanisms(
            self.listener_security_settings(listener_name)["sasl.enabled.mechanisms"]
        )

    @property
    def cluster_mode(self) -> bool:
        """True with ``zookeeper.connect``: brokers coordinate through ZooKeeper."""
        return self.zookeeper_connect is not None

    @property
    def data_dir(self) -> Path:
        return Path(self.log_dirs)

    def log_properties(self) -> dict[str, str]:
        """Broker-level storage keys given explicitly (defaults are LogConfig's, the same)."""
        return {k: v for k, v in self.properties.items() if k in SERVER_LOG_CONFIG}

    def log_config(self) -> LogConfig:
        """The default topic config, built by the storage layer from the ``log.*`` keys."""
        from sluice.server.storage.log_config import LogConfig

        return LogConfig.from_broker_properties(self.log_properties())

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> Config:
        """Typed config from text properties (no file). Raises :class:`ConfigError`."""
        parsed = BROKER_CONFIG.parse(props)  # ConfigError naming key and value
        # listener.name.<l>.<key>: a per-listener security setting (read by listener_settings)
        ignored = [
            key
            for key in props
            if key not in BROKER_CONFIG and not key.startswith("listener.name.")
        ]
        values = typed_values(cls, parsed)
        if "log_dirs" not in values and "log.dir" in parsed:
            values["log_dirs"] = parsed["log.dir"]
        broker_id = parsed.get("broker.id")
        if "node_id" not in values and broker_id is not None and broker_id >= 0:
            values["node_id"] = broker_id
        config = cls(**values, properties=dict(props), ignored_keys=tuple(sorted(ignored)))
        config._check_log_config()
        config._check_listeners()
        if config.replica_socket_timeout_ms < config.replica_fetch_wait_max_ms:
            raise ConfigError(  # Kafka's own check: a waiting fetch would always time out
                f"replica.socket.timeout.ms ({config.replica_socket_timeout_ms}) must be at "
                f"least replica.fetch.wait.max.ms ({config.replica_fetch_wait_max_ms})"
            )
        if config.max_connections_per_ip == 0 and not config.max_connections_per_ip_overrides:
            raise ConfigError(  # Kafka's check: else no client could ever connect
                "max.connections.per.ip can be set to zero only if "
                "max.connections.per.ip.overrides is set"
            )
        if not config.cluster_mode and config.default_replication_factor != 1:
            raise ConfigError(
                f"invalid value {config.default_replication_factor} for "
                "default.replication.factor: a standalone broker (no zookeeper.connect) "
                "supports only 1"
            )
        config._check_zookeeper_identity()
        return config

    def _check_zookeeper_identity(self) -> None:
        """The ZooKeeper link's SASL login (``KAFKA_OPTS``' JAAS file, :mod:`sluice.server.zk.
        sasl`) must load in cluster mode; and ``zookeeper.set.acl`` needs an identity, SASL or a
        TLS client certificate (Kafka's check in ``KafkaServer.initZkClient``)."""
        if not self.cluster_mode and not self.zookeeper_set_acl:
            return
        from sluice.server.zk.sasl import jvm_system_properties, system_config, zookeeper_sasl

        try:
            sasl = zookeeper_sasl(os.environ)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        tls = self.zookeeper_ssl_client_enable and self.zookeeper_ssl_keystore_location
        if self.zookeeper_set_acl and sasl is None and not tls:
            props = jvm_system_properties(os.environ.get("KAFKA_OPTS", ""))
            raise ConfigError(
                "zookeeper.set.acl is true, but ZooKeeper client TLS configuration identifying "
                "at least zookeeper.ssl.client.enable and zookeeper.ssl.keystore.location was "
                "not present and the verification of the JAAS login file failed "
                f"{system_config(props)} (a Client section, named in KAFKA_OPTS)"
            )

    def _check_listeners(self) -> None:
        """Kafka's checks of the listener keys (``KafkaConfig.validateValues``), and Sluice's:
        every SASL listener offers only mechanisms Sluice has (Kafka's default GSSAPI is not)."""
        protocols = dict(self.listener_security_protocol_map)
        for lst in self.listeners:
            if lst.name not in protocols:
                raise ConfigError(
                    f"No security protocol defined for listener {lst.name} "
                    "(listener.security.protocol.map)"
                )
        ports = [lst.port for lst in self.listeners if lst.port != 0]
        if len(set(ports)) != len(ports):
            raise ConfigError(
                "each listener must have a different port, listeners: "
                + ",".join(map(str, self.listeners))
            )
        names = {lst.name for lst in self.listeners}
        for lst in self.advertised_listeners or ():
            if lst.name not in names:
                raise ConfigError(
                    f"advertised.listeners listener names must be equal to or a subset of the "
                    f"ones defined in listeners: {lst.name} is not"
                )
        given = self.properties
        if "inter.broker.listener.name" in given and "security.inter.broker.protocol" in given:
            raise ConfigError(
                "Only one of inter.broker.listener.name and security.inter.broker.protocol "
                "should be set."
            )
        if self.cluster_mode and self.inter_broker_listener not in names:
            raise ConfigError(
                f"inter.broker.listener.name must be a listener name defined in "
                f"advertised.listeners (or listeners); {self.inter_broker_listener} is not "
                f"among {sorted(names)}"
            )
        for lst in self.listeners:  # listener.name.<l>.<key> overrides: the key's own check
            prefix = f"listener.name.{lst.name.lower()}."
            for name, text in given.items():
                key = OPTIONS_BY_KEY.get(name[len(prefix) :]) if name.startswith(prefix) else None
                if key is not None:
                    try:
                        key.parse(text)
                    except ValueError as exc:
                        raise ConfigError(f"invalid value {text!r} for {name}: {exc}") from exc
        supported = ", ".join(SUPPORTED_SASL_MECHANISMS)
        for lst in self.listeners:
            if not self.security_protocol(lst.name).uses_sasl:
                continue
            mechanisms = self.sasl_mechanisms(lst.name)
            unknown = [name for name in mechanisms if name not in SUPPORTED_SASL_MECHANISMS]
            if unknown or not mechanisms:
                raise ConfigError(
                    f"listener {lst.name} is {self.security_protocol(lst.name).value}, but "
                    f"sasl.enabled.mechanisms={','.join(mechanisms)} names mechanisms Sluice "
                    f"does not have ({', '.join(unknown) or 'none given'}): set "
                    f"sasl.enabled.mechanisms to some of {supported}"
                )
        if self.cluster_mode and self.security_protocol(self.inter_broker_listener).uses_sasl:
            mechanism = self.sasl_mechanism_inter_broker_protocol
            if mechanism not in self.sasl_mechanisms(self.inter_broker_listener):
                raise ConfigError(
                    f"sasl.mechanism.inter.broker.protocol={mechanism} must be one of the "
                    f"inter-broker listener's sasl.enabled.mechanisms ({supported} are "
                    "supported)"
                )

    def _check_log_config(self) -> None:
        """Fail at load, not at startup, when the storage layer rejects a ``log.*`` value."""
        from sluice.protocol.errors import InvalidConfig

        try:
            self.log_config()
        except InvalidConfig as exc:
            raise ConfigError(str(exc.args[0]) if exc.args else str(exc)) from exc

    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        overrides: Iterable[str] = (),
        environ: Mapping[str, str] | None = None,
    ) -> Config:
        """Defaults, then the properties file at ``path`` (if any), then the ``SLUICE_*``
        variables of ``environ`` (if given), then ``key=value`` overrides."""
        props: dict[str, str] = {}
        if path is not None:
            try:
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read config file {path}: {exc}") from exc
            try:
                props.update(load_properties(text))
            except ValueError as exc:
                raise ConfigError(f"config file {path}: {exc}") from exc
        from_env, ignored_env = properties_from_env(environ or {})
        props.update(from_env)
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"override {item!r} is not key=value")
            props[key.strip()] = value
        config = cls.from_properties(props)
        return config.replace(
            ignored_environment=ignored_env, environment_keys=tuple(sorted(from_env))
        )

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)


#: Keys the example file sets (uncommented), at their defaults: what a first start needs.
_EXAMPLE_SET = ("listeners", "node.id", "num.partitions", "log.dir")

_EXAMPLE_HEADER = """\
# Sluice broker configuration. Key names and defaults are Apache Kafka's (server.properties);
# keys prefixed sluice. are Sluice's own. Every option is listed with its default: uncomment to
# change it. Unknown keys are ignored with a warning; invalid values stop the broker at startup.
#
#   sluice-server config/server.properties [--override key=value ...]
#   python -m sluice.server config/server.properties --override log.dirs=/var/lib/sluice
#
# Every key can also be set from the environment (after this file, before --override):
# SLUICE_ + the key in upper case with '.' written '_' (a '_' of the key '__', a '-' '___'),
# e.g. SLUICE_ADVERTISED_LISTENERS=PLAINTEXT://broker.example:9092 sets advertised.listeners.
#
# Topic-level settings (segment.bytes, retention.ms, ...) default to the log.* keys below and can
# be overridden per topic with CreateTopics configs.
#
# Generated from the declarations (sluice.server.config.BROKER_CONFIG):
#   python -m sluice.server.config > config/server.properties
"""


def example_properties() -> str:
    """The example ``config/server.properties``: every declared key with its doc and default,
    by section (a test keeps the file equal to this)."""
    import textwrap

    out = [_EXAMPLE_HEADER]
    section = None
    for key in BROKER_CONFIG:
        if key.group != section:
            section = key.group
            out.append(f"\n# --- {section} ---\n")
        doc = textwrap.wrap(key.doc, width=98, break_on_hyphens=False)
        comment = "" if key.name in _EXAMPLE_SET else "#"
        out.append("\n" + "".join(f"# {line}\n" for line in doc))
        out.append(f"{comment}{key.name}={key.default or ''}\n")
    return "".join(out)


def _check_defaults() -> None:
    """Every declared default passes its validator and is the default of its ``Config`` field
    (run by the tests)."""
    default = Config()
    for key in BROKER_CONFIG:
        if key.default is not None:
            assert key.parse(key.default) == key.value, key.name
    for f in dataclasses.fields(Config):
        name = f.metadata.get("config")
        if name is not None and name != "log.dirs":
            assert getattr(default, f.name) == BROKER_CONFIG.default(name), name


if __name__ == "__main__":
    print(example_properties(), end="")
