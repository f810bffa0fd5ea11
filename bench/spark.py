"""Spark benchmark: read throughput of ``format("sluice")`` through Spark (local[2]), next to
reading the same topic with our own consumer loop, in the same run on the same data.

``python -m bench spark [--quick] [--records N] [--partitions P] [--value-size B]``

* **setup**: a ``python -m sluice.server`` broker in a temp dir; a topic of ``P`` partitions filled
  with ``N`` records (``B``-byte values, 16-byte keys, uncompressed, ~1 MiB batches built once
  with ``sluice.protocol.records.RecordBatchBuilder`` and produced repeatedly).
* **consumer**: one process reads every partition to its high watermark with Sluice's own
  ``client.Consumer`` (assigned partitions, 4 MiB per partition fetch, records handed out by
  ``getmany``) — what a Python application does, with no Spark and no Arrow.
* **source read loop**: the Spark source's executor loop without Spark
  (``sluice.pipeline.source.read_range``: ``sluice.pipeline.wire`` Fetch requests, batches decoded
  as
  columns, Arrow record batches), one process, every partition in turn.
* **spark sluice**: ``spark.read.format("sluice")...load().write.format("noop").save()`` on a
  local[2] session (Python workers warmed up by one small read first): fetch, decode, Arrow
  record batches, handed to the JVM. Target: >= 500,000 records/s.
* **spark sluice-segments**: the same through ``format("sluice-segments")`` (segment files
  read directly, no broker in the path).
* **decoders alone**: µs per record of ``decode_batch`` and ``decode_batch_columns`` on one
  ~1 MiB batch of the same records.

Figures vary with what else runs on this shared 2-core machine; best of ``--rounds``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from sluice.client import Consumer
from sluice.client import TopicPartition as ClientTopicPartition
from sluice.pipeline.offsets import OffsetRange, TopicPartition
from sluice.pipeline.options import parse
from sluice.pipeline.source import read_range
from sluice.pipeline.wire import SyncClient
from sluice.protocol.records import RecordBatchBuilder, decode_batch, decode_batch_columns
from tests.broker_util import start_broker

TARGET = 500_000
TOPIC = "bench-spark"


def fill(bootstrap: str, records: int, partitions: int, value_size: int) -> None:
    """Produce ``records`` records spread evenly over the partitions (whole batches)."""
    per_batch = max(1, 1_000_000 // (value_size + 16 + 16))  # under max.message.bytes
    builder = RecordBatchBuilder()
    now = int(time.time() * 1000)
    for i in range(per_batch):
        builder.append(now, b"key-%012d" % i, os.urandom(value_size))
    batch = builder.build()
    with SyncClient(bootstrap, timeout=60) as client:
        client.create_topic(TOPIC, partitions)
        sent = 0
        while sent < records:
            client.produce({TopicPartition(TOPIC, p): batch for p in range(partitions)}, acks=1)
            sent += per_batch * partitions
    return None


def decode_cost(value_size: int) -> dict[str, float]:
    """µs per record of the decoders alone on one ~1 MiB batch like ``fill``'s (CRC checked,
    every record walked), best of 5: ``decode_batch`` (Record objects) and
    ``decode_batch_columns`` (lists: what the Spark sources and client.Consumer use)."""
    builder = RecordBatchBuilder()
    now = int(time.time() * 1000)
    for i in range(max(1, 1_000_000 // (value_size + 32))):
        builder.append(now, b"key-%012d" % i, os.urandom(value_size))
    batch = builder.build()
    count = len(builder)
    out = {}
    for name, decode in (
        ("decode_batch", decode_batch),
        ("decode_batch_columns", decode_batch_columns),
    ):
        best = min(timed(lambda d=decode: [d(batch) for _ in range(5)]) for _ in range(5))
        out[name] = best / 5 / count * 1e6
    return out


def consume(bootstrap: str, partitions: int) -> int:
    """Our own consumer: ``client.Consumer`` from offset 0 to the high watermark of every
    partition; returns the count of records handed out."""

    async def run() -> int:
        tps = [ClientTopicPartition(TOPIC, p) for p in range(partitions)]
        async with Consumer(
            bootstrap, auto_offset_reset="earliest", max_partition_fetch_bytes=4 << 20
        ) as consumer:
            ends = await consumer.end_offsets(tps)
            consumer.assign(tps)
            count = 0
            deadline = time.monotonic() + 300
            while any(consumer.position(tp) != ends[tp] for tp in tps):
                if time.monotonic() > deadline:
                    raise TimeoutError("consumer did not reach the high watermarks")
                got = await consumer.getmany(timeout_ms=1000)
                count += sum(len(records) for records in got.values())
            return count

    return asyncio.run(run())


def fetch_columns(bootstrap: str, partitions: int, hws: dict[TopicPartition, int]) -> int:
    """The Spark source's read loop (fetch, decode as columns, Arrow) without Spark."""
    options = parse({"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC}, streaming=False)
    count = 0
    for p in range(partitions):
        tp = TopicPartition(TOPIC, p)
        for arrow_batch in read_range(OffsetRange(TOPIC, p, 0, hws[tp]), options):
            count += arrow_batch.num_rows
    return count


def spark_session() -> Any:
    from sluice import pipeline

    pipeline.python_worker_env()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("sluice-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.memory", "2g")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
    spark.sparkContext.setLogLevel("ERROR")
    pipeline.register(spark)
    return spark


def timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench spark", description=__doc__)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--max-records-per-partition", type=int, default=None, help="source option (split)"
    )
    parser.add_argument("--quick", action="store_true", help="200k records, one round")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.rounds = 200_000, 1
    workdir = Path(tempfile.mkdtemp(prefix="sluice-bench-spark-"))
    broker = start_broker(workdir / "data", overrides=["log.segment.bytes=268435456"])
    spark = None
    try:
        fill(broker.bootstrap, args.records, args.partitions, args.value_size)
        with SyncClient(broker.bootstrap) as client:
            tps = [TopicPartition(TOPIC, p) for p in range(args.partitions)]
            hws = client.list_offsets(dict.fromkeys(tps, -1))
            total = sum(hws.values())
        print(f"spark: {total:,} records of {args.value_size} B in {args.partitions} partitions")

        counted = 0

        def own() -> None:
            nonlocal counted
            counted = consume(broker.bootstrap, args.partitions)

        t_consumer = min(timed(own) for _ in range(args.rounds))
        assert counted == total, (counted, total)

        def columns() -> None:
            nonlocal counted
            counted = fetch_columns(broker.bootstrap, args.partitions, hws)

        t_columns = min(timed(columns) for _ in range(args.rounds))
        assert counted == total, (counted, total)

        spark = spark_session()
        network = (
            spark.read.format("sluice")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", TOPIC)
        )
        if args.max_records_per_partition:
            network = network.option("maxRecordsPerPartition", str(args.max_records_per_partition))
        network = network.load()
        segments = (
            spark.read.format("sluice-segments")
            .option("subscribe", TOPIC)
            .load(str(broker.data_dir))
        )
        # Warm-up (starts the Python workers, loads the modules in them) and a check that both
        # formats see every record.
        if network.count() != total or segments.count() != total:
            raise AssertionError("a Spark read does not see every record")

        def run(df: Any) -> None:
            df.write.format("noop").mode("overwrite").save()

        t_spark = min(timed(lambda: run(network)) for _ in range(args.rounds))
        t_segments = min(timed(lambda: run(segments)) for _ in range(args.rounds))
        rows = [
            ("own consumer (client.Consumer, 1 process)", t_consumer),
            ("source read loop, no Spark (1 process)", t_columns),
            ('spark format("sluice") local[2]', t_spark),
            ('spark format("sluice-segments") local[2]', t_segments),
        ]
        for name, seconds in rows:
            print(f"  {name:<44} {total / seconds:>12,.0f} records/s  ({seconds:.2f} s)")
        for name, micros in decode_cost(args.value_size).items():
            print(f"  {name + ' alone (1 MiB batch)':<44} {micros:>12.2f} µs/record")
        rate = total / t_spark
        verdict = "meets" if rate >= TARGET else "BELOW"
        print(f"  sluice source {verdict} the target of {TARGET:,} records/s")
        return 0
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
