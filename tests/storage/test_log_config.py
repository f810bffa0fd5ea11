"""LogConfig: Kafka names, defaults, validation, broker-key mapping."""

from __future__ import annotations

import sys

import pytest

from sluice.protocol.errors import InvalidConfig
from sluice.server.storage.log_config import (
    BROKER_KEYS,
    LONG_MAX,
    TOPIC_DOCS,
    TOPIC_KEYS,
    CleanerConfig,
    LogConfig,
    broker_synonyms,
)


def test_defaults_are_kafkas() -> None:
    props = LogConfig().to_properties()
    assert props["segment.bytes"] == "1073741824"
    assert props["segment.ms"] == "604800000"
    assert props["segment.index.bytes"] == "10485760"
    assert props["index.interval.bytes"] == "4096"
    assert props["retention.ms"] == "604800000"
    assert props["retention.bytes"] == "-1"
    assert props["max.message.bytes"] == "1048588"
    assert props["message.timestamp.type"] == "CreateTime"
    assert props["flush.messages"] == str(LONG_MAX)
    assert props["file.delete.delay.ms"] == "60000"
    assert props["cleanup.policy"] == "delete"
    assert props["compression.type"] == "producer"
    assert props["min.insync.replicas"] == "1"
    assert props["min.cleanable.dirty.ratio"] == "0.5"
    assert props["message.downconversion.enable"] == "true"
    assert props["preallocate"] == "false"
    assert props["local.retention.ms"] == "-2"
    assert props["message.format.version"] == "3.0-IV1"
    assert props["leader.replication.throttled.replicas"] == ""
    assert set(props) == set(TOPIC_KEYS) == set(TOPIC_DOCS)
    assert set(BROKER_KEYS) <= set(TOPIC_KEYS)
    assert not LogConfig().conform_on_append  # the default append path does nothing more


#: Every topic config key of Kafka 3.9's LogConfig (TopicConfig + QuotaConfig's throttled
#: replicas + the deprecated message.format.version / timestamp difference), as listed there.
KAFKA_TOPIC_KEYS = {
    "segment.bytes", "segment.ms", "segment.jitter.ms", "segment.index.bytes", "flush.messages",
    "flush.ms", "retention.bytes", "retention.ms", "max.message.bytes", "index.interval.bytes",
    "delete.retention.ms", "min.compaction.lag.ms", "max.compaction.lag.ms",
    "file.delete.delay.ms", "min.cleanable.dirty.ratio", "cleanup.policy",
    "unclean.leader.election.enable", "min.insync.replicas", "compression.type",
    "compression.gzip.level", "compression.lz4.level", "compression.zstd.level", "preallocate",
    "message.format.version", "message.timestamp.type", "message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.after.max.ms",
    "leader.replication.throttled.replicas", "follower.replication.throttled.replicas",
    "message.downconversion.enable", "remote.storage.enable", "local.retention.ms",
    "local.retention.bytes", "remote.log.copy.disable", "remote.log.delete.on.disable",
}  # fmt: skip


def test_every_kafka_topic_key_is_known() -> None:
    assert set(TOPIC_KEYS) == KAFKA_TOPIC_KEYS


@pytest.mark.parametrize(
    ("key", "value", "attr", "parsed"),
    [
        ("compression.type", "zstd", "target_codec", 4),
        ("compression.type", "uncompressed", "target_codec", 0),
        ("compression.type", "producer", "target_codec", None),
        ("compression.gzip.level", "9", "compression_gzip_level", 9),
        ("compression.gzip.level", "-1", "compression_gzip_level", -1),
        ("compression.lz4.level", "17", "compression_lz4_level", 17),
        ("compression.zstd.level", "-5", "compression_zstd_level", -5),
        ("min.insync.replicas", "2", "min_insync_replicas", 2),
        ("min.cleanable.dirty.ratio", "0.75", "min_cleanable_dirty_ratio", 0.75),
        ("delete.retention.ms", "1000", "delete_retention_ms", 1000),
        ("max.compaction.lag.ms", "1", "max_compaction_lag_ms", 1),
        ("unclean.leader.election.enable", "TRUE", "unclean_leader_election_enable", True),
        ("message.downconversion.enable", "false", "message_downconversion_enable", False),
        ("message.format.version", "2.8-IV1", "message_format_version", "2.8-IV1"),
        ("message.timestamp.difference.max.ms", "5000", "timestamp_before_max_ms", 5000),
        ("message.timestamp.after.max.ms", "7", "timestamp_after_max_ms", 7),
        ("preallocate", "false", "preallocate", False),
        ("remote.storage.enable", "false", "remote_storage_enable", False),
        ("local.retention.bytes", "-2", "local_retention_bytes", -2),
        ("remote.log.copy.disable", "true", "remote_log_copy_disable", True),
        ("leader.replication.throttled.replicas", "", "leader_replication_throttled_replicas", ""),
        (
            "leader.replication.throttled.replicas",
            "*",
            "leader_replication_throttled_replicas",
            "*",
        ),
        (
            "follower.replication.throttled.replicas",
            " 0:1, 2:3 ",
            "follower_replication_throttled_replicas",
            "0:1, 2:3",
        ),
    ],
)
def test_kafka_keys_parse(key: str, value: str, attr: str, parsed: object) -> None:
    cfg = LogConfig.from_properties({key: value})
    assert getattr(cfg, attr) == parsed
    assert LogConfig.from_properties(cfg.to_properties()) == cfg


