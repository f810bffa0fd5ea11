"""``broker-loggers`` (issue 27): DescribeConfigs / IncrementalAlterConfigs on BROKER_LOGGER (8)
through confluent-kafka's AdminClient against a broker process started as ``python -m
sluice.server`` (the entrypoint's logging): levels listed and changed live, Kafka's refusals."""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_util import BrokerProcess, start_broker

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import ConfigResource, ConfigResourceType

BROKER_LOGGER = ConfigResourceType.BROKER_LOGGER

DEADLINE_S = 30.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = start_broker(tmp_path / "data", overrides=["group.initial.rebalance.delay.ms=0"])
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("lg", 1, 1)])["lg"].result(DEADLINE_S)
        yield b
    finally:
        b.stop()


def levels(admin: Any) -> dict[str, tuple[str, str, bool]]:
    """(level, source, read-only) by logger, as kafka-python describes BROKER_LOGGER 0."""
    got = admin.describe_configs([ConfigResource(BROKER_LOGGER, "0")], config_filter="all")
    found = got["broker_logger"]["0"]
    return {k: (e["value"], e["config_source"], e["read_only"]) for k, e in found.items()}


def alter(admin: Any, name: str, op: str, value: str | None = None) -> str | None:
    """IncrementalAlterConfigs of one logger (op SET / DELETE / APPEND); the error's text
    (kafka-python reports success as "OK")."""
    resource = ConfigResource(BROKER_LOGGER, "0", configs={name: (op, value)})
    result = admin.alter_configs([resource], raise_on_unknown=False, incremental=True)
    outcome = str(result["broker_logger"]["0"])
    return None if outcome == "OK" else outcome


def join_group(broker: BrokerProcess, group: str) -> None:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "topic.metadata.refresh.interval.ms": 500})  # fmt: skip
    try:
        consumer.subscribe(["lg"])
        deadline = time.monotonic() + DEADLINE_S
        while not consumer.assignment():
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(0.2)
    finally:
        consumer.close()


def group_state_events(broker: BrokerProcess, group: str) -> list[dict[str, Any]]:
    out = []
    for line in broker.log_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == "group state" and event.get("group") == group:
            out.append(event)
    return out


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[Any]:
    """kafka-python's admin client: confluent-kafka has no BROKER_LOGGER resource type."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        yield client
    finally:
        client.close()


def test_levels_listed_and_changed_live(broker: BrokerProcess, admin: Any) -> None:
    listed = levels(admin)
    logger_source = "DYNAMIC_BROKER_LOGGER_CONFIG"
    assert listed["root"] == ("INFO", logger_source, False)
    assert listed["sluice.groups"] == ("INFO", logger_source, False)  # unset: root's

    join_group(broker, "before")  # the coordinator's debug line is below INFO: not logged
    assert group_state_events(broker, "before") == []

    assert alter(admin, "sluice.groups", "SET", "DEBUG") is None
    assert levels(admin)["sluice.groups"][0] == "DEBUG"
    assert levels(admin)["root"][0] == "INFO"
    join_group(broker, "after")
    deadline = time.monotonic() + DEADLINE_S
    while not group_state_events(broker, "after"):  # (the log file is written as it goes)
        assert time.monotonic() < deadline, "no debug line after the level change"
        time.sleep(0.1)
    assert all(e["level"] == "debug" for e in group_state_events(broker, "after"))

    # DELETE: back to inheriting root's level.
    assert alter(admin, "sluice.groups", "DELETE") is None
    assert levels(admin)["sluice.groups"][0] == "INFO"
    join_group(broker, "again")
    assert group_state_events(broker, "again") == []


def test_refusals_are_kafkas(admin: Any) -> None:
    resource = "ConfigResource(type=BROKER_LOGGER, name='0')"
    cases = [
        (("nope", "SET", "DEBUG"), "InvalidConfiguration",
         f"Invalid config value for resource {resource}: Logger nope does not exist!"),
        (("root", "SET", "LOUD"), "InvalidConfiguration",
         "Cannot set the log level of root to LOUD as it is not a supported log level. Valid "
         "log levels are TRACE, DEBUG, INFO, WARN, ERROR, FATAL"),
        (("root", "DELETE"), "InvalidRequest",
         "Removing the log level of the root logger is not allowed"),
        (("root", "APPEND", "DEBUG"), "InvalidRequest",
         "APPEND operation is not allowed for the BROKER_LOGGER resource"),
    ]  # fmt: skip
    for op, code, message in cases:
        error = alter(admin, *op)
        assert error is not None and code in error and message in error, (op, error)
    assert levels(admin)["root"][0] == "INFO"  # nothing applied
