"""Per-topic log configuration, with Kafka's names, defaults and validation.

A :class:`LogConfig` is immutable. Every attribute corresponds to one Kafka *topic-level* config
name (``segment.bytes`` -> ``segment_bytes``) and, through :data:`BROKER_KEYS`, to the broker-level
``log.*`` name that supplies its default. A topic's effective config is the broker default
(:meth:`LogConfig.from_broker_properties`) overlaid with the topic's overrides
(:meth:`LogConfig.from_properties` with ``base=``). Values are validated the way Kafka validates
them; anything wrong (unknown name, not an integer, out of range, a setting Sluice does not
implement) raises :class:`sluice.protocol.errors.InvalidConfig` with a message naming the key, so
that nothing is silently ignored.

Every topic key of Kafka's ``LogConfig`` is known (:data:`TOPIC_KEYS`, documented in
:data:`TOPIC_DOCS`). Sluice honours most of them; settings of subsystems it does not have
(tiered storage, replication throttling) are accepted where Kafka itself would give them no
effect without remote storage, and refused otherwise. ``cleanup.policy`` is Kafka's list of
``compact`` and ``delete`` (either, both); the compaction keys are read by the log cleaner
(:mod:`sluice.server.storage.log_cleaner`), whose broker-wide settings are a
:class:`CleanerConfig`. ``compression.type`` and the ``message.timestamp.*.max.ms`` bounds are
applied by ``Log.append_as_leader`` (see :attr:`LogConfig.conform_on_append`).

"Never" for ``flush.messages`` / ``flush.ms`` is Kafka's ``Long.MAX_VALUE``, kept as is so that
:meth:`LogConfig.to_properties` round-trips and DescribeConfigs shows what Kafka would show.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sluice.protocol.config_def import ConfigKey, boolean, int_in, one_of
from sluice.protocol.errors import InvalidConfig

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
#: Java's ``Double.MAX_VALUE`` (Kafka's "unthrottled" cleaner I/O), and as Java prints it.
DOUBLE_MAX = sys.float_info.max
DOUBLE_MAX_TEXT = "1.7976931348623157E308"

#: ``cleanup.policy`` values (Kafka's ``TopicConfig.CLEANUP_POLICY_*``).
COMPACT, DELETE = "compact", "delete"

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)

#: ``compression.type`` values (Kafka's ``BrokerCompressionType``): ``producer`` keeps each batch
#: in the codec its producer chose; the others make the broker store every batch in that codec.
PRODUCER_COMPRESSION = "producer"
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", PRODUCER_COMPRESSION)
_CODEC_IDS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

# A v2 batch header is 61 bytes, but Kafka's lower bound for segment.bytes is the v0 record
# overhead (14); keep Kafka's bound so configs valid there are valid here (tests use tiny segments).
MIN_SEGMENT_BYTES = 14

# Topic-level config name -> attribute name: every key of Kafka's ``LogConfig`` (3.9), in
# Kafka's order after Sluice's original ones. The order is the order of to_properties().
TOPIC_KEYS: dict[str, str] = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.jitter.ms": "segment_jitter_ms",
    "segment.index.bytes": "segment_index_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "max.message.bytes": "max_message_bytes",
    "message.timestamp.type": "message_timestamp_type",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "cleanup.policy": "cleanup_policy",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "delete.retention.ms": "delete_retention_ms",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "unclean.leader.election.enable": "unclean_leader_election_enable",
    "min.insync.replicas": "min_insync_replicas",
    "compression.type": "compression_type",
    "compression.gzip.level": "compression_gzip_level",
    "compression.lz4.level": "compression_lz4_level",
    "compression.zstd.level": "compression_zstd_level",
    "preallocate": "preallocate",
    "message.format.version": "message_format_version",
    "message.timestamp.difference.max.ms": "message_timestamp_difference_max_ms",
    "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
    "leader.replication.throttled.replicas": "leader_replication_throttled_replicas",
    "follower.replication.throttled.replicas": "follower_replication_throttled_replicas",
    "message.downconversion.enable": "message_downconversion_enable",
    "remote.storage.enable": "remote_storage_enable",
    "local.retention.ms": "local_retention_ms",
    "local.retention.bytes": "local_retention_bytes",
    "remote.log.copy.disable": "remote_log_copy_disable",
    "remote.log.delete.on.disable": "remote_log_delete_on_disable",
}

#: What each key does in Sluice (DescribeConfigs' documentation). Keys whose every valid value
#: Sluice honours say what they do; keys whose effect needs a subsystem Sluice does not have
#: accept only the values that need none of it (the others raise InvalidConfig saying so).
TOPIC_DOCS: dict[str, str] = {
    "segment.bytes": "segment size before rolling",
    "segment.ms": "segment age before rolling",
    "segment.jitter.ms": "max random jitter subtracted from segment.ms",
    "segment.index.bytes": "max size of an index file",
    "index.interval.bytes": "bytes between offset index entries",
    "retention.ms": "retention by age (-1 forever)",
    "retention.bytes": "retention by size per partition (negative: unlimited)",
    "max.message.bytes": "largest record batch accepted",
    "message.timestamp.type": "CreateTime keeps the producer's timestamps, LogAppendTime stamps",
    "flush.messages": "fsync after this many messages",
    "flush.ms": "fsync after this long",
    "cleanup.policy": "delete (retention), compact (keep the last record per key), or both",
    "file.delete.delay.ms": "delay between renaming a segment to .deleted and removing it",
    "delete.retention.ms": "how long a compacted topic keeps tombstones once cleaned",
    "min.compaction.lag.ms": "the minimum time a record stays uncompacted",
    "max.compaction.lag.ms": "the maximum time a record stays ineligible for compaction",
    "min.cleanable.dirty.ratio": "dirty share of the log above which the cleaner compacts it",
    "unclean.leader.election.enable": "with no live in-sync replica, an out-of-sync one may lead "
    "(the controller's choice; acknowledged records may be lost)",
    "min.insync.replicas": "acks=all produce fails with NOT_ENOUGH_REPLICAS below this ISR size",
    "compression.type": "producer keeps batches as sent; a codec makes the broker store it",
    "compression.gzip.level": "gzip level when the broker compresses (-1: default)",
    "compression.lz4.level": "lz4 level when the broker compresses",
    "compression.zstd.level": "zstd level when the broker compresses",
    "preallocate": "false only (segment preallocation is not implemented)",
    "message.format.version": "ignored as by Kafka 3 (batches are always record format v2)",
    "message.timestamp.difference.max.ms": "CreateTime records further from now are refused",
    "message.timestamp.before.max.ms": "CreateTime records older than now minus this are refused",
    "message.timestamp.after.max.ms": "CreateTime records newer than now plus this are refused",
    "leader.replication.throttled.replicas": "empty only (no replication throttling)",
    "follower.replication.throttled.replicas": "empty only (no replication throttling)",
    "message.downconversion.enable": "accepted; Sluice never down-converts (Fetch v4+ only)",
    "remote.storage.enable": "false only (tiered storage is not implemented)",
    "local.retention.ms": "tiered storage setting (no effect without remote storage)",
    "local.retention.bytes": "tiered storage setting (no effect without remote storage)",
    "remote.log.copy.disable": "tiered storage setting (no effect without remote storage)",
    "remote.log.delete.on.disable": "tiered storage setting (no effect without remote storage)",
}

#: The type of each key as DescribeConfigs v3+ reports it (Kafka's ``ConfigType``).
CONFIG_TYPE_BOOLEAN, CONFIG_TYPE_STRING, CONFIG_TYPE_INT, CONFIG_TYPE_LONG = 1, 2, 3, 5
CONFIG_TYPE_DOUBLE, CONFIG_TYPE_LIST = 6, 7
_INT_KEYS = frozenset(
    {"segment.bytes", "segment.index.bytes", "index.interval.bytes", "max.message.bytes",
     "min.insync.replicas", "compression.gzip.level", "compression.lz4.level",
     "compression.zstd.level"}
)  # fmt: skip
_BOOL_KEYS = frozenset(
    {"unclean.leader.election.enable", "preallocate", "message.downconversion.enable",
     "remote.storage.enable", "remote.log.copy.disable", "remote.log.delete.on.disable"}
)  # fmt: skip
_LIST_KEYS = frozenset(
    {"cleanup.policy", "leader.replication.throttled.replicas",
     "follower.replication.throttled.replicas"}
)  # fmt: skip
_STRING_KEYS = frozenset({"message.timestamp.type", "compression.type", "message.format.version"})


def config_type(key: str) -> int:
    """Kafka's ``ConfigType`` code of a topic key."""
    if key in _INT_KEYS:
        return CONFIG_TYPE_INT
    if key in _BOOL_KEYS:
        return CONFIG_TYPE_BOOLEAN
    if key in _LIST_KEYS:
        return CONFIG_TYPE_LIST
    if key in _STRING_KEYS:
        return CONFIG_TYPE_STRING
    if key == "min.cleanable.dirty.ratio":
        return CONFIG_TYPE_DOUBLE
    return CONFIG_TYPE_LONG