def test_conform_on_append_follows_compression_and_timestamp_bounds() -> None:
    assert LogConfig.from_properties({"compression.type": "gzip"}).conform_on_append
    assert LogConfig.from_properties({"message.timestamp.before.max.ms": "1"}).conform_on_append
    assert LogConfig.from_properties({"cleanup.policy": "compact,delete"}).conform_on_append
    relaxed = LogConfig.from_properties({"compression.type": "producer", "preallocate": "false"})
    assert not relaxed.conform_on_append


def test_from_properties_overlays_base_and_round_trips() -> None:
    base = LogConfig(segment_bytes=5000)
    cfg = LogConfig.from_properties(
        {"retention.ms": "-1", "message.timestamp.type": "LogAppendTime"}, base
    )
    assert cfg.segment_bytes == 5000
    assert cfg.retention_ms == -1
    assert cfg.log_append_time
    assert LogConfig.from_properties(cfg.to_properties()) == cfg
    assert cfg.overrides_against(base) == {
        "retention.ms": "-1",
        "message.timestamp.type": "LogAppendTime",
    }


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("segment.bytes", "13", "segment.bytes"),
        ("segment.bytes", "abc", "not an integer"),
        ("segment.ms", "0", "segment.ms"),
        ("retention.ms", "-2", "retention.ms"),
        ("flush.messages", "0", "flush.messages"),
        ("message.timestamp.type", "WallClock", "message.timestamp.type"),
        ("cleanup.policy", "shred", "cleanup.policy"),
        ("cleanup.policy", "compact,shred", "cleanup.policy"),
        ("cleanup.policy", " , ", "cleanup.policy"),
        ("min.compaction.lag.ms", "-1", "min.compaction.lag.ms"),
        ("delete.retention.ms", "-1", "delete.retention.ms"),
        ("min.cleanable.dirty.ratio", "-0.1", "min.cleanable.dirty.ratio"),
        ("min.cleanable.dirty.ratio", "half", "min.cleanable.dirty.ratio"),
        ("min.insync.replicas", "0", "min.insync.replicas"),
        ("sluice.no.such.key", "1", "unknown or unsupported"),
        ("compression.type", "brotli", "compression.type"),
        ("compression.gzip.level", "0", "compression.gzip.level"),
        ("compression.lz4.level", "18", "compression.lz4.level"),
        ("compression.zstd.level", "23", "compression.zstd.level"),
        ("min.cleanable.dirty.ratio", "1.5", "min.cleanable.dirty.ratio"),
        ("unclean.leader.election.enable", "yes", "true or false"),
        ("message.format.version", "latest", "message.format.version"),
        ("max.compaction.lag.ms", "0", "max.compaction.lag.ms"),
        ("local.retention.ms", "-3", "local.retention.ms"),
        ("preallocate", "true", "preallocation is not implemented"),
        ("remote.storage.enable", "true", "tiered (remote) storage is not implemented"),
        ("leader.replication.throttled.replicas", "*,0:1", "must be the literal '*' or a list"),
        ("follower.replication.throttled.replicas", "0-1", "[partitionId]:[brokerId]"),
        ("follower.replication.throttled.replicas", "0:1,", "[partitionId]:[brokerId]"),
    ],
)
def test_invalid_values_raise_invalid_config(key: str, value: str, fragment: str) -> None:
    with pytest.raises(InvalidConfig) as info:
        LogConfig.from_properties({key: value})
    assert fragment in str(info.value)
    assert info.value.code == 40


