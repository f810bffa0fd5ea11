"""What the transaction crash tests compare a recovered partition against.

* :func:`log_batches` reads a partition's segment files (every batch: offsets, producer, whether
  it is transactional, COMMIT/ABORT for a marker);
* :func:`kafka_model` replays those batches with the rules of Kafka's ``ProducerStateManager``
  and ``UnifiedLog.append`` -- a transactional batch opens its producer's transaction at its
  base offset, a marker closes it; an ABORT adds the aborted-transaction entry ``(producer id,
  first offset, marker offset, last stable offset)`` whose last stable offset is the first
  offset of the earliest *other* open transaction, else the marker's offset + 1
  (``lastStableOffset(completedTxn)``); a marker without an open transaction (a second marker
  of the same transaction) completes nothing and adds no entry (``appendEndTxnMarker``: "only
  emit the CompletedTxn for non-empty transactions") -- and answers the ``.txnindex``
  entries and the LSO (the earliest open transaction's first offset, bounded by the high
  watermark) that the partition must have;
* :func:`read_txn_index` parses the ``.txnindex`` files themselves (Kafka's 34-byte entries:
  version int16, producer id, first offset, last offset, last stable offset, all int64), without
  Sluice's reader;
* :func:`offsets` asks a broker over the wire for the high watermark and the LSO (ListOffsets
  latest, read_uncommitted and read_committed) and Fetch v4+'s ``last_stable_offset``.
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import NamedTuple

from sluice.protocol import messages as m
from sluice.protocol.records import end_txn_marker_of, iter_batches
from tests.broker_util import WireClient

TXN_ENTRY = struct.Struct(">hqqqq")
assert TXN_ENTRY.size == 34


class Batch(NamedTuple):
    base: int
    last: int
    producer_id: int
    epoch: int
    transactional: bool
    #: None: data; True: a COMMIT marker; False: an ABORT marker.
    commit: bool | None


class TxnEntry(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def log_batches(partition_dir: Path) -> list[Batch]:
    out: list[Batch] = []
    for segment in sorted(partition_dir.glob("*.log")):
        for _pos, h, view in iter_batches(segment.read_bytes(), allow_partial_tail=True):
            control = bool(h.attributes & 0x20)
            marker = end_txn_marker_of(view) if control else None
            out.append(
                Batch(
                    h.base_offset,
                    h.base_offset + h.last_offset_delta,
                    h.producer_id,
                    h.producer_epoch,
                    bool(h.attributes & 0x10),
                    None if marker is None else marker.commit,
                )
            )
    return out


def kafka_model(batches: list[Batch], high_watermark: int) -> tuple[list[TxnEntry], int]:
    """``(.txnindex entries, LSO)`` by Kafka's rules (module docstring)."""
    ongoing: dict[int, int] = {}
    entries: list[TxnEntry] = []
    for b in batches:
        if b.base >= high_watermark:
            break
        if b.commit is None:
            if b.transactional:
                ongoing.setdefault(b.producer_id, b.base)
            continue
        first = ongoing.pop(b.producer_id, None)
        if first is not None and not b.commit:
            lso = min(ongoing.values(), default=b.base + 1)
            entries.append(TxnEntry(b.producer_id, first, b.base, lso))
    return entries, min([*ongoing.values(), high_watermark])


def read_txn_index(partition_dir: Path) -> list[TxnEntry]:
    out: list[TxnEntry] = []
    for path in sorted(partition_dir.glob("*.txnindex")):
        data = path.read_bytes()
        assert len(data) % TXN_ENTRY.size == 0, f"{path}: {len(data)} bytes"
        for i in range(0, len(data), TXN_ENTRY.size):
            version, *fields = TXN_ENTRY.unpack_from(data, i)
            assert version == 0, f"{path}: entry version {version}"
            out.append(TxnEntry(*fields))
    return out


class Offsets(NamedTuple):
    high_watermark: int
    lso: int
    #: Fetch v4+'s ``last_stable_offset`` (read_committed).
    fetch_lso: int


async def _offsets(port: int, topic: str, partitions: list[int]) -> dict[int, Offsets] | None:
    client = await WireClient.connect("127.0.0.1", port)
    try:
        latest: dict[int, list[int]] = {}
        for isolation in (0, 1):
            req = m.ListOffsetsRequest(
                replica_id=-1,
                isolation_level=isolation,
                topics=[m.ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                    m.ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=-1)
                    for p in partitions])],
            )  # fmt: skip
            resp = await client.request(m.ListOffsets.key, 5, req)
            for part in resp.topics[0].partitions:
                if part.error_code:
                    return None  # not the leader (yet), or its HW not caught up: ask again
                latest.setdefault(part.partition_index, []).append(part.offset)
        fetch = m.FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=1,
            topics=[m.FetchRequest.FetchTopic(topic=topic, partitions=[
                m.FetchRequest.FetchPartition(
                    partition=p, fetch_offset=0, partition_max_bytes=1)
                for p in partitions])],
        )  # fmt: skip
        fresp = await client.request(m.Fetch.key, 4, fetch)
        out: dict[int, Offsets] = {}
        for part in fresp.responses[0].partitions:
            if part.error_code:
                return None
            hw, lso = latest[part.partition_index]
            out[part.partition_index] = Offsets(hw, lso, part.last_stable_offset)
        return out
    finally:
        await client.close()


def offsets(port: int, topic: str, partitions: list[int]) -> dict[int, Offsets] | None:
    """HW and LSO of each partition from the broker at ``port`` (None: it cannot answer for
    every partition yet -- not the leader, or still loading)."""
    try:
        return asyncio.run(_offsets(port, topic, partitions))
    except (OSError, ConnectionError, TimeoutError):
        return None
