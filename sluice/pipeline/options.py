"""The options of ``format("sluice")``, with the names of Spark's Kafka connector.

Spark hands a data source its options as a case-insensitive string mapping; :func:`parse`
turns them into one validated, picklable :class:`SourceOptions` on the driver, so a bad option
fails the query at analysis time with a message that names it, not later inside a task.

Read options (see Spark's "Structured Streaming + Kafka Integration Guide")::

    kafka.bootstrap.servers   host:port[,host:port]   required (network source/sink)
    subscribe                 topicA,topicB            exactly one of subscribe /
    subscribePattern          regex (whole topic name)   subscribePattern / assign
    assign                    {"topicA":[0,1]}
    startingOffsets           earliest | latest | JSON  batch default earliest, streaming latest
    endingOffsets             latest | JSON             batch only, default latest
    startingTimestamp         ms since epoch            first offset with timestamp >= it
    maxOffsetsPerTrigger      int                       streaming admission control
    minPartitions             int                       split ranges to at least this many tasks
    maxRecordsPerPartition    int                       split ranges above this many records
    includeHeaders            true | false              adds the ``headers`` column
    failOnDataLoss            true | false (true)       offsets gone to retention: fail or skip
    kafka.max.partition.fetch.bytes  int (1 MiB)        Fetch partition_max_bytes
    kafka.request.timeout.ms  int (30000)
    kafka.isolation.level     read_uncommitted | read_committed   (read_uncommitted, the Java
                              consumer's default, which Spark's Kafka source keeps): with
                              read_committed, ``latest`` is each partition's last stable offset
                              and aborted transactions' records are skipped

Write options: ``kafka.bootstrap.servers``, ``topic`` (default topic when rows have none),
``kafka.acks`` (-1/all, 1, 0; default all), ``kafka.batch.size`` (bytes per produced batch,
default 1 MiB), ``kafka.compression.type`` (none, gzip, snappy, lz4, zstd).

Security, read and write (passed through to the client as Spark's Kafka connector does with
every ``kafka.`` option; PEM files)::

    kafka.security.protocol   PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    kafka.sasl.mechanism      PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
    kafka.sasl.jaas.config    ... required username="..." password="...";
                              (or librdkafka's kafka.sasl.username / kafka.sasl.password)
    kafka.ssl.truststore.location / kafka.ssl.ca.location          CA certificates
    kafka.ssl.keystore.location / kafka.ssl.certificate.location   client certificate (mTLS)
    kafka.ssl.key.location, kafka.ssl.key.password, kafka.ssl.endpoint.identification.algorithm

They are checked on the driver (a bad protocol, mechanism or file fails the query there) and
never appear in a repr of the parsed options.

``sluice-segments`` reads ``path`` (the broker's ``log.dirs`` directory) and accepts
``subscribe`` / ``subscribePattern`` / ``assign`` (one is required), ``includeHeaders``,
``failOnDataLoss`` and ``kafka.isolation.level`` (read_committed: up to each partition's last
stable offset as its files leave it, aborted transactions skipped; see ``segments``).

Any other key is refused, naming it (:func:`check_keys`): Spark hands a data source every
``.option()`` given, and a Kafka option this source does not act on (``kafka.group.id``,
``startingOffsetsByTimestamp``, a misspelt ``startingOffset``) would otherwise be dropped in
silence and the query would read something else than asked. Keys that only Spark uses
(``checkpointLocation`` on a streaming write) are accepted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from .offsets import EARLIEST, LATEST, OptionError, PartitionOffsets, parse_partition_offsets

DEFAULT_MAX_RECORDS_PER_PARTITION = 2_000_000
DEFAULT_PARTITION_FETCH_BYTES = 1 << 20
COMPRESSION_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

_SUBSCRIPTION_KEYS = ("subscribe", "subscribePattern", "assign")
#: The client's security properties (``ClientSecurity.from_properties``), ``kafka.``-prefixed.
SECURITY_KEYS = tuple(f"kafka.{key}" for key in (
    "security.protocol", "sasl.mechanism", "sasl.jaas.config", "sasl.username", "sasl.password",
    "ssl.truststore.location", "ssl.ca.location", "ssl.keystore.location",
    "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
))  # fmt: skip
#: The keys each format understands (Spark's option names are case-insensitive).
SOURCE_KEYS = (
    "kafka.bootstrap.servers", *_SUBSCRIPTION_KEYS, "startingOffsets", "endingOffsets",
    "startingTimestamp", "maxOffsetsPerTrigger", "minPartitions", "maxRecordsPerPartition",
    "includeHeaders", "failOnDataLoss", "kafka.max.partition.fetch.bytes",
    "kafka.request.timeout.ms", "kafka.isolation.level", *SECURITY_KEYS,
)  # fmt: skip
SEGMENTS_KEYS = (
    "path", *_SUBSCRIPTION_KEYS, "includeHeaders", "failOnDataLoss", "kafka.isolation.level",
)  # fmt: skip
SINK_KEYS = (
    "kafka.bootstrap.servers", "topic", "kafka.acks", "kafka.batch.size",
    "kafka.compression.type", "kafka.request.timeout.ms",
    "checkpointLocation",  # Spark's own (streaming writes), passed to the sink too
    *SECURITY_KEYS,
)  # fmt: skip
_NO_GROUP = (
    "this source reads without a consumer group: offsets live in Spark's checkpoint, and no "
    "group would be joined or committed to"
)
#: Options of Spark's Kafka connector that Sluice's formats do not honour, with what to do.
UNSUPPORTED = {
    "startingOffsetsByTimestamp": "per-partition timestamps are not supported; "
    "startingTimestamp takes one timestamp for every partition",
    "startingOffsetsByTimestampStrategy": "per-partition timestamps are not supported",
    "endingTimestamp": "ending at a timestamp is not supported; use endingOffsets",
    "endingOffsetsByTimestamp": "ending at a timestamp is not supported; use endingOffsets",
    "kafka.group.id": _NO_GROUP,
    "groupIdPrefix": _NO_GROUP,
    "minOffsetsPerTrigger": "use maxOffsetsPerTrigger",
    "maxTriggerDelay": "use maxOffsetsPerTrigger",
    "kafka.auto.offset.reset": "set the source option startingOffsets instead",
}
_UNSUPPORTED_BY_LOWER = {k.lower(): (k, hint) for k, hint in UNSUPPORTED.items()}
_SECURITY_LOWER = tuple(k.lower() for k in SECURITY_KEYS)


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which partitions to read: ``subscribe`` (topics), ``subscribePattern`` or ``assign``."""

    kind: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()

    def topics_of_interest(self) -> list[str] | None:
        """Topic names to ask Metadata for, or None for all (pattern subscriptions)."""
        if self.kind == "subscribe":
            return list(self.topics)
        if self.kind == "assign":
            return sorted({t for t, _ in self.assigned})
        return None

    def select(self, partition_counts: Mapping[str, int]) -> list[tuple[str, int]]:
        """The (topic, partition) pairs this subscription reads, given each topic's partitions.

        ``subscribe``/``assign`` name topics that must exist (else OptionError, as the Kafka
        source fails on an unknown assigned topic); a pattern matches whole names.
        """
        if self.kind == "subscribePattern":
            rx = re.compile(self.pattern or "")
            return [
                (t, p)
                for t in sorted(partition_counts)
                if rx.fullmatch(t)
                for p in range(partition_counts[t])
            ]
        if self.kind == "subscribe":
            missing = [t for t in self.topics if t not in partition_counts]
            if missing:
                raise OptionError(f"subscribe: unknown topic(s) {', '.join(missing)}")
            return [(t, p) for t in self.topics for p in range(partition_counts[t])]
        out = []
        for t, p in self.assigned:
            if p >= partition_counts.get(t, 0):
                raise OptionError(f"assign: {t}-{p} does not exist")
            out.append((t, p))
        return out


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """``earliest``, ``latest``, a timestamp, or specific offsets (-2/-1 allowed per partition).

    ``default`` applies to partitions not named in ``specific`` (Kafka: a partition missing from
    a JSON startingOffsets is an error for subscribe; we use the default, which is kinder and
    what the streaming source needs for partitions added later).
    """

    default: int  # EARLIEST or LATEST
    specific: PartitionOffsets = field(default_factory=dict)
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Every read option, parsed and validated (picklable: shipped to executors)."""

    bootstrap: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    max_records_per_partition: int | None
    include_headers: bool
    fail_on_data_loss: bool
    fetch_bytes: int
    timeout_s: float
    path: str | None = None
    #: Fetch/ListOffsets isolation level: 0 read_uncommitted, 1 read_committed
    isolation_level: int = 0
    #: Kafka client properties for TLS/SASL (``security.protocol``...); may hold passwords.
    security: tuple[tuple[str, str], ...] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True)
class SinkOptions:
    bootstrap: str
    topic: str | None
    acks: int
    batch_bytes: int
    compression: int
    timeout_s: float
    #: Kafka client properties for TLS/SASL (``security.protocol``...); may hold passwords.
    security: tuple[tuple[str, str], ...] = field(default=(), repr=False)


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def check_keys(options: Mapping[str, str], known: tuple[str, ...], fmt: str) -> None:
    """Refuse every key of ``options`` not in ``known`` (case-insensitive), naming it."""
    allowed = {k.lower() for k in known}
    for key in options:
        lower = str(key).lower()
        if lower in allowed:
            continue
        if lower in _UNSUPPORTED_BY_LOWER:  # named as documented: Spark may lower-case keys
            name, hint = _UNSUPPORTED_BY_LOWER[lower]
            raise OptionError(f'{name} is not supported by format("{fmt}"): {hint}')
        raise OptionError(
            f'{key} is not an option of format("{fmt}"), which takes {", ".join(known)}'
        )


def _isolation(opts: Mapping[str, str]) -> int:
    raw = opts.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if raw not in ("read_uncommitted", "read_committed"):
        raise OptionError(
            f"kafka.isolation.level must be read_uncommitted or read_committed, not {raw!r}"
        )
    return 1 if raw == "read_committed" else 0


def _int(opts: Mapping[str, str], key: str, default: int | None, *, minimum: int) -> int | None:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"{key}: {raw!r} is not an integer") from None
    if value < minimum:
        raise OptionError(f"{key}: {value} is below {minimum}")
    return value


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise OptionError(f"{key}: {raw!r} is not true or false")


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        raise OptionError(
            "exactly one of subscribe, subscribePattern, assign is required"
            + (f" (got {', '.join(given)})" if given else "")
        )
    key = given[0]
    value = opts[key].strip()
    if key == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError("subscribe: no topic given")
        return Subscription("subscribe", topics=topics)
    if key == "subscribepattern":
        try:
            re.compile(value)
        except re.error as exc:
            raise OptionError(f"subscribePattern: {exc}") from None
        return Subscription("subscribePattern", pattern=value)
    try:
        doc = json.loads(value)
    except json.JSONDecodeError as exc:
        raise OptionError(f'assign: expected {{"topic":[0,1]}}, {exc.msg}') from None
    if not isinstance(doc, dict) or not all(
        isinstance(ps, list) and all(isinstance(p, int) and p >= 0 for p in ps)
        for ps in doc.values()
    ):
        raise OptionError(f'assign: expected {{"topic":[0,1]}}, got {value!r}')
    pairs = tuple(sorted({(str(t), int(p)) for t, ps in doc.items() for p in ps}))
    if not pairs:
        raise OptionError("assign: no partition given")
    return Subscription("assign", assigned=pairs)


def _security(opts: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The ``kafka.``-prefixed security options as client properties, checked here (on the
    driver) by building the client's settings from them."""
    from .wire import client_security

    prefix = len("kafka.")
    props = tuple(sorted((key[prefix:], opts[key]) for key in _SECURITY_LOWER if key in opts))
    try:
        client_security(props)
    except (ValueError, OSError) as exc:
        raise OptionError(f"kafka.security.protocol / kafka.sasl.* / kafka.ssl.*: {exc}") from None
    return props


