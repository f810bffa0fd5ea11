"""format("sluice") / format("sluice-segments") on a real local Spark (the session-scoped
``spark`` fixture: local[2]) against a real broker process.

Test data is produced, and written data checked, with confluent-kafka (librdkafka): a client
nobody here wrote. Small data, ``availableNow`` triggers; one broker for the module.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CfTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.pipeline import offsets_behind_latest
from tests.broker_util import BrokerProcess, running_broker

# A Spark session takes tens of seconds to start: slow, out of the quick loop.
pytestmark = [pytest.mark.spark, pytest.mark.slow]

DEADLINE_S = 30.0
BASE_TS = 1_700_000_000_000

# (partition, offset) -> (key, value, headers, timestamp)
Expected = dict[tuple[int, int], tuple[bytes | None, bytes | None, tuple[Any, ...], int]]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("pipeline") / "data"
    with running_broker(data, overrides=["auto.create.topics.enable=false"]) as b:
        yield b


def create_topic(broker: BrokerProcess, name: str, partitions: int, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config)])
    futures[name].result(DEADLINE_S)


def headers_of(n: int) -> list[tuple[str, bytes | None]] | None:
    return [("h", f"{n}".encode()), ("nil", None)] if n % 5 == 0 else None


def produce(
    broker: BrokerProcess, topic: str, count: int, *, start: int = 0, **conf: Any
) -> Expected:
    """``count`` records (every 7th without key, every 5th with headers, one tombstone per 50)
    produced with librdkafka; returns what the delivery reports say landed where."""
    expected: Expected = {}
    errors: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        if err:
            errors.append(err)
            return
        # librdkafka's delivery reports carry no headers: rebuild them from the timestamp.
        ts = msg.timestamp()[1]
        headers = tuple(headers_of(ts - BASE_TS) or ())
        expected[(msg.partition(), msg.offset())] = (msg.key(), msg.value(), headers, ts)

    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "all", **conf}
    )
    for n in range(start, start + count):
        key = None if n % 7 == 0 else f"key-{n % 13}".encode()
        value = None if n % 50 == 49 else f"value-{n}".encode() * (1 + n % 3)
        producer.produce(
            topic, key=key, value=value, headers=headers_of(n), timestamp=BASE_TS + n,
            on_delivery=delivered,
        )  # fmt: skip
        if n % 500 == 499:
            producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0
    assert errors == []
    assert len(expected) == count
    return expected


def rows_of(df: Any) -> Expected:
    """Collect a DataFrame of the source schema as the ``Expected`` mapping (fails on dups)."""
    out: Expected = {}
    for row in df.collect():
        key = (row["partition"], row["offset"])
        assert key not in out, f"duplicate {key}"
        headers = tuple((h["key"], h["value"]) for h in row["headers"] or ())
        ts = int(row["timestamp"].timestamp() * 1000)
        out[key] = (row["key"], row["value"], headers, ts)
    return out


def read(spark: Any, broker: BrokerProcess, topic: str, **options: str) -> Any:
    reader = spark.read.format("sluice").option("kafka.bootstrap.servers", broker.bootstrap)
    if "assign" not in options:
        reader = reader.option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


@pytest.fixture(scope="module")
def events(broker: BrokerProcess) -> Expected:
    """Topic ``events``: 2 partitions, small segments (several per partition), lz4 batches."""
    create_topic(broker, "events", 2, **{"segment.bytes": "8192"})
    return produce(broker, "events", 3000, **{"compression.type": "lz4", "batch.num.messages": 50})


def test_batch_read_equals_what_was_produced(
    spark: Any, broker: BrokerProcess, events: Expected
) -> None:
    df = read(spark, broker, "events", includeHeaders="true")
    assert df.columns == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
    ]  # fmt: skip
    got = rows_of(df)
    assert got == events
    assert {r["topic"] for r in df.select("topic").distinct().collect()} == {"events"}
    assert {r["timestampType"] for r in df.select("timestampType").distinct().collect()} == {0}
    # One Spark partition per topic-partition, large ranges split into pieces.
    assert df.rdd.getNumPartitions() == 2
    split = read(spark, broker, "events", maxRecordsPerPartition="400")
    assert split.rdd.getNumPartitions() >= 3000 // 400
    assert {
        (r["partition"], r["offset"]) for r in split.select("partition", "offset").collect()
    } == set(events)


def test_batch_read_offset_options(spark: Any, broker: BrokerProcess, events: Expected) -> None:
    ends = {p: max(o for q, o in events if q == p) + 1 for p in (0, 1)}
    window = read(
        spark, broker, "events",
        startingOffsets=json.dumps({"events": {"0": 10, "1": -2}}),
        endingOffsets=json.dumps({"events": {"0": 20, "1": -1}}),
    )  # fmt: skip
    got = {(r["partition"], r["offset"]) for r in window.select("partition", "offset").collect()}
    assert got == {(0, o) for o in range(10, 20)} | {(1, o) for o in range(ends[1])}
    # startingTimestamp: the first offset whose timestamp >= it, per partition.
    cutoff = BASE_TS + 2500
    later = read(spark, broker, "events", startingTimestamp=str(cutoff))
    want = {k for k, v in events.items() if v[3] >= cutoff}
    assert {
        (r["partition"], r["offset"]) for r in later.select("partition", "offset").collect()
    } == want
    assigned = read(spark, broker, "events", assign='{"events":[1]}')
    assert assigned.count() == sum(1 for p, _ in events if p == 1)


def test_segment_reader_equals_network_reader(
    spark: Any, broker: BrokerProcess, events: Expected
) -> None:
    segments = (
        spark.read.format("sluice-segments")
        .option("subscribe", "events")
        .option("includeHeaders", "true")
        .load(str(broker.data_dir))
    )
    files = sorted(broker.data_dir.glob("events-*/*.log"))
    assert len(files) > 2, "the topic should have rolled segments"
    assert segments.rdd.getNumPartitions() == len(files)  # one Spark partition per segment
    network = read(spark, broker, "events", includeHeaders="true")

    def by_offset(df: Any) -> dict[tuple[int, int], Any]:
        return {(r["partition"], r["offset"]): r.asDict(recursive=True) for r in df.collect()}

    assert by_offset(segments) == by_offset(network)
    assert rows_of(segments) == events


def run_available_now(spark: Any, broker: BrokerProcess, topic: str, out: Path, **opts: str) -> Any:
    reader = (
        spark.readStream.format("sluice")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for k, v in opts.items():
        reader = reader.option(k, v)
    query = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "availableNow query did not finish"
    assert query.exception() is None
    return query


def test_streaming_restart_from_checkpoint_delivers_every_record_once(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(broker, "stream", 2)
    first = produce(broker, "stream", 300)
    q1 = run_available_now(spark, broker, "stream", tmp_path, maxOffsetsPerTrigger="100")
    batches = [p for p in q1.recentProgress if p["numInputRows"] > 0]
    assert len(batches) >= 3, "maxOffsetsPerTrigger=100 must split 300 records"
    assert all(p["numInputRows"] <= 102 for p in batches)  # prorated: < 1 extra per partition
    done = spark.read.parquet(str(tmp_path / "data"))
    assert done.count() == 300
    second = produce(broker, "stream", 200, start=300)
    run_available_now(spark, broker, "stream", tmp_path, maxOffsetsPerTrigger="100")
    got = spark.read.parquet(str(tmp_path / "data")).select("partition", "offset", "value")
    rows = [(r["partition"], r["offset"], r["value"]) for r in got.collect()]
    assert len(rows) == 500 == len(set(rows))  # no duplicate
    assert {(p, o): v for p, o, v in rows} == {k: v[1] for k, v in {**first, **second}.items()}


def consume_all(broker: BrokerProcess, topic: str, partitions: int, count: int) -> list[Any]:
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "pipeline-test",  # required by librdkafka; assign() only, no group API
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        c.assign([CfTopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[Any] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < count and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg)
        return got
    finally:
        c.close()


def test_batch_write_lands_in_the_topic(spark: Any, broker: BrokerProcess) -> None:
    create_topic(broker, "written", 3)
    rows = [
        (f"k{i % 17}" if i % 4 else None, f"v{i}".encode(), [("n", str(i).encode())])
        for i in range(600)
    ]
    df = spark.createDataFrame(
        rows, "key string, value binary, headers array<struct<key string, value binary>>"
    )
    (
        df.repartition(2)
        .write.format("sluice")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", "written")
        .mode("append")
        .save()
    )
    got = consume_all(broker, "written", 3, 600)
    assert sorted(m.value() for m in got) == sorted(v for _, v, _ in rows)
    by_value = {v: (k, h) for k, v, h in rows}
    for m in got:
        key, headers = by_value[m.value()]
        assert m.key() == (key.encode() if key is not None else None)
        assert list(m.headers()) == headers
    # Kafka's default partitioner: one key always lands on one partition.
    parts: dict[bytes, set[int]] = {}
    for m in got:
        if m.key() is not None:
            parts.setdefault(m.key(), set()).add(m.partition())
    assert all(len(p) == 1 for p in parts.values())


def test_a_write_in_the_default_save_mode_appends_as_kafka_does(
    spark: Any, broker: BrokerProcess
) -> None:
    create_topic(broker, "saved", 1)
    df = spark.createDataFrame([(b"a",), (b"b",)], "value binary")

    def writer() -> Any:
        return (
            df.write.format("sluice")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("topic", "saved")
        )

    writer().save()  # no .mode(): Spark's ErrorIfExists, Kafka's connector accepts it
    writer().mode("errorifexists").save()
    df.write.save(format="sluice", mode="error", topic="saved", **{
        "kafka.bootstrap.servers": broker.bootstrap})  # fmt: skip
    assert sorted(m.value() for m in consume_all(broker, "saved", 1, 6)) == [b"a"] * 3 + [b"b"] * 3
    for refused in ("overwrite", "ignore"):  # as Kafka: a topic is only appended to
        with pytest.raises(Exception, match=f"save mode {refused} is not allowed"):
            writer().mode(refused).save()


def test_write_errors_fail_the_job(spark: Any, broker: BrokerProcess) -> None:
    # This broker does not auto-create topics: the write says so.
    df = spark.createDataFrame([(b"x",)], "value binary")
    with pytest.raises(Exception, match=r"'no-such-topic' does not exist .*auto\.create\.topics"):
        (
            df.write.format("sluice")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("topic", "no-such-topic")
            .mode("append")
            .save()
        )
    create_topic(broker, "two-partitions", 2)
    beyond = spark.createDataFrame([(b"x", 2)], "value binary, partition int")
    with pytest.raises(Exception, match=r"partition 2 of topic 'two-partitions' is not in"):
        (
            beyond.write.format("sluice")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("topic", "two-partitions")
            .save()
        )


def test_streaming_write_copies_a_topic(
    spark: Any, broker: BrokerProcess, events: Expected, tmp_path: Path
) -> None:
    create_topic(broker, "copy", 2)
    query = (
        spark.readStream.format("sluice")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", "events")
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load()
        .select("key", "value", "partition", "headers")
        .writeStream.format("sluice")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", "copy")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    copied = rows_of(read(spark, broker, "copy", includeHeaders="true"))
    # Same partition (the partition column), same order within it, so the same offsets.
    assert {k: v[:3] for k, v in copied.items()} == {k: v[:3] for k, v in events.items()}


def test_data_loss_is_handled_per_fail_on_data_loss(spark: Any, broker: BrokerProcess) -> None:
    create_topic(broker, "lossy", 1)
    produce(broker, "lossy", 100)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    (deleted,) = admin.delete_records([CfTopicPartition("lossy", 0, 60)]).values()
    assert deleted.result(DEADLINE_S).low_watermark == 60
    start = json.dumps({"lossy": {"0": 10}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, broker, "lossy", startingOffsets=start).collect()
    rest = read(spark, broker, "lossy", startingOffsets=start, failOnDataLoss="false")
    assert sorted(r["offset"] for r in rest.select("offset").collect()) == list(range(60, 100))


def test_reading_an_empty_topic_gives_no_rows(spark: Any, broker: BrokerProcess) -> None:
    # nothing to plan: PySpark reads one InputPartition(None), which must yield nothing
    create_topic(broker, "empty", 2)
    assert read(spark, broker, "empty").count() == 0
    segments = (
        spark.read.format("sluice-segments").option("subscribe", "empty").load(str(broker.data_dir))
    )
    assert segments.count() == 0


def test_an_option_the_source_does_not_honour_fails_the_query_naming_it(
    spark: Any, broker: BrokerProcess, events: Expected
) -> None:
    with pytest.raises(Exception, match=r"kafka\.group\.id is not supported"):
        read(spark, broker, "events", **{"kafka.group.id": "g"}).count()
    stream = (
        spark.readStream.format("sluice")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", "events")
        .option("startingOffsetsByTimestamp", '{"events":{"0":0}}')
        .load()
    )
    with pytest.raises(Exception, match="startingOffsetsByTimestamp is not supported"):
        stream.writeStream.format("noop").start().awaitTermination(60)


def test_streaming_progress_gives_kafkas_offsets_behind_latest(
    spark: Any, broker: BrokerProcess, events: Expected, tmp_path: Path
) -> None:
    query = (
        spark.readStream.format("sluice")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", "events")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "1000")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    high_watermarks = {
        str(p): 1 + max(o for q, o in events if q == p) for p in {p for p, _ in events}
    }
    read_so_far = 0
    figures = []
    for progress in query.recentProgress:
        (source,) = progress["sources"]
        # Spark fills a source's metrics only from a ReportsSourceMetrics stream, which the one
        # wrapping a Python data source is not (PySpark 4.3). Failing here means PySpark now
        # lets Python sources report them: report Kafka's figures there.
        assert not source.get("metrics")
        assert json.loads(source["latestOffset"]) == {"events": high_watermarks}  # latestOffset saw
        read_so_far += progress["numInputRows"]
        behind = offsets_behind_latest(source)
        assert float(behind["avgOffsetsBehindLatest"]) * 2 == len(events) - read_so_far
        assert int(behind["minOffsetsBehindLatest"]) <= int(behind["maxOffsetsBehindLatest"])
        figures.append(behind)
    assert read_so_far == len(events) and len(figures) >= 3  # about 1000 records a trigger
    assert figures[0]["maxOffsetsBehindLatest"] != "0"
    assert figures[-1] == dict.fromkeys(
        ["minOffsetsBehindLatest", "maxOffsetsBehindLatest", "avgOffsetsBehindLatest"], "0"
    ) | {"avgOffsetsBehindLatest": "0.0"}


def test_both_formats_read_committed_skip_aborted_and_open_transactions(
    spark: Any, broker: BrokerProcess
) -> None:
    """Transactions written by librdkafka's transactional producer: one committed, one aborted,
    one committed, one left open. With ``kafka.isolation.level=read_committed`` both formats
    return the committed records only (the open transaction bounds the read: the last stable
    offset); by default (read_uncommitted) every data record."""
    create_topic(broker, "txns", 2, **{"segment.bytes": "1024"})
    producer = Producer({
        "bootstrap.servers": broker.bootstrap, "transactional.id": "spark-tx",
        "transaction.timeout.ms": 600_000,  # the open one outlives the reads on a busy machine
    })  # fmt: skip
    producer.init_transactions(DEADLINE_S)
    for name, commit in (("a", True), ("b", False), ("c", True), ("d", None)):
        producer.begin_transaction()
        for i in range(20):
            producer.produce("txns", f"{name}{i}".encode(), partition=i % 2)
        # Written before the end (librdkafka's abort purges what it has not sent yet).
        assert producer.flush(DEADLINE_S) == 0
        if commit is None:
            continue  # left open
        if commit:
            producer.commit_transaction(DEADLINE_S)
        else:
            producer.abort_transaction(DEADLINE_S)

    def values(df: Any) -> list[str]:
        return sorted(bytes(r["value"]).decode() for r in df.select("value").collect())

    def segments(**options: str) -> Any:
        reader = spark.read.format("sluice-segments").option("subscribe", "txns")
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load(str(broker.data_dir))

    committed = sorted(f"{n}{i}" for n in "ac" for i in range(20))
    everything = sorted(f"{n}{i}" for n in "abcd" for i in range(20))
    try:
        level = {"kafka.isolation.level": "read_committed"}
        assert values(read(spark, broker, "txns", **level)) == committed
        assert values(segments(**level)) == committed
        assert values(read(spark, broker, "txns")) == everything
        assert values(segments()) == everything
    finally:
        producer.abort_transaction(DEADLINE_S)
