"""Offsets as Spark's Kafka connector writes them, offset ranges, and how ranges are planned.

Pure functions, no Spark and no I/O: the driver-side planning of :mod:`sluice.pipeline.source` is
built
from them, so they are unit-tested without a SparkSession.

JSON format (the Kafka connector's, so a user's ``startingOffsets`` strings carry over)::

    {"topicA": {"0": 23, "1": -1}, "topicB": {"0": -2}}

Partition numbers are JSON object keys, hence strings. ``-2`` means *earliest* (the log start
offset), ``-1`` *latest* (the high watermark); any other value must be >= 0. A streaming query's
checkpointed offset is the same shape with concrete offsets only: it is what
``DataSourceStreamReader.initialOffset/latestOffset`` return and what Spark writes to the
checkpoint's ``offsets/`` log, so a restarted query resumes exactly where the last committed
micro-batch ended (no gap, no duplicate: ranges are half-open ``[from, until)``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sluice.protocol.structs import TopicPartition

EARLIEST = -2
LATEST = -1


class OptionError(ValueError):
    """An option value the source cannot use (the message names the option)."""


#: ``{TopicPartition: offset}``: the in-memory form of an offsets JSON document.
PartitionOffsets = dict[TopicPartition, int]


def parse_partition_offsets(text: str, *, option: str) -> PartitionOffsets:
    """Parse ``{"topic": {"0": 23}}`` JSON. Values must be integers >= -2."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"{option}: not JSON ({exc.msg}): {text!r}") from exc
    return offsets_from_dict(doc, option=option)


def offsets_from_dict(doc: Any, *, option: str = "offsets") -> PartitionOffsets:
    """The ``{"topic": {"0": 23}}`` dict (parsed JSON, or a Spark streaming offset) as a mapping."""
    if not isinstance(doc, dict):
        raise OptionError(f'{option}: expected {{"topic": {{"partition": offset}}}}, got {doc!r}')
    out: PartitionOffsets = {}
    for topic, parts in doc.items():
        if not isinstance(topic, str) or not isinstance(parts, dict):
            raise OptionError(f"{option}: topic {topic!r} must map to an object of partitions")
        for part, offset in parts.items():
            try:
                partition = int(part)
            except (TypeError, ValueError):
                raise OptionError(
                    f"{option}: partition {part!r} of {topic!r} is not a number"
                ) from None
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise OptionError(f"{option}: offset {offset!r} of {topic}-{part} is not >= -2")
            if partition < 0:
                raise OptionError(f"{option}: partition {partition} of {topic!r} is negative")
            out[TopicPartition(topic, partition)] = offset
    return out


