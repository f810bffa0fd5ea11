"""The transaction coordinator (Kafka's ``TransactionCoordinator``, ``TransactionStateManager``
and ``TransactionMarkerChannelManager``).

This broker coordinates the transactional ids of the ``__transaction_state`` partitions it
leads (:mod:`sluice.server.transaction.state_log`; standalone: all of them). Each id's state is
a :class:`~sluice.server.transaction.metadata.TxnMetadata`; every transition is written to the
log (acks=all) before it is applied (two-phase, see :mod:`~sluice.server.transaction.metadata`).

**Ownership** is the group coordinator's scheme (Kafka's ``loadTransactionsForTxnTopicPartition``
/ ``removeTransactionsForTxnTopicPartition``): :meth:`TransactionCoordinator.on_elected` loads a
partition in the background (requests for its ids get COORDINATOR_LOAD_IN_PROGRESS meanwhile),
:meth:`~TransactionCoordinator.on_resigned` drops it (NOT_COORDINATOR). The *coordinator epoch*
of a partition is its leader epoch: it goes into every marker, and a partition refuses markers
of an older coordinator epoch (TRANSACTION_COORDINATOR_FENCED), so a deposed coordinator can
never complete a transaction its successor handles. A transaction found in PrepareCommit /
PrepareAbort by a load has its markers sent again (a new coordinator finishes what its
predecessor started). Standalone, :meth:`~TransactionCoordinator.load` owns every partition at
start-up with coordinator epoch 0.

**EndTxn** (Kafka's order): PrepareCommit/PrepareAbort is written, the client is answered, then
the markers are written to every partition of the transaction -- grouped by leader, retried
until each is acknowledged (the :data:`MarkerWriter` the broker supplies) -- and finally
CompleteCommit/CompleteAbort is written. Until then the id has a pending transition, so the
producer's next InitProducerId / AddPartitionsToTxn / EndTxn gets CONCURRENT_TRANSACTIONS and
retries. A partition whose topic was deleted meanwhile is dropped from the marker set, as
Kafka's channel manager does; an INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED
answer means a newer coordinator or producer epoch exists there: sending stops, the id stays
pending until this coordinator resigns.

**Fencing**: InitProducerId bumps the epoch (a new producer id when the epoch is exhausted);
with an ongoing transaction it first aborts it with a bumped epoch (PrepareEpochFence, then
PrepareAbort) and answers CONCURRENT_TRANSACTIONS, so the new instance retries and the old one is
fenced by the abort markers (INVALID_PRODUCER_EPOCH at the partitions, PRODUCER_FENCED here).
KIP-360: an InitProducerId v3+ carrying the producer's id and epoch bumps the epoch of that
producer (or answers the same bump again to a retry), anything else is PRODUCER_FENCED.

**Produce verification** (KIP-890 part 1): :meth:`TransactionCoordinator.verify` tells the
Produce handler whether a transactional batch's partition is in its producer's ongoing
transaction, so that a batch nobody will end (a producer that skipped AddPartitionsToTxn, or a
late retry of an aborted transaction) is refused instead of opening a transaction no marker
closes.

**Timers**: every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` ongoing
transactions past their ``transaction.timeout.ms`` are aborted (epoch fenced first, as Kafka);
every ``transaction.remove.expired.transaction.cleanup.interval.ms`` ended ids untouched for
``transactional.id.expiration.ms`` are written as tombstones and forgotten.

**Concurrency**: one event-loop thread. A log write and what follows it run in a task of the
coordinator, never in the request's coroutine, so a client that disconnects cannot leave an id
pending for good; the handlers await the task through ``asyncio.shield``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from sluice.protocol import errors
from sluice.server.crash_points import crash_point
from sluice.server.logging import get_logger
from sluice.server.transaction.config import TransactionConfig
from sluice.server.transaction.metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    Transit,
    TxnMetadata,
    TxnState,
)
from sluice.server.transaction.state_log import TxnStateLog, key_bytes, value_bytes

log = get_logger("sluice.transactions")

NONE = 0
_T = TypeVar("_T")
TopicPartition = tuple[str, int]

#: Writes the marker of ``(producer_id, producer_epoch)`` -- COMMIT if ``commit`` -- with
#: ``coordinator_epoch`` to each partition, at its leader, acks=all; answers an error code per
#: partition (0: written and replicated). Never raises for a Kafka error.
MarkerWriter = Callable[
    [int, int, bool, int, list[TopicPartition]], Awaitable[dict[TopicPartition, int]]
]

#: Pause between two rounds of marker writes with failures (Kafka's ``retry.backoff.ms``).
MARKER_RETRY_BACKOFF_S = 0.1
#: Pause before a Complete* write is tried again after a retriable error.
COMPLETE_RETRY_BACKOFF_S = 0.1

_RETRIABLE_APPEND = {
    errors.UnknownTopicOrPartition.code,
    errors.NotEnoughReplicas.code,
    errors.NotEnoughReplicasAfterAppend.code,
    errors.RequestTimedOut.code,
}
_NOT_COORDINATOR_APPEND = {errors.NotLeaderOrFollower.code, errors.KafkaStorageError.code}
_FATAL_APPEND = {errors.MessageTooLarge.code, errors.RecordListTooLarge.code}
#: Marker answers that stop the sending: someone newer is in charge of the partition.
_ENDED = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
_MARKER_FENCED = {errors.InvalidProducerEpoch.code, errors.TransactionCoordinatorFenced.code}
#: The crash points around each state write (:mod:`sluice.server.crash_points`).
_CRASH_BEFORE = {state: f"txn.before.{state.kafka_name}" for state in TxnState}
_CRASH_AFTER = {state: f"txn.after.{state.kafka_name}" for state in TxnState}


def append_error(code: int) -> int:
    """Kafka's ``appendTransactionToLog`` translation of a log append's error."""
    if code in _RETRIABLE_APPEND:
        return errors.CoordinatorNotAvailable.code
    if code in _NOT_COORDINATOR_APPEND:
        return errors.NotCoordinator.code
    if code in _FATAL_APPEND:
        return errors.UnknownServerError.code
    return code


@dataclass(frozen=True)
class InitResult:
    error: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    """The transactional ids of the ``__transaction_state`` partitions this broker owns.
    Create on the running loop, then :meth:`load` (standalone) or let the cluster call
    :meth:`on_elected` / :meth:`on_resigned`; serve; :meth:`shutdown`."""

    def __init__(
        self,
        state_log: TxnStateLog,
        config: TransactionConfig,
        allocate_producer_id: Callable[[], Awaitable[int]],
        markers: MarkerWriter,
        *,
        topic_exists: Callable[[str], bool] = lambda _t: True,
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        self.log = state_log
        self.config = config
        self._allocate = allocate_producer_id
        self._markers = markers
        self._topic_exists = topic_exists
        self._clock = clock
        self._loop = asyncio.get_running_loop()
        #: partition -> transactional id -> metadata, for owned partitions only.
        self._owned: dict[int, dict[str, TxnMetadata]] = {}
        self._loading: dict[int, asyncio.Task[None]] = {}
        #: partition -> coordinator epoch (its leader epoch when this broker took it over).
        self._epochs: dict[int, int] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timers: list[asyncio.TimerHandle] = []
        self._stopped = False
        #: Every id is coordinated here (:meth:`load`).
        self._standalone = False
        #: The longest partition load so far (``partition-load-time-max``), in ms.
        self.max_load_time_ms = 0.0

    # ------------------------------------------------------------------ ownership

    def load(self) -> None:
        """Standalone: own every partition of an existing topic now (coordinator epoch 0);
        the topic itself is created on the first FindCoordinator (:meth:`ensure_ready`)."""
        self._standalone = True
        if self.log.open():
            for partition in range(self.log.num_partitions):
                started = time.monotonic()
                txns = self._read(partition)
                elapsed_ms = (time.monotonic() - started) * 1000
                self.max_load_time_ms = max(self.max_load_time_ms, elapsed_ms)
                self._install(partition, 0, txns, announce=False)
            log.info("transaction state loaded", partitions=self.log.num_partitions,
                     transactional_ids=sum(len(t) for t in self._owned.values()))  # fmt: skip
        self._start_timers()

    def ensure_ready(self) -> int:
        """Standalone FindCoordinator: create the topic (owning its partitions) if needed."""
        if self._stopped:
            return errors.NotCoordinator.code
        try:
            if not self.log.open():
                self.log.ensure_topic()
                for partition in range(self.log.num_partitions):
                    self._install(partition, 0, {}, announce=False)
        except Exception:
            log.exception("cannot create the transaction state topic")
            return errors.CoordinatorNotAvailable.code
        return NONE

    def on_elected(self, partition: int, leader_epoch: int) -> bool:
        """This broker leads ``partition`` at ``leader_epoch``: load its ids in the background."""
        if self._stopped or leader_epoch < self._epochs.get(partition, -1):
            return False
        if partition in self._owned and self._epochs.get(partition) == leader_epoch:
            return True
        self._drop(partition)
        self._epochs[partition] = leader_epoch
        log.info("loading transaction state partition", partition=partition,
                 coordinator_epoch=leader_epoch)  # fmt: skip
        self._loading[partition] = self._loop.create_task(self._load(partition, leader_epoch))
        if not self._timers:
            self._start_timers()
        return True

    def on_resigned(self, partition: int, leader_epoch: int | None) -> bool:
        """This broker stopped leading ``partition``: forget its ids (marker sends in flight
        stop at their next step: the epoch they carry is no longer this partition's)."""
        if leader_epoch is not None and leader_epoch < self._epochs.get(partition, -1):
            return False
        self._drop(partition)
        if leader_epoch is not None:
            self._epochs[partition] = leader_epoch
        log.info("transaction state partition resigned", partition=partition)
        return True

    def _drop(self, partition: int) -> None:
        task = self._loading.pop(partition, None)
        if task is not None:
            task.cancel()
        self._owned.pop(partition, None)

    def _read(self, partition: int) -> dict[str, TxnMetadata]:
        txns: dict[str, TxnMetadata] = {}
        for chunk in self.log.read_partition(partition):
            self._apply_chunk(txns, chunk)
        return txns

    @staticmethod
    def _apply_chunk(txns: dict[str, TxnMetadata], chunk: Iterable[tuple[str, object]]) -> None:
        for txn_id, value in chunk:
            if value is None:
                txns.pop(txn_id, None)
            else:
                txns[txn_id] = TxnMetadata.from_log(txn_id, value)  # type: ignore[arg-type]

    async def _load(self, partition: int, epoch: int) -> None:
        started = time.monotonic()
        txns: dict[str, TxnMetadata] = {}
        try:
            for chunk in self.log.read_partition(partition):
                self._apply_chunk(txns, chunk)
                await asyncio.sleep(0)
        except Exception:
            log.exception("loading transaction state partition failed", partition=partition)
        if self._loading.get(partition) is not asyncio.current_task():
            return
        del self._loading[partition]
        elapsed_ms = (time.monotonic() - started) * 1000
        self.max_load_time_ms = max(self.max_load_time_ms, elapsed_ms)
        self._install(partition, epoch, txns)

    def _install(
        self, partition: int, epoch: int, txns: dict[str, TxnMetadata], *, announce: bool = True
    ) -> None:
        """Serve ``partition``'s ids; finish the transactions found half-way (markers again)."""
        self._owned[partition] = txns
        self._epochs[partition] = epoch
        if announce:
            log.info("transaction state partition loaded", partition=partition,
                     coordinator_epoch=epoch, transactional_ids=len(txns))  # fmt: skip
        for meta in txns.values():
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self._spawn(self._send_markers(meta, partition, epoch))

    def state_counts(self) -> dict[str, int]:
        """How many owned ids are in each state (by Kafka's state names), for ``/metrics``."""
        counts: dict[str, int] = {}
        for txns in self._owned.values():
            for meta in txns.values():
                counts[meta.state.kafka_name] = counts.get(meta.state.kafka_name, 0) + 1
        return counts

    @property
    def owned_partitions(self) -> frozenset[int]:
        return frozenset(self._owned)

    def shutdown(self) -> None:
        self._stopped = True
        for timer in self._timers:
            timer.cancel()
        for task in list(self._loading.values()) + list(self._tasks):
            task.cancel()
        self._owned.clear()
        self._loading.clear()

    def _spawn(self, coro: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------ lookups

    def _lookup(self, txn_id: str) -> tuple[int, int, dict[str, TxnMetadata] | None]:
        """``(error, partition, the partition's ids)``: NOT_COORDINATOR /
        COORDINATOR_LOAD_IN_PROGRESS as Kafka's ``getTransactionState``."""
        if self._stopped:
            return errors.NotCoordinator.code, -1, None
        partition = self.log.partition_for(txn_id)
        if partition in self._loading:
            return errors.CoordinatorLoadInProgress.code, partition, None
        txns = self._owned.get(partition)
        if txns is None:
            return errors.NotCoordinator.code, partition, None
        return NONE, partition, txns

    def coordinates(self, txn_id: str) -> int:
        """The error code FindCoordinator-level checks would give (0: served here)."""
        return self._lookup(txn_id)[0]

    def _owns(self, partition: int, epoch: int) -> bool:
        return partition in self._owned and self._epochs.get(partition) == epoch

    # ------------------------------------------------------------------ log writes

    def _write(
        self, meta: TxnMetadata, partition: int, epoch: int, transit: Transit
    ) -> asyncio.Task[int]:
        """Write ``transit`` and apply it (or drop it) when settled, in a task of ours."""
        return self._spawn(self._append(meta, partition, epoch, transit))

    async def _append(self, meta: TxnMetadata, partition: int, epoch: int, transit: Transit) -> int:
        """Kafka's ``appendTransactionToLog``: the error code the client gets."""
        value = None if transit.state == TxnState.DEAD else value_bytes(transit.log_value())
        crash_point(_CRASH_BEFORE[transit.state], meta.transactional_id)
        try:
            outcome = self.log.write(partition, key_bytes(meta.transactional_id), value)
            if isinstance(outcome, asyncio.Future):
                outcome = await outcome
            code = append_error(outcome.error)
            if code == NONE:
                crash_point(_CRASH_AFTER[transit.state], meta.transactional_id)
        except Exception:
            log.exception(
                "writing transaction state failed", transactional_id=meta.transactional_id
            )
            code = errors.UnknownServerError.code
        txns = self._owned.get(partition)
        if (
            not self._owns(partition, epoch)
            or txns is None
            or txns.get(meta.transactional_id) is not meta
        ):
            # resigned (or reloaded) meanwhile: the new owner reads the log, not this object
            return errors.NotCoordinator.code
        if code == NONE:
            meta.complete(transit)
            if transit.state == TxnState.DEAD:
                del txns[meta.transactional_id]
        else:
            meta.abandon()
            log.info("transaction state not written", transactional_id=meta.transactional_id,
                     state=transit.state.kafka_name, error=errors.error_name(code))  # fmt: skip
        return code

    # ------------------------------------------------------------------ InitProducerId

    def valid_timeout(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.config.max_timeout_ms

    async def init_producer_id(
        self, txn_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> InitResult:
        """InitProducerId with a transactional id (Kafka's ``handleInitProducerId``);
        ``expected`` is KIP-360's (producer id, epoch) of a v3+ request that sets them."""
        if not txn_id:
            return InitResult(errors.InvalidRequest.code)
        if not self.valid_timeout(timeout_ms):
            return InitResult(errors.InvalidTransactionTimeout.code)
        code, partition, txns = self._lookup(txn_id)
        if txns is None:
            return InitResult(code)
        epoch = self._epochs[partition]
        meta = txns.get(txn_id)
        if meta is None:
            try:
                producer_id = await self._allocate()
            except Exception as exc:
                log.warning("no producer id", error=repr(exc))
                return InitResult(errors.CoordinatorNotAvailable.code)
            if not self._owns(partition, epoch):
                return InitResult(errors.NotCoordinator.code)
            meta = txns.setdefault(
                txn_id,
                TxnMetadata(txn_id, producer_id, timeout_ms=timeout_ms,
                            last_update_ms=self._clock()),
            )  # fmt: skip
        if meta.pending is not None:
            return InitResult(errors.ConcurrentTransactions.code)
        if expected is not None and not (
            meta.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == meta.producer_id
            or (expected[0] == meta.previous_producer_id and expected[1] >= 32766)
        ):
            return InitResult(errors.ProducerFenced.code)
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return InitResult(errors.ConcurrentTransactions.code)
        if meta.state == TxnState.ONGOING:
            # abort the ongoing transaction with a bumped epoch; the client retries
            fence = meta.prepare_fence_epoch()
            end = await self._end(meta, partition, epoch, fence.producer_epoch, False,
                                  from_client=False, fence=fence)  # fmt: skip
            return InitResult(end if end != NONE else errors.ConcurrentTransactions.code)
        now = self._clock()
        if meta.is_epoch_exhausted and (expected is None or expected[1] == meta.producer_epoch):
            try:
                new_id = await self._allocate()
            except Exception as exc:
                log.warning("no producer id", error=repr(exc))
                return InitResult(errors.CoordinatorNotAvailable.code)
            if meta.pending is not None:
                return InitResult(errors.ConcurrentTransactions.code)
            transit = meta.prepare_producer_id_rotation(
                new_id, timeout_ms, now, expected is not None
            )
        else:
            bumped = meta.prepare_increment_epoch(
                timeout_ms, None if expected is None else expected[1], now
            )
            if bumped is None:
                return InitResult(errors.ProducerFenced.code)
            transit = bumped
        code = await asyncio.shield(self._write(meta, partition, epoch, transit))
        if code != NONE:
            return InitResult(code)
        log.info("initialized transactional id", transactional_id=txn_id,
                 producer_id=transit.producer_id, producer_epoch=transit.producer_epoch,
                 partition=partition)  # fmt: skip
        return InitResult(NONE, transit.producer_id, transit.producer_epoch)

    # ------------------------------------------------------------------ AddPartitionsToTxn

    async def add_partitions(
        self, txn_id: str, producer_id: int, producer_epoch: int, partitions: set[TopicPartition]
    ) -> int:
        """AddPartitionsToTxn / AddOffsetsToTxn (Kafka's ``handleAddPartitionsToTransaction``)."""
        if not txn_id:
            return errors.InvalidRequest.code
        code, partition, txns = self._lookup(txn_id)
        if txns is None:
            return code
        meta = txns.get(txn_id)
        if meta is None or meta.producer_id != producer_id:
            return errors.InvalidProducerIdMapping.code
        if meta.producer_epoch != producer_epoch:
            return errors.ProducerFenced.code
        if meta.pending is not None or meta.state in (
            TxnState.PREPARE_COMMIT,
            TxnState.PREPARE_ABORT,
        ):
            return errors.ConcurrentTransactions.code
        if meta.state == TxnState.ONGOING and partitions <= meta.partitions:
            return NONE
        transit = meta.prepare_add_partitions(partitions, self._clock())
        task = self._write(meta, partition, self._epochs[partition], transit)
        return await asyncio.shield(task)

    # ------------------------------------------------------------------ EndTxn

    async def end_txn(
        self, txn_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> int:
        """EndTxn (Kafka's ``handleEndTransaction``): answered once PrepareCommit/PrepareAbort is
        written; markers and Complete* follow in the background."""
        if not txn_id:
            return errors.InvalidRequest.code
        code, partition, txns = self._lookup(txn_id)
        if txns is None:
            return code
        meta = txns.get(txn_id)
        if meta is None:
            return errors.InvalidProducerIdMapping.code
        return await self._end(meta, partition, self._epochs[partition], producer_epoch, commit,
                               from_client=True, producer_id=producer_id)  # fmt: skip

    async def _end(
        self,
        meta: TxnMetadata,
        partition: int,
        epoch: int,
        producer_epoch: int,
        commit: bool,
        *,
        from_client: bool,
        producer_id: int | None = None,
        fence: Transit | None = None,
    ) -> int:
        """Kafka's ``endTransaction`` (transaction version 0 rules)."""
        if producer_id is not None and meta.producer_id != producer_id:
            return errors.InvalidProducerIdMapping.code
        if fence is None:
            valid_epoch = (not from_client or producer_epoch == meta.producer_epoch) and (
                producer_epoch >= meta.producer_epoch
            )
            if not valid_epoch:
                return errors.ProducerFenced.code
            if meta.pending is not None:
                return errors.ConcurrentTransactions.code
        state = meta.state
        if state == TxnState.ONGOING:
            if fence is not None:
                # the fence is not written: its bumped epoch goes into the abort
                meta.pending = None
                meta.producer_epoch = fence.producer_epoch
                meta.last_producer_epoch = NO_PRODUCER_EPOCH
            transit = meta.prepare_end(commit, self._clock())
            code = await asyncio.shield(self._write(meta, partition, epoch, transit))
            if code != NONE:
                if fence is not None and self._owns(partition, epoch):
                    meta.has_failed_epoch_fence = True
                return code
            self._spawn(self._send_markers(meta, partition, epoch))
            return NONE
        wanted = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if state == wanted:
            return NONE  # a retry of an EndTxn that completed
        if state == preparing:
            return errors.ConcurrentTransactions.code
        log.info("EndTxn in a state that cannot end", transactional_id=meta.transactional_id,
                 state=state.kafka_name, commit=commit)  # fmt: skip
        return errors.InvalidTxnState.code

    async def _send_markers(self, meta: TxnMetadata, partition: int, epoch: int) -> None:
        """Kafka's ``TransactionMarkerChannelManager``: markers to every partition of the
        transaction until each is acknowledged, then Complete* written."""
        commit = meta.state == TxnState.PREPARE_COMMIT
        complete = meta.prepare_complete(self._clock())
        remaining = set(meta.partitions)
        while remaining:
            if not self._owns(partition, epoch):
                return
            remaining = {tp for tp in remaining if self._topic_exists(tp[0])}
            if not remaining:
                break
            answers = await self._markers(
                meta.producer_id, meta.producer_epoch, commit, epoch, sorted(remaining)
            )
            for tp, code in answers.items():
                if code == NONE:
                    remaining.discard(tp)
                elif code in _MARKER_FENCED:
                    log.warning(
                        "transaction markers fenced",
                        transactional_id=meta.transactional_id,
                        topic=tp[0],
                        partition=tp[1],
                        error=errors.error_name(code),
                    )
                    return
            if remaining:
                await asyncio.sleep(MARKER_RETRY_BACKOFF_S)
        while self._owns(partition, epoch):
            code = await self._append(meta, partition, epoch, complete)
            if code == NONE:
                log.info("transaction completed", transactional_id=meta.transactional_id,
                         producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                         state=complete.state.kafka_name)  # fmt: skip
                return
            if code != errors.CoordinatorNotAvailable.code:
                return
            meta.pending = complete.state  # _append abandoned it: try again
            await asyncio.sleep(COMPLETE_RETRY_BACKOFF_S)

    def verify(
        self, txn_id: str, producer_id: int, producer_epoch: int, partition: TopicPartition
    ) -> int:
        """Produce's KIP-890 check (Kafka's ``handleVerifyPartitionsInTransaction``): 0 when
        ``partition`` is in the ongoing transaction of that producer, or when this broker does
        not coordinate the id (nothing to check here); else the error Kafka answers."""
        code, _p, txns = self._lookup(txn_id)
        if txns is None:
            if code != errors.NotCoordinator.code:
                return code
            # standalone every id is ours: no partition means no id was ever initialized
            return errors.InvalidProducerIdMapping.code if self._standalone else NONE
        meta = txns.get(txn_id)
        if meta is None or meta.producer_id != producer_id:
            return errors.InvalidProducerIdMapping.code
        if meta.producer_epoch != producer_epoch:
            return errors.ProducerFenced.code
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return errors.ConcurrentTransactions.code
        if meta.state != TxnState.ONGOING or partition not in meta.partitions:
            return errors.InvalidTxnState.code
        return NONE

    # ------------------------------------------------------------------ admin

    def describe(self, txn_id: str) -> tuple[int, TxnMetadata | None]:
        """DescribeTransactions: TRANSACTIONAL_ID_NOT_FOUND for an id this coordinator owns but
        does not know."""
        code, _partition, txns = self._lookup(txn_id)
        if txns is None:
            return code, None
        meta = txns.get(txn_id)
        if meta is None:
            return errors.TransactionalIdNotFound.code, None
        return NONE, meta

    def list_transactions(
        self, states: set[TxnState], producer_ids: set[int]
    ) -> tuple[int, list[TxnMetadata]]:
        """ListTransactions: COORDINATOR_LOAD_IN_PROGRESS (with what is loaded) while a
        partition loads, as Kafka."""
        out = [
            meta
            for txns in self._owned.values()
            for meta in txns.values()
            if (not states or meta.state in states)
            and (not producer_ids or meta.producer_id in producer_ids)
        ]
        code = errors.CoordinatorLoadInProgress.code if self._loading else NONE
        return code, out

    # ------------------------------------------------------------------ timers

    def _start_timers(self) -> None:
        if self._stopped:
            return
        config = self.config
        self._timers = [
            self._loop.call_later(config.abort_timed_out_interval_ms / 1000, self._abort_timed_out),
            self._loop.call_later(config.remove_expired_interval_ms / 1000, self._remove_expired),
        ]

    def _idle(self) -> Iterator[tuple[int, int, TxnMetadata]]:
        """``(partition, coordinator epoch, metadata)`` of every owned id without a pending
        transition (a snapshot: the timers change the dicts as they go)."""
        for partition, txns in list(self._owned.items()):
            epoch = self._epochs[partition]
            for meta in list(txns.values()):
                if meta.pending is None:
                    yield partition, epoch, meta

    def _abort_timed_out(self) -> None:
        """Kafka's ``abortTimedOutTransactions``."""
        if self._stopped:
            return
        self._timers[0] = self._loop.call_later(
            self.config.abort_timed_out_interval_ms / 1000, self._abort_timed_out
        )
        now = self._clock()
        for partition, epoch, meta in self._idle():
            if meta.state == TxnState.ONGOING and meta.start_ms + meta.timeout_ms < now:
                log.info("aborting a timed-out transaction", transactional_id=meta.transactional_id,
                         producer_id=meta.producer_id, timeout_ms=meta.timeout_ms)  # fmt: skip
                fence = meta.prepare_fence_epoch()
                self._spawn(self._end(meta, partition, epoch, fence.producer_epoch, False,
                                      from_client=False, fence=fence))  # fmt: skip

    def _remove_expired(self) -> None:
        """Kafka's ``removeExpiredTransactionalIds``: tombstones for ids left alone too long."""
        if self._stopped:
            return
        self._timers[1] = self._loop.call_later(
            self.config.remove_expired_interval_ms / 1000, self._remove_expired
        )
        limit = self._clock() - self.config.transactional_id_expiration_ms
        for partition, epoch, meta in self._idle():
            if meta.state in _ENDED and meta.last_update_ms <= limit:
                log.info("transactional id expired", transactional_id=meta.transactional_id)
                self._write(meta, partition, epoch, meta.prepare_dead())
