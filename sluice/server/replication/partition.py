"""One partition as this broker sees it (Kafka's ``Partition``): its local log, leadership state,
the leader's view of its followers, the ISR and the high watermark.

The rules for who writes which state are in :mod:`sluice.server.replication.replica_manager`'s
docstring; this module imports nothing of the ReplicaManager, which owns the partition table.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from sluice.protocol import errors
from sluice.protocol.records import NO_TIMESTAMP
from sluice.server.config import BROKER_CONFIG
from sluice.server.crash_points import crash_point
from sluice.server.logging import get_logger
from sluice.server.storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    Isolation,
)

if TYPE_CHECKING:
    from sluice.server.storage.log import AppendInfo, FetchDataInfo, Log

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


class TxnMarker(NamedTuple):
    """One WriteTxnMarkers entry for one partition: the transaction of ``producer_id`` ends
    (``commit`` or abort), written by the coordinator of ``coordinator_epoch``."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


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

    # --- the follower's writes: the replica fetcher changes the local log only through these ---

    def append_as_follower(
        self, fetched_at: int, records: object, leader_hw: int, leader_log_start: int = -1
    ) -> bool:
        """Append what the leader answered to a fetch from ``fetched_at`` (its offsets and
        epochs kept: :meth:`Log.append_as_follower`), then take the leader's HW up to this LEO,
        and its log start up to this HW (the leader's retention or DeleteRecords; Kafka's
        ``maybeIncrementLogStartOffset`` on the follower). Returns False, touching nothing, if
        the log end moved since the fetch was sent (a truncation in between)."""
        log_ = self.log
        if log_.log_end_offset != fetched_at:
            return False
        if isinstance(records, bytes | bytearray | memoryview) and len(records) > 0:
            log_.append_as_follower(records)
        log_.update_high_watermark(min(leader_hw, log_.log_end_offset))
        start = min(leader_log_start, log_.high_watermark)
        if start > log_.log_start_offset:
            log_.delete_records(start)
        return True

    def truncate_to(self, offset: int) -> None:
        """Drop the follower's records from ``offset`` on (KIP-101/279 truncation by epoch); the
        epoch cache drops its entries from there even when no record goes."""
        self.log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the follower's log and start it at ``offset`` (it fell behind the leader's log
        start)."""
        self.log.truncate_fully_and_start_at(offset)

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
            self._check_min_isr()
        info = log_.append_as_leader(records, leader_epoch=self.leader_epoch)
        self.maybe_increment_high_watermark()
        return info

    def _check_min_isr(self) -> None:
        min_isr = self.min_insync_replicas
        if len(self.isr) < min_isr:
            raise errors.NotEnoughReplicas(
                f"{self.topic}-{self.index}: the ISR {list(self.isr)} is smaller than "
                f"min.insync.replicas={min_isr}"
            )

    def append_end_txn_marker(self, marker: TxnMarker, required_acks: int = -1) -> AppendInfo:
        """Append a transaction coordinator's COMMIT/ABORT marker as leader (Kafka's
        ``appendRecordsToLeader`` with origin Coordinator): the same leadership and
        ``min.insync.replicas`` checks as a producer's append, then
        :meth:`Log.append_end_txn_marker` (its producer/coordinator epoch checks), then HW."""
        log_ = self.local_log()
        if required_acks == -1:
            self._check_min_isr()
        info = log_.append_end_txn_marker(
            marker.producer_id,
            marker.producer_epoch,
            marker.coordinator_epoch,
            marker.commit,
            self.leader_epoch,
        )
        crash_point("partition.marker.appended", self.topic)
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

        Max timestamp (-3, KIP-734): the offset of the first record holding the log's largest
        timestamp (not its batch's last offset), bounded like any timestamp. Earliest local
        (-4): the log start offset, as earliest (no tiered storage). Latest tiered (-5): no
        offset is tiered, so offset -1 and epoch -1 with no error, Kafka's answer
        (``UnifiedLog.fetchOffsetByTimestamp`` without remote storage).
        """
        log_ = self.local_log(current_leader_epoch, require_leader)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return ListedOffset(NO_TIMESTAMP, -1, NO_EPOCH)
        if isolation is None:
            bound_isolation, last_fetchable = Isolation.LOG_END, log_.log_end_offset
        elif isolation is Isolation.TXN_COMMITTED:  # read_committed: latest is the LSO
            bound_isolation, last_fetchable = isolation, log_.last_stable_offset
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
        require_leader: bool = True,
    ) -> FetchDataInfo:
        """Read from the log below the isolation bound (HW for consumers). ``require_leader``
        False: a follower serves it too, below its own HW (KIP-392, a consumer that sent its
        rack: Kafka's ``fetchOnlyLeader`` is false for a consumer with client metadata)."""
        log_ = self.local_log(current_leader_epoch, require_leader)
        return log_.read(offset, max_bytes, isolation, min_one_message=min_one_message)

    def preferred_read_replica(
        self, client_rack: str, fetch_offset: int, rack_of: Callable[[int], str | None]
    ) -> int | None:
        """The replica a consumer in ``client_rack`` should fetch from instead of this leader
        (KIP-392: Kafka's ``ReplicaManager.findPreferredReadReplica`` with its
        ``RackAwareReplicaSelector``); None: read here. Candidates are the leader and the ISR
        followers whose last fetch had reached ``fetch_offset`` (a lagging follower would make
        the consumer fall behind for good). The leader wins if it is in the client's rack or no
        candidate is; otherwise the candidate in the rack that is furthest ahead (then the most
        recently caught up). Leader only; ``rack_of`` gives a broker's ``broker.rack``."""
        if not client_rack or not self.is_leader or rack_of(self.local_id) == client_rack:
            return None
        best: tuple[int, int, int] | None = None  # (leo, last caught up, broker)
        for replica, follower in self._followers.items():
            if replica not in self.isr or follower.leo < fetch_offset:
                continue
            if rack_of(replica) != client_rack:
                continue
            candidate = (follower.leo, follower.last_caught_up_ms, replica)
            if best is None or candidate > best:
                best = candidate
        return None if best is None else best[2]