def offsets_to_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The JSON-able form, topics and partitions sorted so equal offsets serialize equally."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> str:
    return json.dumps(offsets_to_dict(offsets), separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records ``[from_offset, until_offset)`` of one partition: one Spark input partition.

    Offsets are concrete (>= 0). A range may contain fewer records than its width (compacted
    or transaction-marker offsets); readers never return an offset outside it.
    """

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return max(0, self.until_offset - self.from_offset)

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def make_ranges(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
) -> list[OffsetRange]:
    """One range per partition present in ``end`` (missing from ``start`` = nothing to read)."""
    ranges = []
    for tp in sorted(end):
        if tp in start and end[tp] > start[tp]:
            ranges.append(OffsetRange(tp.topic, tp.partition, start[tp], end[tp]))
    return ranges


def split_ranges(
    ranges: Iterable[OffsetRange],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Split ranges so Spark parallelises large partitions.

    As Kafka's ``KafkaOffsetRangeCalculator``: with ``min_partitions`` above the number of
    ranges, each range gets a share of the ``min_partitions`` proportional to its size (at least
    one piece); then every piece larger than ``max_records_per_partition`` is cut into equal
    pieces below that bound. Pieces tile the original range exactly (no gap, no overlap).
    """
    result = [r for r in ranges if r.size > 0]
    if min_partitions is not None and min_partitions > len(result) and result:
        total = sum(r.size for r in result)
        pieces: list[OffsetRange] = []
        for r in result:
            parts = max(1, math.floor(r.size / total * min_partitions))
            pieces.extend(_cut(r, parts))
        result = pieces
    if max_records_per_partition is not None:
        bounded: list[OffsetRange] = []
        for r in result:
            bounded.extend(_cut(r, math.ceil(r.size / max_records_per_partition)))
        result = bounded
    return result


def _cut(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``r`` cut into ``parts`` contiguous pieces whose sizes differ by at most one."""
    parts = max(1, min(parts, r.size))
    out = []
    for i in range(parts):
        lo = r.from_offset + r.size * i // parts
        hi = r.from_offset + r.size * (i + 1) // parts
        out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out


def rate_limit(
    limit: int,
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
) -> PartitionOffsets:
    """End offsets admitting at most about ``limit`` records in one micro-batch.

    As Kafka's source (``KafkaMicroBatchStream.rateLimit``): each partition gets a share of the
    limit proportional to its backlog; a share below one record is rounded up (so a small
    partition is not starved forever), otherwise down. Partitions absent from ``start`` start at
    their ``latest`` value's own start (they are new: the caller puts them in ``start``).
    """
    backlog = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    out: PartitionOffsets = {}
    for tp, until in latest.items():
        begin = start.get(tp, until)
        size = backlog[tp]
        if size == 0:
            out[tp] = until
            continue
        prorated = limit * (size / total)
        step = math.ceil(prorated) if prorated < 1 else math.floor(prorated)
        out[tp] = min(until, begin + step)
    return out


def offsets_behind_latest(source_progress: Any) -> dict[str, str]:
    """Kafka's source metrics (``KafkaMicroBatchStream.metrics``) for one source of a streaming
    query's progress: per partition, the latest offset the source saw minus the offset the
    micro-batch read up to, and their ``minOffsetsBehindLatest`` / ``maxOffsetsBehindLatest`` /
    ``avgOffsetsBehindLatest`` as strings (Kafka's ``Map[String, String]``); ``{}`` when the
    progress has no offsets (no batch yet). A partition missing from the end offset counts from
    0, as in Kafka.

    Why a function and not ``progress.sources[i].metrics``: Spark fills that map only from a
    ``MicroBatchStream`` that implements ``ReportsSourceMetrics``, and the stream Spark wraps
    around a Python data source does not (PySpark 4.3: ``PythonMicroBatchStream`` implements
    ``MicroBatchStream``, ``SupportsAdmissionControl``, ``SupportsTriggerAvailableNow`` and
    ``AcceptsLatestSeenOffset``; the Python runner has no metrics call). The progress does
    carry both inputs: ``endOffset``, and ``latestOffset`` from the reader's
    ``reportLatestOffset``, which returns the offsets its ``latestOffset`` saw, as Kafka's does.

    ``source_progress``: a ``SourceProgress`` of a listener event (offsets as JSON strings) or
    one ``query.lastProgress["sources"]`` entry (offsets as dicts or JSON strings).
    """

    def field(name: str) -> Any:
        value = (
            source_progress.get(name)
            if isinstance(source_progress, Mapping)
            else getattr(source_progress, name, None)
        )
        if isinstance(value, str):
            value = json.loads(value) if value.strip() not in ("", "null") else None
        return value

    end, latest = field("endOffset"), field("latestOffset")
    if not end or not latest:
        return {}
    consumed = offsets_from_dict(end)
    behind = [offset - consumed.get(tp, 0) for tp, offset in offsets_from_dict(latest).items()]
    if not behind:
        return {}
    return {
        "minOffsetsBehindLatest": str(min(behind)),
        "maxOffsetsBehindLatest": str(max(behind)),
        "avgOffsetsBehindLatest": str(sum(behind) / len(behind)),
    }