# Topic-level name -> the broker-level name that provides its default (Kafka's LogConfig mapping),
# for the keys whose broker default Sluice reads. The other topic keys default to Kafka's value.
BROKER_KEYS: dict[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "cleanup.policy": "log.cleanup.policy",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.insync.replicas": "min.insync.replicas",
    "compression.type": "compression.type",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}


def _double(text: str) -> float:
    """Parser of a finite number (Kafka's DOUBLE)."""
    value = float(text.strip())
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def _policy_list(text: str) -> str:
    """Parser of ``cleanup.policy`` (Kafka's ``ValidList.in("compact", "delete")``): the
    policies, comma-separated, as given without blanks."""
    policies = [p.strip() for p in text.split(",") if p.strip()]
    if not policies or any(p not in (COMPACT, DELETE) for p in policies):
        raise ValueError("must be a list of 'compact' and 'delete'")
    return ",".join(policies)


def _ratio(text: str) -> float:
    """Parser of a number in [0, 1] (Kafka's ``between(0, 1)``)."""
    value = _double(text)
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be in [0.0, 1.0]")
    return value


#: The broker-level keys above (and their coarser-unit fallbacks below), as the broker's Config
#: lists them: text defaults, parsers for load-time checks, docs. Declared here, collected by
#: sluice.server.core.config; the LogConfig field defaults below are the same values, parsed
#: (a test keeps them equal).
BROKER_OPTIONS: tuple[ConfigKey, ...] = (
    ConfigKey("log.segment.bytes", int_in(14), "1073741824", "segment size before rolling"),
    ConfigKey("log.roll.ms", int_in(1), None, "segment age before rolling; overrides hours"),
    ConfigKey("log.roll.hours", int_in(1), "168", "segment age before rolling"),
    ConfigKey("log.roll.jitter.ms", int_in(0), None, "max random jitter subtracted from roll"),
    ConfigKey("log.roll.jitter.hours", int_in(0), "0", "max random jitter subtracted from roll"),
    ConfigKey("log.index.size.max.bytes", int_in(4), "10485760", "max size of an index file"),
    ConfigKey("log.index.interval.bytes", int_in(0), "4096", "bytes between index entries"),
    ConfigKey("log.retention.ms", int_in(-1), None, "retention by age (-1 forever)"),
    ConfigKey("log.retention.minutes", int_in(-1), None, "retention by age"),
    ConfigKey("log.retention.hours", int_in(-1), "168", "retention by age"),
    ConfigKey("log.retention.bytes", int_in(-1), "-1", "retention by size per partition"),
    ConfigKey("message.max.bytes", int_in(0), "1048588", "largest record batch accepted"),
    ConfigKey(
        "log.message.timestamp.type",
        one_of("CreateTime", "LogAppendTime"),
        "CreateTime",
        "which timestamp a batch keeps",
    ),
    ConfigKey(
        "log.flush.interval.messages",
        int_in(1),
        str(LONG_MAX),
        "fsync after this many messages",
    ),
    ConfigKey("log.flush.interval.ms", int_in(0), None, "fsync after this long"),
    ConfigKey(
        "log.cleanup.policy",
        _policy_list,
        "delete",
        "delete (retention), compact (keep the last record per key), or both",
    ),
    ConfigKey(
        "log.segment.delete.delay.ms",
        int_in(0),
        "60000",
        "delay between renaming a segment to .deleted and removing it",
    ),
    ConfigKey("min.insync.replicas", int_in(1), "1", "ISR size an acks=all produce needs"),
    ConfigKey(
        "unclean.leader.election.enable",
        boolean,
        "false",
        "cluster: with no live in-sync replica, let an out-of-sync one lead (may lose acked data)",
    ),
    ConfigKey(
        "compression.type",
        one_of(*COMPRESSION_TYPES),
        "producer",
        "codec batches are stored in (producer: as sent)",
    ),
    ConfigKey(
        "log.cleaner.delete.retention.ms",
        int_in(0),
        "86400000",
        "how long a compacted topic keeps tombstones once cleaned",
    ),
    ConfigKey(
        "log.cleaner.min.compaction.lag.ms",
        int_in(0),
        "0",
        "the minimum time a record stays uncompacted",
    ),
    ConfigKey(
        "log.cleaner.max.compaction.lag.ms",
        int_in(1),
        str(LONG_MAX),
        "the maximum time a record stays ineligible for compaction",
    ),
    ConfigKey(
        "log.cleaner.min.cleanable.ratio",
        _ratio,
        "0.5",
        "dirty share of a log above which the cleaner compacts it",
    ),
    # The cleaner's own settings (CleanerConfig; Kafka's CleanerConfig.CONFIG_DEF).
    ConfigKey("log.cleaner.enable", boolean, "true", "run the log cleaner (compacted topics)"),
    ConfigKey("log.cleaner.threads", int_in(0), "1", "log cleaner threads (0: none)"),
    ConfigKey(
        "log.cleaner.dedupe.buffer.size",
        int_in(),
        str(128 * 1024 * 1024),
        "memory for the cleaners' offset maps (key hash -> last offset), all threads together",
    ),
    ConfigKey(
        "log.cleaner.io.buffer.size",
        int_in(0),
        str(512 * 1024),
        "memory for the cleaners' read and write buffers, all threads together",
    ),
    ConfigKey(
        "log.cleaner.io.buffer.load.factor",
        _double,
        "0.9",
        "how full an offset map may become before a cleaning stops reading dirty segments",
    ),
    ConfigKey(
        "log.cleaner.io.max.bytes.per.second",
        _double,
        DOUBLE_MAX_TEXT,
        "throttle: the cleaners read and write at most this many bytes per second on average",
    ),
    ConfigKey(
        "log.cleaner.backoff.ms",
        int_in(0),
        "15000",
        "how long a cleaner sleeps when no log needs cleaning",
    ),
)

