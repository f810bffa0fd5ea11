"""Pipeline jobs users run from the command line (``sluice pipeline archive|replay``).

* :func:`archive`: topic(s) → Parquet files partitioned by record date (``date=YYYY-MM-DD``
  directories, the record timestamp's UTC date), as a streaming query with a checkpoint.
  Exactly-once files: Spark's file sink records every micro-batch's files in
  ``<path>/_spark_metadata`` and the checkpoint holds the source offsets, so a job that is
  killed and restarted re-plans the unfinished micro-batch with the same offsets and readers
  of ``spark.read.parquet(path)`` see each record once (files of a failed attempt are not in the
  log). Default trigger ``availableNow`` (archive what is there, then exit: run it from cron);
  ``processing_time`` keeps it running.
* :func:`replay`: Parquet written by :func:`archive` (or any data with the source's columns) →
  a topic, keeping the order of each original partition (rows are grouped by their original
  ``topic``/``partition`` and sorted by ``offset`` within each Spark task). With
  ``keep_partitions`` a record goes back to its original partition number; otherwise Kafka's
  default partitioner places it by key. A missing topic is created by the writer when the
  broker allows it (``auto.create.topics.enable``, with the broker's ``num.partitions``), as
  a Kafka producer's first send creates it; else the job fails saying so.
"""

from __future__ import annotations

from typing import Any

from . import FORMAT, python_worker_env, register


def spark_session(master: str = "local[*]", app_name: str = "sluice-pipeline") -> Any:
    """The active SparkSession, or a new one with Sluice's formats registered."""
    python_worker_env()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        register(active)
        return active
    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    register(spark)
    return spark


def archive(
    spark: Any,
    *,
    bootstrap: str,
    topics: list[str],
    path: str,
    checkpoint: str,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
    processing_time: str | None = None,
    fail_on_data_loss: bool = True,
) -> Any:
    """Start the archiver; returns the StreamingQuery (already finished with availableNow)."""
    from pyspark.sql import functions as f

    reader = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", starting_offsets)
        .option("includeHeaders", "true")
        .option("failOnDataLoss", str(fail_on_data_loss).lower())
    )
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    # The UTC date whatever the session time zone: days since the epoch of the record's millis.
    rows = reader.load().withColumn(
        "date",
        f.expr("date_add(DATE'1970-01-01', CAST(floor(unix_millis(timestamp) / 86400000) AS INT))"),
    )
    writer = (
        rows.writeStream.format("parquet")
        .option("path", path)
        .option("checkpointLocation", checkpoint)
        .partitionBy("date")
        .queryName("sluice-archive")
    )
    writer = (
        writer.trigger(processingTime=processing_time)
        if processing_time
        else writer.trigger(availableNow=True)
    )
    query = writer.start()
    if not processing_time:
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"archive failed: {query.exception()}")
    return query


def replay(
    spark: Any,
    *,
    path: str,
    bootstrap: str,
    topic: str,
    keep_partitions: bool = False,
    date_from: str | None = None,
    date_to: str | None = None,
    source_topic: str | None = None,
) -> int:
    """Produce the archived records under ``path`` to ``topic``; returns how many."""
    from pyspark.sql import functions as f

    df = spark.read.parquet(path)
    if date_from is not None:
        df = df.where(f.col("date") >= date_from)
    if date_to is not None:
        df = df.where(f.col("date") <= date_to)
    if source_topic is not None:
        df = df.where(f.col("topic") == source_topic)
    # One task per original partition, in offset order: the replayed partition keeps its order.
    ordered = df.repartition("topic", "partition").sortWithinPartitions(
        "topic", "partition", "offset"
    )
    columns = ["key", "value"]
    if "headers" in df.columns:
        columns.append("headers")
    if keep_partitions:
        columns.append("partition")
    ordered = ordered.select(*columns).cache()
    try:
        count = int(ordered.count())
        (
            ordered.write.format(FORMAT)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .mode("append")
            .save()
        )
    finally:
        ordered.unpersist()
    return count
