"""Inspect segment files the way Kafka's ``kafka-dump-log.sh`` (DumpLogSegments) does.

Library + command line (``python -m sluice.server.storage.dump_log``)::

    python -m sluice.server.storage.dump_log 00000000000000000000.log [--print-data-log]
    python -m sluice.server.storage.dump_log 00000000000000000000.index
    00000000000000000000.timeindex
    python -m sluice.server.storage.dump_log 00000000000000000000.txnindex
    python -m sluice.server.storage.dump_log 00000000000000000042.snapshot
    python -m sluice.server.storage.dump_log <topic>-<partition>/leader-epoch-checkpoint
    python -m sluice.server.storage.dump_log --verify /var/lib/sluice/data      # exit status 1 on
    any problem

Output, one line per batch / record / index entry, with Kafka's field names so that the output
of the two tools can be compared line by line (Kafka's Java-only ``deleteHorizonMs:
OptionalLong.empty`` is left out)::

    Dumping <path>
    Log starting offset: 0
    baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1
        producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false
        position: 0 CreateTime: 1000 size: 80 magic: 2 compresscodec: none crcValid: true
    | offset: 0 CreateTime: 1000 keySize: 1 valueSize: 2 sequence: -1 headerKeys: [] key: k
        payload: hi                                         (--print-data-log; one line each)
    | offset: 7 CreateTime: 1000 keySize: 4 valueSize: 6 sequence: -1 headerKeys: []
        endTxnMarker: COMMIT coordinatorEpoch: 3            (a control record)
    version: 0 producerId: 7 firstOffset: 2 lastOffset: 9 lastStableOffset: 10   (.txnindex)
    offset: 133 position: 4169                              (.index)
    timestamp: 1700000000000 offset: 133                    (.timeindex)
    epoch: 3 startOffset: 1200                              (leader-epoch-checkpoint)
    producerId: 7 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset:
        OptionalLong.empty lastTimestamp: 1000 firstSequence: 0 lastSequence: 1
        lastOffset: 1 offsetDelta: 1 timestamp: 1000        (.snapshot)

Index files are preallocated and zero-filled beyond their valid entries (see server/index.py):
the dump stops at the first all-zero entry, as Kafka's does. ``--deep-iteration`` prints the
record lines without key and payload (``--print-data-log`` implies it and adds them), as Kafka's.

``--verify DIR`` checks a whole log directory (a data dir of ``topic-partition`` directories, or
one partition directory): the CRC and record structure of every batch; offsets strictly
increasing across batches and segments (and each segment's first batch at or above its file
name's base offset); every offset-index entry pointing at a batch boundary whose batch's last
offset is the entry's offset, with offsets and positions increasing; every time-index entry
increasing and naming an offset of the segment whose batch has that max timestamp; the
partition's ``leader-epoch-checkpoint``, if present, readable and holding exactly the entries
the batch headers give (each epoch at its first batch; the first entry may start later, where
the log start moved; one more entry may start at the log end, a leader's term without records
yet) or, in a compacted log whose cleaner removed an epoch's first batches, entries that give
every batch its own epoch; each ``.txnindex`` readable (34-byte entries, version 0, markers
increasing) and every entry naming an ABORT control batch of its producer in that segment, its
first offset at or below the marker. A missing checkpoint is not a problem: the broker rebuilds
it from the headers at the next open. It lists every problem found, not just the first.

This is an offline tool: it reads files with plain blocking I/O and never writes. Do not run it
from the broker's event loop.
"""

from __future__ import annotations

import bisect
import itertools
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import click

from sluice.protocol.compression import CODEC_NAMES
from sluice.protocol.errors import CorruptRecordError
from sluice.protocol.records import (
    CRC_OFFSET,
    HEADER_SIZE,
    LENGTH_OFFSET,
    NO_SEQUENCE,
    BatchHeader,
    Record,
    compute_crc,
    decode_batch,
    parse_end_txn_marker,
    parse_header,
)
from sluice.server.storage.checkpoint import CorruptCheckpointError, LeaderEpochCheckpointFile
from sluice.server.storage.index import OFFSET_ENTRY, TIME_ENTRY, CorruptIndexError
from sluice.server.storage.layout import (
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    offset_file_name,
    parse_offset_file_name,
)
from sluice.server.storage.leader_epoch import EpochEntry, LeaderEpochFileCache
from sluice.server.storage.producer_state import (
    CorruptSnapshotError,
    decode_snapshot,
    java_hash_map_order,
)
from sluice.server.storage.txn_index import ABORTED_TXN_VERSION, decode_entries