#: The broker keys of :class:`CleanerConfig` -> its attribute names.
CLEANER_KEYS: dict[str, str] = {
    "log.cleaner.enable": "enable",
    "log.cleaner.threads": "threads",
    "log.cleaner.dedupe.buffer.size": "dedupe_buffer_size",
    "log.cleaner.io.buffer.size": "io_buffer_size",
    "log.cleaner.io.buffer.load.factor": "dedupe_buffer_load_factor",
    "log.cleaner.io.max.bytes.per.second": "io_max_bytes_per_second",
    "log.cleaner.backoff.ms": "backoff_ms",
}


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's log cleaner settings (Kafka's ``CleanerConfig``), from the ``log.cleaner.*``
    keys of :data:`CLEANER_KEYS`. The per-topic compaction settings are in :class:`LogConfig`."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_size: int = 512 * 1024
    dedupe_buffer_load_factor: float = 0.9
    io_max_bytes_per_second: float = DOUBLE_MAX
    backoff_ms: int = 15_000

    @classmethod
    def from_broker_properties(cls, props: Mapping[str, str]) -> CleanerConfig:
        """The cleaner settings given in ``props`` (others ignored) over Kafka's defaults.
        Raises InvalidConfig naming the key of a malformed or out-of-range value."""
        declared = {k.key: k for k in BROKER_OPTIONS}
        changes: dict[str, object] = {}
        for key, attr in CLEANER_KEYS.items():
            if key in props:
                try:
                    changes[attr] = declared[key].parse(str(props[key]))
                except ValueError as exc:
                    raise InvalidConfig(f"{key}={props[key]!r}: {exc}") from None
        config = dataclasses.replace(cls(), **changes)  # type: ignore[arg-type]
        slots = config.dedupe_buffer_size // max(config.threads, 1) // 24  # MD5 + offset
        if config.enable and config.threads > 0 and slots * config.dedupe_buffer_load_factor < 1:
            raise InvalidConfig(  # Kafka's Cleaner refuses to start likewise
                "offset map is too small to fit in even a single message, so log cleaning "
                "will never make progress. You can increase log.cleaner.dedupe.buffer.size "
                "or decrease log.cleaner.threads"
            )
        return config