def _offset_spec(opts: Mapping[str, str], key: str, default: int, *, ending: bool) -> OffsetSpec:
    raw = opts.get(key.lower())
    if raw is None:
        return OffsetSpec(default)
    text = raw.strip()
    if text.lower() == "earliest":
        if ending:
            raise OptionError(f"{key}: earliest is not a valid ending offset")
        return OffsetSpec(EARLIEST)
    if text.lower() == "latest":
        return OffsetSpec(LATEST)
    specific = parse_partition_offsets(text, option=key)
    if ending and any(v == EARLIEST for v in specific.values()):
        raise OptionError(f"{key}: -2 (earliest) is not a valid ending offset")
    return OffsetSpec(default, specific)


def parse(options: Mapping[str, str], *, streaming: bool, segments: bool = False) -> SourceOptions:
    """Validate the read options of ``sluice`` (``streaming`` picks the Kafka connector's
    defaults) or, with ``segments``, of ``sluice-segments`` (no broker: no bootstrap)."""
    if segments:
        check_keys(options, SEGMENTS_KEYS, "sluice-segments")
    else:
        check_keys(options, SOURCE_KEYS, "sluice")
    opts = _lower(options)
    bootstrap = opts.get("kafka.bootstrap.servers", "")
    if not segments and not bootstrap.strip():
        raise OptionError("kafka.bootstrap.servers is required")
    starting = _offset_spec(
        opts, "startingOffsets", LATEST if streaming else EARLIEST, ending=False
    )
    if not streaming and starting.default == LATEST and "startingoffsets" in opts:
        raise OptionError("startingOffsets: latest is not valid for a batch query")
    ts = _int(opts, "startingTimestamp", None, minimum=0)
    if ts is not None:
        starting = OffsetSpec(starting.default, {}, ts)
    if streaming and "endingoffsets" in opts:
        raise OptionError("endingOffsets is for batch queries only")
    ending = _offset_spec(opts, "endingOffsets", LATEST, ending=True)
    return SourceOptions(
        bootstrap=bootstrap.strip(),
        subscription=_subscription(opts),
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_int(opts, "maxOffsetsPerTrigger", None, minimum=1),
        min_partitions=_int(opts, "minPartitions", None, minimum=1),
        max_records_per_partition=_int(
            opts, "maxRecordsPerPartition", DEFAULT_MAX_RECORDS_PER_PARTITION, minimum=1
        ),
        include_headers=_bool(opts, "includeHeaders", False),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        fetch_bytes=_int(
            opts, "kafka.max.partition.fetch.bytes", DEFAULT_PARTITION_FETCH_BYTES, minimum=1024
        )
        or DEFAULT_PARTITION_FETCH_BYTES,
        timeout_s=(_int(opts, "kafka.request.timeout.ms", 30000, minimum=1) or 30000) / 1000,
        isolation_level=_isolation(opts),
        path=opts.get("path"),
        security=() if segments else _security(opts),
    )


def parse_sink(options: Mapping[str, str]) -> SinkOptions:
    """Validate the write options."""
    check_keys(options, SINK_KEYS, "sluice")
    opts = _lower(options)
    bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise OptionError("kafka.bootstrap.servers is required")
    acks_raw = opts.get("kafka.acks", "all").strip().lower()
    acks_map = {"all": -1, "-1": -1, "1": 1, "0": 0}
    if acks_raw not in acks_map:
        raise OptionError(f"kafka.acks: {acks_raw!r} is not all, -1, 1 or 0")
    codec = opts.get("kafka.compression.type", "none").strip().lower()
    if codec not in COMPRESSION_CODECS:
        raise OptionError(
            f"kafka.compression.type: {codec!r} is not one of {list(COMPRESSION_CODECS)}"
        )
    return SinkOptions(
        bootstrap=bootstrap,
        topic=opts.get("topic") or None,
        acks=acks_map[acks_raw],
        batch_bytes=_int(opts, "kafka.batch.size", 1 << 20, minimum=1) or 1 << 20,
        compression=COMPRESSION_CODECS[codec],
        timeout_s=(_int(opts, "kafka.request.timeout.ms", 30000, minimum=1) or 30000) / 1000,
        security=_security(opts),
    )
