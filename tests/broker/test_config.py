"""Config: defaults, Java-properties files, --override precedence, validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.server.core import config as config_mod
from sluice.server.core.config import Config, ConfigError, Listener


def test_defaults_match_the_option_table() -> None:
    config_mod._check_defaults()
    c = Config()
    assert c.listener == Listener("PLAINTEXT", "127.0.0.1", 9092)
    assert c.socket_request_max_bytes == 104857600
    assert c.data_dir == Path("./data")
    assert c.default_replication_factor == 1
    assert c.auto_create_topics_enable is True


def test_properties_file_syntax(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# a comment\n"
        "! also a comment\n"
        "listeners = PLAINTEXT://127.0.0.1:19092\n"
        "node.id: 7\n"
        "log.dirs /var/sluice\n"
        "num.partitions=\\\n"
        "    3\n"
        "log.segment.bytes=1048576\n"
        "zookeeper.connect=localhost:2181\n"
    )
    c = Config.load(path)
    assert c.listener == Listener("PLAINTEXT", "127.0.0.1", 19092)
    assert c.node_id == 7
    assert c.log_dirs == "/var/sluice"
    assert c.num_partitions == 3
    assert c.log_properties() == {"log.segment.bytes": "1048576"}
    assert c.ignored_keys == ("zookeeper.connect",)


def test_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=3\nauto.create.topics.enable=true\n")
    c = Config.load(path, ["num.partitions=5", "auto.create.topics.enable=FALSE"])
    assert c.num_partitions == 5
    assert c.auto_create_topics_enable is False


def test_log_dir_alias_and_broker_id() -> None:
    c = Config.load(None, ["log.dir=/tmp/x", "broker.id=4"])
    assert c.log_dirs == "/tmp/x"
    assert c.node_id == 4
    c = Config.load(None, ["log.dir=/tmp/x", "log.dirs=/tmp/y", "broker.id=4", "node.id=2"])
    assert c.log_dirs == "/tmp/y"
    assert c.node_id == 2


def test_advertised_listener_defaults() -> None:
    c = Config.load(None, ["listeners=PLAINTEXT://0.0.0.0:9093"])
    assert c.advertised_listener == Listener("PLAINTEXT", "127.0.0.1", 9093)
    c = Config.load(None, ["advertised.listeners=PLAINTEXT://broker.example:9094"])
    assert c.advertised_listener == Listener("PLAINTEXT", "broker.example", 9094)


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("num.partitions=zero", "num.partitions"),
        ("num.partitions=0", "must be >= 1"),
        ("default.replication.factor=3", "default.replication.factor"),
        ("auto.create.topics.enable=yes", "true or false"),
        ("listeners=SSL://127.0.0.1:9093", "only PLAINTEXT"),
        ("listeners=PLAINTEXT://127.0.0.1", "port"),
        ("listeners=PLAINTEXT://127.0.0.1:70000", "out of range"),
        ("log.dirs=/a,/b", "exactly one"),
        ("log.message.timestamp.type=Now", "CreateTime"),
        ("socket.request.max.bytes=-5", "socket.request.max.bytes"),
        ("noequals", "key=value"),
        ("log.cleanup.policy=compact", "compact"),
        ("log.segment.bytes=10", "log.segment.bytes"),
    ],
)
def test_invalid_values_are_rejected_clearly(override: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        Config.load(None, [override])
    assert fragment in str(info.value)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        Config.load(tmp_path / "nope.properties")


def test_example_properties_file_loads() -> None:
    example = Path(__file__).resolve().parents[2] / "config" / "server.properties"
    c = Config.load(example)
    assert c.ignored_keys == ()
    assert c == Config.load(None, [f"{k}={v}" for k, v in c.properties.items()])


def test_log_keys_reach_the_storage_defaults() -> None:
    c = Config.load(
        None,
        [
            "log.segment.bytes=1048576",
            "log.retention.hours=1",
            "log.message.timestamp.type=LogAppendTime",
            "message.max.bytes=2000000",
        ],
    )
    lc = c.log_config()
    assert lc.segment_bytes == 1048576
    assert lc.retention_ms == 3_600_000
    assert lc.message_timestamp_type == "LogAppendTime"
    assert lc.max_message_bytes == 2000000
    assert Config().log_config().segment_bytes == 1073741824


def test_logging_is_json_off_a_terminal_and_pretty_on_one() -> None:
    import io
    import json

    import structlog

    from sluice.server.logging import configure_logging, get_logger

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    try:
        out = io.StringIO()
        configure_logging("info", stream=out)
        get_logger("sluice.test").info("hello", n=1)
        get_logger("sluice.test").debug("dropped below the level")
        (line,) = out.getvalue().splitlines()
        record = json.loads(line)
        assert (record["event"], record["n"], record["logger_name"]) == ("hello", 1, "sluice.test")
        assert record["level"] == "info"
        tty = Tty()
        configure_logging("info", stream=tty)
        get_logger("sluice.test").info("hello", n=2)
        text = tty.getvalue()
        assert "hello" in text and "\x1b[" in text and not text.lstrip().startswith("{")
    finally:
        structlog.reset_defaults()


def test_group_keys_are_known_and_reach_the_coordinator() -> None:
    from sluice.server.group.coordinator import GroupConfig

    c = Config.load(None, ["group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=3"])
    assert c.ignored_keys == ()
    assert "offsets.topic.num.partitions" not in c.log_properties()
    gc = GroupConfig.from_properties(c.properties)
    assert (gc.initial_rebalance_delay_ms, gc.offsets_topic_num_partitions) == (0, 3)


def test_group_option_defaults_match_the_coordinator() -> None:
    from sluice.server.core.config import OPTIONS
    from sluice.server.group.coordinator import GroupConfig

    table = {o.key: o.default for o in OPTIONS}
    defaults = GroupConfig()
    for key, attr in GroupConfig.KEYS.items():
        assert int(table[key] or 0) == getattr(defaults, attr), key
    assert int(table["offsets.retention.minutes"] or 0) * 60000 == defaults.offsets_retention_ms


@pytest.mark.parametrize(
    "override", ["offsets.topic.num.partitions=0", "group.initial.rebalance.delay.ms=soon"]
)
def test_invalid_group_value_is_a_config_error(override: str) -> None:
    with pytest.raises(ConfigError, match=override.split("=")[0]):
        Config.load(None, [override])