def test_broker_properties_mapping_and_unit_precedence() -> None:
    cfg = LogConfig.from_broker_properties(
        {
            "log.segment.bytes": "2048",
            "log.roll.hours": "2",
            "log.retention.hours": "1",
            "log.retention.minutes": "3",
            "message.max.bytes": "999",
            "log.flush.interval.messages": "10",
            "log.segment.delete.delay.ms": "0",
            "broker.id": "7",  # not a log setting: ignored here
        }
    )
    assert cfg.segment_bytes == 2048
    assert cfg.segment_ms == 2 * 3_600_000
    assert cfg.retention_ms == 3 * 60_000  # minutes beats hours
    assert cfg.max_message_bytes == 999
    assert cfg.flush_messages == 10
    assert cfg.file_delete_delay_ms == 0
    ms_wins = LogConfig.from_broker_properties(
        {"log.retention.ms": "5", "log.retention.hours": "1"}
    )
    assert ms_wins.retention_ms == 5


def test_broker_properties_validated_too() -> None:
    with pytest.raises(InvalidConfig):
        LogConfig.from_broker_properties({"log.cleanup.policy": "shred"})
    with pytest.raises(InvalidConfig):
        LogConfig.from_broker_properties({"log.cleaner.min.cleanable.ratio": "2"})
    with pytest.raises(InvalidConfig):
        LogConfig.from_broker_properties({"log.retention.hours": "x"})


def test_declared_broker_defaults_are_the_log_config_defaults() -> None:
    from sluice.server.config_def import fields_by_key
    from sluice.server.storage.log_config import SERVER_LOG_CONFIG, TOPIC_CONFIG, broker_synonyms

    assert list(fields_by_key(LogConfig)) == TOPIC_CONFIG.names() == list(TOPIC_KEYS)
    defaults = {k.name: k.default for k in SERVER_LOG_CONFIG if k.default is not None}
    assert LogConfig.from_broker_properties(defaults) == LogConfig()
    assert CleanerConfig.from_broker_properties(defaults) == CleanerConfig()
    assert LogConfig() == LogConfig.from_properties(
        {k.name: k.default for k in TOPIC_CONFIG if k.default is not None}
    )
    for key in SERVER_LOG_CONFIG:  # a broker key supplying a topic key's default is its synonym
        if key.synonym_of is not None:
            assert key.synonym_of in TOPIC_CONFIG and key.name in broker_synonyms(key.synonym_of)
    assert broker_synonyms("retention.ms") == (
        "log.retention.ms", "log.retention.minutes", "log.retention.hours",
    )  # fmt: skip
    assert BROKER_KEYS["max.message.bytes"] == "message.max.bytes"
    # a broker key is validated as its topic key is, and the message names the broker key
    with pytest.raises(InvalidConfig, match=r"log\.segment\.bytes=13: must be in \[14, "):
        LogConfig.from_broker_properties({"log.segment.bytes": "13"})


def test_messages_name_key_and_value() -> None:
    for props, message in [
        ({"segment.bytes": "13"}, "segment.bytes=13: must be in [14, 2147483647]"),
        ({"segment.bytes": "abc"}, "segment.bytes='abc': not an integer"),
        ({"preallocate": "true"}, "preallocate=true: segment preallocation is not implemented"),
        ({"compression.type": "brotli"}, "compression.type='brotli': must be one of"),
    ]:
        with pytest.raises(InvalidConfig) as info:
            LogConfig.from_properties(props)
        assert str(info.value.args[0]).startswith(message)


@pytest.mark.parametrize(
    "value",
    [
        # Kafka 3.9's MetadataVersion names, full and short, and what fromVersionString reduces
        # to one: the first three parts of a 0.x name, the first two of any other.
        "0.8.0", "0.8.2", "0.9.0", "0.10.0", "0.10.0-IV0", "0.10.0-IV1", "0.10.0.0",
        "0.10.0.x", "0.10.1-IV2", "0.10.2", "0.11.0", "0.11.0.2", "1.0", "1.0.1", "1.1-IV0",
        "2.0-IV1", "2.8", "2.8-IV1", "2.8.1", "3.0", "3.0-IV1", "3.3-IV3", "3.7-IV4", "3.9",
        "3.9-IV0", "4.0-IV0", "4.0-IV1", " 3.0-IV1 ",
    ],
)  # fmt: skip
def test_message_format_version_accepts_kafkas_version_names(value: str) -> None:
    config = LogConfig.from_properties({"message.format.version": value})
    assert config.message_format_version == value.strip()  # kept as given (Kafka ignores it)
    assert config.to_properties()["message.format.version"] == value.strip()


