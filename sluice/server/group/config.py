"""The group coordinator's broker keys (``group.*``, ``offsets.*``) and :class:`GroupConfig`.

Declared here, apart from the coordinator, so that the broker's ``Config`` can collect and
validate them without importing the coordinator (which a broker needs only once a group
request arrives). ``offsets.topic.num.partitions`` defaults to Kafka's 50 in a cluster, so
that group coordination spreads over the brokers (a group's coordinator is the leader of its
partition, ``abs(hash(group)) % n``); a standalone broker that does not set it uses
:data:`STANDALONE_OFFSETS_TOPIC_PARTITIONS` (1): it is every partition's leader anyway, and one
partition is fewer files to create and load. Either way an existing ``__consumer_offsets``
keeps its partition count (the coordinator reads it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from sluice.server.config_def import HIGH, INT, LONG, MEDIUM, ConfigDef, int_in, typed_values

GROUP_CONFIG = (
    ConfigDef()
    .section("consumer groups and committed offsets")
    .define("group.initial.rebalance.delay.ms", INT, 3000, int_in(0), MEDIUM, "wait this long for more members before the first rebalance of an empty group")  # noqa: E501
    .define("group.min.session.timeout.ms", INT, 6000, int_in(1), MEDIUM, "smallest session timeout")  # noqa: E501
    .define("group.max.session.timeout.ms", INT, 1800000, int_in(1), MEDIUM, "largest session timeout")  # noqa: E501
    .define("group.max.size", INT, 2147483647, int_in(1), MEDIUM, "members per group")
    .define("offsets.topic.num.partitions", INT, 50, int_in(1), HIGH, "partitions of __consumer_offsets, fixed once it exists (a standalone broker that does not set it uses 1)")  # noqa: E501
    .define("offsets.topic.replication.factor", INT, 3, int_in(1), HIGH, "replicas of __consumer_offsets in a cluster (standalone: 1); created when that many brokers live")  # noqa: E501
    .define("offsets.retention.minutes", INT, 10080, int_in(1), HIGH, "committed offsets of an empty group expire after this long")  # noqa: E501
    .define("offsets.retention.check.interval.ms", LONG, 600000, int_in(1), HIGH, "how often expired offsets are removed")  # noqa: E501
    .define("offset.metadata.max.bytes", INT, 4096, int_in(0), HIGH, "largest commit metadata string")  # noqa: E501
    .define("offsets.commit.timeout.ms", INT, 5000, int_in(1), HIGH, "an offset commit or group write waits this long for the offsets topic's replicas")  # noqa: E501
    .define("offsets.commit.required.acks", INT, -1, int_in(-1, 1), HIGH, "acks of the coordinator's writes to the offsets topic (keep -1)")  # noqa: E501
    .define("offsets.load.buffer.size", INT, 5242880, int_in(1), HIGH, "bytes read per step when loading an offsets partition")  # noqa: E501
    .define("offsets.topic.segment.bytes", INT, 104857600, int_in(1), HIGH, "segment.bytes of __consumer_offsets (kept small for faster compaction and loads)")  # noqa: E501
    .define("offsets.topic.compression.codec", INT, 0, int_in(0, 4), HIGH, "codec of the coordinator's batches to __consumer_offsets (Kafka's ids: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)")  # noqa: E501
)  # fmt: skip

_setting = GROUP_CONFIG.setting

#: ``offsets.topic.num.partitions`` of a standalone broker that does not set it.
STANDALONE_OFFSETS_TOPIC_PARTITIONS = 1


@dataclass(frozen=True)
class GroupConfig:
    """The coordinator's settings, typed: one field per key of :data:`GROUP_CONFIG`."""

    initial_rebalance_delay_ms: int = _setting("group.initial.rebalance.delay.ms")
    min_session_timeout_ms: int = _setting("group.min.session.timeout.ms")
    max_session_timeout_ms: int = _setting("group.max.session.timeout.ms")
    offsets_topic_num_partitions: int = _setting("offsets.topic.num.partitions")
    #: Cluster mode: replicas of ``__consumer_offsets``; FindCoordinator answers
    #: COORDINATOR_NOT_AVAILABLE until that many brokers are alive to create it (Kafka's rule).
    offsets_topic_replication_factor: int = _setting("offsets.topic.replication.factor")
    offsets_retention_ms: int = _setting("offsets.retention.minutes", scale=60_000)
    offsets_retention_check_interval_ms: int = _setting("offsets.retention.check.interval.ms")
    offset_metadata_max_bytes: int = _setting("offset.metadata.max.bytes")
    max_size: int = _setting("group.max.size")
    offsets_topic_segment_bytes: int = _setting("offsets.topic.segment.bytes")
    #: Compression of the coordinator's batches (the topic itself is ``compression.type``
    #: ``producer``, so they are stored as written), as Kafka's ``offsetsTopicCompressionType``.
    offsets_topic_compression_codec: int = _setting("offsets.topic.compression.codec")
    offsets_commit_timeout_ms: int = _setting("offsets.commit.timeout.ms")
    offsets_commit_required_acks: int = _setting("offsets.commit.required.acks")
    offsets_load_buffer_size: int = _setting("offsets.load.buffer.size")

    @classmethod
    def from_properties(cls, props: Mapping[str, str], *, cluster: bool = True) -> GroupConfig:
        """From broker properties (Kafka names; other keys are left out); ``cluster``: False
        for a standalone broker (the module docstring has its offsets topic default). Raises
        :class:`sluice.server.config_def.ConfigError` (a ValueError) for an invalid value."""
        config = cls(**typed_values(cls, GROUP_CONFIG.parse(props)))
        if not cluster and "offsets.topic.num.partitions" not in props:
            config = dataclasses.replace(
                config, offsets_topic_num_partitions=STANDALONE_OFFSETS_TOPIC_PARTITIONS
            )
        return config
