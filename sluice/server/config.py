"""Broker configuration: every option, its Kafka name, its default, loaded once by the entrypoint.

Sources, later wins (like ``kafka-server-start.sh server.properties --override k=v``):

1. the defaults in :data:`OPTIONS` (Kafka's, except ``listeners`` and ``log.dirs`` which default
   to a local, unprivileged setup). Each key is declared once, by the room that reads it: the
   network and broker keys here, the ``log.*`` keys by the storage layer
   (:data:`sluice.server.storage.log_config.BROKER_OPTIONS`), the ``group.*`` / ``offsets.*``
   keys by the group coordinator (:data:`sluice.server.group.coordinator.GROUP_OPTIONS`);
   :data:`OPTIONS` collects them all;
2. a Java ``.properties`` file (parsed by the ``javaproperties`` package: comments, ``key=value``,
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
:class:`ConfigError` naming the key and the value. The ``log.*`` storage defaults are validated
and converted by :meth:`sluice.server.storage.log_config.LogConfig.from_broker_properties` (owned
by the storage layer); :meth:`Config.log_config` hands it the merged properties.

A ``Config`` is immutable; ``Server`` and the handlers read it, nobody writes it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import javaproperties

from sluice.protocol.config_def import NO_BOUND, ConfigKey, boolean, int_in, parse_ip_overrides
from sluice.server.group.coordinator import GROUP_OPTIONS
from sluice.server.storage.log_config import BROKER_OPTIONS

if TYPE_CHECKING:
    from sluice.server.storage.log_config import LogConfig


class ConfigError(ValueError):
    """A configuration key has a value Sluice cannot use (message names key and value)."""


@dataclass(frozen=True)
class Listener:
    """One ``PLAINTEXT://host:port`` listener. ``port`` 0 = any free port (tests)."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_listeners(text: str) -> tuple[Listener, ...]:
    """``PLAINTEXT://host:port[,...]``; only PLAINTEXT is supported (no TLS/SASL in Sluice)."""
    listeners = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, rest = item.partition("://")
        if not sep:
            raise ValueError(f"{item!r} is not NAME://host:port")
        if name.upper() != "PLAINTEXT":
            raise ValueError(f"listener {name!r}: only PLAINTEXT is supported")
        host, colon, port_text = rest.rpartition(":")
        if not colon:
            raise ValueError(f"{item!r} has no port")
        host = host.strip("[]")  # IPv6 literal
        port = int(port_text)
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} out of range")
        listeners.append(Listener(name.upper(), host, port))
    if not listeners:
        raise ValueError("no listener given")
    if len(listeners) > 1:
        raise ValueError("Sluice serves exactly one listener")
    return tuple(listeners)


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


@dataclass(frozen=True)
class Option:
    """One broker option: Kafka key, ``Config`` attribute, parser, default and a one-line doc."""

    key: str
    attr: str | None  # None: read by another room (storage, group) or an alias (log.dir)
    parse: Callable[[str], Any]
    default: str | None  # as text, like in server.properties; None = unset (Kafka's "null")
    doc: str

    @classmethod
    def declared(cls, key: ConfigKey) -> Option:
        """An option declared by another room (storage, group): read from :attr:`Config.properties`
        by that room, so no ``Config`` attribute."""
        return cls(key.key, None, key.parse, key.default, key.doc)


_LONG_MAX = 9223372036854775807