_INT32_MAX = 2**31 - 1
_U32 = struct.Struct(">I")


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: sequences wrap at Int.MaxValue to 0."""
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


def base_offset_of(path: Path) -> int:
    """The base offset a segment file name encodes (20 zero-padded digits)."""
    base = parse_offset_file_name(path.name, path.suffix)
    if base is None:
        raise click.BadParameter(f"{path.name} is not named after a base offset")
    return base


@dataclass(frozen=True, slots=True)
class ScannedBatch:
    """One batch found in a .log file: its position, header, whole bytes and CRC verdict."""

    position: int
    header: BatchHeader
    data: bytes
    crc_valid: bool


@dataclass(frozen=True, slots=True)
class InvalidTail:
    """Where the walk of a .log file stopped: a header that does not parse, or a batch running
    past the end of the file (what a torn write leaves)."""

    position: int
    invalid_bytes: int
    error: CorruptRecordError


def scan_log(path: Path) -> Iterator[ScannedBatch | InvalidTail]:
    """Stream a .log file batch by batch (one batch in memory at a time, so 1 GiB segments are
    fine); an :class:`InvalidTail`, if any, comes last."""
    with path.open("rb") as f:
        size = f.seek(0, 2)
        f.seek(0)
        position = 0
        while position < size:
            batch = _read_batch(f, position, size)
            if isinstance(batch, CorruptRecordError):
                yield InvalidTail(position, size - position, batch)
                return
            yield batch
            position += len(batch.data)


def _read_batch(f: BinaryIO, position: int, file_size: int) -> ScannedBatch | CorruptRecordError:
    head = f.read(HEADER_SIZE)
    try:
        header = parse_header(head)
    except CorruptRecordError as exc:
        return CorruptRecordError(str(exc.args[0]), field=exc.field, position=position)
    if position + header.size > file_size:
        return CorruptRecordError(
            f"batch of {header.size} bytes runs past the end of the file "
            f"({file_size - position} bytes left)",
            field="batchLength",
            position=position + LENGTH_OFFSET,
        )
    data = head + f.read(header.size - HEADER_SIZE)
    (stored,) = _U32.unpack_from(data, CRC_OFFSET)
    return ScannedBatch(position, header, data, stored == compute_crc(data))


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _text(data: bytes) -> str:
    # Kafka prints keys and payloads as UTF-8 strings, replacing what does not decode.
    return data.decode("utf-8", "replace")


def format_batch(batch: ScannedBatch) -> str:
    h = batch.header
    last_sequence = (
        NO_SEQUENCE
        if h.base_sequence == NO_SEQUENCE
        else increment_sequence(h.base_sequence, h.last_offset_delta)
    )
    time_name = "LogAppendTime" if h.timestamp_type else "CreateTime"
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {last_sequence} "
        f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
        f"partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"isTransactional: {_bool(h.is_transactional)} isControl: {_bool(h.is_control)} "
        f"position: {batch.position} {time_name}: {h.max_timestamp} size: {h.size} "
        f"magic: {h.magic} compresscodec: {CODEC_NAMES.get(h.compression, 'unknown')} "
        f"crcValid: {_bool(batch.crc_valid)}"
    )


def format_record(header: BatchHeader, record: Record, *, payload: bool = True) -> str:
    """One record line; ``payload``: with key and value (Kafka's --print-data-log)."""
    delta = record.offset - header.base_offset
    sequence = (
        NO_SEQUENCE
        if header.base_sequence == NO_SEQUENCE
        else increment_sequence(header.base_sequence, delta)
    )
    time_name = "LogAppendTime" if header.timestamp_type else "CreateTime"
    key_size = -1 if record.key is None else len(record.key)
    value_size = -1 if record.value is None else len(record.value)
    line = (
        f"| offset: {record.offset} {time_name}: {record.timestamp} keySize: {key_size} "
        f"valueSize: {value_size} sequence: {sequence} "
        f"headerKeys: [{','.join(k for k, _ in record.headers)}]"
    )
    if header.is_control:
        try:
            marker = parse_end_txn_marker(record.key, record.value)
        except CorruptRecordError as exc:
            return line + f" endTxnMarker: unreadable ({exc})"
        if marker is not None:
            line += (
                f" endTxnMarker: {marker.type_name} coordinatorEpoch: {marker.coordinator_epoch}"
            )
        return line
    if not payload:
        return line
    if record.key is not None:
        line += f" key: {_text(record.key)}"
    if record.value is not None:
        line += f" payload: {_text(record.value)}"
    return line


def dump_log(
    path: Path, *, print_data_log: bool = False, deep_iteration: bool = False
) -> Iterator[str]:
    """Lines describing a .log file: one per batch, and per record with ``deep_iteration``
    (key and payload too with ``print_data_log``, which implies it)."""
    yield f"Dumping {path}"
    yield f"Log starting offset: {base_offset_of(path)}"
    for batch in scan_log(path):
        if isinstance(batch, InvalidTail):
            yield (
                f"Found {batch.invalid_bytes} invalid bytes at the end of {path.name} "
                f"(position {batch.position}): {batch.error}"
            )
            break
        yield format_batch(batch)
        if print_data_log or deep_iteration:
            try:
                decoded = decode_batch(batch.data)
            except CorruptRecordError as exc:
                yield f"| records unreadable: {exc}"
                continue
            for record in decoded.records:
                yield format_record(batch.header, record, payload=print_data_log)


def read_offset_index(path: Path) -> tuple[list[tuple[int, int]], int]:
    """``([(absolute offset, position)], trailing bytes)`` of a .index file, stopping at the
    first all-zero (preallocated) entry; trailing bytes = a size not a multiple of 8."""
    base = base_offset_of(path)
    data = path.read_bytes()
    whole = len(data) - len(data) % OFFSET_ENTRY.size
    entries = []
    for relative, position in OFFSET_ENTRY.iter_unpack(data[:whole]):
        if relative == 0 and position == 0:
            break
        entries.append((base + relative, position))
    return entries, len(data) - whole


def read_time_index(path: Path) -> tuple[list[tuple[int, int]], int]:
    """``([(timestamp, absolute offset)], trailing bytes)`` of a .timeindex file, stopping at the
    first all-zero entry."""
    base = base_offset_of(path)
    data = path.read_bytes()
    whole = len(data) - len(data) % TIME_ENTRY.size
    entries = []
    for timestamp, relative in TIME_ENTRY.iter_unpack(data[:whole]):
        if timestamp == 0 and relative == 0:
            break
        entries.append((timestamp, base + relative))
    return entries, len(data) - whole


def dump_index(path: Path) -> Iterator[str]:
    yield f"Dumping {path}"
    entries, trailing = read_offset_index(path)
    for offset, position in entries:
        yield f"offset: {offset} position: {position}"
    if trailing:
        yield f"Found {trailing} trailing bytes (not a whole {OFFSET_ENTRY.size}-byte entry)"


def dump_time_index(path: Path) -> Iterator[str]:
    yield f"Dumping {path}"
    entries, trailing = read_time_index(path)
    for timestamp, offset in entries:
        yield f"timestamp: {timestamp} offset: {offset}"
    if trailing:
        yield f"Found {trailing} trailing bytes (not a whole {TIME_ENTRY.size}-byte entry)"


def dump_leader_epochs(path: Path) -> Iterator[str]:
    """A partition's leader epoch cache, one line per entry."""
    yield f"Dumping {path}"
    try:
        entries = LeaderEpochCheckpointFile(path).read() or []
    except CorruptCheckpointError as exc:
        yield f"Unreadable leader epoch checkpoint: {exc}"
        return
    for epoch, start in entries:
        yield f"epoch: {epoch} startOffset: {start}"


def dump_txn_index(path: Path) -> Iterator[str]:
    """A ``.txnindex``, one line per aborted transaction (Kafka's ``dumpTxnIndex``)."""
    yield f"Dumping {path}"
    try:
        entries = decode_entries(path.read_bytes(), path.name)
    except CorruptIndexError as exc:
        yield f"Unreadable transaction index: {exc}"
        return
    for e in entries:
        yield (
            f"version: {ABORTED_TXN_VERSION} producerId: {e.producer_id} "
            f"firstOffset: {e.first_offset} lastOffset: {e.last_offset} "
            f"lastStableOffset: {e.last_stable_offset}"
        )


def dump_producer_snapshot(path: Path) -> Iterator[str]:
    """A producer ``.snapshot``, one line per producer (Kafka's ``dumpProducerIdSnapshot``,
    its Java ``OptionalLong`` and all)."""
    yield f"Dumping {path}"
    try:
        state = decode_snapshot(path.read_bytes())
    except CorruptSnapshotError as exc:
        yield f"Unreadable producer snapshot: {exc}"
        return
    for pid in java_hash_map_order(list(state.producers)):
        e = state.producers[pid]
        txn = e.current_txn_first_offset
        line = (
            f"producerId: {pid} producerEpoch: {e.epoch} coordinatorEpoch: "
            f"{e.coordinator_epoch} currentTxnFirstOffset: "
            f"{f'OptionalLong[{txn}]' if txn >= 0 else 'OptionalLong.empty'} "
            f"lastTimestamp: {e.last_timestamp} "
        )
        if e.batches:
            b = e.batches[-1]
            line += (
                f"firstSequence: {b.first_seq} lastSequence: {b.last_seq} lastOffset: "
                f"{b.last_offset} offsetDelta: {b.last_offset - b.first_offset} "
                f"timestamp: {e.last_timestamp}"
            )
        yield line


def dump_file(
    path: Path, *, print_data_log: bool = False, deep_iteration: bool = False
) -> Iterator[str]:
    """Dispatch on the suffix (.log, .index, .timeindex, .txnindex, .snapshot) or the name
    (leader-epoch-checkpoint)."""
    if path.name == LEADER_EPOCH_CHECKPOINT:
        return dump_leader_epochs(path)
    if path.suffix == SNAPSHOT_SUFFIX:
        return dump_producer_snapshot(path)
    if path.suffix == LOG_SUFFIX:
        return dump_log(path, print_data_log=print_data_log, deep_iteration=deep_iteration)
    if path.suffix == TXN_INDEX_SUFFIX:
        return dump_txn_index(path)
    if path.suffix == INDEX_SUFFIX:
        return dump_index(path)
    if path.suffix == TIME_INDEX_SUFFIX:
        return dump_time_index(path)
    raise click.BadParameter(
        f"{path}: not a .log, .index, .timeindex, .txnindex, .snapshot or "
        f"{LEADER_EPOCH_CHECKPOINT} file"
    )


# -- verification ------------------------------------------------------------------------------


def partition_dirs(root: Path) -> list[Path]:
    """``root`` itself if it holds segments, else its subdirectories that do (sorted)."""
    if any(root.glob(f"*{LOG_SUFFIX}")):
        return [root]
    return sorted(d for d in root.iterdir() if d.is_dir() and any(d.glob(f"*{LOG_SUFFIX}")))


def verify_partition(directory: Path) -> list[str]:
    """Every problem found in one partition directory (empty list: all good)."""
    problems: list[str] = []
    previous_last: int | None = None
    epochs = LeaderEpochFileCache()  # what the batch headers say, as appends would assign
    batch_epochs: list[tuple[int, int]] = []  # (base offset, epoch) of every batch
    first_offset: int | None = None
    for log_path in sorted(directory.glob(f"*{LOG_SUFFIX}"), key=base_offset_of):
        base = base_offset_of(log_path)
        where = f"{directory.name}/{log_path.name}"
        if previous_last is not None and base <= previous_last:
            problems.append(
                f"{where}: segment base offset {base} not above the previous segment's last "
                f"offset {previous_last}"
            )
        headers: list[tuple[int, BatchHeader]] = []  # (position, header): no batch bytes kept
        aborts: set[tuple[int, int]] = set()  # (offset, producer id) of ABORT markers
        for batch in scan_log(log_path):
            if isinstance(batch, InvalidTail):
                problems.append(f"{where}: {batch.error}")
                break
            h = batch.header
            headers.append((batch.position, h))
            if first_offset is None:
                first_offset = h.base_offset
            if h.partition_leader_epoch >= 0:
                epochs.assign(h.partition_leader_epoch, h.base_offset)
                batch_epochs.append((h.base_offset, h.partition_leader_epoch))
            at = f"{where} position {batch.position} (baseOffset {h.base_offset})"
            if not batch.crc_valid:
                problems.append(f"{at}: CRC mismatch (stored {h.crc:#010x})")
            else:
                try:
                    decoded = decode_batch(batch.data)
                    if h.is_control and decoded.records:
                        first = decoded.records[0]
                        marker = parse_end_txn_marker(first.key, first.value)
                        if marker is not None and not marker.commit:
                            aborts.add((h.base_offset, h.producer_id))
                except CorruptRecordError as exc:
                    problems.append(f"{at}: {exc}")
            if h.last_offset_delta < 0:
                problems.append(f"{at}: lastOffsetDelta {h.last_offset_delta} is negative")
            if h.base_offset < base:
                problems.append(f"{at}: offset below the segment's base offset {base}")
            if previous_last is not None and h.base_offset <= previous_last:
                problems.append(
                    f"{at}: offsets not increasing (previous batch ended at {previous_last})"
                )
            previous_last = max(h.last_offset, previous_last if previous_last is not None else -1)
        problems += _verify_offset_index(directory, base, where, dict(headers))
        problems += _verify_time_index(directory, base, where, [h for _, h in headers])
        problems += _verify_txn_index(directory, base, where, aborts)
    end = previous_last + 1 if previous_last is not None else None
    problems += _verify_leader_epochs(directory, epochs, first_offset, end, batch_epochs)
    return problems


def _verify_txn_index(
    directory: Path, base: int, where: str, aborts: set[tuple[int, int]]
) -> list[str]:
    path = directory / offset_file_name(base, TXN_INDEX_SUFFIX)
    if not path.exists():
        return []
    try:
        entries = decode_entries(path.read_bytes(), path.name)
    except CorruptIndexError as exc:
        return [f"{where}: {exc}"]
    problems = []
    for e in entries:
        if (e.last_offset, e.producer_id) not in aborts:
            problems.append(
                f"{where}: {path.name} entry {e} names no ABORT marker of producer "
                f"{e.producer_id} at offset {e.last_offset}"
            )
        if e.first_offset > e.last_offset:
            problems.append(f"{where}: {path.name} entry {e}: first offset after the marker")
    return problems


def _show_epochs(entries: tuple[EpochEntry, ...]) -> str:
    return "[" + ", ".join(f"{e.epoch}@{e.start_offset}" for e in entries) + "]"


def _verify_leader_epochs(
    directory: Path,
    derived: LeaderEpochFileCache,
    first_offset: int | None,
    end: int | None,
    batch_epochs: list[tuple[int, int]],
) -> list[str]:
    """The checkpoint against ``derived`` (the headers' entries); ``first_offset`` is the first
    batch's base offset, ``end`` the log end (None: no batch). A compacted log may have lost
    the first batches of an epoch (or all of them) to the cleaner, which leaves the cache as
    it was: there the check is what the cache is for, every batch's epoch being the epoch the
    cache gives for its base offset."""
    path = directory / LEADER_EPOCH_CHECKPOINT
    where = f"{directory.name}/{LEADER_EPOCH_CHECKPOINT}"
    try:
        stored = LeaderEpochCheckpointFile(path).read()
    except CorruptCheckpointError as exc:
        return [f"{where}: unreadable: {exc}"]
    if stored is None:
        return []
    cached = tuple(EpochEntry(*entry) for entry in stored)
    for before, after in itertools.pairwise(cached):
        if not (before.epoch < after.epoch and before.start_offset < after.start_offset):
            return [f"{where}: entries not increasing: {_show_epochs(cached)}"]
    # The log start is not in the partition directory: take the file's first start as it,
    # when it lies inside the log (retention or DeleteRecords moved it there).
    if cached and first_offset is not None and cached[0].start_offset > first_offset:
        derived.truncate_from_start(cached[0].start_offset)
    expected = derived.entries
    if cached == expected:
        return []
    if cached[:-1] == expected and cached[-1].start_offset == (end or cached[-1].start_offset):
        return []  # a term that has written nothing yet, starting at the log end
    starts = [e.start_offset for e in cached]
    if (
        cached
        and (end is None or starts[-1] <= end)
        and all(
            cached[bisect.bisect_right(starts, offset) - 1].epoch == epoch
            for offset, epoch in batch_epochs
            if offset >= starts[0]
        )
    ):
        return []  # compacted: each batch lies in its epoch's range
    return [
        f"{where}: holds {_show_epochs(cached)}, the batch headers say {_show_epochs(expected)}"
        " (epoch@startOffset)"
    ]


def _verify_offset_index(
    directory: Path, base: int, where: str, by_position: dict[int, BatchHeader]
) -> list[str]:
    path = directory / offset_file_name(base, INDEX_SUFFIX)
    if not path.exists():
        return [f"{where}: offset index {path.name} missing"]
    problems = []
    entries, trailing = read_offset_index(path)
    if trailing:
        problems.append(f"{path.name}: {trailing} trailing bytes (size not a multiple of 8)")
    previous = (-1, -1)
    for offset, position in entries:
        at = f"{directory.name}/{path.name} entry offset: {offset} position: {position}"
        if offset <= previous[0] or position <= previous[1]:
            problems.append(f"{at}: not above the previous entry {previous}")
        previous = (offset, position)
        header = by_position.get(position)
        if header is None:
            problems.append(f"{at}: position is not a batch boundary in {where}")
        elif header.last_offset != offset:
            problems.append(f"{at}: the batch there ends at offset {header.last_offset}")
    return problems


def _verify_time_index(
    directory: Path, base: int, where: str, batches: list[BatchHeader]
) -> list[str]:
    path = directory / offset_file_name(base, TIME_INDEX_SUFFIX)
    if not path.exists():
        return [f"{where}: time index {path.name} missing"]
    problems = []
    entries, trailing = read_time_index(path)
    if trailing:
        problems.append(f"{path.name}: {trailing} trailing bytes (size not a multiple of 12)")
    previous_ts = previous_offset = -(2**63)
    last_offsets = [b.last_offset for b in batches]  # increasing in a healthy segment
    for timestamp, offset in entries:
        at = f"{directory.name}/{path.name} entry timestamp: {timestamp} offset: {offset}"
        if timestamp <= previous_ts or offset < previous_offset:
            problems.append(f"{at}: not increasing after ({previous_ts}, {previous_offset})")
        previous_ts, previous_offset = timestamp, offset
        i = bisect.bisect_left(last_offsets, offset)
        holder = batches[i] if i < len(batches) else None
        if holder is None or not holder.base_offset <= offset <= holder.last_offset:
            problems.append(f"{at}: no batch of {where} holds this offset")
        elif holder.max_timestamp != timestamp:  # the entry is (batch maxTimestamp, last offset)
            problems.append(f"{at}: the batch holding it has maxTimestamp {holder.max_timestamp}")
    return problems


def verify_log_dir(root: Path) -> list[str]:
    """Every problem in every partition under ``root`` (see the module docstring)."""
    problems: list[str] = []
    directories = partition_dirs(root)
    if not directories:
        return [f"{root}: no partition directory with segments found"]
    for directory in directories:
        problems += verify_partition(directory)
    return problems


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--files",
    "files_csv",
    help="Comma-separated files to dump (kafka-dump-log.sh style); same as positional paths.",
)
@click.option("--print-data-log", is_flag=True, help="Also print every record of every batch.")
@click.option(
    "--deep-iteration",
    is_flag=True,
    help="Print every record (without key and payload); implied by --print-data-log.",
)
@click.option(
    "--verify",
    "verify_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Verify a whole log directory; exit status 1 if any problem is found.",
)
def main(
    paths: tuple[Path, ...],
    files_csv: str | None,
    print_data_log: bool,
    deep_iteration: bool,
    verify_dir: Path | None,
) -> None:
    """Dump .log/.index/.timeindex files like kafka-dump-log.sh (and a partition's
    leader-epoch-checkpoint), or verify a log directory."""
    files = list(paths)
    if files_csv:
        files += [Path(p) for p in files_csv.split(",") if p]
    if not files and verify_dir is None:
        raise click.UsageError("give files to dump or --verify DIR")
    for path in files:
        if not path.is_file():
            raise click.BadParameter(f"{path} does not exist", param_hint="--files")
        for line in dump_file(path, print_data_log=print_data_log, deep_iteration=deep_iteration):
            click.echo(line)
    if verify_dir is not None:
        problems = verify_log_dir(verify_dir)
        for problem in problems:
            click.echo(f"PROBLEM {problem}")
        partitions = len(partition_dirs(verify_dir))
        click.echo(
            f"Verified {partitions} partition(s) under {verify_dir}: {len(problems)} problem(s)"
        )
        if problems:
            sys.exit(1)


if __name__ == "__main__":
    main()
