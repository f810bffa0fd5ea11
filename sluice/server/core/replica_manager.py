"""Partitions this broker hosts: leadership state, the append and read paths, the purgatories.

Kafka's ``ReplicaManager`` / ``Partition`` / ``DelayedOperationPurgatory`` in one module. The
handlers decode a request, call in here, and encode what comes back; nothing in here knows the
wire format.

**Today** Sluice is one broker: it leads every partition at leader epoch 0, replicas = ISR =
[``node.id``], so the high watermark (HW) reaches the log end offset (LEO) after every append
and an ``acks=-1`` produce never waits. The code is written for the replicated case
(``shared/spec/replication.md`` §2, §4) so that replication only has to add callers:

* HW = min LEO over the ISR (:meth:`Partition.maybe_increment_high_watermark`); the follower
  fetch path feeds follower LEOs through :meth:`Partition.update_follower_end_offset`.
* ``acks=-1`` parks a :class:`DelayedProduce` in :attr:`ReplicaManager.produce_purgatory` until HW
  passes the appended records (completed by :meth:`ReplicaManager.complete_delayed_requests`
  when HW moves), the partition changes hands, or ``timeout_ms`` passes.
* A Fetch with fewer than ``min_bytes`` parks a :class:`DelayedFetch` in
  :attr:`ReplicaManager.fetch_purgatory` until new data is readable on one of its partitions.

**Who writes which state** (STYLE 16: cluster state is versioned and stale state is ignored):

* Leadership (leader, leader epoch, partition epoch, replicas, ISR): only
  :meth:`Partition.make_leader`, called by :class:`ReplicaManager` -- today when it first sees a
  partition's log (epoch 0); later by the ZooKeeper state watcher with the state znode's
  ``(leader_epoch, zkVersion)``. A state not newer than the one held is ignored (fenced).
* ISR changes: only the leader (the ISR expand/shrink to come); today the ISR never changes.
* Follower LEOs: only the leader's follower-fetch path
  (:meth:`Partition.update_follower_end_offset`).
* HW: only :meth:`Partition.maybe_increment_high_watermark`, on the leader, after a local
  append, a follower LEO update or a leadership change. (Exception kept from before this module:
  the group coordinator's offsets store, which sits below the core, appends to
  ``__consumer_offsets`` and advances that HW itself.)
* The partition table: only :class:`ReplicaManager` (lazily, and
  :meth:`ReplicaManager.delete_topic`); topics are deleted only through it, so a
  :class:`Partition` never outlives its log.

**Concurrency**: none. Everything runs on the event-loop thread; a purgatory check runs
synchronously inside the append that makes it true, so no append can slip between a fetch's read
and its parking.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from sluice.protocol import errors
from sluice.server.logging import get_logger
from sluice.server.storage.log import Isolation

if TYPE_CHECKING:
    from sluice.server.storage.log import AppendInfo, FetchDataInfo, Log, TimestampAndOffset
    from sluice.server.storage.log_manager import LogManager

log = get_logger("sluice.replica_manager")

#: Partition key: ``(topic, partition)``. ``sluice.protocol.TopicPartition`` is one, and so is
#: the plain tuple the hot paths build (cheaper; equal and hash-equal to the NamedTuple).
PartitionKey = tuple[str, int]

#: ``leader_id`` of a partition without a leader (Kafka's ``LeaderAndIsr.NoLeader``).
NO_LEADER = -1
#: Leader/partition epoch before any state was applied.
NO_EPOCH = -1
#: Error code of a partition without an error (Kafka's ``Errors.NONE``).
NONE = 0


class Partition:
    """This broker's view of one partition: its local log and its leadership state.

    ``leader_epoch`` and ``partition_epoch`` version the state (``make_leader`` ignores older
    ones); ``replicas`` is the assignment in preference order, ``isr`` the in-sync replicas.
    Follower LEOs are known only on the leader (``-1`` = not heard from since it became leader).
    """

    __slots__ = (
        "_follower_leo",
        "index",
        "isr",
        "leader_epoch",
        "leader_id",
        "local_id",
        "log",
        "partition_epoch",
        "replicas",
        "topic",
    )

    def __init__(self, topic: str, index: int, log_: Log, local_id: int) -> None:
        self.topic = topic
        self.index = index
        self.log = log_
        self.local_id = local_id
        self.leader_id = NO_LEADER
        self.leader_epoch = NO_EPOCH
        self.partition_epoch = NO_EPOCH
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self._follower_leo: dict[int, int] = {}

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic}-{self.index}, leader={self.leader_id}, "
            f"epoch={self.leader_epoch}, isr={list(self.isr)})"
        )

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

    def make_leader(
        self,
        leader_epoch: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        partition_epoch: int = 0,
    ) -> bool:
        """Become leader at ``leader_epoch`` (Kafka's ``Partition.makeLeader``).

        Ignored (False) unless ``(leader_epoch, partition_epoch)`` is newer than the state held:
        a late or replayed state must not move leadership back. Follower LEOs are forgotten (a
        new term starts), then HW is recomputed; with the ISR just this broker that is HW = LEO,
        which matters after an unclean stop, when the checkpointed HW lags the recovered log.
        """
        if (leader_epoch, partition_epoch) <= (self.leader_epoch, self.partition_epoch):
            log.info(
                "stale partition state ignored",
                topic=self.topic,
                partition=self.index,
                leader_epoch=leader_epoch,
                held_epoch=self.leader_epoch,
            )
            return False
        replicas = tuple(replicas)
        isr = tuple(isr)
        if self.local_id not in isr:
            raise ValueError(f"leader {self.local_id} must be in the ISR {list(isr)}")
        self.leader_id = self.local_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = replicas
        self.isr = isr
        self._follower_leo = {r: -1 for r in replicas if r != self.local_id}
        self.maybe_increment_high_watermark()
        return True

    def maybe_increment_high_watermark(self) -> bool:
        """HW = min LEO over the ISR, moved only forward. Returns whether it moved."""
        log_ = self.log
        hw = log_.log_end_offset
        local = self.local_id
        for replica in self.isr:
            if replica != local:
                leo = self._follower_leo.get(replica, -1)
                if leo < hw:
                    hw = leo
        return log_.maybe_increment_high_watermark(hw) if hw >= 0 else False

    def update_follower_end_offset(self, replica_id: int, leo: int) -> bool:
        """A follower's fetch reached ``leo`` (the fetch offset *is* the follower's LEO).

        The replica fetch path calls this on the leader (replication.md §4); returns whether HW
        moved (then the caller completes parked produces and fetches). ISR expansion is to come.
        """
        if not self.is_leader:
            raise errors.NotLeaderOrFollower(f"{self.topic}-{self.index}: not the leader")
        if replica_id not in self._follower_leo:
            raise errors.UnknownServerError(f"{replica_id} is not a follower of {self}")
        self._follower_leo[replica_id] = min(leo, self.log.log_end_offset)
        return self.maybe_increment_high_watermark()

    def append_as_leader(self, records: Any, required_acks: int = 1) -> AppendInfo:
        """Append a producer's batches (stamped with the leader epoch), then maybe advance HW.

        ``acks=-1`` with fewer in-sync replicas than the topic's ``min.insync.replicas``
        writes nothing: NOT_ENOUGH_REPLICAS (Kafka's ``Partition.appendRecordsToLeader``)."""
        if self.leader_id != self.local_id:
            raise errors.NotLeaderOrFollower(f"{self.topic}-{self.index}: not the leader")
        if required_acks == -1 and len(self.isr) < self.log.config.min_insync_replicas:
            raise errors.NotEnoughReplicas(
                f"{self.topic}-{self.index}: {len(self.isr)} in-sync replicas, "
                f"min.insync.replicas is {self.log.config.min_insync_replicas}"
            )
        info = self.log.append_as_leader(records, leader_epoch=self.leader_epoch)
        self.maybe_increment_high_watermark()
        return info

    def fetch_offset_for_timestamp(
        self, timestamp: int, isolation: Isolation
    ) -> TimestampAndOffset | None:
        """ListOffsets on the leader (see ``Log.fetch_offset_by_timestamp``)."""
        if self.leader_id != self.local_id:
            raise errors.NotLeaderOrFollower(f"{self.topic}-{self.index}: not the leader")
        return self.log.fetch_offset_by_timestamp(timestamp, isolation)

    def read(
        self, offset: int, max_bytes: int, isolation: Isolation, min_one_message: bool
    ) -> FetchDataInfo:
        """Read from the leader's log below the isolation bound (HW for consumers)."""
        if self.leader_id != self.local_id:
            raise errors.NotLeaderOrFollower(f"{self.topic}-{self.index}: not the leader")
        return self.log.read(offset, max_bytes, isolation, min_one_message=min_one_message)


class DelayedOperation:
    """A request parked until it can complete (Kafka's ``DelayedOperation``).

    Completed exactly once: by :meth:`try_complete` finding its condition true (when a
    purgatory checks a key it watches), by :meth:`expire` when its wait times out, or by
    :meth:`force_complete` (shutdown). The waiting handler awaits :attr:`future`.
    """

    __slots__ = ("future", "keys")

    def __init__(self, keys: Iterable[PartitionKey]) -> None:
        self.keys = tuple(keys)
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @property
    def completed(self) -> bool:
        return self.future.done()

    def try_complete(self) -> bool:
        """Complete now if the condition holds; returns whether the operation is complete."""
        raise NotImplementedError

    def force_complete(self) -> bool:
        """Complete now whatever the condition; False if it was already complete."""
        if self.future.done():
            return False
        self.future.set_result(None)
        return True

    def expire(self) -> None:
        """The wait timed out (called once, before completion)."""
        self.force_complete()


Op = TypeVar("Op", bound=DelayedOperation)


class DelayedOperationPurgatory(Generic[Op]):
    """Parked operations watched by partition (Kafka's ``DelayedOperationPurgatory``).

    Whoever changes what an operation waits for (an append, an HW move, a deleted partition)
    calls :meth:`check_and_complete` for that partition; the waiting handler calls :meth:`wait`,
    which bounds the wait and unregisters the operation however it ends. Timeouts are the event
    loop's timers (``asyncio.wait``), not a timing wheel: a few parked requests per connection.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[PartitionKey, set[Op]] = {}

    def try_complete_else_watch(self, op: Op) -> bool:
        """Complete ``op`` now if it can; else watch it on each of its keys. Returns whether it
        completed. (Synchronous, so no state change can slip between the check and the watch.)
        """
        if op.try_complete():
            return True
        for key in op.keys:
            self._watchers.setdefault(key, set()).add(op)
        return False

    def check_and_complete(self, key: PartitionKey) -> int:
        """Try to complete every operation watching ``key``; returns how many completed."""
        ops = self._watchers.get(key)
        if not ops:
            return 0
        completed = 0
        for op in list(ops):
            if op.completed:
                ops.discard(op)
            elif op.try_complete():
                ops.discard(op)
                completed += 1
        if not ops:
            del self._watchers[key]
        return completed

    def remove(self, op: Op) -> None:
        for key in op.keys:
            ops = self._watchers.get(key)
            if ops is not None:
                ops.discard(op)
                if not ops:
                    del self._watchers[key]

    async def wait(self, op: Op, timeout_s: float) -> bool:
        """Wait until ``op`` completes or ``timeout_s`` passes (then it expires). Returns whether
        it completed before the timeout. ``op`` is unwatched afterwards in every case."""
        try:
            await asyncio.wait({op.future}, timeout=max(timeout_s, 0))
        finally:
            self.remove(op)
        if op.completed:
            return True
        op.expire()
        return False

    def drain(self) -> list[Op]:
        """Unwatch and return every parked operation not yet complete (shutdown)."""
        ops = {op for watched in self._watchers.values() for op in watched if not op.completed}
        self._watchers.clear()
        return list(ops)

    def watched(self) -> int:
        """Number of keys with at least one parked operation (tests, metrics)."""
        return len(self._watchers)

    def __len__(self) -> int:
        return len({op for watched in self._watchers.values() for op in watched})


class DelayedFetch(DelayedOperation):
    """A Fetch that found fewer than ``min_bytes``, parked until one of its partitions has new
    data below its read bound (HW for consumers, LEO for ``Isolation.LOG_END``), or is gone or
    replaced. The handler then reads again and may park again (today's long-poll behaviour).

    The bound seen at parking is remembered, not the fetch offsets: data already readable but
    too little for ``min_bytes`` must not wake the fetch again and again.
    """

    __slots__ = ("_isolation", "_observed", "_replicas")

    def __init__(
        self, replicas: ReplicaManager, keys: Iterable[PartitionKey], isolation: Isolation
    ) -> None:
        super().__init__(keys)
        self._replicas = replicas
        self._isolation = isolation
        self._observed = [self._bound(key) for key in self.keys]

    def _bound(self, key: PartitionKey) -> tuple[Partition | None, int]:
        partition = self._replicas.get_partition(*key)
        if partition is None:
            return None, -1
        log_ = partition.log
        if log_.closed:
            return partition, -1
        if self._isolation is Isolation.LOG_END:
            return partition, log_.log_end_offset
        return partition, log_.high_watermark

    def try_complete(self) -> bool:
        for key, (partition, bound) in zip(self.keys, self._observed, strict=True):
            now_partition, now_bound = self._bound(key)
            if now_partition is not partition or now_bound != bound:
                return self.force_complete()
        return False


class AppendResult(NamedTuple):
    """One partition's outcome of :meth:`ReplicaManager.append_records` (``info`` None on
    error). A parked ``acks=-1`` produce rewrites ``error`` when it completes."""

    topic: str
    partition: int
    error: int
    message: str | None
    info: AppendInfo | None
    log_start_offset: int


class DelayedProduce(DelayedOperation):
    """An ``acks=-1`` produce waiting for HW to reach each partition's last offset + 1.

    Per partition: HW there -> NONE; the partition gone, replaced or no longer led here ->
    NOT_LEADER_OR_FOLLOWER; the wait timed out -> REQUEST_TIMED_OUT. The outcome is written into
    the shared ``results`` list the handler encodes. (To come with min.insync.replicas: ISR below
    it when HW gets there -> NOT_ENOUGH_REPLICAS_AFTER_APPEND.)
    """

    __slots__ = ("_pending", "_replicas", "results")

    def __init__(
        self,
        replicas: ReplicaManager,
        results: list[AppendResult],
        pending: dict[int, tuple[Partition, int]],
    ) -> None:
        super().__init__((results[i].topic, results[i].partition) for i in pending)
        self._replicas = replicas
        self.results = results
        # index into results -> (the partition appended to, the offset HW must reach)
        self._pending = pending

    def _settle(self, i: int, code: int) -> None:
        self.results[i] = self.results[i]._replace(error=code, message=None)
        del self._pending[i]

    def try_complete(self) -> bool:
        for i, (partition, required) in list(self._pending.items()):
            result = self.results[i]
            now = self._replicas.get_partition(result.topic, result.partition)
            if now is not partition or not partition.is_leader:
                self._settle(i, errors.NotLeaderOrFollower.code)
            elif partition.log.high_watermark >= required:
                self._settle(i, NONE)
        if self._pending:
            return False
        return self.force_complete()

    def expire(self) -> None:
        for i in list(self._pending):
            self._settle(i, errors.RequestTimedOut.code)
        self.force_complete()


class ReplicaManager:
    """The partitions this broker hosts (Kafka's ``ReplicaManager``).

    Owns the :class:`Partition` table over the LogManager's logs and both purgatories. Standalone,
    it makes this broker leader of every partition at epoch 0 the first time it is asked for one
    (:meth:`get_partition`), so topics created anywhere (CreateTopics, auto-creation, the
    offsets topic) need no registration.
    """

    def __init__(self, log_manager: LogManager, local_id: int) -> None:
        self.logs = log_manager
        self.local_id = local_id
        self._partitions: dict[PartitionKey, Partition] = {}
        self.fetch_purgatory = DelayedOperationPurgatory[DelayedFetch]("Fetch")
        self.produce_purgatory = DelayedOperationPurgatory[DelayedProduce]("Produce")

    def startup(self) -> None:
        """Become leader of every loaded partition (HW = LEO after an unclean stop)."""
        for topic, index in self.logs.logs:
            self.get_partition(topic, index)

    def shutdown(self) -> None:
        """Parked fetches answer now with what they have; parked produces time out."""
        for fetch in self.fetch_purgatory.drain():
            fetch.force_complete()
        for produce in self.produce_purgatory.drain():
            produce.expire()

    # --- partition state -------------------------------------------------------------------------

    def get_partition(self, topic: str, index: int) -> Partition | None:
        """The partition if this broker hosts it (None: unknown topic or partition)."""
        partition = self._partitions.get((topic, index))
        if partition is None:
            log_ = self.logs.get_log(topic, index)
            if log_ is None:
                return None
            partition = Partition(topic, index, log_, self.local_id)
            # Standalone: the only replica, leader from epoch 0 (a cluster applies ZooKeeper's).
            partition.make_leader(0, [self.local_id], [self.local_id])
            self._partitions[(topic, index)] = partition
        return partition

    def leader_epoch(self, topic: str, index: int) -> int:
        """Current leader epoch of a hosted partition (-1 if not hosted)."""
        partition = self.get_partition(topic, index)
        return NO_EPOCH if partition is None else partition.leader_epoch

    def update_follower_end_offset(self, topic: str, index: int, replica_id: int, leo: int) -> bool:
        """A follower fetched ``topic-index`` from ``leo``: record it; if HW moved, complete the
        produces and fetches waiting for it. Returns whether HW moved. (The follower Fetch path
        of replication calls this; today only tests do.)"""
        partition = self.get_partition(topic, index)
        if partition is None:
            raise errors.UnknownTopicOrPartition(f"{topic}-{index} is not hosted here")
        moved = partition.update_follower_end_offset(replica_id, leo)
        if moved:
            self.complete_delayed_requests((topic, index))
        return moved

    def delete_topic(self, name: str) -> None:
        """Delete ``name``'s logs and forget its partitions; parked requests on them answer."""
        count = self.logs.topics().get(name, 0)
        self.logs.delete_topic(name)
        for index in range(count):
            self._partitions.pop((name, index), None)
            self.complete_delayed_requests((name, index))

    # --- produce ---------------------------------------------------------------------------------

    def append_records(
        self, entries: Iterable[tuple[str, int, Any]], acks: int, timeout_ms: int
    ) -> tuple[list[AppendResult], DelayedProduce | None]:
        """Leader append of each ``(topic, partition, records)``, in order.

        Returns one :class:`AppendResult` per entry and, for ``acks=-1`` when some partition's HW
        is not yet past its records, the :class:`DelayedProduce` to wait on (already parked; the
        caller waits with ``produce_purgatory.wait(op, timeout_ms / 1000)``). Never raises for a
        Kafka error: it becomes the entry's error code.
        """
        results: list[AppendResult] = []
        if acks not in (-1, 0, 1):
            code = errors.InvalidRequiredAcks.code
            return [AppendResult(t, i, code, None, None, -1) for t, i, _ in entries], None
        pending: dict[int, tuple[Partition, int]] | None = {} if acks == -1 else None
        for topic, index, records in entries:
            partition = self.get_partition(topic, index)
            if partition is None:
                code = errors.UnknownTopicOrPartition.code
                results.append(AppendResult(topic, index, code, None, None, -1))
                continue
            if records is None or len(records) == 0:
                code = errors.InvalidRecord.code
                results.append(AppendResult(topic, index, code, "no records", None, -1))
                continue
            try:
                info = partition.append_as_leader(records, acks)
            except errors.KafkaError as exc:
                log.info("produce rejected", topic=topic, partition=index, error=str(exc))
                results.append(AppendResult(topic, index, exc.code, str(exc), None, -1))
                continue
            except Exception as exc:
                log.exception("append failed", topic=topic, partition=index)
                code = errors.UnknownServerError.code
                results.append(AppendResult(topic, index, code, type(exc).__name__, None, -1))
                continue
            self.complete_delayed_requests((topic, index))
            log_ = partition.log
            if pending is not None and log_.high_watermark <= info.last_offset:
                pending[len(results)] = (partition, info.last_offset + 1)
            results.append(AppendResult(topic, index, NONE, None, info, log_.log_start_offset))
        if not pending:
            return results, None
        delayed = DelayedProduce(self, results, pending)
        if self.produce_purgatory.try_complete_else_watch(delayed):
            return results, None
        return results, delayed

    def complete_delayed_requests(self, key: PartitionKey) -> None:
        """A partition's LEO, HW or leadership changed: complete what was waiting for it
        (Kafka's ``tryCompleteDelayedRequests``). Replication calls it after a follower fetch
        moves HW."""
        self.fetch_purgatory.check_and_complete(key)
        self.produce_purgatory.check_and_complete(key)

    # --- fetch -----------------------------------------------------------------------------------

    def delayed_fetch(self, keys: Iterable[PartitionKey], isolation: Isolation) -> DelayedFetch:
        """Park a fetch that read too little on ``keys`` (it completes at once if new data
        arrived since the read, which cannot happen on the event-loop thread in between)."""
        op = DelayedFetch(self, keys, isolation)
        self.fetch_purgatory.try_complete_else_watch(op)
        return op