OPTIONS: tuple[Option, ...] = (
    # --- network -------------------------------------------------------------------------------
    Option(
        "listeners",
        "listeners",
        parse_listeners,
        "PLAINTEXT://127.0.0.1:9092",
        "where the broker listens (port 0 = any free port)",
    ),
    Option(
        "advertised.listeners",
        "advertised_listeners",
        parse_listeners,
        None,
        "what Metadata tells clients to connect to; defaults to listeners",
    ),
    Option(
        "socket.request.max.bytes",
        "socket_request_max_bytes",
        int_in(1),
        "104857600",
        "largest request frame; a bigger one closes the connection before its body is read",
    ),
    Option(
        "socket.send.buffer.bytes",
        "socket_send_buffer_bytes",
        int_in(-1),
        "-1",  # Kafka: 102400; the kernel's autotuning fetches ~2x faster on loopback
        "SO_SNDBUF of client connections (-1: the OS default, with autotuning)",
    ),
    Option(
        "socket.receive.buffer.bytes",
        "socket_receive_buffer_bytes",
        int_in(-1),
        "-1",  # Kafka: 102400; the kernel's autotuning fetches ~2x faster on loopback
        "SO_RCVBUF of client connections (-1: the OS default, with autotuning)",
    ),
    Option(
        "queued.max.requests",
        "queued_max_requests",
        int_in(1),
        "500",
        "per connection: unanswered requests before the broker stops reading from it",
    ),
    Option(
        "sluice.connection.max.unsent.bytes",
        "max_unsent_bytes",
        int_in(1),
        "4194304",
        "per connection: bytes buffered for a slow reader; above it sending and reading wait",
    ),
    Option(
        "fetch.max.bytes",
        "fetch_max_bytes",
        int_in(1024),
        "57671680",
        "largest Fetch response; a request asking more gets this (its first batch may exceed it)",
    ),
    Option(
        "sluice.fetch.zero.copy",
        "fetch_zero_copy",
        boolean,
        "true",
        "send Fetch record bytes with os.sendfile (true) or copy them through Python (false)",
    ),
    Option(
        "sluice.shutdown.timeout.ms",
        "shutdown_timeout_ms",
        int_in(0),
        "10000",
        "graceful shutdown: how long in-flight requests may take before connections close",
    ),
    Option(
        "sluice.metrics.listener",
        "metrics_listener",
        parse_metrics_listener,
        None,
        "Prometheus endpoint, http://host:port (path /metrics); unset or empty: none",
    ),
    # --- limits a client can exhaust (sluice.server.network.quotas; 2147483647: no bound) --------
    Option(
        "max.connections.per.ip",
        "max_connections_per_ip",
        int_in(0),
        str(NO_BOUND),
        "open connections from one address; more are closed when accepted",
    ),
    Option(
        "max.connections.per.ip.overrides",
        "max_connections_per_ip_overrides",
        parse_ip_overrides,
        "",
        "host:count,... : max.connections.per.ip for the addresses (or host names) named",
    ),
    Option(
        "max.connections",
        "max_connections",
        int_in(0),
        str(NO_BOUND),
        "open connections in all; more are closed when accepted",
    ),
    Option(
        "sluice.quota.requests.per.second",
        "quota_requests_per_second",
        int_in(1),
        str(NO_BOUND),
        "requests per second per client id; above it responses carry throttle_time_ms and the "
        "connection waits that long",
    ),
    Option(
        "quota.window.num",
        "quota_window_num",
        int_in(2),
        "11",
        "samples the request rate is measured over",
    ),
    Option(
        "quota.window.size.seconds",
        "quota_window_size_seconds",
        int_in(1),
        "1",
        "length of one request-rate sample (also the longest throttle)",
    ),
    Option(
        "sluice.max.topics",
        "max_topics",
        int_in(1),
        str(NO_BOUND),
        "topics in all (internal ones included); creating more is POLICY_VIOLATION",
    ),
    Option(
        "sluice.max.partitions",
        "max_partitions",
        int_in(1),
        str(NO_BOUND),
        "partitions of all topics (internal ones included); more is POLICY_VIOLATION",
    ),
    Option(
        "sluice.max.partitions.per.topic",
        "max_partitions_per_topic",
        int_in(1),
        "10000",
        "partitions of one topic; more is INVALID_PARTITIONS",
    ),
    # --- broker identity and topics ------------------------------------------------------------
    Option("node.id", "node_id", int_in(0), "0", "this broker's id (in Metadata)"),
    Option("broker.id", None, int_in(-1), None, "Kafka's old name for node.id; node.id wins"),
    Option(
        "num.partitions",
        "num_partitions",
        int_in(1),
        "1",
        "partitions of an auto-created topic or CreateTopics with num_partitions -1",
    ),
    Option(
        "default.replication.factor",
        "default_replication_factor",
        int_in(1),
        "1",
        "replicas of an auto-created topic or CreateTopics with replication_factor -1 "
        "(standalone: only 1)",
    ),
    Option(
        "auto.create.topics.enable",
        "auto_create_topics_enable",
        boolean,
        "true",
        "create a topic on Metadata/Produce for an unknown name",
    ),
    Option("delete.topic.enable", "delete_topic_enable", boolean, "true", "allow DeleteTopics"),
    # --- cluster: ZooKeeper mode (no zookeeper.connect = a standalone broker) ------------------
    Option(
        "zookeeper.connect",
        "zookeeper_connect",
        _zookeeper_connect,
        None,
        "host:port[,host:port...][/chroot] of the ZooKeeper ensemble; unset: standalone broker",
    ),
    Option(
        "zookeeper.session.timeout.ms",
        "zookeeper_session_timeout_ms",
        int_in(1),
        "18000",
        "ZooKeeper session timeout: how long a dead broker keeps its registration",
    ),
    Option(
        "zookeeper.connection.timeout.ms",
        "zookeeper_connection_timeout_ms",
        int_in(1),
        None,
        "how long to wait for a ZooKeeper connection (unset: the session timeout)",
    ),
    Option(
        "replica.lag.time.max.ms",
        "replica_lag_time_max_ms",
        int_in(1),
        "30000",
        "a follower not caught up for this long leaves the ISR",
    ),
    Option(
        "replica.fetch.wait.max.ms",
        "replica_fetch_wait_max_ms",
        int_in(0),
        "500",
        "how long a follower's fetch waits at the leader for new data",
    ),
    Option(
        "replica.fetch.min.bytes",
        "replica_fetch_min_bytes",
        int_in(1),
        "1",
        "bytes a follower's fetch waits for",
    ),
    Option(
        "replica.fetch.max.bytes",
        "replica_fetch_max_bytes",
        int_in(0),
        "1048576",
        "bytes per partition a follower fetches at once (at least one batch)",
    ),
    Option(
        "replica.fetch.response.max.bytes",
        "replica_fetch_response_max_bytes",
        int_in(0),
        "10485760",
        "bytes per follower fetch response (at least one batch)",
    ),
    Option(
        "replica.fetch.backoff.ms",
        "replica_fetch_backoff_ms",
        int_in(0),
        "1000",
        "pause before a follower retries after a fetch error",
    ),
    Option(
        "replica.socket.timeout.ms",
        "replica_socket_timeout_ms",
        int_in(1),
        "30000",
        "how long a follower waits for a fetch answer before reconnecting",
    ),
    Option(
        "auto.leader.rebalance.enable",
        "auto_leader_rebalance_enable",
        boolean,
        "true",
        "the controller moves leadership back to preferred replicas",
    ),
    Option(
        "leader.imbalance.check.interval.seconds",
        "leader_imbalance_check_interval_seconds",
        int_in(1),
        "300",
        "how often the controller checks for non-preferred leaders",
    ),
    Option(
        "leader.imbalance.per.broker.percentage",
        "leader_imbalance_per_broker_percentage",
        int_in(0, 100),
        "10",
        "rebalance a broker's partitions when more than this % of those it should lead it does not",
    ),
    Option(
        "controlled.shutdown.enable",
        "controlled_shutdown_enable",
        boolean,
        "true",
        "on SIGTERM, move leadership away before stopping",
    ),
    Option(
        "controlled.shutdown.max.retries",
        "controlled_shutdown_max_retries",
        int_in(0),
        "3",
        "controlled shutdown attempts before stopping anyway",
    ),
    Option(
        "controlled.shutdown.retry.backoff.ms",
        "controlled_shutdown_retry_backoff_ms",
        int_in(0),
        "5000",
        "pause between controlled shutdown attempts",
    ),
    # --- storage (log.dirs is ours; the other log.* keys go to LogConfig) ----------------------
    Option("log.dirs", "log_dirs", _log_dirs, None, "the data directory (exactly one)"),
    Option("log.dir", None, _log_dirs, "./data", "used when log.dirs is not set"),
    Option(
        "log.retention.check.interval.ms",
        "log_retention_check_interval_ms",
        int_in(1),
        "300000",
        "how often retention runs",
    ),
    Option(
        "log.flush.scheduler.interval.ms",
        "log_flush_scheduler_interval_ms",
        int_in(0),
        str(_LONG_MAX),
        "how often the flush check runs (unset: every second, which also flushes rolled segments)",
    ),
    Option(
        "sluice.log.open.files.max",
        "log_open_files_max",
        int_in(1),
        None,
        "segment files kept open at once; the least recently read old segments are closed "
        "beyond it (unset: the open-file limit less a quarter of it, or 64 if more)",
    ),
    Option(
        "log.flush.offset.checkpoint.interval.ms",
        "log_checkpoint_interval_ms",
        int_in(0),
        "60000",
        "how often recovery points are checkpointed",
    ),
    # --- storage: the topic-level defaults, declared by the storage layer --------------------
    *(Option.declared(k) for k in BROKER_OPTIONS),
    # --- consumer groups: declared by the group coordinator --------------------------------------
    *(Option.declared(k) for k in GROUP_OPTIONS),
)

