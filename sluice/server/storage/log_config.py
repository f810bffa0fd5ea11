"""Per-topic log configuration, with Kafka's names, defaults and validation.

Each key is declared once (:mod:`sluice.server.config_def`): the topic keys in
:data:`TOPIC_CONFIG` (name, type, default, validator, importance, doc), the broker's ``log.*``
keys that supply their defaults in :data:`SERVER_LOG_CONFIG`. Everything else here is derived
from those two tables: the fields of :class:`LogConfig` and their defaults, validation, the
broker-key mapping and DescribeConfigs' types, synonyms and docs.

A :class:`LogConfig` is immutable. Every attribute corresponds to one Kafka *topic-level* config
name (``segment.bytes`` -> ``segment_bytes``) and, through :func:`broker_synonyms`, to the
broker-level ``log.*`` names that supply its default. A topic's effective config is the broker
default (:meth:`LogConfig.from_broker_properties`) overlaid with the topic's overrides
(:meth:`LogConfig.from_properties` with ``base=``). Values are validated the way Kafka validates
them; anything wrong (unknown name, not an integer, out of range, a setting Sluice does not
implement) raises :class:`sluice.protocol.errors.InvalidConfig` with a message naming the key, so
that nothing is silently ignored.

Every topic key of Kafka's ``LogConfig`` is known. Sluice honours most of them; settings of
subsystems it does not have (tiered storage) are accepted where Kafka
itself would give them no effect without remote storage, and refused otherwise.
``cleanup.policy`` is Kafka's list of ``compact`` and ``delete`` (either, both); the compaction
keys are read by the log cleaner (:mod:`sluice.server.storage.log_cleaner`), whose broker-wide
settings (the ``log.cleaner.*`` keys) are a :class:`CleanerConfig`. ``compression.type`` and
the ``message.timestamp.*.max.ms`` bounds are applied by ``Log.append_as_leader`` (see
:attr:`LogConfig.conform_on_append`).

"Never" for ``flush.messages`` / ``flush.ms`` is Kafka's ``Long.MAX_VALUE``, kept as is so that
:meth:`LogConfig.to_properties` round-trips and DescribeConfigs shows what Kafka would show.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from sluice.protocol.errors import InvalidConfig
from sluice.server.config_def import (
    BOOLEAN,
    DOUBLE,
    HIGH,
    INT,
    LIST,
    LONG,
    LOW,
    MEDIUM,
    STRING,
    ConfigDef,
    Validator,
    boolean,
    fields_by_key,
    format_value,
    int_in,
    one_of,
)

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


# --- validators of topic keys: text -> value, or ValueError with the reason -----------------


def _long_in(lo: int, hi: int = LONG_MAX) -> Validator:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError("not an integer") from None
        if not lo <= value <= hi:
            raise ValueError(f"must be in [{lo}, {hi}]")
        return value

    return parse


def _gzip_level(text: str) -> int:
    # Kafka: 1..9, or -1 for the codec's default (Deflater.DEFAULT_COMPRESSION).
    value: int = _long_in(-1, 9)(text)
    if value == 0:
        raise ValueError("must be in [1, 9] or -1")
    return value


def _false_only(feature: str) -> Validator:
    """A boolean whose ``true`` needs ``feature``, which Sluice does not have."""

    def parse(text: str) -> bool:
        if boolean(text):
            raise ValueError(f"{feature} is not implemented by Sluice")
        return False

    return parse


def _cleanup_policy(text: str) -> str:
    """``cleanup.policy`` (Kafka's ``ValidList.in("compact", "delete")``): the policies,
    comma-separated, as given without blanks."""
    policies = [p.strip() for p in text.split(",") if p.strip()]
    if not policies or any(p not in (COMPACT, DELETE) for p in policies):
        raise ValueError("must be a list of 'compact' and 'delete'")
    return ",".join(policies)


def _double(text: str) -> float:
    """A finite number (Kafka's DOUBLE)."""
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError("not a number") from None
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


#: Kafka 3.9's ``MetadataVersion``: each release with its number of internal versions
#: (``-IV0``, ``-IV1``, ...; 0: the release alone names its one version, as ``0.9.0``).
_METADATA_RELEASES = {
    "0.8.0": 0, "0.8.1": 0, "0.8.2": 0, "0.9.0": 0,
    "0.10.0": 2, "0.10.1": 3, "0.10.2": 1, "0.11.0": 3,
    "1.0": 1, "1.1": 1,
    "2.0": 2, "2.1": 3, "2.2": 2, "2.3": 2, "2.4": 2, "2.5": 1, "2.6": 1, "2.7": 3, "2.8": 2,
    "3.0": 2, "3.1": 1, "3.2": 1, "3.3": 4, "3.4": 1, "3.5": 3, "3.6": 3, "3.7": 5, "3.8": 1,
    "3.9": 1, "4.0": 2,
}  # fmt: skip
#: Every name ``MetadataVersion.fromVersionString`` knows in Kafka 3.9: each version's full name
#: (``0.8.2``, ``0.10.0-IV1``, ``3.0-IV1``) and each release up to the latest production one
#: (3.9; ``4.0`` is known only by its full names) for its latest internal version.
METADATA_VERSION_NAMES = frozenset(
    [f"{release}-IV{i}" if count else release
     for release, count in _METADATA_RELEASES.items() for i in range(max(count, 1))]
    + [release for release in _METADATA_RELEASES if release != "4.0"]
)  # fmt: skip


def _version(text: str) -> str:
    """Check a Kafka version name as Kafka 3.9's ``MetadataVersionValidator`` does (for
    ``message.format.version``, which Kafka 3 then ignores: its batches are always v2) and
    return it, trimmed as Kafka's STRING configs are. ``MetadataVersion.fromVersionString``
    looks up the first three dot-separated parts of a name starting ``0.`` (``0.10.0.0`` and
    ``0.10.0.x`` are ``0.10.0``), the first two of any other (``1.0.1`` is ``1.0``, ``2.8.1`` is
    ``2.8``), the whole name when it has no more parts than that (``0.10.0-IV1``,
    ``3.0-IV1``). Anything else is refused with Kafka's message."""
    value = text.strip()
    parts = value.split(".")
    while parts and not parts[-1]:
        parts.pop()  # Java's String.split drops trailing empty strings
    count = 3 if value.startswith("0.") else 2
    name = value if count >= len(parts) else ".".join(parts[:count])
    if name not in METADATA_VERSION_NAMES:
        raise ValueError(
            f"Invalid value {value} for configuration message.format.version: "
            f"Version {value} is not a valid version"
        )
    return value


def _ratio(text: str) -> float:
    """A number in [0, 1] (Kafka's ``between(0, 1)``)."""
    ratio = _double(text)
    if not 0.0 <= ratio <= 1.0:
        raise ValueError("must be in [0.0, 1.0]")
    return ratio


_THROTTLED_REPLICA = re.compile(r"\d+:\d+")


def parse_throttled_replicas(text: str) -> str:
    """Kafka's ``ThrottledReplicaListValidator`` (``leader/follower.replication.throttled.
    replicas``): ``*`` or ``partition:broker`` entries, comma-separated (spaces around them
    allowed); the text itself is the value (``sluice.server.replication.throttle`` reads it)."""
    entries = [e.strip() for e in text.split(",")] if text.strip() else []
    if entries == ["*"] or all(_THROTTLED_REPLICA.fullmatch(e) for e in entries):
        return text.strip()
    raise ValueError(
        "must be the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
    )


_NO_TIERING = "tiered storage setting (no effect without remote storage)"

#: Every topic key of Kafka's ``LogConfig`` (3.9), in Kafka's order after Sluice's original
#: ones (the order of :meth:`LogConfig.to_properties`). The docs say what each key does in
#: Sluice (DescribeConfigs' documentation): keys whose effect needs a subsystem Sluice does not
#: have accept only the values that need none of it, and the validator says so for the others.
TOPIC_CONFIG = (
    ConfigDef()
    .define("segment.bytes", INT, 1_073_741_824, _long_in(MIN_SEGMENT_BYTES, INT_MAX), HIGH, "segment size before rolling")  # noqa: E501
    .define("segment.ms", LONG, 604_800_000, _long_in(1), HIGH, "segment age before rolling")
    .define("segment.jitter.ms", LONG, 0, _long_in(0), MEDIUM, "max random jitter subtracted from segment.ms")  # noqa: E501
    .define("segment.index.bytes", INT, 10_485_760, _long_in(4, INT_MAX), MEDIUM, "max size of an index file")  # noqa: E501
    .define("index.interval.bytes", INT, 4096, _long_in(0, INT_MAX), MEDIUM, "bytes between offset index entries")  # noqa: E501
    .define("retention.ms", LONG, 604_800_000, _long_in(-1), HIGH, "retention by age (-1 forever)")
    .define("retention.bytes", LONG, -1, _long_in(-(2**63)), HIGH, "retention by size per partition (negative: unlimited)")  # noqa: E501
    .define("max.message.bytes", INT, 1_048_588, _long_in(0, INT_MAX), HIGH, "largest record batch accepted")  # noqa: E501
    .define("message.timestamp.type", STRING, CREATE_TIME, one_of(*TIMESTAMP_TYPES), MEDIUM, "CreateTime keeps the producer's timestamps, LogAppendTime stamps")  # noqa: E501
    .define("flush.messages", LONG, LONG_MAX, _long_in(1), HIGH, "fsync after this many messages")
    .define("flush.ms", LONG, LONG_MAX, _long_in(0), HIGH, "fsync after this long")
    .define("cleanup.policy", LIST, "delete", _cleanup_policy, MEDIUM, "delete (retention), compact (keep the last record per key), or both")  # noqa: E501
    .define("file.delete.delay.ms", LONG, 60_000, _long_in(0), HIGH, "delay between renaming a segment to .deleted and removing it")  # noqa: E501
    .define("delete.retention.ms", LONG, 86_400_000, _long_in(0), MEDIUM, "how long a compacted topic keeps tombstones once cleaned")  # noqa: E501
    .define("min.compaction.lag.ms", LONG, 0, _long_in(0), MEDIUM, "the minimum time a record stays uncompacted")  # noqa: E501
    .define("max.compaction.lag.ms", LONG, LONG_MAX, _long_in(1), MEDIUM, "the maximum time a record stays ineligible for compaction")  # noqa: E501
    .define("min.cleanable.dirty.ratio", DOUBLE, 0.5, _ratio, MEDIUM, "dirty share of the log above which the cleaner compacts it")  # noqa: E501
    .define("unclean.leader.election.enable", BOOLEAN, False, boolean, HIGH, "with no live in-sync replica, an out-of-sync one may lead (the controller's choice; acknowledged records may be lost)")  # noqa: E501
    .define("min.insync.replicas", INT, 1, _long_in(1, INT_MAX), HIGH, "acks=all produce fails with NOT_ENOUGH_REPLICAS below this ISR size")  # noqa: E501
    .define("compression.type", STRING, PRODUCER_COMPRESSION, one_of(*COMPRESSION_TYPES), HIGH, "producer keeps batches as sent; a codec makes the broker store it")  # noqa: E501
    .define("compression.gzip.level", INT, -1, _gzip_level, MEDIUM, "gzip level when the broker compresses (-1: default)")  # noqa: E501
    .define("compression.lz4.level", INT, 9, _long_in(1, 17), MEDIUM, "lz4 level when the broker compresses")  # noqa: E501
    .define("compression.zstd.level", INT, 3, _long_in(-131072, 22), MEDIUM, "zstd level when the broker compresses")  # noqa: E501
    .define("preallocate", BOOLEAN, False, _false_only("segment preallocation"), MEDIUM, "false only (segment preallocation is not implemented)")  # noqa: E501
    .define("message.format.version", STRING, "3.0-IV1", _version, MEDIUM, "ignored as by Kafka 3 (batches are always record format v2)")  # noqa: E501
    .define("message.timestamp.difference.max.ms", LONG, LONG_MAX, _long_in(0), MEDIUM, "CreateTime records further from now are refused")  # noqa: E501
    .define("message.timestamp.before.max.ms", LONG, LONG_MAX, _long_in(0), MEDIUM, "CreateTime records older than now minus this are refused")  # noqa: E501
    .define("message.timestamp.after.max.ms", LONG, LONG_MAX, _long_in(0), MEDIUM, "CreateTime records newer than now plus this are refused")  # noqa: E501
    .define("leader.replication.throttled.replicas", LIST, "", parse_throttled_replicas, MEDIUM, "partition:broker,... (or *): the replicas whose leader on that broker throttles sending to followers outside the ISR to leader.replication.throttled.rate")  # noqa: E501
    .define("follower.replication.throttled.replicas", LIST, "", parse_throttled_replicas, MEDIUM, "partition:broker,... (or *): the replicas whose follower on that broker throttles fetching while not caught up, to follower.replication.throttled.rate")  # noqa: E501
    .define("message.downconversion.enable", BOOLEAN, True, boolean, LOW, "accepted; Sluice never down-converts (Fetch v4+ only)")  # noqa: E501
    .define("remote.storage.enable", BOOLEAN, False, _false_only("tiered (remote) storage"), MEDIUM, "false only (tiered storage is not implemented)")  # noqa: E501
    .define("local.retention.ms", LONG, -2, _long_in(-2), MEDIUM, _NO_TIERING)
    .define("local.retention.bytes", LONG, -2, _long_in(-2), MEDIUM, _NO_TIERING)
    .define("remote.log.copy.disable", BOOLEAN, False, boolean, MEDIUM, _NO_TIERING)
    .define("remote.log.delete.on.disable", BOOLEAN, False, boolean, MEDIUM, _NO_TIERING)
)  # fmt: skip

_T = TOPIC_CONFIG.__getitem__

#: The broker's ``log.*`` keys: each supplies a topic key's default (its *synonym*, Kafka's
#: ``ServerTopicConfigSynonyms``), with the topic key's type, validator and default unless said.
#: (A storage key that is the broker's only, such as a cleaner's thread count, is a plain
#: ``define`` in its own ``section``.)
#: The coarser-unit keys (``log.retention.hours``...) are declared with their own defaults and
#: converted by :data:`_UNIT_MS`; the finer key wins when both are set (Kafka's precedence
#: ``log.retention.ms`` > ``log.retention.minutes`` > ``log.retention.hours``: declaration
#: order). Collected by the broker's Config (sluice.server.config).
SERVER_LOG_CONFIG = (
    ConfigDef()
    .section("storage: the defaults of the topic-level keys")
    .define_synonym("log.segment.bytes", _T("segment.bytes"))
    .define_synonym("log.roll.ms", _T("segment.ms"), default=None, doc="segment age before rolling; overrides hours")  # noqa: E501
    .define("log.roll.hours", INT, 168, int_in(1), HIGH, "segment age before rolling", synonym_of="segment.ms")  # noqa: E501
    .define_synonym("log.roll.jitter.ms", _T("segment.jitter.ms"), default=None, doc="max random jitter subtracted from roll")  # noqa: E501
    .define("log.roll.jitter.hours", INT, 0, int_in(0), HIGH, "max random jitter subtracted from roll", synonym_of="segment.jitter.ms")  # noqa: E501
    .define_synonym("log.index.size.max.bytes", _T("segment.index.bytes"))
    .define_synonym("log.index.interval.bytes", _T("index.interval.bytes"), doc="bytes between index entries")  # noqa: E501
    .define_synonym("log.retention.ms", _T("retention.ms"), default=None)
    .define("log.retention.minutes", INT, None, int_in(-1), HIGH, "retention by age", synonym_of="retention.ms")  # noqa: E501
    .define("log.retention.hours", INT, 168, int_in(-1), HIGH, "retention by age", synonym_of="retention.ms")  # noqa: E501
    .define_synonym("log.retention.bytes", _T("retention.bytes"), doc="retention by size per partition")  # noqa: E501
    .define_synonym("message.max.bytes", _T("max.message.bytes"))
    .define_synonym("log.message.timestamp.type", _T("message.timestamp.type"), doc="which timestamp a batch keeps")  # noqa: E501
    .define_synonym("log.flush.interval.messages", _T("flush.messages"))
    .define_synonym("log.flush.interval.ms", _T("flush.ms"), default=None)
    .define_synonym("log.cleanup.policy", _T("cleanup.policy"))
    .define_synonym("log.segment.delete.delay.ms", _T("file.delete.delay.ms"))
    .define_synonym("min.insync.replicas", _T("min.insync.replicas"), doc="ISR size an acks=all produce needs")  # noqa: E501
    .define_synonym("unclean.leader.election.enable", _T("unclean.leader.election.enable"), doc="cluster: with no live in-sync replica, let an out-of-sync one lead (may lose acked data)")  # noqa: E501
    .define_synonym("compression.type", _T("compression.type"), doc="codec batches are stored in (producer: as sent)")  # noqa: E501
    .define_synonym("log.cleaner.delete.retention.ms", _T("delete.retention.ms"))
    .define_synonym("log.cleaner.min.compaction.lag.ms", _T("min.compaction.lag.ms"))
    .define_synonym("log.cleaner.max.compaction.lag.ms", _T("max.compaction.lag.ms"))
    .define_synonym("log.cleaner.min.cleanable.ratio", _T("min.cleanable.dirty.ratio"), doc="dirty share of a log above which the cleaner compacts it")  # noqa: E501
    .section("storage: the log cleaner (Kafka's CleanerConfig)")
    .define("log.cleaner.enable", BOOLEAN, True, boolean, MEDIUM, "run the log cleaner (compacted topics)")  # noqa: E501
    .define("log.cleaner.threads", INT, 1, int_in(0), MEDIUM, "log cleaner threads (0: none). Sluice runs one per data dir: more than 1 is accepted, logged at start, and runs as 1 with the whole buffers")  # noqa: E501
    .define("log.cleaner.dedupe.buffer.size", LONG, 128 * 1024 * 1024, int_in(), MEDIUM, "memory for the cleaners' offset maps (key hash -> last offset), all threads together")  # noqa: E501
    .define("log.cleaner.io.buffer.size", INT, 512 * 1024, int_in(0), MEDIUM, "memory for the cleaners' read and write buffers, all threads together")  # noqa: E501
    .define("log.cleaner.io.buffer.load.factor", DOUBLE, 0.9, _double, MEDIUM, "how full an offset map may become before a cleaning stops reading dirty segments")  # noqa: E501
    .define("log.cleaner.io.max.bytes.per.second", DOUBLE, DOUBLE_MAX_TEXT, _double, MEDIUM, "throttle: the cleaners read and write at most this many bytes per second on average")  # noqa: E501
    .define("log.cleaner.backoff.ms", LONG, 15_000, int_in(0), MEDIUM, "how long a cleaner sleeps when no log needs cleaning")  # noqa: E501
    .section("storage: producer state (Kafka's ProducerStateManagerConfig)")
    .define("producer.id.expiration.ms", INT, 86400000, int_in(1), LOW, "a partition forgets an idempotent producer whose last batch's timestamp is this old (never while its transaction is open); its next batch is taken as an unknown producer's, with any sequence. Set it at least to the producers' delivery.timeout.ms: an expired producer's retry is no longer recognised as a duplicate")  # noqa: E501
    .define("producer.id.expiration.check.interval.ms", INT, 600000, int_in(1), LOW, "how often each partition removes the producer ids producer.id.expiration.ms expired (Kafka: an internal key)")  # noqa: E501
)  # fmt: skip

_S_SETTING = SERVER_LOG_CONFIG.setting


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's log cleaner settings (Kafka's ``CleanerConfig``), from the ``log.cleaner.*``
    keys (defaults: their declarations). The per-topic compaction settings are in
    :class:`LogConfig`."""

    enable: bool = _S_SETTING("log.cleaner.enable")
    threads: int = _S_SETTING("log.cleaner.threads")
    dedupe_buffer_size: int = _S_SETTING("log.cleaner.dedupe.buffer.size")
    io_buffer_size: int = _S_SETTING("log.cleaner.io.buffer.size")
    dedupe_buffer_load_factor: float = _S_SETTING("log.cleaner.io.buffer.load.factor")
    io_max_bytes_per_second: float = _S_SETTING("log.cleaner.io.max.bytes.per.second")
    backoff_ms: int = _S_SETTING("log.cleaner.backoff.ms")

    @classmethod
    def from_broker_properties(cls, props: Mapping[str, str]) -> CleanerConfig:
        """The cleaner settings given in ``props`` (others ignored) over their defaults.
        Raises InvalidConfig naming the key of a malformed or out-of-range value, and Kafka's
        message when the offset map could not hold a single key."""
        changes: dict[str, object] = {}
        for key, attr in CLEANER_KEYS.items():
            if key in props:
                changes[attr] = _parse(SERVER_LOG_CONFIG, key, props[key])
        config = dataclasses.replace(cls(), **changes)  # type: ignore[arg-type]
        slots = config.dedupe_buffer_size // max(config.threads, 1) // 24  # MD5 + offset
        if config.enable and config.threads > 0 and slots * config.dedupe_buffer_load_factor < 1:
            raise InvalidConfig(  # Kafka's Cleaner refuses to start likewise
                "offset map is too small to fit in even a single message, so log cleaning "
                "will never make progress. You can increase log.cleaner.dedupe.buffer.size "
                "or decrease log.cleaner.threads"
            )
        return config


#: The broker keys of :class:`CleanerConfig` -> its attribute names.
CLEANER_KEYS: dict[str, str] = fields_by_key(CleanerConfig)


@dataclass(slots=True)
class ProducerStateManagerConfig:
    """Kafka's ``ProducerStateManagerConfig``: the broker's settings of the partitions'
    producer state. One instance is shared by the LogManager and every Log it opens, and is
    *mutable*: ``producer.id.expiration.ms`` is a dynamic broker config (Kafka's
    ``DynamicProducerStateManagerConfig``), and a change assigned here reaches every
    partition's next expiration check and snapshot load at once."""

    producer_id_expiration_ms: int = _S_SETTING("producer.id.expiration.ms")

    @classmethod
    def from_broker_properties(cls, props: Mapping[str, str]) -> ProducerStateManagerConfig:
        """The settings given in ``props`` (others ignored) over their defaults; InvalidConfig
        naming the key of a malformed or out-of-range value."""
        config = cls()
        config.update(props)
        return config

    def update(self, props: Mapping[str, str]) -> bool:
        """Take the values of ``props`` (the defaults for the keys it lacks); whether any
        changed. InvalidConfig as :meth:`from_broker_properties`, nothing changed then."""
        values = {
            attr: _parse(SERVER_LOG_CONFIG, key, props[key]) if key in props
            else SERVER_LOG_CONFIG.default(key)
            for key, attr in PRODUCER_STATE_KEYS.items()
        }  # fmt: skip
        changed = False
        for attr, value in values.items():
            if getattr(self, attr) != value:
                setattr(self, attr, value)
                changed = True
        return changed


#: The broker keys of :class:`ProducerStateManagerConfig` -> its attribute names.
PRODUCER_STATE_KEYS: dict[str, str] = fields_by_key(ProducerStateManagerConfig)

#: The coarser-unit broker keys: milliseconds per unit.
_UNIT_MS = {
    "log.roll.hours": 3_600_000,
    "log.roll.jitter.hours": 3_600_000,
    "log.retention.minutes": 60_000,
    "log.retention.hours": 3_600_000,
}


def broker_synonyms(topic_key: str) -> tuple[str, ...]:
    """The broker keys that supply ``topic_key``'s default, most specific first
    (``retention.ms`` -> ``log.retention.ms``, ``log.retention.minutes``,
    ``log.retention.hours``); empty for a key with no broker default in Sluice. DescribeConfigs
    lists them as the synonyms of a topic setting."""
    return _SYNONYMS.get(topic_key, ())


_SYNONYMS: dict[str, tuple[str, ...]] = {}
for _key in SERVER_LOG_CONFIG:
    if _key.synonym_of is not None:
        _SYNONYMS[_key.synonym_of] = (*_SYNONYMS.get(_key.synonym_of, ()), _key.name)

#: Topic-level name -> the broker-level name that supplies its default (the first synonym).
BROKER_KEYS: dict[str, str] = {topic: names[0] for topic, names in _SYNONYMS.items()}


def config_type(key: str) -> int:
    """Kafka's ``ConfigType`` code of a topic key."""
    return int(TOPIC_CONFIG[key].type)


def _shown(text: str) -> str:
    """A value in a message: a number or boolean as is, anything else quoted."""
    value = text.strip()
    return value if _PLAIN.fullmatch(value) else repr(text)


_PLAIN = re.compile(r"-?\d+|true|false")


_T_SETTING = TOPIC_CONFIG.setting


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The effective configuration of one partition log: one field per key of
    :data:`TOPIC_CONFIG`, defaulting to the declared default (Kafka's, storage spec §6).

    Immutable: to change a topic's config build a new one and hand it to ``Log.update_config``.
    """

    segment_bytes: int = _T_SETTING("segment.bytes")
    segment_ms: int = _T_SETTING("segment.ms")
    segment_jitter_ms: int = _T_SETTING("segment.jitter.ms")
    segment_index_bytes: int = _T_SETTING("segment.index.bytes")
    index_interval_bytes: int = _T_SETTING("index.interval.bytes")
    retention_ms: int = _T_SETTING("retention.ms")  # -1 = keep forever
    retention_bytes: int = _T_SETTING("retention.bytes")  # negative = unlimited
    max_message_bytes: int = _T_SETTING("max.message.bytes")
    message_timestamp_type: str = _T_SETTING("message.timestamp.type")
    flush_messages: int = _T_SETTING("flush.messages")  # LONG_MAX = never: the OS page cache
    flush_ms: int = _T_SETTING("flush.ms")
    cleanup_policy: str = _T_SETTING("cleanup.policy")
    file_delete_delay_ms: int = _T_SETTING("file.delete.delay.ms")
    delete_retention_ms: int = _T_SETTING("delete.retention.ms")
    min_compaction_lag_ms: int = _T_SETTING("min.compaction.lag.ms")
    max_compaction_lag_ms: int = _T_SETTING("max.compaction.lag.ms")
    min_cleanable_dirty_ratio: float = _T_SETTING("min.cleanable.dirty.ratio")
    unclean_leader_election_enable: bool = _T_SETTING("unclean.leader.election.enable")
    min_insync_replicas: int = _T_SETTING("min.insync.replicas")
    compression_type: str = _T_SETTING("compression.type")
    compression_gzip_level: int = _T_SETTING("compression.gzip.level")  # -1: zlib's 6
    compression_lz4_level: int = _T_SETTING("compression.lz4.level")
    compression_zstd_level: int = _T_SETTING("compression.zstd.level")
    preallocate: bool = _T_SETTING("preallocate")
    message_format_version: str = _T_SETTING("message.format.version")
    message_timestamp_difference_max_ms: int = _T_SETTING("message.timestamp.difference.max.ms")
    message_timestamp_before_max_ms: int = _T_SETTING("message.timestamp.before.max.ms")
    message_timestamp_after_max_ms: int = _T_SETTING("message.timestamp.after.max.ms")
    leader_replication_throttled_replicas: str = _T_SETTING("leader.replication.throttled.replicas")
    follower_replication_throttled_replicas: str = _T_SETTING(
        "follower.replication.throttled.replicas"
    )
    message_downconversion_enable: bool = _T_SETTING("message.downconversion.enable")
    remote_storage_enable: bool = _T_SETTING("remote.storage.enable")
    local_retention_ms: int = _T_SETTING("local.retention.ms")
    local_retention_bytes: int = _T_SETTING("local.retention.bytes")
    remote_log_copy_disable: bool = _T_SETTING("remote.log.copy.disable")
    remote_log_delete_on_disable: bool = _T_SETTING("remote.log.delete.on.disable")
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
    def compact(self) -> bool:
        """True when ``cleanup.policy`` holds ``compact``: the log cleaner keeps the last record
        of each key, and records without a key are refused."""
        return COMPACT in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """True when ``cleanup.policy`` holds ``delete``: retention by time and size applies."""
        return DELETE in self.cleanup_policy.split(",")

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
    def log_append_time(self) -> bool:
        """True when the broker stamps batches with its own clock (LogAppendTime)."""
        return self.message_timestamp_type == LOG_APPEND_TIME

    @classmethod
    def from_properties(cls, props: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """Overlay topic-level ``props`` (Kafka names) on ``base`` (default: Kafka's defaults).

        Raises InvalidConfig for an unknown name, a malformed or out-of-range value, a value
        that needs what Sluice does not implement (``remote.storage.enable=true``,
        ``preallocate=true``), or ``min.compaction.lag.ms`` above
        ``max.compaction.lag.ms`` (Kafka's check, with its message): the message says which.
        """
        changes: dict[str, object] = {}
        for key, raw in props.items():
            attr = TOPIC_KEYS.get(key)
            if attr is None:
                raise InvalidConfig(f"unknown or unsupported topic config {key!r}")
            changes[attr] = _parse(TOPIC_CONFIG, key, raw)
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
        """Build the broker-wide default from broker ``log.*`` names (:data:`SERVER_LOG_CONFIG`):
        each topic key from its most specific synonym given, else its default.

        Keys that are not log settings are ignored here: a broker config holds many other things.
        """
        topic_props: dict[str, str] = {}
        for topic_key, names in _SYNONYMS.items():
            for name in names:
                if name in props:
                    value = _parse(SERVER_LOG_CONFIG, name, props[name])
                    if name in _UNIT_MS:
                        value = int(value) * _UNIT_MS[name]  # type: ignore[call-overload]
                    topic_props[topic_key] = format_value(value)
                    break
        return cls.from_properties(topic_props)

    def to_properties(self) -> dict[str, str]:
        """Every setting under its topic-level Kafka name, as strings (as Kafka prints them)."""
        return {key: format_value(getattr(self, attr)) for key, attr in TOPIC_KEYS.items()}

    def overrides_against(self, base: LogConfig) -> dict[str, str]:
        """The topic-level settings whose value differs from ``base``."""
        mine, theirs = self.to_properties(), base.to_properties()
        return {k: v for k, v in mine.items() if theirs[k] != v}


def _parse(config: ConfigDef, key: str, raw: str) -> object:
    """The value of ``key`` declared in ``config``; InvalidConfig naming key, value and reason."""
    try:
        return config[key].parse(str(raw))
    except ValueError as exc:
        raise InvalidConfig(f"{key}={_shown(str(raw))}: {exc}") from None


#: Topic-level config name -> LogConfig attribute, in declaration order.
TOPIC_KEYS: dict[str, str] = {k.name: fields_by_key(LogConfig)[k.name] for k in TOPIC_CONFIG}
#: What each key does in Sluice (DescribeConfigs' documentation).
TOPIC_DOCS: dict[str, str] = {k.name: k.doc for k in TOPIC_CONFIG}
