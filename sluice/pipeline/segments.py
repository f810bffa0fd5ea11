"""``format("sluice-segments")``: read a broker's data directory straight from its segment files.

For backfills and analytics that must not load the broker: nothing is asked over the network,
each ``<topic>-<partition>/<base>.log`` (storage spec §1) is one Spark input partition, read
with ``pread`` and split into batches by the one RecordBatch codec (``sluice.protocol.records``) —
every batch's CRC is checked. Same schema and options names as ``format("sluice")``::

    spark.read.format("sluice-segments").option("subscribe", "events").load("/var/lib/sluice")

What is read, and why it equals what a consumer sees (single-replica broker: HW = LEO after
each append, so nothing below the end of the files is uncommitted):

* segments in base-offset order; files with another suffix (``.deleted``, ``.cleaned``,
  ``.swap``) and directories of deleted topics (``*-delete``) are skipped;
* records below the partition's log start offset (``log-start-offset-checkpoint``, written by
  the broker every ``checkpoint_interval_ms`` and at shutdown: a hint that may lag a recent
  DeleteRecords) are dropped, as a Fetch would never return them;
* the file is read up to its length when the task opens it: a batch still being appended (a
  partial tail) is not read; a corrupt batch fails the task (CorruptRecordError names the
  file and position);
* control batches (transaction markers) are skipped;
* with ``kafka.isolation.level=read_committed`` (the option of ``format("sluice")``), what a
  read_committed consumer would get: records from the partition's last stable offset on are
  not read, and the records of aborted transactions are skipped.

The last stable offset is found as a broker's recovery finds it (storage spec: producer
state): the newest producer snapshot (``<offset>.snapshot``: each producer's ongoing
transaction) then the batch headers from its offset to the end of the files, where a
transactional batch opens its producer's transaction and a marker closes it; the LSO is the
first offset of the oldest transaction left open (none open: no bound). It is computed once
per partition when the query is planned, reading only past the snapshot (the active segment,
after a clean shutdown). Aborted transactions come from the partition's ``.txnindex`` files
(Kafka's aborted-transaction index, one entry per abort marker) and are dropped by the same
rule the Fetch-based readers apply (:class:`sluice.protocol.aborted.AbortedFilter`). A data
directory copied while its broker ran is read as of its files: a transaction whose marker is
not in them yet counts as open.

Read-only: the broker may keep running and appending; a segment that retention deletes while
it is read stays readable through the open descriptor (POSIX unlink semantics); one renamed to
``.deleted`` before the task opens it is reported as lost (``failOnDataLoss``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from sluice.protocol.aborted import AbortedFilter
from sluice.protocol.errors import CorruptRecordError
from sluice.protocol.records import (
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    BatchHeader,
    decode_batch_columns,
    end_txn_marker_of,
    iter_batches,
)
from sluice.protocol.structs import TopicPartition
from sluice.server.storage.layout import (
    LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    TXN_INDEX_SUFFIX,
    is_deleted_partition_dir,
    offset_file_name,
    parse_offset_file_name,
    parse_partition_dir,
)
from sluice.server.storage.producer_state import (
    CorruptSnapshotError,
    ProducerStateManager,
    decode_snapshot,
    snapshot_files,
)
from sluice.server.storage.txn_index import decode_entries

from .offsets import OptionError
from .options import SourceOptions, parse
from .schema import ARROW_BATCH_RECORDS, ColumnBuilder, schema_ddl

CHUNK_BYTES = 8 << 20


@dataclass(frozen=True)
class SegmentFile(InputPartition):
    """One ``.log`` file to read: records ``[max(base, log_start), next_base)`` of it."""

    topic: str
    partition: int
    path: str
    base_offset: int
    log_start_offset: int
    next_base_offset: int | None  # base offset of the following segment (None: the last one)
    #: read_committed: records at or past it are not read (the partition's LSO; None: no bound)
    stable_offset: int | None = None
    #: read_committed: the aborted transactions whose data may lie in this segment,
    #: ``(producer id, first offset)`` (None: read_uncommitted)
    aborted: tuple[tuple[int, int], ...] | None = None


def partition_dirs(log_dir: Path) -> dict[TopicPartition, Path]:
    """Every ``<topic>-<partition>`` directory of a data directory (deleted topics excluded)."""
    out: dict[TopicPartition, Path] = {}
    if not log_dir.is_dir():
        raise OptionError(f"path: {log_dir} is not a directory")
    for entry in log_dir.iterdir():
        if not entry.is_dir() or is_deleted_partition_dir(entry.name):
            continue
        try:
            out[parse_partition_dir(entry.name)] = entry
        except ValueError:
            continue  # not a partition directory
    return out


def read_log_start_offsets(log_dir: Path) -> dict[TopicPartition, int]:
    """``log-start-offset-checkpoint`` (``0\\n<n>\\n<topic> <partition> <offset>...``), or {}."""
    try:
        lines = (log_dir / LOG_START_OFFSET_CHECKPOINT).read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines[2:]:
        fields = line.split()
        if len(fields) == 3 and fields[1].isdigit() and fields[2].lstrip("-").isdigit():
            out[TopicPartition(fields[0], int(fields[1]))] = int(fields[2])
    return out


def plan_segments(log_dir: Path, options: SourceOptions) -> list[SegmentFile]:
    """One :class:`SegmentFile` per segment of every selected partition, in offset order."""
    dirs = partition_dirs(log_dir)
    counts: dict[str, int] = {}
    for topic, partition in dirs:
        counts[topic] = max(counts.get(topic, 0), partition + 1)
    starts = read_log_start_offsets(log_dir)
    committed = options.isolation_level == 1
    plan: list[SegmentFile] = []
    for topic, partition in options.subscription.select(counts):
        tp = TopicPartition(topic, partition)
        directory = dirs.get(tp)
        if directory is None:
            continue
        found = (parse_offset_file_name(p.name, LOG_SUFFIX) for p in directory.iterdir())
        bases = sorted(base for base in found if base is not None)
        start = starts.get(tp, 0)
        stable = last_stable_offset(directory, bases) if committed else None
        aborted = aborted_transactions(directory) if committed else []
        for i, base in enumerate(bases):
            following = bases[i + 1] if i + 1 < len(bases) else None
            if following is not None and following <= start:
                continue  # wholly below the log start offset: deleted records
            if stable is not None and base >= stable:
                break  # wholly at or past the last stable offset
            plan.append(
                SegmentFile(
                    topic=topic,
                    partition=partition,
                    path=str(directory / offset_file_name(base, LOG_SUFFIX)),
                    base_offset=base,
                    log_start_offset=start,
                    next_base_offset=following,
                    stable_offset=stable,
                    aborted=tuple(
                        (pid, first)
                        for pid, first, last in aborted
                        if last >= base and (following is None or first < following)
                    )
                    if committed
                    else None,
                )
            )
    return plan


def aborted_transactions(directory: Path) -> list[tuple[int, int, int]]:
    """``(producer id, first offset, last offset)`` of every aborted transaction the
    partition's ``.txnindex`` files list (an unreadable or torn file fails the query: without
    it aborted records would be read as committed)."""
    out = []
    for path in directory.iterdir():
        if parse_offset_file_name(path.name, TXN_INDEX_SUFFIX) is None:
            continue
        for entry in decode_entries(path.read_bytes(), path):
            out.append((entry.producer_id, entry.first_offset, entry.last_offset))
    return sorted(out, key=lambda a: a[1])


def last_stable_offset(directory: Path, bases: list[int]) -> int | None:
    """The partition's last stable offset as its files leave it (module docstring), or None
    when no transaction is open. ``bases``: its segments' base offsets, in order. The files are
    replayed by the broker's own producer-state rules (:class:`ProducerStateManager`, as its
    recovery does), from the newest readable snapshot."""
    state = ProducerStateManager()
    since = 0
    for offset, path in reversed(snapshot_files(directory)):
        try:
            state = decode_snapshot(path.read_bytes())
        except (OSError, CorruptSnapshotError):
            continue  # torn or removed meanwhile: an older one, else the whole log
        since = offset
        break
    for i, base in enumerate(bases):
        following = bases[i + 1] if i + 1 < len(bases) else None
        if following is not None and following <= since:
            continue
        path = directory / offset_file_name(base, LOG_SUFFIX)
        state.replay_batches(
            (header, end_txn_marker_of(batch) if header.is_control else None)
            for header, batch in _file_batches(str(path))
            if header.next_offset > since
        )
    return state.first_undecided_offset()


def read_segment(seg: SegmentFile, include_headers: bool) -> Iterator[Any]:
    """Arrow record batches of one segment file (see the module docstring for what is kept)."""
    hi = seg.next_base_offset if seg.next_base_offset is not None else 2**63 - 1
    if seg.stable_offset is not None:
        hi = min(hi, seg.stable_offset)
    drop = AbortedFilter(seg.aborted).drop if seg.aborted else None
    builder = ColumnBuilder(seg.topic, seg.partition, include_headers)
    for header, batch in _file_batches(seg.path):
        if header.base_offset >= hi:
            break
        if header.last_offset < seg.log_start_offset:
            continue
        if drop is not None and drop(header, batch):
            continue
        builder.add(header, decode_batch_columns(batch), seg.log_start_offset, hi)
        if len(builder) >= ARROW_BATCH_RECORDS:
            yield builder.build()
    if len(builder):
        yield builder.build()


def _file_batches(path: str) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Every whole batch of a segment file, in order, up to the length the file had when it
    was opened (a partial batch at the end, still being appended, is not read).

    The file is read with ``pread`` in chunks of :data:`CHUNK_BYTES` (grown for a larger batch);
    each chunk is split by the batches' length prefixes, a batch cut by the chunk's end is
    re-read at the start of the next chunk. A corrupt batch raises CorruptRecordError naming
    the file and position.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        position = 0
        want = CHUNK_BYTES
        while position < size:
            chunk = os.pread(fd, min(want, size - position), position)
            if not chunk:
                break
            consumed = 0
            try:
                for at, header, batch in iter_batches(chunk, allow_partial_tail=True):
                    consumed = at + header.size
                    yield header, batch
            except CorruptRecordError as exc:
                raise CorruptRecordError(
                    f"{path}: {exc}", field=exc.field, position=position + consumed
                ) from exc
            if consumed == 0:
                if position + len(chunk) >= size:
                    break  # a partial batch at the end: still being appended
                want = max(want * 2, _batch_size_at(chunk))  # one batch larger than the chunk
                continue
            position += consumed
            want = CHUNK_BYTES
    finally:
        os.close(fd)


def _batch_size_at(chunk: bytes) -> int:
    """Size of the batch starting ``chunk`` (its length prefix), or 0 if not even that is here."""
    if len(chunk) < LOG_OVERHEAD:
        return 0
    return LOG_OVERHEAD + int.from_bytes(chunk[LENGTH_OFFSET:LOG_OVERHEAD], "big", signed=True)


class SegmentReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[SegmentFile]:
        if not self.options.path:
            raise OptionError('sluice-segments needs a path: .load("<broker log.dirs>")')
        return plan_segments(Path(self.options.path), self.options)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, SegmentFile) and partition.value is None:
            return iter(())  # no segment planned: PySpark then reads one InputPartition(None)
        assert isinstance(partition, SegmentFile)
        if not os.path.exists(partition.path):
            if self.options.fail_on_data_loss:
                raise FileNotFoundError(
                    f"{partition.path} was deleted (retention?) before it was read; "
                    "set failOnDataLoss=false to skip it"
                )
            return iter(())
        return read_segment(partition, self.options.include_headers)


class SluiceSegmentsDataSource(DataSource):
    """``format("sluice-segments")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "sluice-segments"

    def _options(self) -> SourceOptions:
        return parse(self.options, streaming=False, segments=True)

    def schema(self) -> str:
        return schema_ddl(self._options().include_headers)

    def reader(self, schema: Any) -> DataSourceReader:
        return SegmentReader(self._options())
