"""``sluice groups list | describe | delete`` against a broker process, with a confluent-kafka
consumer group providing the members and commits (the lag shown is end offset - commit)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.cli.main import cli
from tests.broker_util import BrokerProcess, start_broker

pytestmark = pytest.mark.interop

WAIT = 15.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = start_broker(
        tmp_path / "data",
        overrides=["group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=500"],
    )
    try:
        yield b
    finally:
        assert b.stop() == 0


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_groups_list_describe_lag_and_delete(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("lagged", 2, 1)])["lagged"].result(WAIT)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for p in (0, 1):
        for i in range(10):
            producer.produce("lagged", value=b"%d" % i, partition=p)
    assert producer.flush(WAIT) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cli-g",
                         "client.id": "lag-client", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})  # fmt: skip
    bootstrap = ("--bootstrap-server", broker.bootstrap)
    try:
        consumer.subscribe(["lagged"])
        deadline = time.monotonic() + WAIT
        while len(consumer.assignment()) < 2:
            assert time.monotonic() < deadline
            consumer.poll(0.1)
        consumer.commit(offsets=[TopicPartition("lagged", 0, 4), TopicPartition("lagged", 1, 10)],
                        asynchronous=False)  # fmt: skip
        assert "cli-g" in run("groups", "list", *bootstrap).split()
        out = run("groups", "describe", "--group", "cli-g", *bootstrap)
        rows = {
            int(m.group(1)): (int(m.group(2)), int(m.group(3)), int(m.group(4)))
            for m in re.finditer(r"lagged\s*│\s*(\d+)\s*│\s*(\d+)\s*│\s*(\d+)\s*│\s*(\d+)", out)
        }
        assert rows == {0: (4, 10, 6), 1: (10, 10, 0)}, out
        assert "lag-client" in out
        members = run("groups", "describe", "--group", "cli-g", "--members", *bootstrap)
        assert "lagged-0,lagged-1" in members
    finally:
        consumer.close()
    out = run("groups", "describe", "--group", "cli-g", *bootstrap)
    assert re.search(r"lagged\s*│\s*0\s*│\s*4\s*│\s*10\s*│\s*6\s*│\s*-", out), out
    result = CliRunner().invoke(cli, ["groups", "delete", "--group", "cli-g", "--group", "nope",
                                      *bootstrap])  # fmt: skip
    assert result.exit_code == 1
    assert "Deleted group cli-g." in result.output and "GroupIdNotFound" in result.output
    assert "cli-g" not in run("groups", "list", *bootstrap).split()
