"""Batch and streaming writes of DataFrames to Sluice topics (the Kafka sink's contract).

Input columns, as Spark's Kafka sink takes them::

    value      binary or string   required (null = tombstone)
    key        binary or string   optional (null = no key)
    topic      string             optional; else the ``topic`` option (one must be given)
    partition  int                optional, in [0, partitions); else Kafka's default
                                  partitioner: murmur2(key) mod partitions for keyed rows
                                  (``sluice.client.partitioner``: the same placement as Java
                                  producers), a sticky partition per produced batch for
                                  unkeyed rows
    headers    array<struct<key string, value binary>>   optional

Each Spark task produces its rows with :class:`BatchProducer`: rows go into one
``sluice.protocol.records.RecordBatchBuilder`` per partition; a builder is sent as a Produce request
when it reaches ``kafka.batch.size`` bytes (default 1 MiB) and all are sent at the end of the
task (acks per ``kafka.acks``, default all). A topic's partitions are asked once per task with
Metadata allowing auto-creation, as Kafka's producer asks: a missing topic is created when the
broker's ``auto.create.topics.enable`` is true, else the task fails saying it does not exist and
is not auto-created. A partition error (record too large, ...) raises the
``sluice.protocol.errors`` class for it, which fails the task, and Spark retries or fails the
job: at-least-once, like the Kafka sink (a retried task may produce rows twice).

The arrow variants are used (``DataSourceArrowWriter``): Spark hands the rows over as Arrow
record batches, not one Python ``Row`` at a time.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from sluice.client.partitioner import default_partition
from sluice.protocol.errors import UnknownTopicOrPartition
from sluice.protocol.records import RecordBatchBuilder
from sluice.protocol.structs import TopicPartition

from .offsets import OptionError
from .options import SinkOptions, parse_sink
from .wire import SyncClient

_KNOWN_COLUMNS = {"key", "value", "topic", "partition", "headers"}


@dataclass(frozen=True)
class ProducedMessage(WriterCommitMessage):
    """What one task produced: records per ``topic-partition`` (for logs and tests)."""

    records: dict[str, int]


class BatchProducer:
    """Rows → per-partition batch builders → Produce requests. One per Spark task."""

    def __init__(self, sink: SinkOptions) -> None:
        self.sink = sink
        self.client = SyncClient.of(sink)
        self._builders: dict[TopicPartition, RecordBatchBuilder] = {}
        self._partitions: dict[str, int] = {}
        self._sticky: dict[str, int] = {}
        self._round_robin = itertools.count()
        self.sent: dict[TopicPartition, int] = {}

    def partition_count(self, topic: str) -> int:
        """Partitions of ``topic``, asked once per task the way Kafka's producer does: a
        missing topic is created when the broker allows it (``auto.create.topics.enable``),
        else the task fails saying so (:meth:`SyncClient.partitions_for_produce`)."""
        count = self._partitions.get(topic)
        if count is None:
            count = self._partitions[topic] = self.client.partitions_for_produce(topic)
        return count

    def add(
        self,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[tuple[str, bytes | None], ...],
        timestamp: int,
    ) -> None:
        count = self.partition_count(topic)  # also for a given partition, as Kafka's producer
        if partition is not None:
            if not 0 <= partition < count:
                raise UnknownTopicOrPartition(
                    f"partition {partition} of topic {topic!r} is not in the range [0, {count})"
                )
        else:
            if key is not None:
                partition = default_partition(key, count)
            else:
                sticky = self._sticky.get(topic)
                if sticky is None:
                    sticky = next(self._round_robin) % count
                    self._sticky[topic] = sticky
                partition = sticky
        tp = TopicPartition(topic, partition)
        builder = self._builders.get(tp)
        if builder is None:
            builder = self._builders[tp] = RecordBatchBuilder(compression=self.sink.compression)
        elif builder.size_in_bytes + builder.max_record_size(key, value, headers) > (
            self.sink.batch_bytes
        ):
            self._send({tp: self._builders.pop(tp)})
            builder = self._builders[tp] = RecordBatchBuilder(compression=self.sink.compression)
        builder.append(timestamp, key, value, headers)

    def _send(self, builders: Mapping[TopicPartition, RecordBatchBuilder]) -> None:
        for tp in builders:
            if self._sticky.get(tp.topic) == tp.partition:
                del self._sticky[tp.topic]  # the sticky batch is full: pick another next time
        batches = {tp: b.build() for tp, b in builders.items()}
        self.client.produce(
            batches, acks=self.sink.acks, timeout_ms=int(self.sink.timeout_s * 1000)
        )
        for tp, b in builders.items():
            self.sent[tp] = self.sent.get(tp, 0) + len(b)

    def flush(self) -> None:
        if self._builders:
            builders, self._builders = self._builders, {}
            self._send(builders)

    def close(self) -> None:
        self.client.close()


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"key/value must be binary or string, not {type(value).__name__}")


def write_arrow(sink: SinkOptions, batches: Iterator[Any]) -> ProducedMessage:
    """Produce every row of ``batches`` (pyarrow RecordBatches); flush; report counts."""
    producer = BatchProducer(sink)
    try:
        for batch in batches:
            names = set(batch.schema.names)
            if "value" not in names:
                raise OptionError("the DataFrame to write needs a value column")
            n = batch.num_rows
            cols = {c: batch.column(c).to_pylist() for c in names & _KNOWN_COLUMNS}
            values = cols["value"]
            keys = cols.get("key", [None] * n)
            topics = cols.get("topic") or [None] * n
            parts = cols.get("partition") or [None] * n
            headers = cols.get("headers") or [None] * n
            now = int(time.time() * 1000)
            for i in range(n):
                topic = topics[i] or sink.topic
                if topic is None:
                    raise OptionError("row without topic and no topic option given")
                hs = tuple((h["key"], _as_bytes(h["value"])) for h in headers[i] or ())
                producer.add(topic, parts[i], _as_bytes(keys[i]), _as_bytes(values[i]), hs, now)
        producer.flush()
    finally:
        producer.close()
    return ProducedMessage({f"{tp.topic}-{tp.partition}": n for tp, n in producer.sent.items()})


def checked_sink(options: Mapping[str, str], schema: Any) -> SinkOptions:
    """The sink the options describe, refused early (on the driver) if the DataFrame cannot
    be written: no value column, or neither a topic option nor a topic column."""
    sink = parse_sink(options)
    columns = set(schema.fieldNames())
    if "value" not in columns:
        raise OptionError("the DataFrame to write needs a value column")
    if "topic" not in columns and sink.topic is None:
        raise OptionError("give a topic option or a topic column")
    return sink


class SluiceWriter(DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self.sink = checked_sink(options, schema)

    def write(self, iterator: Iterator[Any]) -> ProducedMessage:
        return write_arrow(self.sink, iterator)


class SluiceStreamWriter(DataSourceStreamArrowWriter):
    """Streaming sink: each micro-batch's tasks produce their rows; commit has nothing to do."""

    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self.sink = checked_sink(options, schema)

    def write(self, iterator: Iterator[Any]) -> ProducedMessage:
        return write_arrow(self.sink, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Rows were produced (acknowledged per acks) by the tasks already."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Produced records cannot be taken back (Kafka sink semantics: at least once)."""
