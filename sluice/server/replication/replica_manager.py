"""Partitions this broker hosts: leadership state, the append and read paths, the purgatories.

Kafka's ``ReplicaManager``, over :class:`~sluice.server.replication.partition.Partition` and the
purgatories (:mod:`sluice.server.replication.purgatory`, :mod:`sluice.server.replication.delayed`).
The handlers decode a request, call in here, and encode what comes back; nothing in here knows
the wire format.

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
  :meth:`Partition.make_leader` / :meth:`Partition.make_follower`, through
  :meth:`ReplicaManager.make_leader` / :meth:`ReplicaManager.make_follower` -- today when it
  first sees a partition's log (at the log's latest epoch, 0 for a new log) and when a test
  bumps the epoch (``EmbeddedBroker.set_leader_epoch``); later by the ZooKeeper state watcher
  with the state znode's ``(leader_epoch, zkVersion)``. A state not newer than the one held is
  ignored (fenced). Becoming leader at epoch e writes ``(e, LEO)`` to the log's epoch cache.
* Leader epoch checks: every request path reaches the log through
  :meth:`Partition.local_log`, which fences a client's stale ``current_leader_epoch``
  (FENCED_LEADER_EPOCH), refuses one from the future (UNKNOWN_LEADER_EPOCH) and a non-leader
  (NOT_LEADER_OR_FOLLOWER), in Kafka's order.
* ISR changes between leadership changes: only the leader (:meth:`Partition.maybe_shrink_isr`
  and the expansion on a follower fetch), one change in flight at a time, stored by the
  :data:`IsrWriter` conditionally on the partition epoch it was computed from (ZooKeeper's
  zkVersion) and applied only if that state is still the one held. Without a writer
  (standalone) the leader's word is final; standalone the ISR is just the leader anyway.
* Follower LEOs and caught-up times: only the leader's follower-fetch path
  (:meth:`Partition.update_follower_end_offset`).
* HW: only :meth:`Partition.maybe_increment_high_watermark`, on the leader, after a local
  append, a follower LEO update or a leadership change. (The group coordinator writes
  ``__consumer_offsets`` through :meth:`append_records` too: ``offsets_appender``.)
* The partition table: only :class:`ReplicaManager` (lazily, and
  :meth:`ReplicaManager.delete_topic`); topics are deleted only through it, so a
  :class:`Partition` never outlives its log.

**Concurrency**: none. Everything runs on the event-loop thread; a purgatory check runs
synchronously inside the append that makes it true, so no append can slip between a fetch's read
and its parking.
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NamedTuple

from sluice.protocol import errors
from sluice.server.group.offsets_store import OFFSETS_TOPIC
from sluice.server.logging import get_logger
from sluice.server.replication.delayed import AppendResult, DelayedFetch, DelayedProduce
from sluice.server.replication.partition import (
    NO_EPOCH,
    NONE,
    IsrUpdate,
    IsrWriter,
    Partition,
    PartitionKey,
    ReplicationSettings,
    TxnMarker,
)
from sluice.server.replication.purgatory import DelayedOperationPurgatory
from sluice.server.replication.throttle import ReplicationQuota, is_throttled
from sluice.server.storage.log import FetchDataInfo, Isolation
from sluice.server.transaction.state_log import TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from sluice.server.storage.log import AppendInfo
    from sluice.server.storage.log_manager import LogManager

log = get_logger("sluice.replica_manager")

#: Threads writing never-led logs' first leader epoch in parallel (:meth:`ReplicaManager.lead`):
#: 1,000 such writes took 5.9 s one after the other, 0.42 s on 8 threads, 0.39 s on 32.
#: Topics only the coordinators append to (a client's Produce gets INVALID_TOPIC_EXCEPTION).
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
FIRST_EPOCH_WRITERS = 16

#: One partition a Fetch wants: ``(topic, partition, fetch_offset, partition_max_bytes,
#: current_leader_epoch)`` (-1: no epoch check), in the request's order.
FetchWant = tuple[str, int, int, int, int]


class PartitionRead(NamedTuple):
    """One partition's outcome of :meth:`ReplicaManager.fetch_messages`: the hosted partition
    (None: not hosted here, see :meth:`ReplicaManager.missing_partition_code`), and what was
    read or why not (exactly one of ``info`` and ``error`` is set when ``partition`` is)."""

    partition: Partition | None
    info: FetchDataInfo | None
    error: Exception | None
    #: KIP-392: the replica the consumer should fetch this partition from instead (-1: none);
    #: set, the read was skipped and ``info`` holds no records.
    preferred_read_replica: int = -1


class DiskFaults:
    """Appends failing on a storage error (``OSError`` from the log: ENOSPC, EIO, EDQUOT...),
    logged once per partition per *episode* instead of once per request.

    An episode starts with a partition's first failing append (one ERROR line naming the
    errno) and ends with its next successful append (one WARNING line with how many appends
    failed and for how long) or at shutdown (one ERROR line with the count). With the disk
    full a client's retries fail hundreds of times a second; a traceback for each buries the
    log (415 in 3 s were seen). The client gets KAFKA_STORAGE_ERROR (retriable) each time.

    Kafka takes the whole log dir offline on an ``IOException`` (``LogDirFailureChannel``)
    until a restart; Sluice keeps the partition: the storage layer leaves a failed append
    without a trace (``LogSegment.append`` cuts a torn write back), so appends resume by
    themselves when space returns. Only the append paths call this, on the event loop."""

    __slots__ = ("_clock", "_open")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        #: partition -> [failed appends, first failure (clock), errno name]
        self._open: dict[PartitionKey, list[Any]] = {}
        self._clock = clock

    def __bool__(self) -> bool:
        return bool(self._open)

    def failed(self, key: PartitionKey, exc: OSError) -> str:
        """Count a failed append; returns the message for the client."""
        reason = exc.strerror or str(exc)
        episode = self._open.get(key)
        if episode is not None:
            episode[0] += 1
            return reason
        name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        self._open[key] = [1, self._clock(), name]
        log.error("appends failing: storage error", topic=key[0], partition=key[1], errno=name,
                  error=reason, file=exc.filename)  # fmt: skip
        return reason

    def succeeded(self, key: PartitionKey) -> None:
        episode = self._open.pop(key, None)
        if episode is not None:
            log.warning("appends resumed", topic=key[0], partition=key[1], failed=episode[0],
                        errno=episode[2],
                        seconds=round(self._clock() - episode[1], 3))  # fmt: skip

    def close(self) -> None:
        """Shutdown: the episodes still open, with their counts."""
        for (topic, index), (count, since, name) in sorted(self._open.items()):
            log.error("appends still failing at shutdown", topic=topic, partition=index,
                      failed=count, errno=name,
                      seconds=round(self._clock() - since, 3))  # fmt: skip
        self._open.clear()


class ReplicaManager:
    """The partitions this broker hosts (Kafka's ``ReplicaManager``).

    Owns the :class:`Partition` table over the LogManager's logs and both purgatories. Standalone
    (``standalone=True``), it makes this broker leader of every partition at its log's latest
    epoch the first time it is asked for one (:meth:`get_partition`), so topics created anywhere
    (CreateTopics, auto-creation, the offsets topic) need no registration. In a cluster a
    partition is hosted only once :meth:`host` is called for it (its replica is assigned here)
    and has no leader until a partition state is applied.
    """

    def __init__(
        self,
        log_manager: LogManager,
        local_id: int,
        settings: ReplicationSettings | None = None,
        isr_writer: IsrWriter | None = None,
        *,
        standalone: bool = True,
    ) -> None:
        self.logs = log_manager
        self.local_id = local_id
        self.standalone = standalone
        self.settings = settings or ReplicationSettings()
        #: ``replica.selector.class`` is Kafka's RackAwareReplicaSelector (KIP-392): a leader
        #: sends a consumer that names its rack to a replica in that rack.
        self.rack_aware_selector = False
        #: A broker's ``broker.rack`` (None: none or unknown); the cluster sets it.
        self.rack_of: Callable[[int], str | None] = lambda broker_id: None
        self._partitions: dict[PartitionKey, Partition] = {}
        #: Replication throttles (:mod:`~sluice.server.replication.throttle`): what this broker
        #: sends as a leader, what it fetches as a follower; the server sets their rates.
        self.leader_quota = ReplicationQuota()
        self.follower_quota = ReplicationQuota()
        self.fetch_purgatory = DelayedOperationPurgatory[DelayedFetch]("Fetch")
        self.produce_purgatory = DelayedOperationPurgatory[DelayedProduce]("Produce")
        self._isr_writer = isr_writer
        self._isr_writes: set[asyncio.Task[None]] = set()
        self.disk_faults = DiskFaults()
        #: Whether the cluster has ``topic-index`` (the cluster's metadata cache replaces it).
        self.known_partition: Callable[[str, int], bool] = self._known_locally
        if isr_writer is not None:
            self.settings.propose_isr = self._propose_isr

    def set_isr_writer(self, writer: IsrWriter) -> None:
        """Where the leader's ISR changes are stored from now on (the cluster's ZooKeeper
        write; without one, standalone, a change is applied at once)."""
        self._isr_writer = writer
        self.settings.propose_isr = self._propose_isr

    def startup(self) -> None:
        """Standalone: become leader of every loaded partition (HW = LEO after an unclean
        stop). In a cluster nothing happens until states arrive."""
        if self.standalone:
            self.lead(list(self.logs.logs))

    def lead(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Standalone: become leader of these hosted partitions now (at startup every loaded
        one; after CreateTopics / CreatePartitions the new ones, as Kafka's controller elects
        a new partition's leader at once; :meth:`get_partition` would otherwise do it at the
        first request).

        A log that never had a leader gets its first epoch (0, at its LEO) in its
        ``leader-epoch-checkpoint``, a durable write (two fsyncs). Thousands of them one
        after the other are bound by the disk's fsync latency (5,000 took 47 s of a 60 s
        restart here, issue 27), so those writes run in parallel, up to
        :data:`FIRST_EPOCH_WRITERS` threads (fsync releases the GIL; the file system commits
        concurrent fsyncs together). Each thread writes one log's file and nothing else, and
        the event loop serves nothing meanwhile; leadership itself is then taken in order
        (its epoch assignment now a no-op). A partition whose write failed (a disk error) is
        left to be led at its first request, which reports the error then (as before)."""
        keys = [key for key in partitions if key not in self._partitions]
        fresh = {
            key: log_
            for key in keys
            if (log_ := self.logs.get_log(*key)) is not None and log_.latest_epoch is None
        }
        failed: set[tuple[str, int]] = set()
        if len(fresh) > 1:

            def first_epoch(key: tuple[str, int]) -> OSError | None:
                try:
                    fresh[key].assign_leader_epoch(0)
                except OSError as exc:
                    return exc
                return None

            with ThreadPoolExecutor(
                min(FIRST_EPOCH_WRITERS, len(fresh)), thread_name_prefix="first-epoch"
            ) as pool:
                for key, error in zip(fresh, pool.map(first_epoch, fresh), strict=True):
                    if error is not None:
                        # Left to the first request for it, which reports the storage error.
                        log.warning("cannot lead partition yet", topic=key[0],
                                    partition=key[1], error=str(error))  # fmt: skip
                        failed.add(key)
        for topic, index in keys:
            if (topic, index) not in failed:
                self.get_partition(topic, index)

    def shutdown(self) -> None:
        """Parked fetches answer now with what they have; parked produces time out; ISR writes in
        flight are abandoned (their outcome arrives as partition state if they landed)."""
        for task in list(self._isr_writes):
            task.cancel()
        for fetch in self.fetch_purgatory.drain():
            fetch.force_complete()
        for produce in self.produce_purgatory.drain():
            produce.expire()
        self.disk_faults.close()

    # --- partition state -------------------------------------------------------------------------

    def get_partition(self, topic: str, index: int) -> Partition | None:
        """The partition if this broker hosts it (None: unknown topic or partition)."""
        partition = self._partitions.get((topic, index))
        if partition is None:
            if not self.standalone:
                return None
            log_ = self.logs.get_log(topic, index)
            if log_ is None:
                return None
            partition = Partition(topic, index, log_, self.local_id, self.settings)
            # Standalone: the only replica, leader at the latest epoch of its log (0 for a new
            # one), so an epoch never goes backwards across restarts; a cluster applies
            # ZooKeeper's state instead.
            latest = log_.latest_epoch
            partition.make_leader(0 if latest is None else latest, [self.local_id], [self.local_id])
            self._partitions[(topic, index)] = partition
        return partition

    def host(self, topic: str, index: int) -> Partition:
        """Cluster mode: host ``topic-index``, whose log exists here (the LogManager's
        ``create_log``), without a leader until :meth:`apply_partition_state`."""
        key = (topic, index)
        partition = self._partitions.get(key)
        if partition is None:
            log_ = self.logs.get_log(topic, index)
            if log_ is None:
                raise errors.UnknownTopicOrPartition(f"{topic}-{index} has no log here")
            partition = Partition(topic, index, log_, self.local_id, self.settings)
            self._partitions[key] = partition
        return partition

    def forget(self, topic: str, index: int) -> None:
        """Cluster mode: stop hosting ``topic-index`` (its log is no longer the topic's: another
        topic id); parked requests on it answer."""
        if self._partitions.pop((topic, index), None) is not None:
            self.complete_delayed_requests((topic, index))

    def partitions(self) -> list[Partition]:
        """Every hosted partition (a snapshot)."""
        return list(self._partitions.values())

    def resign_all(self) -> list[Partition]:
        """Stop leading every partition at once (:meth:`Partition.resign`; the ZooKeeper
        session was lost). Parked requests on them answer. Returns those that were led."""
        resigned = []
        for key, partition in list(self._partitions.items()):
            if partition.resign():
                resigned.append(partition)
                self.complete_delayed_requests(key)
        if resigned:
            log.warning("resigned leadership", partitions=len(resigned))
        return resigned

    def leader_epoch(self, topic: str, index: int) -> int:
        """Current leader epoch of a hosted partition (-1 if not hosted)."""
        partition = self.get_partition(topic, index)
        return NO_EPOCH if partition is None else partition.leader_epoch

    def missing_partition_code(self, topic: str, index: int) -> int:
        """The error for a partition not hosted here (Kafka's ``getPartitionOrError``):
        NOT_LEADER_OR_FOLLOWER if the topic has that partition (its replicas are elsewhere, or
        its log is not open), else UNKNOWN_TOPIC_OR_PARTITION."""
        known = self.known_partition(topic, index)
        return (errors.NotLeaderOrFollower if known else errors.UnknownTopicOrPartition).code

    def _known_locally(self, topic: str, index: int) -> bool:
        return 0 <= index < self.logs.topics().get(topic, 0)

    def _hosted(self, topic: str, index: int) -> Partition:
        partition = self.get_partition(topic, index)
        if partition is None:
            raise errors.UnknownTopicOrPartition(f"{topic}-{index} is not hosted here")
        return partition

    def make_leader(
        self,
        topic: str,
        index: int,
        leader_epoch: int,
        replicas: Iterable[int] | None = None,
        isr: Iterable[int] | None = None,
        partition_epoch: int | None = None,
    ) -> bool:
        """:meth:`apply_partition_state` with this broker as the leader (Kafka's
        ``ReplicaManager.makeLeaders``); ``None`` keeps the replicas, ISR or partition epoch
        held. ``EmbeddedBroker.set_leader_epoch`` calls it (on the broker's loop) so that tests
        can bump a running broker's epoch as a controller's election would."""
        return self._apply_keeping(
            topic, index, self.local_id, leader_epoch, replicas, isr, partition_epoch
        )

    def make_follower(
        self,
        topic: str,
        index: int,
        leader_id: int,
        leader_epoch: int,
        replicas: Iterable[int] | None = None,
        isr: Iterable[int] | None = None,
        partition_epoch: int | None = None,
    ) -> bool:
        """:meth:`apply_partition_state` with ``leader_id`` as the leader (Kafka's
        ``ReplicaManager.makeFollowers``; ``NO_LEADER``: offline); ``None`` keeps what is held."""
        if leader_id == self.local_id:
            raise ValueError(f"{self.local_id} cannot follow itself: use make_leader")
        return self._apply_keeping(
            topic, index, leader_id, leader_epoch, replicas, isr, partition_epoch
        )

    def _apply_keeping(
        self,
        topic: str,
        index: int,
        leader: int,
        leader_epoch: int,
        replicas: Iterable[int] | None,
        isr: Iterable[int] | None,
        partition_epoch: int | None,
    ) -> bool:
        held = self._hosted(topic, index)
        return self.apply_partition_state(
            topic,
            index,
            leader,
            leader_epoch,
            held.replicas if replicas is None else replicas,
            held.isr if isr is None else isr,
            held.partition_epoch if partition_epoch is None else partition_epoch,
            held.controller_epoch,
        )

    def last_offset_for_leader_epoch(
        self, topic: str, index: int, current_leader_epoch: int, leader_epoch: int
    ) -> tuple[int, int, int]:
        """OffsetForLeaderEpoch for one partition (Kafka's
        ``ReplicaManager.lastOffsetForLeaderEpoch``): ``(error code, epoch, end offset)``.
        Not hosted -> UNKNOWN_TOPIC_OR_PARTITION, or NOT_LEADER_OR_FOLLOWER when the topic has
        that partition but its log is not open here (Kafka: known to the metadata cache);
        then the partition's checks (:meth:`Partition.local_log`) and the log's epoch cache."""
        partition = self.get_partition(topic, index)
        if partition is None:
            return self.missing_partition_code(topic, index), NO_EPOCH, -1
        try:
            epoch, end = partition.last_offset_for_leader_epoch(current_leader_epoch, leader_epoch)
        except errors.KafkaError as exc:
            return exc.code, NO_EPOCH, -1
        return NONE, epoch, end

    def update_follower_end_offset(self, topic: str, index: int, replica_id: int, leo: int) -> bool:
        """A follower fetched ``topic-index`` from ``leo``: record it; if HW moved, complete the
        produces and fetches waiting for it. Returns whether HW moved."""
        return self._follower_fetched(self._hosted(topic, index), topic, index, replica_id, leo)

    def _follower_fetched(
        self, partition: Partition, topic: str, index: int, replica_id: int, leo: int
    ) -> bool:
        """:meth:`update_follower_end_offset` for a partition already looked up (the Fetch
        path: :meth:`fetch_messages`, once per request)."""
        moved = partition.update_follower_end_offset(replica_id, leo)
        if moved:
            self.complete_delayed_requests((topic, index))
        return moved

    def apply_partition_state(
        self,
        topic: str,
        index: int,
        leader: int,
        leader_epoch: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        partition_epoch: int,
        controller_epoch: int = 0,
    ) -> bool:
        """Apply a partition state (a ZooKeeper state znode): lead or follow ``topic-index``.
        The one way a hosted partition's leadership changes (the cluster's state watcher, and
        :meth:`make_leader` / :meth:`make_follower`).

        Only if newer than the state held (``(leader_epoch, partition_epoch)``); returns whether
        it was applied. Parked requests on the partition are re-checked (a produce waiting on a
        deposed leader answers NOT_LEADER_OR_FOLLOWER). The log must exist here.
        """
        partition = self._hosted(topic, index)
        if leader == self.local_id:
            applied = partition.make_leader(
                leader_epoch, replicas, isr, partition_epoch, controller_epoch
            )
        else:
            applied = partition.make_follower(
                leader, leader_epoch, replicas, isr, partition_epoch, controller_epoch
            )
        if applied:
            log.info(
                "partition state applied",
                topic=topic,
                partition=index,
                leader=leader,
                leader_epoch=leader_epoch,
                isr=list(partition.isr),
                partition_epoch=partition_epoch,
            )
            self.complete_delayed_requests((topic, index))
        return applied

    def maybe_shrink_isr(self) -> int:
        """Run the ISR shrink check on every led partition (every ``replica.lag.time.max.ms / 2``
        in a cluster); returns how many proposed a change."""
        proposed = 0
        for key, partition in list(self._partitions.items()):
            if partition.is_leader and partition.maybe_shrink_isr():
                proposed += 1
                # Without a writer the change is applied at once: HW may have moved.
                self.complete_delayed_requests(key)
        return proposed

    def _propose_isr(self, partition: Partition, isr: tuple[int, ...]) -> None:
        update = partition.isr_update(isr)
        task = asyncio.get_running_loop().create_task(self._write_isr(partition, update))
        self._isr_writes.add(task)
        task.add_done_callback(self._isr_writes.discard)

    async def _write_isr(self, partition: Partition, update: IsrUpdate) -> None:
        assert self._isr_writer is not None
        try:
            version = await self._isr_writer(update)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Unknown outcome (e.g. ZooKeeper connection lost): drop the proposal; if it landed,
            # the new state arrives through apply_partition_state, else a later fetch or shrink
            # check proposes again.
            log.warning(
                "ISR update failed",
                topic=update.topic,
                partition=update.partition,
                isr=list(update.isr),
                error=repr(exc),
            )
            version = None
        if version is None:
            log.info(
                "ISR update not stored (partition state moved on)",
                topic=update.topic,
                partition=update.partition,
                isr=list(update.isr),
                partition_epoch=update.partition_epoch,
            )
        partition.isr_update_completed(update, version)
        # HW may have moved, and the stored ISR size decides parked acks=-1 produces.
        self.complete_delayed_requests((update.topic, update.partition))

    def stop_replica(self, topic: str, index: int) -> Partition | None:
        """This broker is no longer a replica of ``topic-index`` (reassigned away): stop
        leading it, forget it and delete its log (Kafka's StopReplica with ``delete``). Parked
        requests on it answer. Returns the partition that was hosted (None: none)."""
        partition = self._partitions.pop((topic, index), None)
        if partition is not None:
            partition.resign()
        self.logs.delete_partition(topic, index)
        self.complete_delayed_requests((topic, index))
        return partition

    def delete_topic(self, name: str) -> None:
        """Delete ``name``'s logs and forget its partitions; parked requests on them answer."""
        count = self.logs.topics().get(name, 0)
        self.logs.delete_topic(name)
        for index in range(count):
            self._partitions.pop((name, index), None)
            self.complete_delayed_requests((name, index))

    # --- produce ---------------------------------------------------------------------------------

    def append_records(
        self,
        entries: Iterable[tuple[str, int, Any]],
        acks: int,
        timeout_ms: int,
        *,
        internal_topics_allowed: bool = False,
    ) -> tuple[list[AppendResult], DelayedProduce | None]:
        """Leader append of each ``(topic, partition, records)``, in order.

        An internal topic (``__consumer_offsets``) is appended to only with
        ``internal_topics_allowed`` (the group coordinator's writes); a client's Produce gets
        INVALID_TOPIC_EXCEPTION, "Cannot append to internal topic", as from Kafka's
        ``ReplicaManager.appendToLocalLog``.

        Returns one :class:`AppendResult` per entry and, for ``acks=-1`` when some partition's HW
        is not yet past its records, the :class:`DelayedProduce` to wait on (already parked; the
        caller waits with ``produce_purgatory.wait(op, timeout_ms / 1000)``). Never raises for a
        Kafka error: it becomes the entry's error code.
        """
        if acks not in (-1, 0, 1):
            code = errors.InvalidRequiredAcks.code
            return [AppendResult(t, i, code, None, None, -1) for t, i, _ in entries], None
        return self._append(entries, acks, internal_topics_allowed, Partition.append_as_leader)

    def append_txn_markers(
        self, entries: Iterable[tuple[str, int, TxnMarker]], timeout_ms: int
    ) -> tuple[list[AppendResult], DelayedProduce | None]:
        """WriteTxnMarkers: the leader append of each ``(topic, partition, marker)`` as Kafka's
        ``appendRecords`` with origin Coordinator, ``requiredAcks = -1`` and internal topics
        allowed (markers go to ``__consumer_offsets`` too). Results and waiting as
        :meth:`append_records`; the producer-state checks of the marker (INVALID_PRODUCER_EPOCH,
        TRANSACTION_COORDINATOR_FENCED) become the entry's error code."""
        return self._append(entries, -1, True, Partition.append_end_txn_marker)

    def _append(
        self,
        entries: Iterable[tuple[str, int, Any]],
        acks: int,
        internal_topics_allowed: bool,
        append: Callable[[Partition, Any, int], AppendInfo],
    ) -> tuple[list[AppendResult], DelayedProduce | None]:
        """The loop of :meth:`append_records` / :meth:`append_txn_markers`: ``append`` writes
        one entry's payload to a partition it leads."""
        results: list[AppendResult] = []
        pending: dict[int, tuple[Partition, int]] | None = {} if acks == -1 else None
        for topic, index, records in entries:
            if topic in INTERNAL_TOPICS and not internal_topics_allowed:
                message = f"Cannot append to internal topic {topic}"
                results.append(AppendResult(topic, index, errors.InvalidTopic.code, message,
                                            None, -1))  # fmt: skip
                continue
            partition = self.get_partition(topic, index)
            if partition is None:
                code = self.missing_partition_code(topic, index)
                results.append(AppendResult(topic, index, code, None, None, -1))
                continue
            if records is None or len(records) == 0:
                code = errors.InvalidRecord.code
                results.append(AppendResult(topic, index, code, "no records", None, -1))
                continue
            log_ = partition.log
            hw_before = log_.high_watermark
            try:
                info = append(partition, records, acks)
            except errors.KafkaError as exc:
                log.info("produce rejected", topic=topic, partition=index, error=str(exc))
                results.append(AppendResult(topic, index, exc.code, str(exc), None, -1))
                continue
            except OSError as exc:  # disk full, I/O error: nothing of it is in the log
                message = self.disk_faults.failed((topic, index), exc)
                code = errors.KafkaStorageError.code
                results.append(AppendResult(topic, index, code, message, None, -1))
                continue
            except Exception as exc:
                log.exception("append failed", topic=topic, partition=index)
                code = errors.UnknownServerError.code
                results.append(AppendResult(topic, index, code, type(exc).__name__, None, -1))
                continue
            key = (topic, index)
            if self.disk_faults:
                self.disk_faults.succeeded(key)
            if log_.high_watermark != hw_before:
                self.complete_delayed_requests(key)
            else:
                # Kafka's rule (ReplicaManager.appendToLocalLog): an append that did not move HW
                # can only wake fetches (new data below LEO); parked produces wait for HW, the
                # ISR or leadership, none of which an append changes. (With followers in the ISR
                # HW never moves here: checking every parked produce cost O(parked) per append.)
                self.fetch_purgatory.check_and_complete(key)
            if pending is not None and log_.high_watermark <= info.last_offset:
                pending[len(results)] = (partition, info.last_offset + 1)
            results.append(AppendResult(topic, index, NONE, None, info, log_.log_start_offset))
        if not pending:
            return results, None
        delayed = DelayedProduce(self.get_partition, results, pending)
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

    def fetch_messages(
        self,
        wanted: Iterable[FetchWant],
        max_bytes: int,
        isolation: Isolation,
        replica_id: int = -1,
        record_follower: bool = True,
        client_rack: str | None = None,
    ) -> list[PartitionRead]:
        """Read the ``wanted`` partitions for one Fetch (Kafka's ``fetchMessages`` /
        ``readFromLocalLog``), ``max_bytes`` in all (0: no bound) and each partition's own
        bound; the first partition with data may exceed both (KIP-74).

        ``client_rack`` (KIP-392) is a consumer's rack (Fetch v11+; "" when it has none), None
        for older consumers and followers. With it a follower serves the read too (below its
        HW), and a leader with ``replica.selector.class`` set may send the consumer to a
        replica in its rack instead (:meth:`Partition.preferred_read_replica`): that partition
        is answered without records and with ``preferred_read_replica``.

        A follower's fetch (``replica_id`` >= 0) is also its report: its fetch offset is its
        LEO, recorded once its epoch passed the check (HW may move then and complete parked
        produces and fetches) -- once per Fetch request: a long poll's re-reads pass
        ``record_follower=False``, so neither the follower's fetch time nor its caught-up time
        is taken from a re-read. Read errors are answered per partition, never raised.
        """
        get_partition = self.get_partition
        record = replica_id >= 0 and record_follower
        require_leader = client_rack is None
        select = client_rack if client_rack and self.rack_aware_selector else None
        # Kafka's shouldLeaderThrottle: checked once per request (the quota is shared).
        quota = self.leader_quota
        throttling = replica_id >= 0 and quota.exceeded(time.monotonic())
        budget = max_bytes if max_bytes > 0 else 0
        min_one = True
        total = 0
        out: list[PartitionRead] = []
        for topic, index, offset, part_max, current_epoch in wanted:
            partition = get_partition(topic, index)
            if partition is None:
                out.append(PartitionRead(None, None, None))
                continue
            limit = max(min(part_max, budget - total), 0)
            try:
                if record:
                    partition.local_log(current_epoch)  # the epoch check comes first
                    self._follower_fetched(partition, topic, index, replica_id, offset)
                if throttling and self.leader_throttles(partition, replica_id):
                    log_ = partition.local_log(current_epoch)
                    empty = FetchDataInfo(
                        None, log_.high_watermark, log_.log_start_offset, log_.log_end_offset
                    )
                    out.append(PartitionRead(partition, empty, None))
                    continue
                if select is not None:
                    preferred = partition.preferred_read_replica(select, offset, self.rack_of)
                    if preferred is not None:
                        log_ = partition.local_log(current_epoch)
                        empty = FetchDataInfo(
                            None, log_.high_watermark, log_.log_start_offset, log_.log_end_offset
                        )
                        out.append(PartitionRead(partition, empty, None, preferred))
                        continue
                # Fetch v9+ carries the client's leader epoch (-1 before: no check)
                info = partition.read(
                    offset, limit, isolation, min_one, current_epoch, require_leader
                )
            except Exception as exc:
                if not isinstance(exc, errors.KafkaError):
                    log.exception("fetch read failed", topic=topic, partition=index)
                out.append(PartitionRead(partition, None, exc))
                continue
            records = info.slice
            if records is not None and records.size:
                total += records.size
                min_one = False
            out.append(PartitionRead(partition, info, None))
        return out

    def leader_throttled(self, partition: Partition) -> bool:
        """Whether the topic's ``leader.replication.throttled.replicas`` names ``partition``
        on this broker (Kafka's ``quotas.leader.isThrottled``)."""
        text = partition.log.config.leader_replication_throttled_replicas
        return is_throttled(text, partition.index, self.local_id)

    def leader_throttles(self, partition: Partition, replica_id: int) -> bool:
        """A follower's fetch of ``partition`` goes without records while the leader quota is
        exceeded (the caller checked that): leader-throttled here and the follower is not in
        the ISR (Kafka's ``shouldLeaderThrottle``)."""
        return replica_id not in partition.isr and self.leader_throttled(partition)

    def record_leader_throttled(self, sent: Iterable[tuple[str, int, int]]) -> None:
        """Count the bytes a follower Fetch's response sends for leader-throttled partitions,
        to a follower in the ISR or not (Kafka's ``sizeOfThrottledPartitions``)."""
        quota = self.leader_quota
        size = 0
        for topic, index, n in sent:
            partition = self._partitions.get((topic, index))
            if partition is not None and self.leader_throttled(partition):
                size += n
        quota.record(size, time.monotonic())

    def delayed_fetch(self, keys: Iterable[PartitionKey], isolation: Isolation) -> DelayedFetch:
        """Park a fetch that read too little on ``keys`` (it completes at once if new data
        arrived since the read, which cannot happen on the event-loop thread in between)."""
        op = DelayedFetch(self.get_partition, keys, isolation)
        self.fetch_purgatory.try_complete_else_watch(op)
        return op
