"""Producer id expiration (``producer.id.expiration.ms``, Kafka's ``removeExpiredProducers`` and
``loadFromSnapshot``), with the clock injected: no sleeps."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from sluice.protocol import records as rec
from sluice.protocol.errors import OutOfOrderSequenceNumber
from sluice.protocol.records import BatchHeader
from sluice.server.storage.log import Log
from sluice.server.storage.log_config import LogConfig, ProducerStateManagerConfig
from sluice.server.storage.log_manager import LogManager
from sluice.server.storage.producer_state import (
    ProducerEntry,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
    snapshot_path,
)

EXPIRATION_MS = 1_000
START_MS = 1_700_000_000_000
ENTRY = struct.Struct(">qhiqiqiq")  # Kafka's ProducerSnapshot v1 entry


def header(pid: int, seq: int, ts: int, *, txn: bool = False, offset: int = 0) -> BatchHeader:
    return BatchHeader(
        base_offset=offset,
        batch_length=100,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=rec.ATTR_TRANSACTIONAL_MASK if txn else 0,
        last_offset_delta=0,
        base_timestamp=ts,
        max_timestamp=ts,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        record_count=1,
    )


def batch(pid: int, seq: int, ts: int, *, txn: bool = False) -> bytes:
    return rec.build_batch(
        [(ts, None, b"v%d" % seq)],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        is_transactional=txn,
    )


def snapshot_pids(data: bytes) -> list[int]:
    return [entry[0] for entry in ENTRY.iter_unpack(data[10:])]


def test_expired_means_idle_for_the_expiration_and_no_open_transaction() -> None:
    ps = ProducerStateManager()
    ps.update(header(1, 0, ts=10_000), 0)
    ps.update(header(2, 0, ts=10_001), 1)
    ps.update(header(3, 0, ts=0, txn=True), 2)  # the oldest, but its transaction is open
    # Kafka's rule is now - lastTimestamp >= expiration: producer 1 goes at exactly 1000 ms.
    assert ps.remove_expired(10_999, EXPIRATION_MS) == 0
    assert ps.remove_expired(11_000, EXPIRATION_MS) == 1
    assert sorted(ps.producers) == [2, 3]
    assert ps.remove_expired(10**9, EXPIRATION_MS) == 1
    assert sorted(ps.producers) == [3] and ps.first_undecided_offset() == 2
    # Its marker ends the transaction; the marker's timestamp is its last timestamp.
    marker = rec.EndTxnMarker(commit=True, coordinator_epoch=0)
    control = rec.ATTR_CONTROL_MASK | rec.ATTR_TRANSACTIONAL_MASK
    completed = ps.update(header(3, -1, ts=20_000)._replace(attributes=control), 5, marker)
    assert completed is not None
    ps.complete_txn(completed)
    assert ps.remove_expired(20_999, EXPIRATION_MS) == 0
    assert ps.remove_expired(21_000, EXPIRATION_MS) == 1 and not ps.producers


def test_an_expired_producer_is_an_unknown_one_any_sequence_and_no_duplicate() -> None:
    ps = ProducerStateManager()
    for seq in range(3):
        ps.update(header(1, seq, ts=0, offset=seq), seq)
    with pytest.raises(OutOfOrderSequenceNumber):
        ps.check([header(1, 7, ts=0)])  # known: a gap
    assert ps.check([header(1, 2, ts=0)]) is not None  # known: a retry is a duplicate
    assert ps.remove_expired(EXPIRATION_MS, EXPIRATION_MS) == 1
    assert ps.check([header(1, 7, ts=0)]) is None  # unknown now: any sequence
    assert ps.check([header(1, 2, ts=0)]) is None  # and the old retry is not recognised


def test_the_snapshot_keeps_kafkas_entry_order_after_expiration() -> None:
    """Kafka's producer map is a java.util.HashMap, whose table never shrinks: after growing
    past 12 producers (table 32) and expiring down to two, producers 17 and 1 (one bucket in a
    table of 16, two in one of 32) are still written in the order of the table of 32."""
    ps = ProducerStateManager()
    ps.update(header(17, 0, ts=5_000), 0)
    ps.update(header(1, 0, ts=5_000), 1)
    for i, pid in enumerate(range(100, 111)):
        ps.update(header(pid, 0, ts=0), 2 + i)
    assert len(ps.producers) == 13
    assert ps.remove_expired(EXPIRATION_MS, EXPIRATION_MS) == 11
    assert snapshot_pids(encode_snapshot(ps)) == [1, 17]
    fresh = ProducerStateManager()  # a map that never held more than two: table 16
    fresh.update(header(17, 0, ts=5_000), 0)
    fresh.update(header(1, 0, ts=5_000), 1)
    assert snapshot_pids(encode_snapshot(fresh)) == [17, 1]


def test_a_snapshot_load_skips_the_producers_expired_by_then() -> None:
    ps = ProducerStateManager()
    ps.update(header(1, 0, ts=0), 0)
    ps.update(header(2, 0, ts=500), 1)
    ps.update(header(3, 0, ts=0, txn=True), 2)
    data = encode_snapshot(ps)

    def expired_at(now: int) -> Callable[[ProducerEntry], bool]:
        return lambda e: ProducerStateManager.is_expired(e, now, EXPIRATION_MS)

    assert sorted(decode_snapshot(data, expired_at(999)).producers) == [1, 2, 3]
    loaded = decode_snapshot(data, expired_at(1_000))
    assert sorted(loaded.producers) == [2, 3]
    assert loaded.first_undecided_offset() == 2  # the open transaction is kept, ongoing
    assert sorted(decode_snapshot(data, expired_at(10**9)).producers) == [3]


def open_log(directory: Path, now: list[int], config: ProducerStateManagerConfig) -> Log:
    return Log.open(directory, LogConfig(), clock=lambda: now[0], producer_config=config)


def test_a_log_expires_its_producers_and_its_next_snapshots_leave_them_out(
    tmp_path: Path,
) -> None:
    now = [START_MS]
    config = ProducerStateManagerConfig(producer_id_expiration_ms=EXPIRATION_MS)
    log = open_log(tmp_path / "t-0", now, config)
    try:
        log.append_as_leader(batch(1, 0, ts=now[0]))
        log.append_as_leader(batch(2, 0, ts=now[0], txn=True))  # its transaction stays open
        now[0] += 600
        log.append_as_leader(batch(3, 0, ts=now[0]))
        assert log.producer_count == 3
        now[0] += 400  # producer 1 and 2 idle for 1000 ms, producer 3 for 400
        assert log.remove_expired_producers() == 1
        assert sorted(log.producer_state().producers) == [2, 3]
        log.append_as_leader(batch(1, 5, ts=now[0]))  # unknown again: sequence 5 is taken
        assert log.producer_state().producers[1].last_seq == 5
        leo = log.log_end_offset
    finally:
        log.close()
    assert sorted(snapshot_pids(snapshot_path(log.directory, leo).read_bytes())) == [1, 2, 3]
    # The dynamic setting is read at each use: a shorter expiration applies at the next load.
    config.producer_id_expiration_ms = 1
    now[0] += 1
    log = open_log(tmp_path / "t-0", now, config)
    try:
        assert sorted(log.producer_state().producers) == [2]  # the open transaction's only
        log.append_as_leader(rec.build_batch([(now[0], None, b"plain")]))
        log.roll()  # a snapshot at the roll: the built state, without the expired ones
        assert snapshot_pids(snapshot_path(log.directory, leo + 1).read_bytes()) == [2]
    finally:
        log.close()


def test_a_log_whose_state_is_not_built_is_left_alone(tmp_path: Path) -> None:
    now = [START_MS]
    config = ProducerStateManagerConfig(producer_id_expiration_ms=EXPIRATION_MS)
    log = open_log(tmp_path / "t-0", now, config)
    log.append_as_leader(batch(1, 0, ts=now[0]))
    log.close()
    log = open_log(tmp_path / "t-0", now, config)
    try:
        now[0] += EXPIRATION_MS
        assert log.remove_expired_producers() == 0  # nothing built: nothing read
        assert log.producer_count == 0
        assert log.producer_state().producers == {}  # built now, without the expired one
    finally:
        log.close()


async def test_the_log_manager_runs_the_check_every_interval(tmp_path: Path) -> None:
    now = [START_MS]
    manager = LogManager(
        tmp_path,
        LogConfig(),
        clock=lambda: now[0],
        producer_config=ProducerStateManagerConfig(producer_id_expiration_ms=EXPIRATION_MS),
        producer_id_expiration_check_interval_ms=5,
    )
    manager.open()
    manager.create_topic("t", 3)
    logs = [manager.get_log("t", p) for p in range(3)]
    for i, log in enumerate(logs):
        assert log is not None
        log.append_as_leader(batch(10 + i, 0, ts=now[0]))
    await manager.start()
    try:
        assert sum(log.producer_count for log in logs if log) == 3
        now[0] += EXPIRATION_MS
        for _ in range(500):  # bounded wait for the background check: up to ~5 s
            if not any(log.producer_count for log in logs if log):
                break
            await asyncio.sleep(0.01)
        assert [log.producer_count for log in logs if log] == [0, 0, 0]
    finally:
        await manager.stop()


async def test_a_pass_over_many_producers_yields_to_the_event_loop(tmp_path: Path) -> None:
    now = [START_MS]
    manager = LogManager(
        tmp_path,
        LogConfig(),
        clock=lambda: now[0],
        producer_config=ProducerStateManagerConfig(producer_id_expiration_ms=EXPIRATION_MS),
    )
    manager.open()
    try:
        manager.create_topic("t", 4)
        for p in range(4):
            log = manager.get_log("t", p)
            assert log is not None
            state = log.producer_state()
            for pid in range(1_500):
                state.update(header(p * 10_000 + pid, 0, ts=now[0]), pid)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = ticks
        removed = await manager.remove_expired_producers(now[0] + EXPIRATION_MS)
        task.cancel()
        assert removed == 6_000
        assert ticks - before >= 2  # 6,000 producers: the loop ran in between, twice at least
    finally:
        manager.close()