#: The keys handed to LogConfig.from_broker_properties.
_LOG_KEYS = frozenset(k.key for k in BROKER_OPTIONS)

OPTIONS_BY_KEY: dict[str, Option] = {o.key: o for o in OPTIONS}

#: The prefix of the environment variables that set broker keys (module docstring).
ENV_PREFIX = "SLUICE_"
#: ``SLUICE_`` variables of Sluice's other tools, not broker keys: not warned about.
NON_BROKER_ENV = frozenset({"SLUICE_BOOTSTRAP_SERVER", "SLUICE_ZOOKEEPER_CLASSPATH"})
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
        if key is not None and key in OPTIONS_BY_KEY:
            props[key] = value
        else:
            ignored.append(name)
    return props, tuple(sorted(ignored))


@dataclass(frozen=True)
class Config:
    """Every broker option, typed. Build with :meth:`load` (or ``Config()`` for all defaults)."""

    listeners: tuple[Listener, ...] = (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    advertised_listeners: tuple[Listener, ...] | None = None
    socket_request_max_bytes: int = 104857600
    socket_send_buffer_bytes: int = -1
    socket_receive_buffer_bytes: int = -1
    queued_max_requests: int = 500
    max_unsent_bytes: int = 4194304
    fetch_max_bytes: int = 57671680
    fetch_zero_copy: bool = True
    shutdown_timeout_ms: int = 10000
    metrics_listener: MetricsListener | None = None
    max_connections_per_ip: int = NO_BOUND
    max_connections_per_ip_overrides: tuple[tuple[str, int], ...] = ()
    max_connections: int = NO_BOUND
    quota_requests_per_second: int = NO_BOUND
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    max_topics: int = NO_BOUND
    max_partitions: int = NO_BOUND
    max_partitions_per_topic: int = 10000
    node_id: int = 0
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    delete_topic_enable: bool = True
    zookeeper_connect: str | None = None
    zookeeper_session_timeout_ms: int = 18000
    zookeeper_connection_timeout_ms: int | None = None
    replica_lag_time_max_ms: int = 30000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_max_bytes: int = 1048576
    replica_fetch_response_max_bytes: int = 10485760
    replica_fetch_backoff_ms: int = 1000
    replica_socket_timeout_ms: int = 30_000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    controlled_shutdown_enable: bool = True
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5000
    log_dirs: str = "./data"
    log_retention_check_interval_ms: int = 300000
    log_flush_scheduler_interval_ms: int = _LONG_MAX
    log_checkpoint_interval_ms: int = 60000
    log_open_files_max: int | None = None
    #: every key explicitly given (file + overrides), as text; log.* keys are read from here.
    properties: Mapping[str, str] = field(default_factory=dict)
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
        """What Metadata advertises: advertised.listeners, else listeners (0.0.0.0 -> 127.0.0.1)."""
        if self.advertised_listeners:
            return self.advertised_listeners[0]
        lst = self.listener
        host = lst.host if lst.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        return Listener(lst.name, host, lst.port)

    @property
    def cluster_mode(self) -> bool:
        """True with ``zookeeper.connect``: brokers coordinate through ZooKeeper."""
        return self.zookeeper_connect is not None

    @property
    def data_dir(self) -> Path:
        return Path(self.log_dirs)

    def log_properties(self) -> dict[str, str]:
        """Broker-level storage keys given explicitly (defaults are LogConfig's, the same)."""
        return {k: v for k, v in self.properties.items() if k in _LOG_KEYS}

    def log_config(self) -> LogConfig:
        """The default topic config, built by the storage layer from the ``log.*`` keys."""
        from sluice.server.storage.log_config import LogConfig

        return LogConfig.from_broker_properties(self.log_properties())

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> Config:
        """Typed config from text properties (no file). Raises :class:`ConfigError`."""
        values: dict[str, Any] = {}
        ignored: list[str] = []
        for key, text in props.items():
            option = OPTIONS_BY_KEY.get(key)
            if option is None:
                ignored.append(key)
                continue
            try:
                value = option.parse(text)
            except ValueError as exc:
                raise ConfigError(f"invalid value {text!r} for {key}: {exc}") from exc
            if option.attr is not None:
                values[option.attr] = value
        if "log_dirs" not in values and "log.dir" in props:
            values["log_dirs"] = _log_dirs(props["log.dir"])
        if "node_id" not in values and "broker.id" in props and int(props["broker.id"]) >= 0:
            values["node_id"] = int(props["broker.id"])
        config = cls(**values, properties=dict(props), ignored_keys=tuple(sorted(ignored)))
        config._check_log_config()
        config._check_group_config()
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
        return config

    def _check_group_config(self) -> None:
        """Fail at load when the group coordinator rejects a ``group.*`` / ``offsets.*`` value."""
        from sluice.server.group.coordinator import GroupConfig

        try:
            GroupConfig.from_properties(self.properties)
        except ValueError as exc:
            raise ConfigError(f"invalid group configuration: {exc}") from exc

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
                    props.update(javaproperties.load(fh))
            except OSError as exc:
                raise ConfigError(f"cannot read config file {path}: {exc}") from exc
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


def _check_defaults() -> None:
    """The table's defaults and the dataclass defaults must agree (run by the tests)."""
    default = Config()
    for option in OPTIONS:
        if option.attr is None or option.default is None:
            continue
        assert getattr(default, option.attr) == option.parse(option.default), option.key
