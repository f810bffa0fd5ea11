"""Per-topic log configuration, with Kafka's names, defaults and validation.

A :class:`LogConfig` is immutable. Every attribute corresponds to one Kafka *topic-level* config
name (``segment.bytes`` -> ``segment_bytes``) and, through :data:`BROKER_KEYS`, to the broker-level
``log.*`` name that supplies its default. A topic's effective config is the broker default
(:meth:`LogConfig.from_broker_properties`) overlaid with the topic's overrides
(:meth:`LogConfig.from_properties` with ``base=``). Values are validated the way Kafka validates
them; anything wrong (unknown name, not an integer, out of range, a policy Sluice does not
implement) raises :class:`sluice.protocol.errors.InvalidConfig` with a message naming the key, so
that
nothing is silently ignored.

"Never" for ``flush.messages`` / ``flush.ms`` is Kafka's ``Long.MAX_VALUE``, kept as is so that
:meth:`LogConfig.to_properties` round-trips and DescribeConfigs shows what Kafka would show.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sluice.protocol.config_def import ConfigKey, int_in, one_of, string
from sluice.protocol.errors import InvalidConfig

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)

# A v2 batch header is 61 bytes, but Kafka's lower bound for segment.bytes is the v0 record
# overhead (14); keep Kafka's bound so configs valid there are valid here (tests use tiny segments).
MIN_SEGMENT_BYTES = 14

# Topic-level config name -> attribute name. The order is the order of to_properties().
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
}

# Topic-level name -> the broker-level name that provides its default (Kafka's LogConfig mapping).
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
}

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
    ConfigKey("log.cleanup.policy", string, "delete", "delete (compaction is not implemented)"),
    ConfigKey(
        "log.segment.delete.delay.ms",
        int_in(0),
        "60000",
        "delay between renaming a segment to .deleted and removing it",
    ),
)

# Broker keys given in coarser units; the finer key wins when both are set (Kafka's precedence:
# log.retention.ms > log.retention.minutes > log.retention.hours).
_BROKER_UNIT_FALLBACKS: dict[str, tuple[tuple[str, int], ...]] = {
    "segment.ms": (("log.roll.hours", 3_600_000),),
    "segment.jitter.ms": (("log.roll.jitter.hours", 3_600_000),),
    "retention.ms": (("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)),
}


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

    @property
    def log_append_time(self) -> bool:
        """True when the broker stamps batches with its own clock (LogAppendTime)."""
        return self.message_timestamp_type == LOG_APPEND_TIME

    @classmethod
    def from_properties(cls, props: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """Overlay topic-level ``props`` (Kafka names) on ``base`` (default: Kafka's defaults).

        Raises InvalidConfig for an unknown name, a malformed or out-of-range value, or
        ``cleanup.policy=compact`` (log compaction is not implemented).
        """
        changes: dict[str, object] = {}
        for key, raw in props.items():
            attr = TOPIC_KEYS.get(key)
            if attr is None:
                raise InvalidConfig(f"unknown or unsupported topic config {key!r}")
            changes[attr] = _parse_value(key, raw)
        return dataclasses.replace(base or cls(), **changes)  # type: ignore[arg-type]

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
        """Every setting under its topic-level Kafka name, as strings."""
        return {key: str(getattr(self, attr)) for key, attr in TOPIC_KEYS.items()}

    def overrides_against(self, base: LogConfig) -> dict[str, str]:
        """The topic-level settings whose value differs from ``base``."""
        mine, theirs = self.to_properties(), base.to_properties()
        return {k: v for k, v in mine.items() if theirs[k] != v}


def _parse_value(key: str, raw: str) -> int | str:
    value = str(raw).strip()
    if key == "message.timestamp.type":
        if value not in TIMESTAMP_TYPES:
            raise InvalidConfig(f"{key}={raw!r}: must be one of {', '.join(TIMESTAMP_TYPES)}")
        return value
    if key == "cleanup.policy":
        policies = [p.strip() for p in value.split(",") if p.strip()]
        if not policies or any(p not in ("delete", "compact") for p in policies):
            raise InvalidConfig(f"{key}={raw!r}: must be 'delete' (or 'compact', unsupported)")
        if "compact" in policies:
            raise InvalidConfig(
                f"{key}={raw!r}: log compaction is not implemented by Sluice; use 'delete'"
            )
        return "delete"
    number = _parse_int(key, value)
    _INT_CHECKS[key](key, number)
    return number
