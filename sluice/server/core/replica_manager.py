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
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from sluice.protocol import errors
from sluice.protocol.records import NO_TIMESTAMP
from sluice.server.core.config import BROKER_CONFIG
from sluice.server.group.offsets_store import OFFSETS_TOPIC
from sluice.server.logging import get_logger
from sluice.server.storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    Isolation,
)

if TYPE_CHECKING:
    from sluice.server.storage.log import AppendInfo, FetchDataInfo, Log
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


class IsrUpdate(NamedTuple):
    """An ISR change a leader proposes, with the state it was computed from.

    The writer (ZooKeeper in a cluster) stores ``(leader, leader_epoch, isr, controller_epoch)``
    only if the partition state is still at ``partition_epoch`` (its zkVersion) and answers the new
    version, or ``None`` when the state moved on (the leader then keeps its ISR and waits for the
    newer state to arrive through :meth:`ReplicaManager.apply_partition_state`).
    """

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    partition_epoch: int


#: Writes an :class:`IsrUpdate`; returns the new partition epoch, or None on a version conflict.
IsrWriter = Callable[[IsrUpdate], Awaitable[int | None]]


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ReplicationSettings:
    """What every :class:`Partition` of a ReplicaManager shares: Kafka's replica settings, the
    topic's ``min.insync.replicas`` lookup, the clock (tests pass their own) and where ISR
    proposals go."""

    __slots__ = ("clock_ms", "min_insync_replicas", "propose_isr", "replica_lag_time_max_ms")

    def __init__(
        self,
        replica_lag_time_max_ms: int = BROKER_CONFIG.default("replica.lag.time.max.ms"),
        min_insync_replicas: Callable[[Partition], int] | None = None,
        clock_ms: Callable[[], int] = _monotonic_ms,
    ) -> None:
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.min_insync_replicas: Callable[[Partition], int] = min_insync_replicas or (
            lambda partition: partition.log.config.min_insync_replicas
        )
        self.clock_ms = clock_ms
        self.propose_isr: Callable[[Partition, tuple[int, ...]], None] | None = None


class _Follower:
    """The leader's view of one follower (Kafka's ``Replica``): its LEO (the offset of its last
    fetch; -1 = not heard from in this term) and when it was last caught up."""

    __slots__ = ("last_caught_up_ms", "last_fetch_leader_leo", "last_fetch_ms", "leo")

    def __init__(self) -> None:
        self.leo = -1
        self.last_caught_up_ms = 0
        self.last_fetch_leader_leo = -1
        self.last_fetch_ms = 0


class ListedOffset(NamedTuple):
    """A ListOffsets answer: the offset, its record's timestamp (-1: not applicable) and the
    leader epoch of the record at that offset (-1: unknown), as Kafka's ``TimestampAndOffset``."""

    timestamp: int
    offset: int
    leader_epoch: int


