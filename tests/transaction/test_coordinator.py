"""The transaction coordinator's state machine (Kafka's ``TransactionCoordinatorTest`` cases),
over an in-memory ``__transaction_state`` and a recording marker writer."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from sluice.protocol import errors
from sluice.server.group.offsets_store import AppendOutcome, partition_for
from sluice.server.transaction.config import TransactionConfig
from sluice.server.transaction.coordinator import TransactionCoordinator
from sluice.server.transaction.metadata import (
    IllegalTransition,
    TxnMetadata,
    TxnState,
)
from sluice.server.transaction.state_log import TxnLogValue, decode_key, decode_value

TP = ("t", 0)
TP2 = ("t", 1)


class FakeStateLog:
    """``TxnStateLog``'s interface over lists; ``fail`` makes the next writes answer a code;
    ``hold`` keeps writes unsettled until released."""

    def __init__(self, num_partitions: int = 3) -> None:
        self.num_partitions = num_partitions
        self.records: dict[int, list[tuple[str, TxnLogValue | None]]] = {}
        self.fail: int = 0
        self.hold: asyncio.Future[None] | None = None

    def open(self) -> bool:
        return True

    def ensure_topic(self) -> None:
        pass

    def partition_for(self, txn_id: str) -> int:
        return partition_for(txn_id, self.num_partitions)

    def write(self, partition: int, key: bytes, value: bytes | None) -> Any:
        if self.fail:
            return AppendOutcome(self.fail, -1)
        txn_id = decode_key(key)
        assert txn_id is not None
        self.records.setdefault(partition, []).append((txn_id, decode_value(value)))
        if self.hold is None:
            return AppendOutcome(0, 0)
        settled: asyncio.Future[AppendOutcome] = asyncio.get_running_loop().create_future()
        self.hold.add_done_callback(lambda _f: settled.set_result(AppendOutcome(0, 0)))
        return settled

    def read_partition(self, partition: int) -> Iterator[list[tuple[str, TxnLogValue | None]]]:
        yield list(self.records.get(partition, []))

    def states(self, txn_id: str) -> list[TxnState]:
        return [
            TxnState(v.state_id)
            for records in self.records.values()
            for t, v in records
            if t == txn_id and v is not None
        ]


class Markers:
    """Records every marker write; answers ``codes`` (default 0) or waits on ``gate``."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, bool, int, list[tuple[str, int]]]] = []
        self.codes: dict[tuple[str, int], int] = {}
        self.gate: asyncio.Event | None = None

    async def __call__(
        self, pid: int, epoch: int, commit: bool, coord_epoch: int, parts: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        self.calls.append((pid, epoch, commit, coord_epoch, list(parts)))
        if self.gate is not None:
            await self.gate.wait()
        return {tp: self.codes.get(tp, 0) for tp in parts}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


async def _new(
    log: FakeStateLog | None = None, clock: Clock | None = None, **config: Any
) -> tuple[TransactionCoordinator, FakeStateLog, Markers]:
    log = log or FakeStateLog()
    markers = Markers()
    ids = iter(range(5000, 6000))

    async def allocate() -> int:
        return next(ids)

    coordinator = TransactionCoordinator(
        log,  # type: ignore[arg-type]
        TransactionConfig(**config),
        allocate,
        markers,
        clock=clock or Clock(),
    )
    coordinator.load()
    return coordinator, log, markers


async def _settled(coordinator: TransactionCoordinator) -> None:
    """Wait (bounded) until the coordinator's background tasks are done."""
    for _ in range(200):
        if not coordinator._tasks:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("background tasks did not finish")


async def test_commit_writes_prepare_markers_then_complete() -> None:
    c, log, markers = await _new()
    init = await c.init_producer_id("app", 60_000, None)
    assert (init.error, init.producer_epoch) == (0, 0)
    assert await c.add_partitions("app", init.producer_id, 0, {TP, TP2}) == 0
    assert await c.add_partitions("app", init.producer_id, 0, {TP}) == 0  # already in: no write
    assert await c.end_txn("app", init.producer_id, 0, True) == 0
    await _settled(c)
    assert markers.calls == [(init.producer_id, 0, True, 0, [TP, TP2])]
    assert log.states("app") == [
        TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT,
    ]  # fmt: skip
    code, meta = c.describe("app")
    assert code == 0 and meta is not None
    assert (meta.state, meta.partitions, meta.pending) == (TxnState.COMPLETE_COMMIT, set(), None)
    # a retried EndTxn of the same outcome is fine; the other outcome is not
    assert await c.end_txn("app", init.producer_id, 0, True) == 0
    assert await c.end_txn("app", init.producer_id, 0, False) == errors.InvalidTxnState.code


async def test_requests_during_markers_get_concurrent_transactions() -> None:
    c, _log, markers = await _new()
    init = await c.init_producer_id("app", 60_000, None)
    await c.add_partitions("app", init.producer_id, 0, {TP})
    markers.gate = asyncio.Event()
    assert await c.end_txn("app", init.producer_id, 0, False) == 0
    await asyncio.sleep(0)
    concurrent = errors.ConcurrentTransactions.code
    assert await c.add_partitions("app", init.producer_id, 0, {TP}) == concurrent
    assert (await c.init_producer_id("app", 60_000, None)).error == concurrent
    assert await c.end_txn("app", init.producer_id, 0, False) == concurrent
    assert c.verify("app", init.producer_id, 0, TP) == concurrent
    markers.gate.set()
    await _settled(c)
    again = await c.init_producer_id("app", 60_000, None)
    assert (again.error, again.producer_id, again.producer_epoch) == (0, init.producer_id, 1)


async def test_init_with_an_ongoing_transaction_fences_and_aborts_it() -> None:
    c, log, markers = await _new()
    init = await c.init_producer_id("app", 60_000, None)
    await c.add_partitions("app", init.producer_id, 0, {TP})
    # the new instance: the ongoing transaction is aborted with epoch 1, the client retries
    assert (await c.init_producer_id("app", 60_000, None)).error == (
        errors.ConcurrentTransactions.code
    )
    await _settled(c)
    assert markers.calls == [(init.producer_id, 1, False, 0, [TP])]
    assert log.states("app")[-2:] == [TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT]
    retry = await c.init_producer_id("app", 60_000, None)
    assert (retry.error, retry.producer_epoch) == (0, 2)
    # the old producer is fenced everywhere
    fenced = errors.ProducerFenced.code
    assert await c.add_partitions("app", init.producer_id, 0, {TP}) == fenced
    assert await c.end_txn("app", init.producer_id, 0, True) == fenced
    assert c.verify("app", init.producer_id, 0, TP) == fenced
    assert await c.end_txn("app", 424242, 2, True) == errors.InvalidProducerIdMapping.code


async def test_kip360_bump_and_retry_and_fencing() -> None:
    c, _log, _m = await _new()
    first = await c.init_producer_id("app", 60_000, None)
    bumped = await c.init_producer_id("app", 60_000, (first.producer_id, 0))
    assert (bumped.error, bumped.producer_id, bumped.producer_epoch) == (0, first.producer_id, 1)
    # the same request again (its answer was lost): the same epoch, not another bump
    retried = await c.init_producer_id("app", 60_000, (first.producer_id, 0))
    assert (retried.error, retried.producer_epoch) == (0, 1)
    # an epoch that is neither the current nor the last one: fenced
    assert (await c.init_producer_id("app", 60_000, (first.producer_id, 7))).error == (
        errors.ProducerFenced.code
    )
    assert (await c.init_producer_id("app", 60_000, (999, 1))).error == errors.ProducerFenced.code


async def test_exhausted_epoch_takes_a_new_producer_id() -> None:
    log = FakeStateLog()
    txn_partition = log.partition_for("app")
    log.records[txn_partition] = [
        ("app", TxnLogValue(77, 32766, 60_000, int(TxnState.COMPLETE_COMMIT), frozenset(), 1, -1))
    ]
    c, _log, _m = await _new(log)
    init = await c.init_producer_id("app", 60_000, None)
    assert (init.error, init.producer_epoch) == (0, 0) and init.producer_id != 77


async def test_timeouts_and_bad_requests() -> None:
    c, _log, _m = await _new(**{})
    assert (await c.init_producer_id("app", 900_001, None)).error == (
        errors.InvalidTransactionTimeout.code
    )
    assert (await c.init_producer_id("app", 0, None)).error == (
        errors.InvalidTransactionTimeout.code
    )
    assert (await c.init_producer_id("", 1000, None)).error == errors.InvalidRequest.code
    assert await c.add_partitions("nobody", 1, 0, {TP}) == errors.InvalidProducerIdMapping.code
    init = await c.init_producer_id("app", 1000, None)
    assert await c.end_txn("app", init.producer_id, 0, True) == errors.InvalidTxnState.code


async def test_failed_write_changes_nothing_and_maps_errors() -> None:
    c, log, _m = await _new()
    init = await c.init_producer_id("app", 60_000, None)
    log.fail = errors.NotEnoughReplicas.code
    assert await c.add_partitions("app", init.producer_id, 0, {TP}) == (
        errors.CoordinatorNotAvailable.code
    )
    log.fail = errors.NotLeaderOrFollower.code
    assert await c.add_partitions("app", init.producer_id, 0, {TP}) == (errors.NotCoordinator.code)
    log.fail = 0
    _code, meta = c.describe("app")
    assert meta is not None and (meta.state, meta.pending) == (TxnState.EMPTY, None)
    assert await c.add_partitions("app", init.producer_id, 0, {TP}) == 0


async def test_timed_out_transaction_is_aborted_with_a_bumped_epoch() -> None:
    clock = Clock()
    c, log, markers = await _new(
        clock=clock, abort_timed_out_interval_ms=10, remove_expired_interval_ms=10**9
    )
    init = await c.init_producer_id("app", 1000, None)
    await c.add_partitions("app", init.producer_id, 0, {TP})
    clock.now += 1001
    for _ in range(200):
        if markers.calls:
            break
        await asyncio.sleep(0.01)
    await _settled(c)
    assert markers.calls == [(init.producer_id, 1, False, 0, [TP])]
    assert log.states("app")[-1] == TxnState.COMPLETE_ABORT
    c.shutdown()


async def test_expired_transactional_id_is_tombstoned_and_forgotten() -> None:
    clock = Clock()
    c, log, _m = await _new(
        clock=clock, remove_expired_interval_ms=10, transactional_id_expiration_ms=5000
    )
    await c.init_producer_id("app", 1000, None)
    clock.now += 5000
    for _ in range(200):
        if c.describe("app")[1] is None:
            break
        await asyncio.sleep(0.01)
    assert c.describe("app") == (errors.TransactionalIdNotFound.code, None)
    assert log.records[log.partition_for("app")][-1] == ("app", None)
    c.shutdown()


async def test_ownership_loading_and_resignation() -> None:
    log = FakeStateLog()
    c, _log, markers = await _new(log)
    init = await c.init_producer_id("app", 60_000, None)
    await c.add_partitions("app", init.producer_id, 0, {TP})
    partition = log.partition_for("app")
    # the partition moves away: NOT_COORDINATOR
    assert c.on_resigned(partition, 5)
    assert (await c.init_producer_id("app", 60_000, None)).error == errors.NotCoordinator.code
    assert c.on_elected(partition, 4) is False  # stale epoch
    # back at epoch 6: loading (COORDINATOR_LOAD_IN_PROGRESS), then the state as written
    assert c.on_elected(partition, 6)
    assert c.coordinates("app") == errors.CoordinatorLoadInProgress.code
    for _ in range(100):
        if c.coordinates("app") == 0:
            break
        await asyncio.sleep(0.01)
    _code, meta = c.describe("app")
    assert meta is not None and (meta.state, meta.partitions) == (TxnState.ONGOING, {TP})
    # markers now carry the new coordinator epoch
    assert await c.end_txn("app", init.producer_id, 0, True) == 0
    await _settled(c)
    assert markers.calls[-1] == (init.producer_id, 0, True, 6, [TP])
    c.shutdown()


async def test_a_load_finds_a_prepared_transaction_and_completes_it() -> None:
    log = FakeStateLog()
    partition = log.partition_for("app")
    prepared = TxnLogValue(42, 3, 60_000, int(TxnState.PREPARE_ABORT), frozenset({TP, TP2}), 10, 5)
    log.records[partition] = [("app", prepared)]
    c, _log, markers = await _new(log)
    await _settled(c)
    assert markers.calls == [(42, 3, False, 0, [TP, TP2])]
    assert log.states("app")[-1] == TxnState.COMPLETE_ABORT


async def test_fenced_marker_stops_sending() -> None:
    c, log, markers = await _new()
    init = await c.init_producer_id("app", 60_000, None)
    await c.add_partitions("app", init.producer_id, 0, {TP})
    markers.codes[TP] = errors.TransactionCoordinatorFenced.code
    await c.end_txn("app", init.producer_id, 0, True)
    await _settled(c)
    assert len(markers.calls) == 1
    assert log.states("app")[-1] == TxnState.PREPARE_COMMIT  # never completed here


async def test_retriable_marker_errors_are_retried_until_written() -> None:
    c, log, markers = await _new()
    init = await c.init_producer_id("app", 60_000, None)
    await c.add_partitions("app", init.producer_id, 0, {TP, TP2})
    markers.codes[TP2] = errors.NotLeaderOrFollower.code
    await c.end_txn("app", init.producer_id, 0, True)
    for _ in range(100):
        if len(markers.calls) >= 2:
            break
        await asyncio.sleep(0.01)
    markers.codes.clear()
    await _settled(c)
    assert markers.calls[0][4] == [TP, TP2]
    assert all(call[4] == [TP2] for call in markers.calls[1:])  # only what failed, again
    assert log.states("app")[-1] == TxnState.COMPLETE_COMMIT


async def test_verify_and_list() -> None:
    c, _log, _m = await _new()
    init = await c.init_producer_id("app", 60_000, None)
    pid = init.producer_id
    assert c.verify("app", pid, 0, TP) == errors.InvalidTxnState.code  # not added
    await c.add_partitions("app", pid, 0, {TP})
    assert c.verify("app", pid, 0, TP) == 0
    assert c.verify("app", pid, 0, TP2) == errors.InvalidTxnState.code
    assert c.verify("app", pid + 1, 0, TP) == errors.InvalidProducerIdMapping.code
    assert c.verify("other", pid, 0, TP) == errors.InvalidProducerIdMapping.code
    await c.init_producer_id("idle", 60_000, None)
    code, ongoing = c.list_transactions({TxnState.ONGOING}, set())
    assert code == 0 and [t.transactional_id for t in ongoing] == ["app"]
    _code, by_pid = c.list_transactions(set(), {pid})
    assert [t.transactional_id for t in by_pid] == ["app"]


def test_state_machine_refuses_illegal_moves() -> None:
    meta = TxnMetadata("app", 1, 0)
    with pytest.raises(IllegalTransition):
        meta.prepare_end(True, 0)  # Empty -> PrepareCommit
    transit = meta.prepare_add_partitions({TP}, 5)
    with pytest.raises(IllegalTransition):
        meta.prepare_add_partitions({TP2}, 6)  # one transition at a time
    meta.complete(transit)
    assert (meta.state, meta.start_ms, meta.partitions) == (TxnState.ONGOING, 5, {TP})
    fence = meta.prepare_fence_epoch()
    assert (fence.state, fence.producer_epoch) == (TxnState.PREPARE_EPOCH_FENCE, 1)
    meta.abandon()
    commit = meta.prepare_end(True, 7)
    with pytest.raises(IllegalTransition):
        meta.complete(fence)  # not the pending transition
    meta.complete(commit)
    done = meta.prepare_complete(8)
    assert (done.state, done.partitions) == (TxnState.COMPLETE_COMMIT, frozenset())
    meta.complete(done)
    assert meta.prepare_increment_epoch(1000, None, 9) is not None