# Broker keys given in coarser units; the finer key wins when both are set (Kafka's precedence:
# log.retention.ms > log.retention.minutes > log.retention.hours).
_BROKER_UNIT_FALLBACKS: dict[str, tuple[tuple[str, int], ...]] = {
    "segment.ms": (("log.roll.hours", 3_600_000),),
    "segment.jitter.ms": (("log.roll.jitter.hours", 3_600_000),),
    "retention.ms": (("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)),
}


def broker_synonyms(topic_key: str) -> tuple[str, ...]:
    """The broker keys that supply ``topic_key``'s default, most specific first
    (``retention.ms`` -> ``log.retention.ms``, ``log.retention.minutes``,
    ``log.retention.hours``); empty for a key with no broker default in Sluice. DescribeConfigs
    lists them as the synonyms of a topic setting."""
    first = BROKER_KEYS.get(topic_key)
    if first is None:
        return ()
    return (first, *(key for key, _ in _BROKER_UNIT_FALLBACKS.get(topic_key, ())))


def _parse_int(key: str, value: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise InvalidConfig(f"{key}={value!r}: not an integer") from None


def _at_least(minimum: int, maximum: int = LONG_MAX) -> Callable[[str, int], None]:
    def check(key: str, value: int) -> None:
        if not minimum <= value <= maximum:
            raise InvalidConfig(f"{key}={value}: must be in [{minimum}, {maximum}]")

    return check


_INT_CHECKS: dict[str, Callable[[str, int], None]] = {
    "segment.bytes": _at_least(MIN_SEGMENT_BYTES, INT_MAX),
    "segment.ms": _at_least(1),
    "segment.jitter.ms": _at_least(0),
    "segment.index.bytes": _at_least(4, INT_MAX),
    "index.interval.bytes": _at_least(0, INT_MAX),
    "retention.ms": _at_least(-1),
    "retention.bytes": _at_least(-(2**63)),  # any long; negative = unlimited
    "max.message.bytes": _at_least(0, INT_MAX),
    "flush.messages": _at_least(1),
    "flush.ms": _at_least(0),
    "file.delete.delay.ms": _at_least(0),
    "delete.retention.ms": _at_least(0),
    "min.compaction.lag.ms": _at_least(0),
    "max.compaction.lag.ms": _at_least(1),
    "min.insync.replicas": _at_least(1, INT_MAX),
    "compression.lz4.level": _at_least(1, 17),
    "compression.zstd.level": _at_least(-131072, 22),
    "message.timestamp.difference.max.ms": _at_least(0),
    "message.timestamp.before.max.ms": _at_least(0),
    "message.timestamp.after.max.ms": _at_least(0),
    "local.retention.ms": _at_least(-2),
    "local.retention.bytes": _at_least(-2),
}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The effective configuration of one partition log. Defaults are Kafka's (storage spec §6).

    Immutable: to change a topic's config build a new one and hand it to ``Log.update_config``.
    """

    segment_bytes: int = 1_073_741_824
    segment_ms: int = 604_800_000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10_485_760
    index_interval_bytes: int = 4096
    retention_ms: int = 604_800_000  # -1 = keep forever
    retention_bytes: int = -1  # negative = unlimited
    max_message_bytes: int = 1_048_588
    message_timestamp_type: str = CREATE_TIME
    flush_messages: int = LONG_MAX  # LONG_MAX = never: leave it to the OS page cache
    flush_ms: int = LONG_MAX
    cleanup_policy: str = "delete"
    file_delete_delay_ms: int = 60_000
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    unclean_leader_election_enable: bool = False
    min_insync_replicas: int = 1
    compression_type: str = PRODUCER_COMPRESSION
    compression_gzip_level: int = -1  # Deflater.DEFAULT_COMPRESSION (zlib's 6)
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    preallocate: bool = False
    message_format_version: str = "3.0-IV1"
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""
    message_downconversion_enable: bool = True
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    #: True when an append must do more than validate and assign offsets: recompress
    #: (``compression.type`` not ``producer``), check timestamps (a bound below "never") or
    #: check that every record has a key (a compacted topic). Derived; the append path reads
    #: this one flag.
    conform_on_append: bool = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        conform = (
            self.compression_type != PRODUCER_COMPRESSION
            or min(self.timestamp_before_max_ms, self.timestamp_after_max_ms) < LONG_MAX
            or self.compact
        )
        object.__setattr__(self, "conform_on_append", conform)

    @property
    def target_codec(self) -> int | None:
        """The codec id every batch is stored in; None for ``producer`` (as sent)."""
        return _CODEC_IDS.get(self.compression_type)

    @property
    def target_level(self) -> int | None:
        """The compression level of :attr:`target_codec` (None: the codec's default)."""
        level = {
            "gzip": self.compression_gzip_level,
            "lz4": self.compression_lz4_level,
            "zstd": self.compression_zstd_level,
        }.get(self.compression_type)
        return None if level is None or level == -1 else level

    @property
    def timestamp_before_max_ms(self) -> int:
        """How far in the past a CreateTime timestamp may be (Kafka 3.6: the deprecated
        ``message.timestamp.difference.max.ms`` stands in while ``before`` is unset)."""
        if self.message_timestamp_before_max_ms != LONG_MAX:
            return self.message_timestamp_before_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def timestamp_after_max_ms(self) -> int:
        """How far in the future a CreateTime timestamp may be (same fallback)."""
        if self.message_timestamp_after_max_ms != LONG_MAX:
            return self.message_timestamp_after_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def compact(self) -> bool:
        """True when ``cleanup.policy`` holds ``compact``: the log cleaner keeps the last record
        of each key, and records without a key are refused."""
        return COMPACT in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """True when ``cleanup.policy`` holds ``delete``: retention by time and size applies."""
        return DELETE in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        """True when the broker stamps batches with its own clock (LogAppendTime)."""
        return self.message_timestamp_type == LOG_APPEND_TIME

    @classmethod
    def from_properties(cls, props: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """Overlay topic-level ``props`` (Kafka names) on ``base`` (default: Kafka's defaults).

        Raises InvalidConfig for an unknown name, a malformed or out-of-range value, a value
        that needs what Sluice does not implement (``remote.storage.enable=true``,
        ``preallocate=true``, throttled replicas), or ``min.compaction.lag.ms`` above
        ``max.compaction.lag.ms`` (Kafka's check, with its message): the message says which.
        """
        changes: dict[str, object] = {}
        for key, raw in props.items():
            attr = TOPIC_KEYS.get(key)
            if attr is None:
                raise InvalidConfig(f"unknown or unsupported topic config {key!r}")
            changes[attr] = _parse_value(key, raw)
        config = dataclasses.replace(base or cls(), **changes)  # type: ignore[arg-type]
        if config.min_compaction_lag_ms > config.max_compaction_lag_ms:
            raise InvalidConfig(
                f"conflict topic config setting min.compaction.lag.ms "
                f"({config.min_compaction_lag_ms}) > max.compaction.lag.ms "
                f"({config.max_compaction_lag_ms})"
            )
        return config

    @classmethod
    def from_broker_properties(cls, props: Mapping[str, str]) -> LogConfig:
        """Build the broker-wide default from broker ``log.*`` names (see :data:`BROKER_KEYS`).

        Keys that are not log settings are ignored here: a broker config holds many other things.
        """
        topic_props: dict[str, str] = {}
        for topic_key, broker_key in BROKER_KEYS.items():
            if broker_key in props:
                topic_props[topic_key] = props[broker_key]
                continue
            for coarse_key, factor in _BROKER_UNIT_FALLBACKS.get(topic_key, ()):
                if coarse_key in props:
                    topic_props[topic_key] = str(_parse_int(coarse_key, props[coarse_key]) * factor)
                    break
        return cls.from_properties(topic_props)

    def to_properties(self) -> dict[str, str]:
        """Every setting under its topic-level Kafka name, as strings (as Kafka prints them)."""
        return {key: _format(getattr(self, attr)) for key, attr in TOPIC_KEYS.items()}

    def overrides_against(self, base: LogConfig) -> dict[str, str]:
        """The topic-level settings whose value differs from ``base``."""
        mine, theirs = self.to_properties(), base.to_properties()
        return {k: v for k, v in mine.items() if theirs[k] != v}


def _format(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_VERSION = re.compile(r"^(\d+)\.(\d+)(\.\d+)?(-IV\d+)?$")


def _parse_value(key: str, raw: str) -> object:
    value = str(raw).strip()
    if key == "message.timestamp.type":
        if value not in TIMESTAMP_TYPES:
            raise InvalidConfig(f"{key}={raw!r}: must be one of {', '.join(TIMESTAMP_TYPES)}")
        return value
    if key == "cleanup.policy":
        try:
            return _policy_list(value)
        except ValueError as exc:
            raise InvalidConfig(f"{key}={raw!r}: {exc}") from None
    if key == "compression.type":
        if value not in COMPRESSION_TYPES:
            raise InvalidConfig(f"{key}={raw!r}: must be one of {', '.join(COMPRESSION_TYPES)}")
        return value
    if key == "message.format.version":
        # Kafka 3 validates the version name and then ignores it (IBP >= 3.0 writes v2 only).
        match = _VERSION.match(value)
        if match is None or (int(match.group(1)), int(match.group(2))) < (0, 8):
            raise InvalidConfig(f"{key}={raw!r}: not a Kafka version such as 3.0-IV1")
        return value
    if key == "min.cleanable.dirty.ratio":
        try:
            return _ratio(value)
        except ValueError as exc:
            raise InvalidConfig(f"{key}={raw!r}: {exc}") from None
    if key in _BOOL_KEYS:
        if value.lower() not in ("true", "false"):
            raise InvalidConfig(f"{key}={raw!r}: must be true or false")
        flag = value.lower() == "true"
        unsupported = {
            "preallocate": "segment preallocation",
            "remote.storage.enable": "tiered (remote) storage",
        }
        if flag and key in unsupported:
            raise InvalidConfig(f"{key}=true: {unsupported[key]} is not implemented by Sluice")
        return flag
    if key in _LIST_KEYS:  # the two throttled-replica lists
        if value:
            raise InvalidConfig(
                f"{key}={raw!r}: replication throttling is not implemented by Sluice; "
                "leave it empty"
            )
        return ""
    number = _parse_int(key, value)
    if key == "compression.gzip.level":
        # Kafka: 1..9, or -1 for the codec's default (Deflater.DEFAULT_COMPRESSION).
        if number != -1 and not 1 <= number <= 9:
            raise InvalidConfig(f"{key}={number}: must be in [1, 9] or -1")
        return number
    _INT_CHECKS[key](key, number)
    return number