@pytest.mark.parametrize(
    "value",
    [
        "latest", "", "3", "0.8", "0.7.0", "0.10.3", "3.10", "3.0-IV2", "3.0-iv1", "3.0.",
        "0.10.0.", "4.0", "4.0.1", "5.0-IV0", "v3.0", "3.0-IV1-x",
    ],
)  # fmt: skip
def test_message_format_version_refuses_what_kafka_refuses(value: str) -> None:
    with pytest.raises(InvalidConfig) as info:
        LogConfig.from_properties({"message.format.version": value})
    assert str(info.value).endswith(
        f"Invalid value {value} for configuration message.format.version: Version {value} is "
        "not a valid version"
    )


@pytest.mark.parametrize(
    ("policy", "compact", "delete"),
    [
        ("delete", False, True),
        ("compact", True, False),
        ("compact,delete", True, True),
        ("delete, compact", True, True),
    ],
)
def test_cleanup_policy_is_kafkas_list(policy: str, compact: bool, delete: bool) -> None:
    cfg = LogConfig.from_properties({"cleanup.policy": policy})
    assert (cfg.compact, cfg.delete) == (compact, delete)
    assert cfg.to_properties()["cleanup.policy"] == policy.replace(" ", "")
    assert LogConfig.from_properties(cfg.to_properties()) == cfg
    broker = LogConfig.from_broker_properties({"log.cleanup.policy": policy})
    assert (broker.compact, broker.delete) == (compact, delete)


def test_compaction_keys_have_kafkas_broker_synonyms() -> None:
    cfg = LogConfig.from_broker_properties(
        {
            "log.cleaner.delete.retention.ms": "5",
            "log.cleaner.min.compaction.lag.ms": "6",
            "log.cleaner.max.compaction.lag.ms": "7",
            "log.cleaner.min.cleanable.ratio": "0.25",
        }
    )
    assert (cfg.delete_retention_ms, cfg.min_compaction_lag_ms, cfg.max_compaction_lag_ms) == (
        5,
        6,
        7,
    )
    assert cfg.min_cleanable_dirty_ratio == 0.25
    assert broker_synonyms("min.cleanable.dirty.ratio") == ("log.cleaner.min.cleanable.ratio",)


def test_min_compaction_lag_above_max_is_refused_with_kafkas_message() -> None:
    with pytest.raises(InvalidConfig) as info:
        LogConfig.from_properties({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    assert str(info.value).endswith(
        "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"
    )
    base = LogConfig.from_properties({"max.compaction.lag.ms": "5"})
    with pytest.raises(InvalidConfig):
        LogConfig.from_properties({"min.compaction.lag.ms": "6"}, base=base)


def test_cleaner_config_defaults_and_validation() -> None:
    cfg = CleanerConfig()
    assert (cfg.enable, cfg.threads, cfg.backoff_ms) == (True, 1, 15_000)
    assert cfg.dedupe_buffer_size == 128 * 1024 * 1024
    assert cfg.io_buffer_size == 512 * 1024
    assert cfg.dedupe_buffer_load_factor == 0.9
    assert cfg.io_max_bytes_per_second == sys.float_info.max
    given = CleanerConfig.from_broker_properties(
        {
            "log.cleaner.enable": "false",
            "log.cleaner.threads": "2",
            "log.cleaner.dedupe.buffer.size": "1048576",
            "log.cleaner.io.max.bytes.per.second": "1e6",
            "log.cleaner.backoff.ms": "100",
            "log.segment.bytes": "1024",  # not a cleaner key: ignored here
        }
    )
    assert (given.enable, given.threads, given.dedupe_buffer_size) == (False, 2, 1_048_576)
    assert (given.io_max_bytes_per_second, given.backoff_ms) == (1e6, 100)
    for key, bad in (
        ("log.cleaner.threads", "-1"),
        ("log.cleaner.backoff.ms", "-1"),
        ("log.cleaner.io.buffer.size", "-1"),
        ("log.cleaner.enable", "maybe"),
        ("log.cleaner.io.max.bytes.per.second", "fast"),
    ):
        with pytest.raises(InvalidConfig) as info:
            CleanerConfig.from_broker_properties({key: bad})
        assert key in str(info.value)
    with pytest.raises(InvalidConfig, match="offset map is too small"):
        CleanerConfig.from_broker_properties({"log.cleaner.dedupe.buffer.size": "16"})
    disabled = {"log.cleaner.dedupe.buffer.size": "16", "log.cleaner.enable": "false"}
    assert not CleanerConfig.from_broker_properties(disabled).enable
