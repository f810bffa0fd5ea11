"""``format("sluice")``: batch and streaming reads of Sluice topics over the Kafka protocol.

Modelled on Spark's Kafka source (``KafkaRelation``, ``KafkaMicroBatchStream``):

* **Planning (driver).** The subscription picks topic-partitions (Metadata); start and end
  offsets are resolved with ListOffsets (-2 earliest = log start offset, -1 latest = high
  watermark, or a timestamp); each partition's ``[start, end)`` becomes one or more Spark input
  partitions (:func:`sluice.pipeline.offsets.split_ranges`). Reads never pass the high watermark:
  ``latest`` *is* the HW, and a specific ending offset above it is capped to it. With
  ``kafka.isolation.level=read_committed`` the bound is the last stable offset instead (ListOffsets
  and Fetch with isolation level 1), and the batches of aborted transactions are skipped
  (:class:`sluice.protocol.aborted.AbortedFilter`) as markers are.
* **Reading (executors).** :func:`read_range` fetches the range with Fetch requests, splits the
  response with ``sluice.protocol.records.iter_batches``, decodes each batch (CRC checked), keeps
  the
  offsets inside the range and yields Arrow record batches
  (:class:`sluice.pipeline.schema.ColumnBuilder`).
* **Streaming.** Offsets are ``{"topic": {"partition": offset}}`` dicts (the Kafka connector's
  JSON). ``initialOffset`` resolves ``startingOffsets`` (default latest); ``latestOffset(start,
  limit)`` returns the HWs, cut by the read limit (``maxOffsetsPerTrigger`` → ``ReadMaxRows``,
  prorated per partition like Kafka), and by the target recorded in
  ``prepareForTriggerAvailableNow`` for ``Trigger.AvailableNow``. Partitions that appear later
  start at their earliest offset. ``reportLatestOffset`` returns what ``latestOffset`` saw
  (the progress's ``latestOffset``; lag figures: :func:`sluice.pipeline.offsets_behind_latest`).
  A micro-batch reads exactly ``[start, end)`` of each partition,
  and Spark checkpoints ``end`` before the next batch starts: a restarted query re-plans the same
  batch from its offset log, so every record is delivered once to an idempotent sink (Spark's
  file sink; Kafka semantics otherwise: at least once).
* **Data loss.** Offsets deleted by retention or DeleteRecords before they were read, or a
  partition whose HW went backwards: with ``failOnDataLoss=true`` (default) the query fails with
  a message saying what was lost; with false, reading continues at the earliest offset still
  there (a warning is logged).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from sluice.protocol.aborted import AbortedFilter
from sluice.protocol.errors import OffsetOutOfRange
from sluice.protocol.records import decode_batch_columns, iter_batches
from sluice.protocol.structs import TopicPartition

from .offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    OptionError,
    PartitionOffsets,
    make_ranges,
    offsets_from_dict,
    offsets_to_dict,
    rate_limit,
    split_ranges,
)
from .options import OffsetSpec, SourceOptions, parse
from .schema import ARROW_BATCH_RECORDS, ColumnBuilder, schema_ddl
from .wire import SyncClient, check

logger = logging.getLogger("sluice.pipeline.source")


class DataLossError(RuntimeError):
    """Offsets the query should have read are gone (``failOnDataLoss=true``)."""


class RangePartition(InputPartition):
    """A Spark input partition: one :class:`OffsetRange` (picklable)."""

    def __init__(self, value: OffsetRange) -> None:
        super().__init__(value)
        self.value: OffsetRange = value


# --- driver side: resolving offsets ------------------------------------------------------------


def selected_partitions(client: SyncClient, options: SourceOptions) -> list[TopicPartition]:
    counts = client.partition_counts(options.subscription.topics_of_interest())
    return [TopicPartition(t, p) for t, p in options.subscription.select(counts)]


def resolve(client: SyncClient, tps: list[TopicPartition], spec: OffsetSpec) -> PartitionOffsets:
    """Concrete offsets of ``tps`` under ``spec`` (specific values, timestamp, or default)."""
    if spec.timestamp is not None:
        return client.list_offsets({tp: spec.timestamp for tp in tps})
    wanted = {tp: spec.specific.get(tp, spec.default) for tp in tps}
    symbolic = {tp: v for tp, v in wanted.items() if v in (EARLIEST, LATEST)}
    out = {tp: v for tp, v in wanted.items() if v not in (EARLIEST, LATEST)}
    out.update(client.list_offsets(symbolic))
    return out


def _data_loss(options: SourceOptions, message: str) -> None:
    if options.fail_on_data_loss:
        raise DataLossError(
            f"{message}. Some data may have been lost (retention, DeleteRecords, or the topic "
            "was recreated). Set failOnDataLoss=false to continue from the earliest offset."
        )
    logger.warning("%s; continuing (failOnDataLoss=false)", message)


# --- executor side: reading one range ----------------------------------------------------------


def _client(options: SourceOptions) -> SyncClient:
    return SyncClient.of(options, isolation_level=options.isolation_level)


def read_range(r: OffsetRange, options: SourceOptions) -> Iterator[Any]:
    """Arrow record batches of the records of ``r`` (see the module docstring)."""
    tp = r.topic_partition
    builder = ColumnBuilder(r.topic, r.partition, options.include_headers)
    offset = r.from_offset
    with _client(options) as client:
        while offset < r.until_offset:
            result = client.fetch(tp, offset, max_bytes=options.fetch_bytes)
            if result.error_code == OffsetOutOfRange.code:
                earliest = client.list_offsets({tp: EARLIEST})[tp]
                latest = client.list_offsets({tp: LATEST})[tp]
                _data_loss(
                    options,
                    f"{r.topic}-{r.partition}: offset {offset} is out of range "
                    f"[{earliest}, {latest}) while reading [{r.from_offset}, {r.until_offset})",
                )
                if earliest <= offset:
                    break  # the log ends before the range does (truncated): nothing more
                offset = earliest
                continue
            check(result.error_code, f"Fetch {r.topic}-{r.partition} at {offset}")
            next_offset = offset
            if result.records:
                skip = AbortedFilter(result.aborted).drop
                for _, header, batch in iter_batches(result.records, allow_partial_tail=True):
                    if skip(header, batch) or header.last_offset < offset:
                        # a marker, aborted data (read_committed), or before us (the broker
                        # returns whole batches)
                        next_offset = max(next_offset, header.next_offset)
                        continue
                    builder.add(header, decode_batch_columns(batch), offset, r.until_offset)
                    next_offset = header.next_offset
                    if len(builder) >= ARROW_BATCH_RECORDS:
                        yield builder.build()
            if next_offset == offset:
                # Nothing at ``offset`` although the plan said there is: the HW went back.
                _data_loss(
                    options,
                    f"{r.topic}-{r.partition}: expected records up to {r.until_offset} but the "
                    f"high watermark is {result.high_watermark}",
                )
                break
            offset = next_offset
    if len(builder):
        yield builder.build()


# --- batch ---------------------------------------------------------------------------------


class SluiceBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        opts = self.options
        with _client(opts) as client:
            tps = selected_partitions(client, opts)
            start = resolve(client, tps, opts.starting)
            end = resolve(client, tps, opts.ending)
            hw = client.list_offsets(dict.fromkeys(tps, LATEST))
        for tp in tps:
            end[tp] = min(end[tp], hw[tp])  # reads are capped at the high watermark
            if start[tp] > end[tp] and opts.starting.specific.get(tp) is not None:
                where = f"{tp.topic}-{tp.partition}"
                _data_loss(opts, f"{where}: starting offset {start[tp]} is past the end {end[tp]}")
        ranges = split_ranges(
            make_ranges(start, end),
            min_partitions=opts.min_partitions,
            max_records_per_partition=opts.max_records_per_partition,
        )
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if partition.value is None:
            return iter(())  # nothing planned: PySpark then reads one InputPartition(None)
        assert isinstance(partition, RangePartition)
        return read_range(partition.value, self.options)


# --- streaming -------------------------------------------------------------------------------


class SluiceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Driver methods keep one connection (dropped when pickled)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._client: SyncClient | None = None
        self._target: PartitionOffsets | None = None  # Trigger.AvailableNow's end
        self._seen: PartitionOffsets | None = None  # what the last latestOffset() saw

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_client": None, "_target": None, "_seen": None}

    def _conn(self) -> SyncClient:
        if self._client is None:
            self._client = _client(self.options)
        return self._client

    def _call(self, fn: Any) -> Any:
        """Run ``fn(client)``, reconnecting once if the broker dropped the connection."""
        try:
            return fn(self._conn())
        except (ConnectionError, OSError):
            self.stop()
            return fn(self._conn())

    def initialOffset(self) -> dict[str, Any]:
        def go(client: SyncClient) -> PartitionOffsets:
            return resolve(client, selected_partitions(client, self.options), self.options.starting)

        return offsets_to_dict(self._call(go))

    def _latest(self) -> PartitionOffsets:
        def go(client: SyncClient) -> PartitionOffsets:
            tps = selected_partitions(client, self.options)
            return client.list_offsets(dict.fromkeys(tps, LATEST))

        latest: PartitionOffsets = self._call(go)
        return latest

    def _earliest(self, tps: list[TopicPartition]) -> PartitionOffsets:
        result: PartitionOffsets = self._call(
            lambda c: c.list_offsets(dict.fromkeys(tps, EARLIEST))
        )
        return result

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_offsets_per_trigger
        return ReadMaxRows(n) if n is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = offsets_from_dict(start)
        latest = self._latest() if self._target is None else dict(self._target)
        self._seen = dict(latest)
        for tp in [tp for tp in begin if tp not in latest]:
            _data_loss(self.options, f"{tp.topic}-{tp.partition} is gone")
        new = [tp for tp in latest if tp not in begin]
        begin.update(self._earliest(new))  # partitions added later start at their earliest
        for tp, end in latest.items():
            if end < begin[tp]:
                _data_loss(
                    self.options,
                    f"{tp.topic}-{tp.partition}: high watermark {end} is below the committed "
                    f"offset {begin[tp]}",
                )
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(limit.max_rows, begin, latest)
        # A partition whose HW went back (failOnDataLoss=false) resumes from its new HW.
        return offsets_to_dict({tp: max(latest[tp], 0) for tp in latest})

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The offsets the last :meth:`latestOffset` saw, before the read limit (Kafka's
        ``latestPartitionOffsets``: the high watermarks, or the ``Trigger.AvailableNow``
        target): the progress's ``latestOffset``, from which
        :func:`sluice.pipeline.offsets_behind_latest` gives Kafka's lag metrics."""
        return offsets_to_dict(self._latest() if self._seen is None else self._seen)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin = offsets_from_dict(start)
        until = offsets_from_dict(end)
        new = [tp for tp in until if tp not in begin]
        if new:
            begin.update(self._earliest(new))
        ranges = split_ranges(
            make_ranges(begin, until),
            min_partitions=self.options.min_partitions,
            max_records_per_partition=self.options.max_records_per_partition,
        )
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if partition.value is None:
            return iter(())  # nothing planned: PySpark then reads one InputPartition(None)
        assert isinstance(partition, RangePartition)
        return read_range(partition.value, self.options)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: Spark's checkpoint holds the offsets (no consumer group commit)."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


# --- the data source ---------------------------------------------------------------------------


class SluiceDataSource(DataSource):
    """``format("sluice")``: read (batch, streaming) and write (batch, streaming)."""

    @classmethod
    def name(cls) -> str:
        return "sluice"

    def schema(self) -> str:
        headers = str(_lower(self.options).get("includeheaders", "false")).lower() == "true"
        return schema_ddl(headers)

    def reader(self, schema: Any) -> DataSourceReader:
        return SluiceBatchReader(parse(self.options, streaming=False))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return SluiceStreamReader(parse(self.options, streaming=True))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        """Batch write; Overwrite refused as Kafka's sink does (a topic is only appended to).
        The default mode, ErrorIfExists, means append: :mod:`sluice.pipeline.savemode`."""
        from .writer import SluiceWriter

        if overwrite:
            raise OptionError(
                'save mode overwrite is not allowed for format("sluice"): allowed save modes '
                "are append and errorifexists (the default), as for Kafka"
            )

        return SluiceWriter(self.options, schema)

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        from .writer import SluiceStreamWriter

        return SluiceStreamWriter(self.options, schema)


def _lower(options: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k).lower(): v for k, v in options.items()}
