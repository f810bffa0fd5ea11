"""LogConfig: Kafka names, defaults, validation, broker-key mapping."""

from __future__ import annotations

import pytest

from sluice.protocol.errors import InvalidConfig
from sluice.server.storage.log_config import BROKER_KEYS, LONG_MAX, TOPIC_KEYS, LogConfig


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
    assert set(props) == set(TOPIC_KEYS) == set(BROKER_KEYS)


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
        ("cleanup.policy", "compact", "compaction is not implemented"),
        ("cleanup.policy", "delete,compact", "compaction is not implemented"),
        ("cleanup.policy", "shred", "cleanup.policy"),
        ("min.insync.replicas", "1", "unknown or unsupported"),
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
        LogConfig.from_broker_properties({"log.cleanup.policy": "compact"})
    with pytest.raises(InvalidConfig):
        LogConfig.from_broker_properties({"log.retention.hours": "x"})


def test_declared_broker_defaults_are_the_log_config_defaults() -> None:
    from sluice.server.storage.log_config import _BROKER_UNIT_FALLBACKS, BROKER_KEYS, BROKER_OPTIONS

    declared = {k.key: k for k in BROKER_OPTIONS}
    read = set(BROKER_KEYS.values()) | {
        key for fallbacks in _BROKER_UNIT_FALLBACKS.values() for key, _ in fallbacks
    }
    assert sorted(declared) == sorted(read)
    defaults = {k.key: k.default for k in BROKER_OPTIONS if k.default is not None}
    assert LogConfig.from_broker_properties(defaults) == LogConfig()
    for key in defaults:  # each default also passes its own load-time parser
        declared[key].parse(defaults[key])
