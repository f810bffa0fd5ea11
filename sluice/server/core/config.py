"""Broker configuration: every option, its Kafka name, its default, loaded once by the entrypoint.

Sources, later wins (like ``kafka-server-start.sh server.properties --override k=v``):

1. the defaults in :data:`OPTIONS` (Kafka's, except ``listeners`` and ``log.dirs`` which default
   to a local, unprivileged setup);
2. a Java ``.properties`` file (parsed by the ``javaproperties`` package: comments, ``key=value``,
   ``key: value``, ``key value``, continuation lines and ``\\uXXXX`` escapes behave exactly as in
   Java's ``Properties.load``);
3. ``--override key=value`` arguments.

Unknown keys (including Kafka keys Sluice does not use, such as ``zookeeper.connect``) are kept
in :attr:`Config.ignored_keys` so the entrypoint can warn once; invalid values raise
:class:`ConfigError` naming the key and the value. The ``log.*`` storage defaults are validated
and converted by :meth:`sluice.server.storage.log_config.LogConfig.from_broker_properties` (owned
by the storage
layer); :meth:`Config.log_config` hands it the merged properties.

A ``Config`` is immutable; ``Server`` and the handlers read it, nobody writes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import javaproperties

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


# --- value parsers: str -> typed value, raising ValueError with a short reason -------------------


def _int(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text.strip())
        if lo is not None and value < lo:
            raise ValueError(f"must be >= {lo}")
        if hi is not None and value > hi:
            raise ValueError(f"must be <= {hi}")
        return value

    return parse


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("must be true or false")
    return lowered == "true"


def _str(text: str) -> str:
    return text.strip()


def _one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip()
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return value

    return parse


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


def _log_dirs(text: str) -> str:
    dirs = [d.strip() for d in text.split(",") if d.strip()]
    if len(dirs) != 1:
        raise ValueError("Sluice uses exactly one data directory")
    return dirs[0]


@dataclass(frozen=True)
class Option:
    """One broker option: Kafka key, ``Config`` attribute, parser, default and a one-line doc."""

    key: str
    attr: str | None  # None: a log.* key, handed to LogConfig.from_broker_properties
    parse: Callable[[str], Any]
    default: str | None  # as text, like in server.properties; None = unset (Kafka's "null")
    doc: str


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
        _int(1),
        "104857600",
        "largest request frame; a bigger one closes the connection before its body is read",
    ),
    Option(
        "socket.send.buffer.bytes",
        "socket_send_buffer_bytes",
        _int(-1),
        "-1",  # Kafka: 102400; the kernel's autotuning fetches ~2x faster on loopback
        "SO_SNDBUF of client connections (-1: the OS default, with autotuning)",
    ),
    Option(
        "socket.receive.buffer.bytes",
        "socket_receive_buffer_bytes",
        _int(-1),
        "-1",  # Kafka: 102400; the kernel's autotuning fetches ~2x faster on loopback
        "SO_RCVBUF of client connections (-1: the OS default, with autotuning)",
    ),
    Option(
        "queued.max.requests",
        "queued_max_requests",
        _int(1),
        "500",
        "per connection: unanswered requests before the broker stops reading from it",
    ),
    Option(
        "sluice.connection.max.unsent.bytes",
        "max_unsent_bytes",
        _int(1),
        "4194304",
        "per connection: write-buffer high watermark; above it reading pauses",
    ),
    Option(
        "sluice.fetch.zero.copy",
        "fetch_zero_copy",
        _bool,
        "true",
        "send Fetch record bytes with os.sendfile (true) or copy them through Python (false)",
    ),
    Option(
        "sluice.shutdown.timeout.ms",
        "shutdown_timeout_ms",
        _int(0),
        "10000",
        "graceful shutdown: how long in-flight requests may take before connections close",
    ),
    # --- broker identity and topics ------------------------------------------------------------
    Option("node.id", "node_id", _int(0), "0", "this broker's id (in Metadata)"),
    Option("broker.id", None, _int(-1), None, "Kafka's old name for node.id; node.id wins"),
    Option(
        "num.partitions",
        "num_partitions",
        _int(1),
        "1",
        "partitions of an auto-created topic or CreateTopics with num_partitions -1",
    ),
    Option(
        "default.replication.factor",
        "default_replication_factor",
        _int(1, 1),
        "1",
        "single broker: only 1 is valid",
    ),
    Option(
        "auto.create.topics.enable",
        "auto_create_topics_enable",
        _bool,
        "true",
        "create a topic on Metadata/Produce for an unknown name",
    ),
    Option("delete.topic.enable", "delete_topic_enable", _bool, "true", "allow DeleteTopics"),
    # --- storage (log.dirs is ours; the other log.* keys go to LogConfig) ----------------------
    Option("log.dirs", "log_dirs", _log_dirs, None, "the data directory (exactly one)"),
    Option("log.dir", None, _log_dirs, "./data", "used when log.dirs is not set"),
    Option("log.segment.bytes", None, _int(14), "1073741824", "segment size before rolling"),
    Option("log.roll.ms", None, _int(1), None, "segment age before rolling; overrides hours"),
    Option("log.roll.hours", None, _int(1), "168", "segment age before rolling"),
    Option("log.roll.jitter.ms", None, _int(0), None, "max random jitter subtracted from roll"),
    Option("log.roll.jitter.hours", None, _int(0), "0", "max random jitter subtracted from roll"),
    Option("log.index.size.max.bytes", None, _int(4), "10485760", "max size of an index file"),
    Option("log.index.interval.bytes", None, _int(0), "4096", "bytes between index entries"),
    Option("log.retention.ms", None, _int(-1), None, "retention by age (-1 forever)"),
    Option("log.retention.minutes", None, _int(-1), None, "retention by age"),
    Option("log.retention.hours", None, _int(-1), "168", "retention by age"),
    Option("log.retention.bytes", None, _int(-1), "-1", "retention by size per partition"),
    Option(
        "log.retention.check.interval.ms",
        "log_retention_check_interval_ms",
        _int(1),
        "300000",
        "how often retention runs",
    ),
    Option("message.max.bytes", None, _int(0), "1048588", "largest record batch accepted"),
    Option(
        "log.message.timestamp.type",
        None,
        _one_of("CreateTime", "LogAppendTime"),
        "CreateTime",
        "which timestamp a batch keeps",
    ),
    Option(
        "log.flush.interval.messages",
        None,
        _int(1),
        str(_LONG_MAX),
        "fsync after this many messages",
    ),
    Option("log.flush.interval.ms", None, _int(0), None, "fsync after this long"),
    Option(
        "log.flush.scheduler.interval.ms",
        "log_flush_scheduler_interval_ms",
        _int(0),
        str(_LONG_MAX),
        "how often the flush check runs (unset: every second, which also flushes rolled segments)",
    ),
    Option(
        "log.flush.offset.checkpoint.interval.ms",
        "log_checkpoint_interval_ms",
        _int(0),
        "60000",
        "how often recovery points are checkpointed",
    ),
    Option("log.cleanup.policy", None, _str, "delete", "delete (compaction is not implemented)"),
    Option(
        "log.segment.delete.delay.ms",
        None,
        _int(0),
        "60000",
        "delay between renaming a segment to .deleted and removing it",
    ),
    # --- consumer groups: read by sluice.server.group.coordinator.GroupConfig (validated at load)
    # ---
    Option(
        "group.initial.rebalance.delay.ms",
        None,
        _int(0),
        "3000",
        "wait this long for more members before the first rebalance of an empty group",
    ),
    Option("group.min.session.timeout.ms", None, _int(1), "6000", "smallest session timeout"),
    Option("group.max.session.timeout.ms", None, _int(1), "1800000", "largest session timeout"),
    Option("group.max.size", None, _int(1), "2147483647", "members per group"),
    Option(
        "offsets.topic.num.partitions",
        None,
        _int(1),
        "1",
        "partitions of __consumer_offsets (Kafka: 50; one broker needs few)",
    ),
    Option(
        "offsets.retention.minutes",
        None,
        _int(1),
        "10080",
        "committed offsets of an empty group expire after this long",
    ),
    Option(
        "offsets.retention.check.interval.ms",
        None,
        _int(1),
        "600000",
        "how often expired offsets are removed",
    ),
    Option("offset.metadata.max.bytes", None, _int(0), "4096", "largest commit metadata string"),
    Option(
        "sluice.offsets.compaction.min.records",
        None,
        _int(1),
        "10000",
        "restate __consumer_offsets when it holds this many more records than live offsets",
    ),
)

#: Keys read by the group coordinator (GroupConfig), not by the storage layer.
_GROUP_KEYS = frozenset(
    o.key for o in OPTIONS if o.key.startswith(("group.", "offsets.", "offset.", "sluice.offsets."))
)

OPTIONS_BY_KEY: dict[str, Option] = {o.key: o for o in OPTIONS}


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
    fetch_zero_copy: bool = True
    shutdown_timeout_ms: int = 10000
    node_id: int = 0
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    delete_topic_enable: bool = True
    log_dirs: str = "./data"
    log_retention_check_interval_ms: int = 300000
    log_flush_scheduler_interval_ms: int = _LONG_MAX
    log_checkpoint_interval_ms: int = 60000
    #: every key explicitly given (file + overrides), as text; log.* keys are read from here.
    properties: Mapping[str, str] = field(default_factory=dict)
    #: keys given that Sluice does not know or does not use (the entrypoint warns about them).
    ignored_keys: tuple[str, ...] = ()

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
    def data_dir(self) -> Path:
        return Path(self.log_dirs)

    def log_properties(self) -> dict[str, str]:
        """Broker-level storage keys given explicitly (defaults are LogConfig's, the same)."""
        return {
            k: v
            for k, v in self.properties.items()
            if k in OPTIONS_BY_KEY and OPTIONS_BY_KEY[k].attr is None and k not in _NOT_LOG_KEYS
        }

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
    def load(cls, path: str | Path | None = None, overrides: Iterable[str] = ()) -> Config:
        """Defaults, then the properties file at ``path`` (if any), then ``key=value`` overrides."""
        props: dict[str, str] = {}
        if path is not None:
            try:
                with open(path, encoding="utf-8") as fh:
                    props.update(javaproperties.load(fh))
            except OSError as exc:
                raise ConfigError(f"cannot read config file {path}: {exc}") from exc
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"override {item!r} is not key=value")
            props[key.strip()] = value
        return cls.from_properties(props)

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)


# log.dir is an alias of ours; broker.id too; they are not storage keys for LogConfig.
_NOT_LOG_KEYS = frozenset({"log.dir", "broker.id"}) | _GROUP_KEYS


def _check_defaults() -> None:
    """The table's defaults and the dataclass defaults must agree (run by the tests)."""
    default = Config()
    for option in OPTIONS:
        if option.attr is None or option.default is None:
            continue
        assert getattr(default, option.attr) == option.parse(option.default), option.key
