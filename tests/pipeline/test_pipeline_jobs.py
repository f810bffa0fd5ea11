"""The pipeline jobs through their CLI (``sluice pipeline archive|replay``, click's runner) on
the session's local Spark, against a real broker; data produced with confluent-kafka."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice import EmbeddedBroker
from sluice.pipeline.cli import pipeline
from tests.broker_util import BrokerProcess, running_broker

# A Spark session takes tens of seconds to start: slow, out of the quick loop.
pytestmark = [pytest.mark.spark, pytest.mark.slow]

DAY_MS = 86_400_000
BASE_TS = 1_700_000_000_000 - 1_700_000_000_000 % DAY_MS  # midnight UTC, 2023-11-14


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("pipeline-jobs") / "data"
    with running_broker(data, overrides=["auto.create.topics.enable=false"]) as b:
        yield b


def create_topic(broker: BrokerProcess, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce(broker: BrokerProcess, topic: str, numbers: range) -> None:
    """Records n with key k<n%5>, value v<n>, spread over 3 days (hours apart)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for n in numbers:
        producer.produce(
            topic, key=f"k{n % 5}".encode(), value=f"v{n}".encode(), timestamp=BASE_TS + n * 900_000
        )
    assert producer.flush(30) == 0


def cli(*args: str) -> Any:
    result = CliRunner().invoke(pipeline, list(args), obj={}, catch_exceptions=False)
    return result


def partition_sequences(spark: Any, broker: BrokerProcess, topic: str) -> dict[int, list[bytes]]:
    df = (
        spark.read.format("sluice")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .load()
    )
    out: dict[int, list[bytes]] = {}
    for r in df.orderBy("partition", "offset").collect():
        out.setdefault(r["partition"], []).append(r["value"])
    return out


def test_archive_then_replay(spark: Any, broker: BrokerProcess, tmp_path: Path) -> None:
    create_topic(broker, "arch", 2)
    produce(broker, "arch", range(200))
    out, checkpoint = str(tmp_path / "archive"), str(tmp_path / "checkpoint")
    args = ["archive", "-b", broker.bootstrap, "-t", "arch", "--path", out,
            "--checkpoint", checkpoint, "--max-offsets-per-trigger", "80"]  # fmt: skip
    first = cli(*args)
    assert first.exit_code == 0, first.output
    assert "archived 200 records" in first.output
    dates = sorted(p.name for p in Path(out).glob("date=*"))
    # 200 records 15 minutes apart from midnight: 50 hours = 3 UTC days
    assert dates == ["date=2023-11-14", "date=2023-11-15", "date=2023-11-16"]
    produce(broker, "arch", range(200, 300))
    second = cli(*args)
    assert second.exit_code == 0, second.output
    assert "archived 100 records" in second.output
    archived = spark.read.parquet(out)
    values = [r["value"] for r in archived.select("value").collect()]
    assert sorted(values) == sorted(f"v{n}".encode() for n in range(300))  # each exactly once
    day_one = archived.where("date = '2023-11-14'").count()
    assert day_one == 96  # 24 h / 15 min

    create_topic(broker, "arch-replayed", 2)
    replayed = cli(
        "replay", "-b", broker.bootstrap, "--path", out, "--to-topic", "arch-replayed",
        "--keep-partitions",
    )  # fmt: skip
    assert replayed.exit_code == 0, replayed.output
    assert "replayed 300 records" in replayed.output
    assert partition_sequences(spark, broker, "arch-replayed") == partition_sequences(
        spark, broker, "arch"
    )


def test_replay_to_a_missing_topic_fails_with_a_message(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    schema = "key binary, value binary, topic string, partition int, offset long"
    spark.createDataFrame([(b"k", b"v", "t", 0, 0)], schema).write.parquet(str(tmp_path / "a"))
    result = CliRunner().invoke(
        pipeline,
        ["replay", "-b", broker.bootstrap, "--path", str(tmp_path / "a"), "--to-topic", "nope"],
        obj={},
    )
    assert result.exit_code == 1
    assert "replay failed" in result.output and "'nope' does not exist" in result.output
    assert "auto.create.topics.enable=false" in result.output


def test_replay_creates_a_missing_topic_where_the_broker_auto_creates(
    spark: Any, tmp_path: Path
) -> None:
    archived = str(tmp_path / "archived")
    rows = [(f"k{n}".encode(), f"v{n}".encode(), "t", n % 2, n // 2) for n in range(6)]
    schema = "key binary, value binary, topic string, partition int, offset long"
    spark.createDataFrame(rows, schema).write.parquet(archived)
    with EmbeddedBroker(properties={"num.partitions": "2"}) as auto:
        args = ["replay", "-b", auto.bootstrap_servers, "--path", archived]
        result = cli(*args, "--to-topic", "replayed-here", "--keep-partitions")
        assert result.exit_code == 0, result.output
        assert "replayed 6 records" in result.output
        consumer = Consumer(
            {"bootstrap.servers": auto.bootstrap_servers, "group.id": "check",
             "auto.offset.reset": "earliest", "enable.partition.eof": True}
        )  # fmt: skip
        try:
            consumer.assign([TopicPartition("replayed-here", p) for p in (0, 1)])
            got: dict[int, list[bytes]] = {0: [], 1: []}
            ends = 0
            while ends < 2:
                msg = consumer.poll(10)
                assert msg is not None, "the replayed records did not arrive"
                if msg.error():
                    ends += 1
                    continue
                got[msg.partition()].append(msg.value())
        finally:
            consumer.close()
    assert got == {0: [b"v0", b"v2", b"v4"], 1: [b"v1", b"v3", b"v5"]}