class Partition:
    """This broker's view of one partition: its local log and its leadership state.

    ``leader_epoch`` and ``partition_epoch`` version the state (``make_leader`` /
    ``make_follower`` ignore older ones); ``replicas`` is the assignment in preference order,
    ``isr`` the in-sync replicas as last stored (by the controller or this leader). Follower state
    is kept only on the leader.

    **ISR and HW rules** (Kafka 2.6 ``Partition.scala``, with the 2.7 in-flight ISR and KIP-966's
    strict min ISR; ``shared/spec/replication.md`` §4):

    * A follower's fetch offset *is* its LEO. It counts as caught up at the time of a fetch that
      reached the leader's LEO, or that reached the LEO the leader had at the follower's previous
      fetch (``last_caught_up_ms``).
    * ISR expand: a follower outside the ISR whose LEO is at least HW and at least the start
      offset of the current leader epoch. ISR shrink (:meth:`maybe_shrink_isr`, run every
      ``replica.lag.time.max.ms / 2``): ISR followers not at the leader's LEO and not caught up
      within ``replica.lag.time.max.ms``. The leader never drops itself.
    * One ISR change in flight at a time. Until it is stored, HW waits for the *larger* of the
      old and proposed ISR (a shrink only helps HW once stored; an expanding follower is waited
      for at once), while the ``acks=-1`` checks use the stored ISR.
    * HW = min LEO over the leader, the (maximal) ISR and followers caught up within the lag
      time (so a follower about to join is not overtaken), moved only forward, and not at all
      while the stored ISR is smaller than ``min(min.insync.replicas, replication factor)``.

    ``leader_epoch_start_offset`` is the LEO at which this broker last became leader (Kafka's
    ``leaderEpochStartOffsetOpt``; -1 when it is not the leader): records below it were written
    in earlier epochs, and until HW reaches it the leader does not know whether they are all
    committed (ListOffsets answers OFFSET_NOT_AVAILABLE meanwhile).

    Every request path reaches the log through :meth:`local_log`, which applies Kafka's checks
    of the client's ``current_leader_epoch`` and of leadership, in Kafka's order.
    """

    __slots__ = (
        "_followers",
        "_pending_isr",
        "_settings",
        "controller_epoch",
        "index",
        "isr",
        "leader_epoch",
        "leader_epoch_start_offset",
        "leader_id",
        "local_id",
        "log",
        "partition_epoch",
        "replicas",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        index: int,
        log_: Log,
        local_id: int,
        settings: ReplicationSettings | None = None,
    ) -> None:
        self.topic = topic
        self.index = index
        self.log = log_
        self.local_id = local_id
        self.leader_id = NO_LEADER
        self.leader_epoch = NO_EPOCH
        self.leader_epoch_start_offset = -1
        self.partition_epoch = NO_EPOCH
        self.controller_epoch = NO_EPOCH
        self.leader_epoch_start_offset = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self._followers: dict[int, _Follower] = {}
        self._pending_isr: tuple[int, ...] | None = None
        self._settings = settings or ReplicationSettings()

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic}-{self.index}, leader={self.leader_id}, "
            f"epoch={self.leader_epoch}, isr={list(self.isr)})"
        )

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The stored ISR plus the members of an ISR change in flight (what HW waits for)."""
        pending = self._pending_isr
        if pending is None:
            return self.isr
        return self.isr + tuple(r for r in pending if r not in self.isr)

    @property
    def min_insync_replicas(self) -> int:
        return self._settings.min_insync_replicas(self)

    def _is_newer(self, leader_epoch: int, partition_epoch: int) -> bool:
        if (leader_epoch, partition_epoch) > (self.leader_epoch, self.partition_epoch):
            return True
        log.info(
            "stale partition state ignored",
            topic=self.topic,
            partition=self.index,
            leader_epoch=leader_epoch,
            partition_epoch=partition_epoch,
            held_epoch=self.leader_epoch,
            held_partition_epoch=self.partition_epoch,
        )
        return False

    def make_leader(
        self,
        leader_epoch: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        partition_epoch: int = 0,
        controller_epoch: int = 0,
    ) -> bool:
        """Become (or stay) leader at ``leader_epoch`` (Kafka's ``Partition.makeLeader``).

        Ignored (False) unless ``(leader_epoch, partition_epoch)`` is newer than the state held:
        a late or replayed state must not move leadership back. Then, in Kafka's order: the new
        epoch starts at the current LEO in the log's epoch cache (``assign(epoch, LEO)``, KIP-279:
        at once, not at the first append, so a follower asking OffsetForLeaderEpoch for the
        previous epoch gets its true end); followers' caught-up times restart now for ISR members
        (so none is dropped before it could fetch), and a new leader forgets their LEOs (a new
        term starts); HW is recomputed -- with the ISR just this broker that is HW = LEO, which
        matters after an unclean stop, when the checkpointed HW lags the recovered log.
        """
        if not self._is_newer(leader_epoch, partition_epoch):
            return False
        replicas = tuple(replicas)
        isr = tuple(isr)
        if self.local_id not in isr:
            raise ValueError(f"leader {self.local_id} must be in the ISR {list(isr)}")
        is_new_leader = not self.is_leader
        now = self._settings.clock_ms()
        log_ = self.log
        log_.assign_leader_epoch(leader_epoch)
        # A newer state at the same epoch (an ISR change stored): the epoch started where it did.
        same_term = not is_new_leader and leader_epoch == self.leader_epoch
        start = self.leader_epoch_start_offset if same_term else log_.log_end_offset
        self.leader_id = self.local_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.controller_epoch = controller_epoch
        self.leader_epoch_start_offset = start
        self.replicas = replicas
        self.isr = isr
        self._pending_isr = None
        old = {} if is_new_leader else self._followers
        self._followers = {}
        for replica in replicas:
            if replica == self.local_id:
                continue
            follower = old.get(replica)
            if follower is not None and same_term:
                self._followers[replica] = follower  # its fetch history still holds
                continue
            follower = follower or _Follower()
            follower.last_caught_up_ms = now if replica in isr else 0
            follower.last_fetch_leader_leo = start
            follower.last_fetch_ms = now
            self._followers[replica] = follower
        self.maybe_increment_high_watermark()
        return True

    def make_follower(
        self,
        leader_id: int,
        leader_epoch: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        partition_epoch: int = 0,
        controller_epoch: int = 0,
    ) -> bool:
        """Follow ``leader_id`` (-1: no leader yet) at ``leader_epoch`` (Kafka's
        ``Partition.makeFollower``); ignored (False) unless the state is newer. The log is not
        touched here: the fetcher truncates it by epoch before fetching (KIP-101/279)."""
        if leader_id == self.local_id:
            raise ValueError(f"{self.local_id} cannot follow itself: use make_leader")
        if not self._is_newer(leader_epoch, partition_epoch):
            return False
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.controller_epoch = controller_epoch
        self.leader_epoch_start_offset = -1
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self._pending_isr = None
        self._followers = {}
        return True

    def resign(self) -> bool:
        """Stop leading at once without a new state (this broker's ZooKeeper session was
        lost: another broker may be leading already). Requests get NOT_LEADER_OR_FOLLOWER
        until a state is applied again; the held partition epoch is forgotten so that the
        current state, re-read after re-registering, applies even if it is the one held.
        Returns whether this broker was the leader."""
        was_leader = self.is_leader
        if was_leader:
            self.leader_id = NO_LEADER
            self.leader_epoch_start_offset = -1
            self._followers = {}
            self._pending_isr = None
        self.partition_epoch = NO_EPOCH
        return was_leader

    def follower_end_offset(self, replica_id: int) -> int:
        """The LEO a follower last fetched from (-1 if unknown); leader only."""
        follower = self._followers.get(replica_id)
        return -1 if follower is None else follower.leo

    def local_log(self, current_leader_epoch: int = NO_EPOCH, require_leader: bool = True) -> Log:
        """The log, if a request carrying ``current_leader_epoch`` may use it (Kafka's
        ``Partition.getLocalLog(currentLeaderEpoch, requireLeader)``); raises otherwise.

        The order is Kafka's: first the client's epoch (-1 = the client does not say, no check):
        older than ours -> :class:`~sluice.protocol.errors.FencedLeaderEpoch` (the client's
        metadata is stale), newer -> :class:`~sluice.protocol.errors.UnknownLeaderEpoch` (ours
        is); then leadership when required -> ``NotLeaderOrFollower``. Every path that serves a
        request from the log (Fetch, ListOffsets, OffsetForLeaderEpoch, Produce) goes through
        here.
        """
        if current_leader_epoch != NO_EPOCH and current_leader_epoch != self.leader_epoch:
            name = f"{self.topic}-{self.index}"
            if current_leader_epoch < self.leader_epoch:
                raise errors.FencedLeaderEpoch(
                    f"{name}: request epoch {current_leader_epoch} is older than the leader "
                    f"epoch {self.leader_epoch}"
                )
            raise errors.UnknownLeaderEpoch(
                f"{name}: request epoch {current_leader_epoch} is newer than the leader "
                f"epoch {self.leader_epoch}"
            )
        if require_leader and self.leader_id != self.local_id:
            raise errors.NotLeaderOrFollower(f"{self.topic}-{self.index}: not the leader")
        return self.log

    def maybe_increment_high_watermark(self) -> bool:
        """Recompute HW by the rules in the class docstring; returns whether it moved."""
        if not self.is_leader:
            return False
        log_ = self.log
        hw = log_.log_end_offset
        if self._followers:
            maximal = self.maximal_isr
            now = self._settings.clock_ms()
            lag = self._settings.replica_lag_time_max_ms
            for replica, follower in self._followers.items():
                if follower.leo < hw and (
                    replica in maximal or now - follower.last_caught_up_ms <= lag
                ):
                    hw = follower.leo
            if len(self.isr) < min(self.min_insync_replicas, len(self.replicas)):
                return False
        return log_.maybe_increment_high_watermark(hw) if hw >= 0 else False

    def update_follower_end_offset(
        self, replica_id: int, leo: int, leader_leo: int | None = None
    ) -> bool:
        """A follower fetched from ``leo`` (its LEO) while the leader's LEO was ``leader_leo``
        (default: now): record it (Kafka's ``Replica.updateFetchState``), maybe expand the ISR,
        maybe advance HW. Returns whether HW moved (then the caller completes parked requests).
        """
        self.local_log()
        follower = self._followers.get(replica_id)
        if follower is None:
            # Kafka answers such a fetch with no records; an error tells the broker why.
            raise errors.NotLeaderOrFollower(
                f"broker {replica_id} is not a replica of {self.topic}-{self.index} "
                f"(replicas {list(self.replicas)})"
            )
        now = self._settings.clock_ms()
        leader_end = self.log.log_end_offset if leader_leo is None else leader_leo
        leo = min(leo, self.log.log_end_offset)
        if leo >= leader_end:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, now)
        elif leo >= follower.last_fetch_leader_leo:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.last_fetch_leader_leo = leader_end
        follower.last_fetch_ms = now
        follower.leo = leo
        self._maybe_expand_isr(replica_id, leo)
        return self.maybe_increment_high_watermark()

    def _maybe_expand_isr(self, replica_id: int, leo: int) -> None:
        if replica_id in self.isr or self._pending_isr is not None:
            return
        if leo >= self.log.high_watermark and leo >= self.leader_epoch_start_offset >= 0:
            self._propose_isr((*self.isr, replica_id))

    def maybe_shrink_isr(self) -> bool:
        """Propose dropping ISR followers that fell behind (class docstring); returns whether a
        change was proposed."""
        if not self.is_leader or self._pending_isr is not None:
            return False
        now = self._settings.clock_ms()
        lag = self._settings.replica_lag_time_max_ms
        leo = self.log.log_end_offset
        out = {
            replica
            for replica, follower in self._followers.items()
            if replica in self.isr
            and follower.leo != leo
            and now - follower.last_caught_up_ms > lag
        }
        if not out:
            return False
        self._propose_isr(tuple(r for r in self.isr if r not in out))
        return True

    def _propose_isr(self, isr: tuple[int, ...]) -> None:
        log.info(
            "proposing ISR change",
            topic=self.topic,
            partition=self.index,
            leader_epoch=self.leader_epoch,
            isr=list(self.isr),
            new_isr=list(isr),
        )
        propose = self._settings.propose_isr
        if propose is None:
            # No coordination service (standalone or a unit test): this leader's word is final.
            self._pending_isr = isr
            self.isr_update_completed(self.isr_update(isr), self.partition_epoch + 1)
        else:
            self._pending_isr = isr
            propose(self, isr)

    def isr_update(self, isr: tuple[int, ...]) -> IsrUpdate:
        """The :class:`IsrUpdate` that stores ``isr`` over the state held now."""
        return IsrUpdate(
            self.topic,
            self.index,
            self.leader_id,
            self.leader_epoch,
            isr,
            self.controller_epoch,
            self.partition_epoch,
        )

    def isr_update_completed(self, update: IsrUpdate, partition_epoch: int | None) -> bool:
        """The write of ``update`` finished: stored at ``partition_epoch``, or refused (None).

        Applied only if the state did not change meanwhile (same leader epoch and partition
        epoch it was computed from). Returns whether HW moved.
        """
        if (
            self._pending_isr != update.isr
            or not self.is_leader
            or (self.leader_epoch, self.partition_epoch)
            != (update.leader_epoch, update.partition_epoch)
        ):
            return False  # an answer to a proposal made over an older state
        self._pending_isr = None
        if partition_epoch is None:
            return False
        log.info(
            "ISR changed",
            topic=self.topic,
            partition=self.index,
            leader_epoch=self.leader_epoch,
            old_isr=list(self.isr),
            isr=list(update.isr),
            partition_epoch=partition_epoch,
        )
        self.isr = update.isr
        self.partition_epoch = partition_epoch
        return self.maybe_increment_high_watermark()

    def append_as_leader(self, records: Any, required_acks: int = 1) -> AppendInfo:
        """Append a producer's batches (stamped with the leader epoch), then maybe advance HW.

        ``acks=-1`` with fewer in-sync replicas than the topic's ``min.insync.replicas``
        writes nothing: NOT_ENOUGH_REPLICAS (Kafka's ``Partition.appendRecordsToLeader``)."""
        log_ = self.local_log()
        if required_acks == -1:
            min_isr = self.min_insync_replicas
            if len(self.isr) < min_isr:
                raise errors.NotEnoughReplicas(
                    f"{self.topic}-{self.index}: the ISR {list(self.isr)} is smaller than "
                    f"min.insync.replicas={min_isr}"
                )
        info = log_.append_as_leader(records, leader_epoch=self.leader_epoch)
        self.maybe_increment_high_watermark()
        return info

    def fetch_offset_for_timestamp(
        self,
        timestamp: int,
        isolation: Isolation | None,
        current_leader_epoch: int = NO_EPOCH,
        require_leader: bool = True,
    ) -> ListedOffset | None:
        """ListOffsets (Kafka's ``Partition.fetchOffsetForTimestamp``); None: no such offset.

        ``isolation`` None is a broker's or a debugging client's request: bounded by LEO, never
        OFFSET_NOT_AVAILABLE. A consumer's (HW or committed bound) gets OFFSET_NOT_AVAILABLE
        from a leader whose HW is still below the start offset of its epoch, for the latest
        offset and for a timestamp found nowhere below the bound: the leader cannot yet tell
        which of the earlier epochs' records are committed (KIP-207/KIP-320).

        The epoch of the answer (ListOffsets v4+): latest -> the leader epoch (the epoch the
        next record gets); earliest -> the epoch of the log start offset; a timestamp -> the
        epoch of the batch holding the offset found, read from the epoch cache.
        """
        log_ = self.local_log(current_leader_epoch, require_leader)
        if isolation is None:
            bound_isolation, last_fetchable = Isolation.LOG_END, log_.log_end_offset
        else:
            bound_isolation, last_fetchable = isolation, log_.high_watermark
        start = self.leader_epoch_start_offset
        lagging = isolation is not None and self.is_leader and start > log_.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            if lagging:
                raise self._offset_not_available(start)
            return ListedOffset(NO_TIMESTAMP, last_fetchable, self.leader_epoch)
        found = log_.fetch_offset_by_timestamp(timestamp, bound_isolation)
        if found is None:
            if lagging and timestamp not in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                raise self._offset_not_available(start)
            return None
        return ListedOffset(found.timestamp, found.offset, log_.epoch_for_offset(found.offset))

    def _offset_not_available(self, epoch_start: int) -> errors.KafkaError:
        return errors.OffsetNotAvailable(
            f"{self.topic}-{self.index}: high watermark {self.log.high_watermark} is below "
            f"the start offset {epoch_start} of leader epoch {self.leader_epoch}"
        )

    def last_offset_for_leader_epoch(
        self, current_leader_epoch: int, leader_epoch: int
    ) -> tuple[int, int]:
        """OffsetForLeaderEpoch (Kafka's ``Partition.lastOffsetForLeaderEpoch``): ``(epoch,
        end offset)`` of ``leader_epoch`` in this log -- the largest epoch <= the one asked
        and the start of the next higher epoch, or LEO for the latest; ``(-1, -1)`` when
        undefined. Leader only, whoever asks (Kafka passes ``fetchOnlyFromLeader = true`` for
        every replica id, the debugging id -2 included)."""
        return self.local_log(current_leader_epoch, True).end_offset_for_epoch(leader_epoch)

    def read(
        self,
        offset: int,
        max_bytes: int,
        isolation: Isolation,
        min_one_message: bool,
        current_leader_epoch: int = NO_EPOCH,
    ) -> FetchDataInfo:
        """Read from the leader's log below the isolation bound (HW for consumers)."""
        log_ = self.local_log(current_leader_epoch)
        return log_.read(offset, max_bytes, isolation, min_one_message=min_one_message)


class DelayedOperation:
    """A request parked until it can complete (Kafka's ``DelayedOperation``).

    Completed exactly once: by :meth:`try_complete` finding its condition true (when a
    purgatory checks a key it watches), by :meth:`expire` when its wait times out, or by
    :meth:`force_complete` (shutdown). The waiting handler awaits :attr:`future`.
    """

    __slots__ = ("expired", "future", "keys")

    def __init__(self, keys: Iterable[PartitionKey]) -> None:
        self.keys = tuple(keys)
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        #: Set by :meth:`DelayedOperationPurgatory.wait` when the wait timed out.
        self.expired = False

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

#: Granularity of purgatory timeouts (seconds): a parked operation expires at most this much
#: after its deadline.
EXPIRY_TICK_S = 0.005


class DelayedOperationPurgatory(Generic[Op]):
    """Parked operations watched by partition (Kafka's ``DelayedOperationPurgatory``).

    Whoever changes what an operation waits for (an append, an HW move, a deleted partition)
    calls :meth:`check_and_complete` for that partition; the waiting handler calls :meth:`wait`,
    which bounds the wait and unregisters the operation however it ends. Timeouts are rounded up
    to :data:`EXPIRY_TICK_S` and share one event-loop timer per tick (a one-level timing wheel;
    Kafka's purgatory timer ticks in milliseconds too).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[PartitionKey, set[Op]] = {}
        #: tick (deadline / EXPIRY_TICK_S, rounded up) -> operations waiting that expire then
        self._expiring: dict[int, set[Op]] = {}

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
        it completed before the timeout. ``op`` is unwatched afterwards in every case.

        The handler awaits the operation's own future (no ``asyncio.wait``: a waiter future, a
        done callback and result sets per parked request). The deadline is rounded up to the
        next :data:`EXPIRY_TICK_S` and the operation joins that tick's set, which one loop timer
        expires: arming and cancelling a uvloop timer per parked request cost 2-3 us, a set
        insertion 0.3 (``bench/NOTES.md``). Cancelling the waiting task cancels
        ``op.future``, which counts as complete from then on (nothing reads its outcome)."""
        loop = op.future.get_loop()
        tick = math.ceil((loop.time() + max(timeout_s, 0)) / EXPIRY_TICK_S)
        expiring = self._expiring.get(tick)
        if expiring is None:
            # (A tick already expired gets a new set and timer, so no operation is left behind.)
            expiring = self._expiring[tick] = set()
            loop.call_at(tick * EXPIRY_TICK_S, self._expire_tick, tick)
        expiring.add(op)
        try:
            await op.future
        finally:
            expiring.discard(op)
            self.remove(op)
        return not op.expired

    def _expire_tick(self, tick: int) -> None:
        for op in self._expiring.pop(tick, ()):
            if not op.completed:
                self.remove(op)
                op.expired = True
                op.expire()

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
    data below its read bound (HW for consumers, LEO for ``Isolation.LOG_END``), changes leader
    epoch (a new leader or a new term: Kafka completes the fetch, whose epoch check then answers
    FENCED_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER), or is gone or replaced. The handler then
    reads again and may park again (today's long-poll behaviour).

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

    def _bound(self, key: PartitionKey) -> tuple[Partition | None, int, int]:
        """(partition, its leader epoch, its read bound) now; -1s when gone or closed."""
        partition = self._replicas.get_partition(*key)
        if partition is None:
            return None, NO_EPOCH, -1
        log_ = partition.log
        if log_.closed:
            return partition, partition.leader_epoch, -1
        if self._isolation is Isolation.LOG_END:
            return partition, partition.leader_epoch, log_.log_end_offset
        return partition, partition.leader_epoch, log_.high_watermark

    def try_complete(self) -> bool:
        for key, observed in zip(self.keys, self._observed, strict=True):
            now = self._bound(key)
            if now[0] is not observed[0] or now[1:] != observed[1:]:
                return self.force_complete()
        return False


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
    NOT_LEADER_OR_FOLLOWER; the stored ISR below ``min.insync.replicas`` (it shrank after the
    append; HW cannot pass the records then) -> NOT_ENOUGH_REPLICAS_AFTER_APPEND; the wait timed
    out -> REQUEST_TIMED_OUT. The outcome is written into the shared ``results`` list the
    handler encodes.
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
        if code != NONE:  # (a pending result is a successful append: NONE already, no message)
            self.results[i] = self.results[i]._replace(error=code, message=None)
        del self._pending[i]

    def try_complete(self) -> bool:
        for i, (partition, required) in list(self._pending.items()):
            result = self.results[i]
            now = self._replicas.get_partition(result.topic, result.partition)
            if now is not partition or not partition.is_leader:
                self._settle(i, errors.NotLeaderOrFollower.code)
            elif len(partition.isr) < partition.min_insync_replicas:
                self._settle(i, errors.NotEnoughReplicasAfterAppend.code)
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
        self._partitions: dict[PartitionKey, Partition] = {}
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
            for topic, index in self.logs.logs:
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
        produces and fetches waiting for it. Returns whether HW moved. (The follower Fetch path
        of replication calls this; today only tests do.)"""
        moved = self._hosted(topic, index).update_follower_end_offset(replica_id, leo)
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
        results: list[AppendResult] = []
        if acks not in (-1, 0, 1):
            code = errors.InvalidRequiredAcks.code
            return [AppendResult(t, i, code, None, None, -1) for t, i, _ in entries], None
        pending: dict[int, tuple[Partition, int]] | None = {} if acks == -1 else None
        for topic, index, records in entries:
            if topic == OFFSETS_TOPIC and not internal_topics_allowed:
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
                info = partition.append_as_leader(records, acks)
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
