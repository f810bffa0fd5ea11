"""The classic consumer-group coordinator: membership, rebalances, committed offsets.

This broker coordinates the groups of the ``__consumer_offsets`` partitions it leads (see
*Ownership* below; standalone: all of them). The protocol is Kafka's classic one
(JoinGroup / SyncGroup / Heartbeat / LeaveGroup): the broker never looks inside the protocol
metadata or assignments -- range, roundrobin, cooperative-sticky... are the clients' business and
pass through as opaque bytes. The leader (a member) computes the assignment.

**Group states** (Kafka's ``GroupState``)::

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable / CompletingRebalance --join (new member, changed metadata, leader rejoin), leave,
                                  session timeout--> PreparingRebalance
    PreparingRebalance --nobody rejoined--> Empty (generation still advances)
    any --DeleteGroups (only when Empty)--> Dead (forgotten)

* A JoinGroup waits (its connection holds the request) until the join phase completes: every
  known member has rejoined and no MEMBER_ID_REQUIRED member is pending, or the largest
  ``rebalance.timeout.ms`` of the members passed (members that did not rejoin are removed). A
  group that was Empty first waits ``group.initial.rebalance.delay.ms`` (extended by that much
  per newcomer, bounded by the rebalance timeout) so a fleet starting together gets one
  rebalance instead of many.
* JoinGroup v4+ with an empty member id gets MEMBER_ID_REQUIRED and its new id (KIP-394); the id
  is pending until the member rejoins with it (or for a session timeout).
* Static members (``group.instance.id``, KIP-345): a rejoin with a known instance id replaces the
  old member id (the old id is fenced: FENCED_INSTANCE_ID) and, when the group is Stable and the
  protocol it would select is unchanged, keeps the current generation and assignment without a
  rebalance -- also when that member was the leader (see :meth:`_join_static_unknown`).
* Session timeouts: every member has a timer reset by each heartbeat, JoinGroup, SyncGroup and
  OffsetCommit; a member waiting in JoinGroup/SyncGroup is kept alive. On expiry the member is
  removed and the group rebalances.

**Committed offsets** live in memory (group -> partition -> :class:`OffsetAndMetadata`) and in
``__consumer_offsets`` (:mod:`sluice.server.group.offsets_store`), loaded together with the last
group metadata when this broker takes a partition over (members come back with fresh session
timers, so consumers that keep heartbeating across a coordinator move keep their generation).
Offsets of a group expire ``offsets.retention.minutes`` after the group became Empty (or, for a
group that only stores offsets, after the commit) -- Kafka's KIP-211 rule; expiry writes
tombstones.

**Ownership** (Kafka's ``GroupMetadataManager``: ``ownedPartitions``, ``loadingPartitions``,
``epochForPartitionId``). A group belongs to offsets partition ``partition_for(group)``; this
coordinator serves it only while it *owns* that partition:

* :meth:`GroupCoordinator.on_elected` (this broker became the partition's leader at
  ``leader_epoch``) marks the partition *loading* and reads it in a background task, chunk by
  chunk (``offsets.load.buffer.size``), yielding to the loop between chunks; when the read
  reaches the log end offset the groups are installed and the partition is *owned*. Like Kafka
  2.6's ``doLoadGroupsAndOffsets`` the read goes to the leader's LEO, not to its high watermark:
  the records above HW were written in earlier terms and the new leader's log is the one its
  followers will converge to, so they are the state to serve. A load that fails (I/O error) is
  logged and the partition is owned with what was read, as Kafka does.
* :meth:`GroupCoordinator.on_resigned` (it stopped leading) drops the partition's groups: timers
  cancelled, waiting JoinGroup/SyncGroup requests answer NOT_COORDINATOR; a load in progress is
  cancelled.
* Both carry the partition's leader epoch; one older than the last applied for that partition is
  ignored (a late call from an earlier term). Kafka accepts an equal epoch, and so does this.
* Requests for a group whose partition is loading get COORDINATOR_LOAD_IN_PROGRESS (Kafka's
  exceptions: SyncGroup gets REBALANCE_IN_PROGRESS -- older clients do not expect the loading
  error and the rebalance state is lost anyway -- and Heartbeat gets NONE, "respond blindly");
  for a partition not owned NOT_COORDINATOR.
* Invariant: :attr:`GroupCoordinator.groups` holds only groups of owned partitions, so a request
  naming a cached group needs no ownership check (no hashing on the hot path).
* Standalone, :meth:`GroupCoordinator.load` owns every partition at once (loaded synchronously at
  start-up, before the broker listens), which is today's single-broker behaviour.

**Writes** go through the replica layer (:data:`sluice.server.group.offsets_store.Appender`,
Kafka's ``appendForGroup``): OffsetCommit and the group metadata written by SyncGroup (and by a
static member's rejoin) use ``offsets.commit.required.acks`` (-1) and are answered when the
partition's high watermark passed the record, or at ``offsets.commit.timeout.ms``. The cache
changes only when the write succeeded (Kafka's ``pendingOffsetCommits``: an OffsetFetch meanwhile
sees the old offset; of two commits of one partition in flight, the one later in the log wins
whichever completes first). Append errors are translated as Kafka's ``storeOffsets`` /
``storeGroup`` do (:func:`commit_error`, :func:`group_write_error`). Tombstones (expiry,
DeleteGroups, OffsetDelete) are written with ``acks=1`` and not waited for: Kafka's
``cleanupGroupMetadata`` does not require acks either (a lost tombstone is written again by the
next expiry pass, or the deletion is retried). Every write happens only while the partition is
owned. Nothing here keeps the topic bounded: it is compacted (``cleanup.policy=compact``, as
Kafka creates it), and the log cleaner keeps the last record of every key
(:mod:`sluice.server.group.offsets_store`).

**Concurrency**: everything runs on the event-loop thread; handlers call the public methods,
timers are ``loop.call_later`` callbacks, a write's completion is a future callback (never code
after an ``await`` in a request, so a client that goes away cannot leave a group half-updated).
No locks are needed because no method awaits between reading and updating a group.
"""

from __future__ import annotations

import asyncio
import enum
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sluice.protocol import errors
from sluice.protocol.consumer_protocol import decode_subscription
from sluice.server.crash_points import crash_point
from sluice.server.group.config import GroupConfig
from sluice.server.group.offsets_store import (
    AppendOutcome,
    GroupMetadataValue,
    LoadedRecord,
    MemberMetadata,
    OffsetAndMetadata,
    OffsetRecord,
    OffsetsStore,
    TxnMarkerRecord,
    group_metadata_record,
    offset_commit_record,
)
from sluice.server.logging import get_logger

log = get_logger("sluice.groups")

NONE = 0
OFFSET_METADATA_TOO_LARGE = errors.OffsetMetadataTooLarge.code
FENCED_INSTANCE_ID = errors.FencedInstanceId.code
GROUP_MAX_SIZE_REACHED = 81


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupError(Exception):
    """A Kafka error code answered for a whole group request."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


_T = TypeVar("_T")
_U = TypeVar("_U")
_WRITE_FAILED = AppendOutcome(errors.UnknownServerError.code, -1)


def commit_error(append_error: int) -> int:
    """The OffsetCommit code for an append error (Kafka's ``storeOffsets``). REQUEST_TIMED_OUT
    (``offsets.commit.timeout.ms`` passed) is COORDINATOR_NOT_AVAILABLE as in Kafka's newer
    coordinator (``GroupCoordinatorService``); 2.6 passed it through."""
    if append_error in _UNAVAILABLE or append_error == errors.RequestTimedOut.code:
        return errors.CoordinatorNotAvailable.code
    if append_error in _MOVED:
        return errors.NotCoordinator.code
    if append_error in _TOO_LARGE:
        return errors.InvalidCommitOffsetSize.code
    return append_error


def group_write_error(append_error: int) -> int:
    """The SyncGroup/JoinGroup code for a failed group-metadata write (Kafka 2.6's
    ``storeGroup``): a timeout is REBALANCE_IN_PROGRESS (the group rebalances after a failed
    write, so its members rejoin), a size error UNKNOWN_SERVER_ERROR."""
    if append_error in _UNAVAILABLE:
        return errors.CoordinatorNotAvailable.code
    if append_error in _MOVED:
        return errors.NotCoordinator.code
    if append_error == errors.RequestTimedOut.code:
        return errors.RebalanceInProgress.code
    if append_error in _TOO_LARGE:
        return errors.UnknownServerError.code
    return append_error


_UNAVAILABLE = frozenset(
    c.code
    for c in (
        errors.UnknownTopicOrPartition,
        errors.NotEnoughReplicas,
        errors.NotEnoughReplicasAfterAppend,
    )
)
_MOVED = frozenset(c.code for c in (errors.NotLeaderOrFollower, errors.KafkaStorageError))
_TOO_LARGE = frozenset(
    c.code for c in (errors.MessageTooLarge, errors.RecordListTooLarge, errors.InvalidFetchSize)
)


async def _yield_to_loop(_partition: int) -> None:
    await asyncio.sleep(0)


#: A group's pending transactional offsets: producer id -> partition -> (offset, log position
#: of its batch; -1 while the write has not settled). Kafka's pendingTransactionalOffsetCommits.
PendingTxnOffsets = dict[int, dict[tuple[str, int], tuple[OffsetAndMetadata, int]]]


class _LoadedPartition:
    """What a load read from one offsets partition so far: the last offsets (and the log
    position of each) and group metadata per group (a tombstone removes), and the offsets of
    transactions whose marker is not read yet, per producer (Kafka's loader: a COMMIT marker
    makes them the group's offsets unless a later batch already holds one, an ABORT drops
    them)."""

    __slots__ = ("metadata", "offsets", "pending", "positions", "records")

    def __init__(self) -> None:
        self.offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        self.positions: dict[tuple[str, str, int], int] = {}
        self.pending: dict[int, dict[tuple[str, str, int], tuple[OffsetAndMetadata, int]]] = {}
        self.metadata: dict[str, Any] = {}
        self.records = 0

    def add(self, records: list[LoadedRecord]) -> None:
        self.records += len(records)
        for rec in records:
            if isinstance(rec, OffsetRecord):
                full = (rec.group, rec.topic, rec.partition)
                if rec.producer_id >= 0:
                    if rec.value is not None:
                        self.pending.setdefault(rec.producer_id, {})[full] = (
                            rec.value, rec.position
                        )  # fmt: skip
                    continue
                group_offsets = self.offsets.setdefault(rec.group, {})
                if rec.value is None:
                    group_offsets.pop((rec.topic, rec.partition), None)
                    self.positions.pop(full, None)
                    for pending in self.pending.values():
                        pending.pop(full, None)
                else:
                    group_offsets[(rec.topic, rec.partition)] = rec.value
                    self.positions[full] = rec.position
            elif isinstance(rec, TxnMarkerRecord):
                done = self.pending.pop(rec.producer_id, None)
                if done is None or not rec.commit:
                    continue
                for full, (value, position) in done.items():
                    if self.positions.get(full, -1) < position:
                        self.offsets.setdefault(full[0], {})[full[1:]] = value
                        self.positions[full] = position
            else:
                self.metadata[rec.group] = rec.value

    def pending_of(self, group_id: str) -> PendingTxnOffsets:
        """The group's transactional offsets still pending at the end of the load."""
        out: PendingTxnOffsets = {}
        for pid, entries in self.pending.items():
            for (group, topic, part), value in entries.items():
                if group == group_id:
                    out.setdefault(pid, {})[(topic, part)] = value
        return out


@dataclass
class JoinResult:
    error_code: int
    generation_id: int = -1
    protocol_name: str = ""
    leader: str = ""
    member_id: str = ""
    #: (member_id, group_instance_id, metadata) -- only for the leader
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[tuple[int, bytes]] | None = None
    heartbeat_handle: asyncio.TimerHandle | None = None

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in self.protocols] == [(n, bytes(m)) for n, m in protocols]


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    state_timestamp: int = 0  # wall-clock ms of the last state change
    rebalance_handle: asyncio.TimerHandle | None = None
    rebalance_deadline: float = 0.0  # loop time by which the (initial) delay must end
    in_initial_delay: bool = False
    #: commits written but not yet settled, the latest per partition (Kafka's
    #: pendingOffsetCommits): a settled write updates ``offsets`` only while its partition is
    #: still pending here (a deletion in between removes it)
    pending_commits: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    #: log offset of the batch that holds each cached offset: of two writes settling out of
    #: order, and of a transaction's offsets and a later plain commit, the later one in the
    #: log wins
    commit_positions: dict[tuple[str, int], int] = field(default_factory=dict)
    #: TxnOffsetCommit offsets waiting for their transaction's marker (invisible until then)
    pending_txn: PendingTxnOffsets = field(default_factory=dict)

    def all_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_future is not None for m in self.members.values()
        )

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def on_commit_written(
        self, key: tuple[str, int], value: OffsetAndMetadata, position: int
    ) -> None:
        """A commit of ``key`` settled successfully at log offset ``position`` (Kafka's
        ``onOffsetCommitAppend``)."""
        if key in self.pending_commits and self.commit_positions.get(key, -1) < position:
            self.offsets[key] = value
            self.commit_positions[key] = position
        if self.pending_commits.get(key) is value:
            del self.pending_commits[key]

    def on_commit_failed(self, key: tuple[str, int], value: OffsetAndMetadata) -> None:
        if self.pending_commits.get(key) is value:
            del self.pending_commits[key]

    def remove_offsets(self, keys: Iterable[tuple[str, int]]) -> None:
        """Forget ``keys``' offsets, including commits still in flight (they will not land)."""
        for key in keys:
            self.offsets.pop(key, None)
            self.pending_commits.pop(key, None)
            self.commit_positions.pop(key, None)
            for pending in self.pending_txn.values():
                pending.pop(key, None)

    def complete_txn(self, producer_id: int, commit: bool) -> int:
        """The marker of ``producer_id``'s transaction is in the log (Kafka's
        ``completePendingTxnOffsetCommit``): on commit its offsets whose batch is later in the
        log than the cached one's become the group's offsets; on abort they are dropped.
        Returns how many offsets were made visible."""
        pending = self.pending_txn.pop(producer_id, None)
        if not pending or not commit:
            return 0
        applied = 0
        for key, (value, position) in pending.items():
            if position < 0:
                # Cannot happen: a producer ends its transaction only after its TxnOffsetCommit
                # was answered, i.e. written. Kafka raises IllegalStateException.
                log.error("transactional offset completed before it was written",
                          group=self.group_id, producer_id=producer_id, partition=key)  # fmt: skip
                continue
            if self.commit_positions.get(key, -1) < position:
                self.offsets[key] = value
                self.commit_positions[key] = position
                applied += 1
        return applied


def _now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinator:
    """The consumer groups of the offsets partitions this broker owns. Create, then either
    :meth:`load` (standalone: own them all) or let the cluster call :meth:`on_elected` /
    :meth:`on_resigned`; serve; :meth:`shutdown`.

    Must be created and used on the running event loop (it schedules timers on it).
    """

    def __init__(
        self,
        store: OffsetsStore,
        config: GroupConfig,
        *,
        topic_exists: Callable[[str, int], bool] = lambda _t, _p: True,
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        self.store = store
        self.config = config
        self.groups: dict[str, Group] = {}
        self._topic_exists = topic_exists
        self._clock = clock
        self._loop = asyncio.get_running_loop()
        self._expiry_handle: asyncio.TimerHandle | None = None
        self._stopped = False
        # Ownership (module docstring). A partition is in at most one of _owned / _loading; the
        # token identifies one term of ownership, so that a write settling after a resignation
        # (and maybe a re-election) knows it belongs to an older term.
        self._epochs: dict[int, int] = {}
        self._owned: dict[int, object] = {}
        self._loading: dict[int, asyncio.Task[None]] = {}
        #: Awaited before each chunk a background load reads (with the partition): a seam for
        #: tests to hold a load open; the default just yields to the loop.
        self.load_pause: Callable[[int], Awaitable[None]] = _yield_to_loop

    # ------------------------------------------------------------------ ownership

    def load(self) -> None:
        """Standalone: own every offsets partition now, each loaded synchronously from its log
        (the topic's partition count if it exists, else ``offsets.topic.num.partitions``; a
        partition without a log yet is owned empty). No epochs are recorded, so any later
        :meth:`on_elected` / :meth:`on_resigned` applies. An offsets topic an older Sluice
        created with ``cleanup.policy=delete`` is switched to ``compact`` first."""
        self.store.compact_old_topic()
        self.store.open()
        for partition in range(self.store.num_partitions):
            if partition in self._owned or partition in self._loading:
                continue
            loaded = _LoadedPartition()
            for chunk in self.store.read_partition(partition):
                loaded.add(chunk)
            self._take_ownership(partition, loaded)

    def on_elected(self, partition: int, leader_epoch: int) -> bool:
        """This broker became the leader of offsets partition ``partition`` at ``leader_epoch``
        (Kafka's ``onElection``): load its groups in the background, then serve them.

        Returns False if ignored: an epoch older than the last applied for the partition, or
        after shutdown. Already owned or loading: nothing more to do (Kafka: "already loading").
        """
        if self._stopped or not self._apply_epoch(partition, leader_epoch, "elected"):
            return False
        if partition in self._owned or partition in self._loading:
            return True
        log.info("loading offsets partition", partition=partition, leader_epoch=leader_epoch)
        self._loading[partition] = self._loop.create_task(self._load(partition, leader_epoch))
        return True

    def on_resigned(self, partition: int, leader_epoch: int | None) -> bool:
        """This broker stopped leading offsets partition ``partition`` at ``leader_epoch``
        (Kafka's ``onResignation``; ``None``: unconditionally, e.g. the partition is gone):
        forget its groups. Members waiting in JoinGroup/SyncGroup get NOT_COORDINATOR; writes
        still in flight settle with the replica layer's answer (NOT_LEADER_OR_FOLLOWER ->
        NOT_COORDINATOR) and change nothing here. Returns False if the epoch is stale."""
        if leader_epoch is not None and not self._apply_epoch(partition, leader_epoch, "resigned"):
            return False
        task = self._loading.pop(partition, None)
        if task is not None:
            task.cancel()
        self._owned.pop(partition, None)
        dropped = [
            g for gid, g in self.groups.items() if self.store.partition_for(gid) == partition
        ]
        for group in dropped:
            self._unload(group)
            self._set_state(group, GroupState.DEAD)
            del self.groups[group.group_id]
        log.info("offsets partition resigned", partition=partition, leader_epoch=leader_epoch,
                 groups=len(dropped))  # fmt: skip
        return True

    @property
    def owned_partitions(self) -> frozenset[int]:
        """Offsets partitions whose groups this coordinator serves now."""
        return frozenset(self._owned)

    @property
    def loading_partitions(self) -> frozenset[int]:
        return frozenset(self._loading)

    @property
    def loading(self) -> bool:
        """Whether some partition is loading (ListGroups then answers
        COORDINATOR_LOAD_IN_PROGRESS with the groups it has, as Kafka does)."""
        return bool(self._loading)

    def _apply_epoch(self, partition: int, leader_epoch: int, what: str) -> bool:
        """Kafka's ``maybeUpdateCoordinatorEpoch``: an epoch at least the one held wins."""
        held = self._epochs.get(partition)
        if held is not None and leader_epoch < held:
            log.info("stale offsets partition event ignored", partition=partition, hook=what,
                     leader_epoch=leader_epoch, held_epoch=held)  # fmt: skip
            return False
        self._epochs[partition] = leader_epoch
        return True

    async def _load(self, partition: int, leader_epoch: int) -> None:
        """Background load of one partition (see the module docstring); cancelled by
        :meth:`on_resigned` and :meth:`shutdown`."""
        started = time.monotonic()
        loaded = _LoadedPartition()
        try:
            chunks = self.store.read_partition(partition)
            while True:
                await self.load_pause(partition)
                chunk = next(chunks, None)
                if chunk is None:
                    break
                loaded.add(chunk)
        except Exception:
            log.exception("loading offsets partition failed", partition=partition)
        if self._loading.get(partition) is not asyncio.current_task():
            return
        del self._loading[partition]
        self._take_ownership(partition, loaded)
        log.info("offsets partition loaded", partition=partition, leader_epoch=leader_epoch,
                 ms=round((time.monotonic() - started) * 1000))  # fmt: skip

    def _take_ownership(self, partition: int, loaded: _LoadedPartition) -> None:
        """Install a partition's loaded groups and serve them (Kafka's ``loadGroup`` +
        ``onGroupLoaded``: members get fresh session timers). A group already cached (cannot
        happen while the invariant holds) is kept, as Kafka's ``addGroup`` does."""
        now = self._clock()
        installed = 0
        pending_groups = {g for entries in loaded.pending.values() for g, _t, _p in entries}
        for group_id in set(loaded.offsets) | set(loaded.metadata) | pending_groups:
            value = loaded.metadata.get(group_id)
            group_offsets = loaded.offsets.get(group_id, {})
            pending = loaded.pending_of(group_id) if group_id in pending_groups else {}
            if (value is None and not group_offsets and not pending) or group_id in self.groups:
                continue
            group = Group(group_id, offsets=dict(group_offsets), state_timestamp=now,
                          pending_txn=pending)  # fmt: skip
            group.commit_positions = {
                key: loaded.positions[(group_id, *key)] for key in group_offsets
            }
            if value is not None:
                self._restore(group, value)
            self.groups[group_id] = group
            installed += 1
        self._owned[partition] = object()
        log.info("groups loaded", partition=partition, groups=installed, records=loaded.records)
        if self._expiry_handle is None:
            self._schedule_expiry()

    def _status(self, group_id: str) -> int:
        """Kafka's ``validateGroupStatus`` (after the group id check): may this coordinator
        serve ``group_id`` now? NONE, COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR."""
        if self._stopped:
            return errors.NotCoordinator.code
        if group_id in self.groups:
            return NONE  # cached groups belong to owned partitions (the invariant)
        partition = self.store.partition_for(group_id)
        if partition in self._loading:
            return errors.CoordinatorLoadInProgress.code
        if partition not in self._owned:
            return errors.NotCoordinator.code
        return NONE

    def ensure_ready(self) -> int:
        """FindCoordinator: create the internal topic if needed; an error code (0 = ready)."""
        if self._stopped:
            return errors.NotCoordinator.code
        try:
            self.store.ensure_topic()
        except Exception:
            log.exception("cannot create the offsets topic")
            return errors.CoordinatorNotAvailable.code
        return NONE

    def _restore(self, group: Group, value: Any) -> None:
        group.generation = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        if value.current_state_timestamp >= 0:
            group.state_timestamp = value.current_state_timestamp
        for mm in value.members:
            member = Member(
                member_id=mm.member_id,
                group_instance_id=mm.group_instance_id,
                client_id=mm.client_id,
                client_host=mm.client_host,
                session_timeout_ms=mm.session_timeout,
                rebalance_timeout_ms=mm.rebalance_timeout,
                protocol_type=value.protocol_type,
                protocols=[(value.protocol or "", bytes(mm.subscription))],
                assignment=bytes(mm.assignment),
            )
            group.members[member.member_id] = member
            if member.group_instance_id is not None:
                group.static_members[member.group_instance_id] = member.member_id
            self._schedule_heartbeat(group, member)
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY

    def shutdown(self) -> None:
        """Cancel timers and loads; waiting JoinGroup/SyncGroup requests answer NOT_COORDINATOR."""
        self._stopped = True
        if self._expiry_handle is not None:
            self._expiry_handle.cancel()
        for task in self._loading.values():
            task.cancel()
        self._loading.clear()
        for group in self.groups.values():
            self._unload(group)

    def _unload(self, group: Group) -> None:
        """Cancel a group's timers; members waiting in JoinGroup/SyncGroup get NOT_COORDINATOR
        (Kafka's ``onGroupUnloaded``)."""
        if group.rebalance_handle is not None:
            group.rebalance_handle.cancel()
            group.rebalance_handle = None
        for handle in group.pending_members.values():
            handle.cancel()
        group.pending_members.clear()
        for member in group.members.values():
            if member.heartbeat_handle is not None:
                member.heartbeat_handle.cancel()
                member.heartbeat_handle = None
            self._complete_join(member, JoinResult(errors.NotCoordinator.code))
            self._complete_sync(member, errors.NotCoordinator.code, b"")

    # ------------------------------------------------------------------ writes

    def _write(
        self,
        group_id: str,
        records: list[tuple[bytes, bytes | None]],
        acks: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> AppendOutcome | asyncio.Future[AppendOutcome]:
        """Append ``records`` to ``group_id``'s partition, only while owning it (else
        NOT_LEADER_OR_FOLLOWER, which callers translate to NOT_COORDINATOR); transactional
        with a ``producer_id`` (:meth:`OffsetsStore.write`)."""
        partition = self.store.partition_for(group_id)
        if partition not in self._owned:
            return AppendOutcome(errors.NotLeaderOrFollower.code, -1)
        return self._write_to(partition, records, acks, producer_id, producer_epoch)

    def _write_to(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        acks: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> AppendOutcome | asyncio.Future[AppendOutcome]:
        try:
            return self.store.write(partition, records, acks, producer_id, producer_epoch)
        except errors.KafkaError as exc:
            return AppendOutcome(exc.code, -1)
        except Exception:
            log.exception("offsets partition write failed", partition=partition)
            return AppendOutcome(errors.UnknownServerError.code, -1)

    def _write_tombstones(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> int:
        """Cleanup writes (expiry, deletions): ``acks=1``, settled at once (module docstring);
        returns the append's error code."""
        outcome = self._write(group_id, records, acks=1)
        assert isinstance(outcome, AppendOutcome), "an acks=1 append settles at once"
        return outcome.error

    def _then(
        self,
        settled: _U | asyncio.Future[_U],
        then: Callable[[_U], _T],
        failed: _U,
    ) -> _T | asyncio.Future[_T]:
        """``then(value)`` now if the write is settled (standalone: always), else a future of
        it, run as the write's completion callback whether or not anybody awaits it.
        ``failed`` stands for the value of a future that was cancelled or failed."""
        if not isinstance(settled, asyncio.Future):
            return then(settled)
        result: asyncio.Future[_T] = self._loop.create_future()

        def done(future: asyncio.Future[_U]) -> None:
            if future.cancelled() or future.exception() is not None:
                log.error("offsets partition write did not settle", error=repr(future))
                value = failed
            else:
                value = future.result()
            try:
                out = then(value)
            except Exception as exc:
                log.exception("applying an offsets partition write failed")
                if not result.done():
                    result.set_exception(exc)
                return
            if not result.done():
                result.set_result(out)

        settled.add_done_callback(done)
        return result

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _complete_join(member: Member, result: JoinResult) -> None:
        fut, member.join_future = member.join_future, None
        if fut is not None and not fut.done():
            fut.set_result(result)

    @staticmethod
    def _complete_sync(member: Member, code: int, assignment: bytes) -> None:
        fut, member.sync_future = member.sync_future, None
        if fut is not None and not fut.done():
            fut.set_result((code, assignment))

    def _set_state(self, group: Group, state: GroupState) -> None:
        if group.state is not state:
            log.debug("group state", group=group.group_id, state=state.value)
        group.state = state
        group.state_timestamp = self._clock()

    def _schedule_heartbeat(self, group: Group, member: Member) -> None:
        if member.heartbeat_handle is not None:
            member.heartbeat_handle.cancel()
        member.heartbeat_handle = self._loop.call_later(
            member.session_timeout_ms / 1000, self._heartbeat_expired, group, member
        )

    def _heartbeat_expired(self, group: Group, member: Member) -> None:
        member.heartbeat_handle = None
        if self.groups.get(group.group_id) is not group or member.member_id not in group.members:
            return
        if member.join_future is not None or member.sync_future is not None:
            # Waiting in JoinGroup/SyncGroup counts as alive (the rebalance timeout governs).
            self._schedule_heartbeat(group, member)
            return
        log.info("member session expired", group=group.group_id, member=member.member_id)
        self._remove_member(group, member, "session timeout")

    def _remove_member(self, group: Group, member: Member, reason: str) -> None:
        if member.heartbeat_handle is not None:
            member.heartbeat_handle.cancel()
            member.heartbeat_handle = None
        self._complete_join(member, JoinResult(errors.UnknownMemberId.code))
        self._complete_sync(member, errors.UnknownMemberId.code, b"")
        group.members.pop(member.member_id, None)
        instance = member.group_instance_id
        if instance is not None and group.static_members.get(instance) == member.member_id:
            del group.static_members[instance]
        if group.leader_id == member.member_id:
            group.leader_id = next(iter(group.members), None)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)

    # ------------------------------------------------------------------ rebalance

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            # The assignment being computed is void: followers waiting in SyncGroup rejoin.
            for m in group.members.values():
                m.assignment = b""
                self._complete_sync(m, errors.RebalanceInProgress.code, b"")
        was_empty = group.state is GroupState.EMPTY
        self._set_state(group, GroupState.PREPARING_REBALANCE)
        if group.rebalance_handle is not None:
            group.rebalance_handle.cancel()
        timeout_ms = group.max_rebalance_timeout_ms()
        delay_ms = self.config.initial_rebalance_delay_ms
        if was_empty and delay_ms > 0:
            group.in_initial_delay = True
            group.rebalance_deadline = self._loop.time() + timeout_ms / 1000
            wait_ms = min(delay_ms, timeout_ms)
        else:
            group.in_initial_delay = False
            wait_ms = timeout_ms
        group.rebalance_handle = self._loop.call_later(wait_ms / 1000, self._rebalance_timer, group)
        log.info(
            "preparing rebalance",
            group=group.group_id,
            generation=group.generation,
            reason=reason,
            members=len(group.members),
        )
        self._maybe_complete_join(group)

    def _rebalance_timer(self, group: Group) -> None:
        group.rebalance_handle = None
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if group.in_initial_delay:
            # The initial delay is over: complete now if everyone is in, else wait for the
            # stragglers up to the rebalance timeout (Kafka's InitialDelayedJoin).
            group.in_initial_delay = False
            remaining = group.rebalance_deadline - self._loop.time()
            if not group.all_joined() and remaining > 0:
                group.rebalance_handle = self._loop.call_later(
                    remaining, self._rebalance_timer, group
                )
                return
        self._complete_join_phase(group)

    def _extend_initial_delay(self, group: Group) -> None:
        """A newcomer during the initial delay: wait another delay, up to the rebalance timeout."""
        if group.rebalance_handle is not None:
            group.rebalance_handle.cancel()
        remaining = max(group.rebalance_deadline - self._loop.time(), 0.0)
        wait = min(self.config.initial_rebalance_delay_ms / 1000, remaining)
        group.rebalance_handle = self._loop.call_later(wait, self._rebalance_timer, group)

    def _maybe_complete_join(self, group: Group) -> None:
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and not group.in_initial_delay
            and group.all_joined()
        ):
            if group.rebalance_handle is not None:
                group.rebalance_handle.cancel()
                group.rebalance_handle = None
            self._complete_join_phase(group)

    def _select_protocol(self, group: Group) -> str | None:
        members = list(group.members.values())
        if not members:
            return None
        candidates = set.intersection(*({n for n, _ in m.protocols} for m in members))
        if not candidates:
            return None
        votes: dict[str, int] = {}
        for m in members:
            for name, _ in m.protocols:
                if name in candidates:
                    votes[name] = votes.get(name, 0) + 1
                    break
        first = [n for n, _ in members[0].protocols if n in candidates]
        return max(first, key=lambda n: votes.get(n, 0))

    def _complete_join_phase(self, group: Group) -> None:
        # Members that did not rejoin in time are out (static ones too: their session is over).
        for m in [m for m in group.members.values() if m.join_future is None]:
            log.info("member did not rejoin", group=group.group_id, member=m.member_id)
            if m.heartbeat_handle is not None:
                m.heartbeat_handle.cancel()
                m.heartbeat_handle = None
            self._complete_sync(m, errors.UnknownMemberId.code, b"")
            group.members.pop(m.member_id, None)
            if m.group_instance_id is not None:
                group.static_members.pop(m.group_instance_id, None)
        # Pending (MEMBER_ID_REQUIRED) members stay pending until their own session expiry:
        # one that rejoins late joins the next generation with its id.
        group.generation += 1
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            self._set_state(group, GroupState.EMPTY)
            self._write_group_metadata(group)
            log.info("group is empty", group=group.group_id, generation=group.generation)
            return
        group.protocol_name = self._select_protocol(group)
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        self._set_state(group, GroupState.COMPLETING_REBALANCE)
        protocol = group.protocol_name or ""
        everyone = [
            (m.member_id, m.group_instance_id, m.metadata_for(protocol))
            for m in group.members.values()
        ]
        log.info(
            "join phase complete",
            group=group.group_id,
            generation=group.generation,
            protocol=protocol,
            members=len(group.members),
            leader=group.leader_id,
        )
        for m in list(group.members.values()):
            result = JoinResult(
                NONE,
                group.generation,
                protocol,
                group.leader_id or "",
                m.member_id,
                everyone if m.member_id == group.leader_id else [],
            )
            self._complete_join(m, result)
            self._schedule_heartbeat(group, m)

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        protocol = group.protocol_name or ""
        members = (
            [
                (m.member_id, m.group_instance_id, m.metadata_for(protocol))
                for m in group.members.values()
            ]
            if member.member_id == group.leader_id
            else []
        )
        return JoinResult(
            NONE, group.generation, protocol, group.leader_id or "", member.member_id, members
        )

    # ------------------------------------------------------------------ JoinGroup

    async def join_group(
        self,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
    ) -> JoinResult:
        """JoinGroup: returns when the join phase completes (or at once for an error)."""
        if not group_id:
            return JoinResult(errors.InvalidGroupId.code, member_id=member_id)
        status = self._status(group_id)
        if status:
            return JoinResult(status, member_id=member_id)
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            return JoinResult(errors.InvalidSessionTimeout.code, member_id=member_id)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms  # JoinGroup v0
        if not protocol_type or not protocols:
            return JoinResult(errors.InconsistentGroupProtocol.code, member_id=member_id)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(errors.UnknownMemberId.code, member_id=member_id)
            group = self.groups[group_id] = Group(group_id, state_timestamp=self._clock())
        if group.members and group.protocol_type not in (None, protocol_type):
            return JoinResult(errors.InconsistentGroupProtocol.code, member_id=member_id)
        if group.members:
            names = {n for n, _ in protocols}
            common = set.intersection(
                *({n for n, _ in m.protocols} for m in group.members.values())
            )
            if member_id not in group.members and not names & common:
                return JoinResult(errors.InconsistentGroupProtocol.code, member_id=member_id)

        def new_member(mid: str) -> Member:
            return Member(
                mid,
                group_instance_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocol_type,
                [(n, bytes(md)) for n, md in protocols],
            )

        if not member_id:
            new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if group_instance_id is not None:
                return await self._join_static_unknown(group, new_member(new_id), group_instance_id)
            if require_known_member_id:
                # KIP-394: hand out the id; the member rejoins with it (pending until then).
                if len(group.members) + len(group.pending_members) >= cfg.max_size:
                    return JoinResult(GROUP_MAX_SIZE_REACHED, member_id="")
                group.pending_members[new_id] = self._loop.call_later(
                    session_timeout_ms / 1000, self._pending_expired, group, new_id
                )
                return JoinResult(errors.MemberIdRequired.code, member_id=new_id)
            return await self._add_and_join(group, new_member(new_id))

        # A known (or pending) member id.
        if member_id in group.pending_members:
            group.pending_members.pop(member_id).cancel()
            return await self._add_and_join(group, new_member(member_id))
        member = group.members.get(member_id)
        if member is None:
            return JoinResult(errors.UnknownMemberId.code, member_id=member_id)
        if (
            group_instance_id is not None
            and group.static_members.get(group_instance_id) != member_id
        ):
            return JoinResult(FENCED_INSTANCE_ID, member_id=member_id)
        return await self._rejoin(
            group, member, protocols, session_timeout_ms, rebalance_timeout_ms
        )

    def _pending_expired(self, group: Group, member_id: str) -> None:
        if group.pending_members.pop(member_id, None) is not None:
            log.info("pending member expired", group=group.group_id, member=member_id)
            self._maybe_complete_join(group)

    async def _wait_join(self, group: Group, member: Member) -> JoinResult:
        fut: asyncio.Future[JoinResult] = self._loop.create_future()
        if member.join_future is not None and not member.join_future.done():
            # A duplicate JoinGroup of the same member: the older one is superseded.
            member.join_future.set_result(JoinResult(errors.RebalanceInProgress.code))
        member.join_future = fut
        self._maybe_complete_join(group)
        return await fut

    async def _add_and_join(self, group: Group, member: Member) -> JoinResult:
        if len(group.members) >= self.config.max_size:
            return JoinResult(GROUP_MAX_SIZE_REACHED, member_id=member.member_id)
        group.members[member.member_id] = member
        if member.group_instance_id is not None:
            group.static_members[member.group_instance_id] = member.member_id
        group.protocol_type = member.protocol_type
        if group.leader_id is None:
            group.leader_id = member.member_id
        self._schedule_heartbeat(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            if group.in_initial_delay:
                self._extend_initial_delay(group)
        else:
            self._prepare_rebalance(group, f"member {member.member_id} joined")
        return await self._wait_join(group, member)

    async def _join_static_unknown(
        self, group: Group, member: Member, instance_id: str
    ) -> JoinResult:
        """A static member (re)starting: JoinGroup with its instance id and no member id.

        A known instance id takes over the old member's place (Kafka's
        ``updateStaticMemberAndRebalance``): the old id is fenced, the new member inherits the
        assignment and, if the old one led the group, the leadership. What happens next depends
        on the state:

        * Stable, and the protocol the group would select next is the current one: no rebalance.
          The new membership is persisted and the member gets the current generation at once.
          The response names the leader as it was *before* the replacement: a restarted leader
          sees another id than its own and acts as a follower (its SyncGroup gets its old
          assignment), because an assignment it computed now would not reach the others of a
          Stable group. It is still the group's leader for the next rebalance. (JoinGroup v9's
          ``SkipAssignment`` is the newer form of this; Sluice serves up to v5.)
        * Stable with a changed protocol choice, or CompletingRebalance (the leader may already
          be assigning to the old id): rebalance.
        * PreparingRebalance: wait for the join phase like any member.
        """
        old_id = group.static_members.get(instance_id)
        old = group.members.get(old_id) if old_id is not None else None
        if old is None:
            return await self._add_and_join(group, member)
        current_leader = group.leader_id
        self._replace_member(group, old, member)
        log.info("static member rejoined", group=group.group_id, instance=instance_id)
        if group.state is GroupState.STABLE:
            if self._select_protocol(group) == group.protocol_name:

                def written(error: int) -> JoinResult:
                    if error:
                        if self.groups.get(group.group_id) is group and (
                            group.members.get(member.member_id) is member
                        ):
                            # Not persisted: the old incarnation stays the member (Kafka's
                            # rollback).
                            self._replace_member(group, member, old)
                        return JoinResult(error, group.generation, group.protocol_name or "",
                                          current_leader or "", "")  # fmt: skip
                    return JoinResult(NONE, group.generation, group.protocol_name or "",
                                      current_leader or "", member.member_id)  # fmt: skip

                answer = self._then(
                    self._write_group_metadata(group), written, errors.UnknownServerError.code
                )
                return await answer if isinstance(answer, asyncio.Future) else answer
            self._prepare_rebalance(group, f"static member {instance_id} changed the protocol")
        elif group.state is GroupState.COMPLETING_REBALANCE:
            self._prepare_rebalance(group, f"static member {instance_id} rejoined")
        return await self._wait_join(group, member)

    def _replace_member(self, group: Group, old: Member, new: Member) -> None:
        """``new`` takes ``old``'s place (same instance id): assignment, leadership, a fresh
        session timer; the old id is fenced (a waiting JoinGroup/SyncGroup of it answers
        FENCED_INSTANCE_ID and its later requests find no member)."""
        if old.heartbeat_handle is not None:
            old.heartbeat_handle.cancel()
            old.heartbeat_handle = None
        self._complete_join(old, JoinResult(FENCED_INSTANCE_ID, member_id=old.member_id))
        self._complete_sync(old, FENCED_INSTANCE_ID, b"")
        del group.members[old.member_id]
        new.assignment = old.assignment
        group.members[new.member_id] = new
        if new.group_instance_id is not None:
            group.static_members[new.group_instance_id] = new.member_id
        if group.leader_id == old.member_id:
            group.leader_id = new.member_id
        self._schedule_heartbeat(group, new)

    async def _rejoin(
        self,
        group: Group,
        member: Member,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
    ) -> JoinResult:
        changed = not member.same_protocols(protocols)
        member.protocols = [(n, bytes(md)) for n, md in protocols]
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        self._schedule_heartbeat(group, member)
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            return await self._wait_join(group, member)
        if state is GroupState.COMPLETING_REBALANCE and not changed:
            return self._join_result(group, member)  # a lost JoinGroup response, resent
        if state is GroupState.STABLE and not changed and member.member_id != group.leader_id:
            return self._join_result(group, member)
        if state in (GroupState.EMPTY, GroupState.DEAD):
            return JoinResult(errors.UnknownMemberId.code, member_id=member.member_id)
        self._prepare_rebalance(group, f"member {member.member_id} rejoined")
        return await self._wait_join(group, member)

    # ------------------------------------------------------------------ SyncGroup / Heartbeat

    def _member_for(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int
    ) -> tuple[Group, Member]:
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            raise GroupError(errors.UnknownMemberId.code)
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is not None and known != member_id:
                raise GroupError(FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(errors.UnknownMemberId.code)
        if generation != group.generation:
            raise GroupError(errors.IllegalGeneration.code)
        return group, member

    async def sync_group(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        assignments: list[tuple[str, bytes]],
    ) -> tuple[int, bytes]:
        """SyncGroup: (error code, this member's assignment); followers wait for the leader.

        The leader's assignment is written to the offsets topic first; everyone is answered when
        that write settles (:meth:`_assignment_written`)."""
        status = self._status(group_id)
        if status:
            # Kafka: while loading, the rebalance state is lost: rejoin (older clients do not
            # expect COORDINATOR_LOAD_IN_PROGRESS here).
            load = errors.CoordinatorLoadInProgress.code
            return (errors.RebalanceInProgress.code if status == load else status), b""
        try:
            group, member = self._member_for(group_id, member_id, group_instance_id, generation_id)
        except GroupError as exc:
            return exc.code, b""
        if group.state is GroupState.PREPARING_REBALANCE:
            return errors.RebalanceInProgress.code, b""
        if group.state is GroupState.STABLE:
            self._schedule_heartbeat(group, member)
            return NONE, member.assignment
        if group.state is not GroupState.COMPLETING_REBALANCE:
            return errors.UnknownMemberId.code, b""
        fut: asyncio.Future[tuple[int, bytes]] = self._loop.create_future()
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result((errors.RebalanceInProgress.code, b""))
        member.sync_future = fut
        self._schedule_heartbeat(group, member)
        if member_id == group.leader_id:
            given = {mid: bytes(a) for mid, a in assignments}
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
            generation = group.generation
            self._then(
                self._write_group_metadata(group),
                lambda error: self._assignment_written(group, generation, error),
                errors.UnknownServerError.code,
            )
        return await fut

    def _assignment_written(self, group: Group, generation: int, error: int) -> None:
        """The leader's assignment settled (Kafka's ``doSyncGroup`` callback): applied only if
        the group is still this one, CompletingRebalance, at the same generation."""
        if (
            self.groups.get(group.group_id) is not group
            or group.state is not GroupState.COMPLETING_REBALANCE
            or group.generation != generation
        ):
            return
        if error:
            for m in group.members.values():
                m.assignment = b""
                self._complete_sync(m, error, b"")
            self._prepare_rebalance(group, "group metadata write failed")
        else:
            self._set_state(group, GroupState.STABLE)
            for m in group.members.values():
                self._complete_sync(m, NONE, m.assignment)
            log.info("group stable", group=group.group_id, generation=group.generation)

    def heartbeat(
        self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> int:
        status = self._status(group_id)
        if status:
            # Kafka: a loading coordinator "responds blindly" NONE to a heartbeat.
            return NONE if status == errors.CoordinatorLoadInProgress.code else status
        try:
            group, member = self._member_for(group_id, member_id, group_instance_id, generation_id)
        except GroupError as exc:
            return exc.code
        if group.state is GroupState.EMPTY:
            return errors.UnknownMemberId.code
        self._schedule_heartbeat(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            return errors.RebalanceInProgress.code
        return NONE

    def leave_group(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[int, list[int]]:
        """LeaveGroup: (top-level error, per-member errors) for (member_id, instance_id) pairs."""
        status = self._status(group_id)
        if status:
            return status, []
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return errors.UnknownMemberId.code, [errors.UnknownMemberId.code for _ in members]
        results = []
        for member_id, instance_id in members:
            if instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None:
                    results.append(errors.UnknownMemberId.code)
                    continue
                if member_id and known != member_id:
                    results.append(FENCED_INSTANCE_ID)
                    continue
                member_id = known
            member = group.members.get(member_id)
            if member is None:
                if group.pending_members.pop(member_id, None) is not None:
                    results.append(NONE)
                    self._maybe_complete_join(group)
                else:
                    results.append(errors.UnknownMemberId.code)
                continue
            log.info("member left", group=group_id, member=member_id)
            self._remove_member(group, member, f"member {member_id} left")
            results.append(NONE)
        return NONE, results

    # ------------------------------------------------------------------ offsets

    def commit_offsets(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: list[tuple[str, int, int, int, str | None]],
    ) -> list[int] | asyncio.Future[list[int]]:
        """OffsetCommit of (topic, partition, offset, leader_epoch, metadata); per-partition
        codes, at once when the write settled at once (standalone), else a future of them that
        completes when the write is replicated, fails or times out (module docstring: the cache
        changes only on success; errors by :func:`commit_error`).

        Validated in Kafka's order (``GroupCoordinator.handleCommitOffsets``): the member and
        generation first (:meth:`_validate_commit`), the group state after. So a stale
        generation is ILLEGAL_GENERATION in every state, and REBALANCE_IN_PROGRESS goes only
        to a current member of the current generation while the group is CompletingRebalance
        (it has its JoinGroup answer but not yet its assignment). PreparingRebalance still
        accepts a current member's commit: the heartbeat tells it to rejoin. A commit with
        generation -1 and no member id (a consumer using ``assign()``) is accepted only while
        the group has no members; for a group that does not exist it creates one (any
        generation >= 0 there is ILLEGAL_GENERATION).
        """
        if not group_id:
            return [errors.InvalidGroupId.code] * len(offsets)
        status = self._status(group_id)
        if status:
            return [status] * len(offsets)
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            if generation_id >= 0:
                return [errors.IllegalGeneration.code] * len(offsets)
            group = Group(group_id, state_timestamp=self._clock())
            code = self._validate_commit(group, generation_id, member_id, group_instance_id)
            if code == NONE:
                self.groups[group_id] = group
        else:
            code = self._validate_commit(group, generation_id, member_id, group_instance_id)
        if code == NONE:
            if group.state is GroupState.COMPLETING_REBALANCE:
                code = errors.RebalanceInProgress.code
            elif group.state is not GroupState.EMPTY:
                self._schedule_heartbeat(group, group.members[member_id])
        if code:
            return [code] * len(offsets)
        results, records, accepted = self._commit_records(group_id, offsets)
        if not records:
            return results
        for key, value in accepted:
            group.pending_commits[key] = value
        outcome = self._write(group_id, records, self.config.offsets_commit_required_acks)
        return self._then(
            outcome, lambda o: self._commit_written(group, accepted, results, o), _WRITE_FAILED
        )

    def _commit_records(
        self, group_id: str, offsets: list[tuple[str, int, int, int, str | None]]
    ) -> tuple[
        list[int],
        list[tuple[bytes, bytes | None]],
        list[tuple[tuple[str, int], OffsetAndMetadata]],
    ]:
        """(per-partition code, records to write, accepted offsets) of a commit: metadata
        over ``offset.metadata.max.bytes`` and unknown partitions are refused one by one."""
        now = self._clock()
        results: list[int] = []
        records: list[tuple[bytes, bytes | None]] = []
        accepted: list[tuple[tuple[str, int], OffsetAndMetadata]] = []
        for topic, partition, offset, epoch, metadata in offsets:
            meta = metadata or ""
            if len(meta.encode()) > self.config.offset_metadata_max_bytes:
                results.append(OFFSET_METADATA_TOO_LARGE)
                continue
            if not self._topic_exists(topic, partition):
                results.append(errors.UnknownTopicOrPartition.code)
                continue
            value = OffsetAndMetadata(offset, epoch, meta, now)
            records.append(offset_commit_record(group_id, topic, partition, value))
            accepted.append(((topic, partition), value))
            results.append(NONE)
        return results, records, accepted

    def _commit_written(
        self,
        group: Group,
        accepted: list[tuple[tuple[str, int], OffsetAndMetadata]],
        results: list[int],
        outcome: AppendOutcome,
    ) -> list[int]:
        """A commit's write settled (Kafka's ``storeOffsets`` callback): cache it on success
        (if the group is still this one), answer each partition."""
        current = self.groups.get(group.group_id) is group
        for key, value in accepted:
            if not current:
                break
            if outcome.error:
                group.on_commit_failed(key, value)
            else:
                group.on_commit_written(key, value, outcome.first_offset)
        if not outcome.error:
            return results
        code = commit_error(outcome.error)
        log.info("offset commit write failed", group=group.group_id,
                 append_error=outcome.error, error=code)  # fmt: skip
        return [code if r == NONE else r for r in results]

    def txn_commit_offsets(
        self,
        *,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: list[tuple[str, int, int, int, str | None]],
    ) -> list[int] | asyncio.Future[list[int]]:
        """TxnOffsetCommit (KIP-98; KIP-447 member checks from v3): like :meth:`commit_offsets`
        but the batch is transactional (``producer_id``/``producer_epoch``) and its offsets stay
        pending -- invisible to OffsetFetch -- until the transaction's marker
        (:meth:`complete_transaction`). Kafka's ``handleTxnCommitOffsets``: a group that does
        not exist is created Empty; the member checks are :meth:`_validate_commit`'s except
        that an anonymous commit (v0-2, or generation -1 and no member) is accepted in every
        state, and no REBALANCE_IN_PROGRESS (the transaction is fenced by its producer epoch,
        not the generation)."""
        if not group_id:
            return [errors.InvalidGroupId.code] * len(offsets)
        status = self._status(group_id)
        if status:
            return [status] * len(offsets)
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, state_timestamp=self._clock())
        if group.state is GroupState.DEAD:
            return [errors.CoordinatorNotAvailable.code] * len(offsets)
        code = self._validate_commit(
            group, generation_id, member_id, group_instance_id, transactional=True
        )
        if code:
            return [code] * len(offsets)
        results, records, accepted = self._commit_records(group_id, offsets)
        if not records:
            return results
        pending = group.pending_txn.setdefault(producer_id, {})
        # What each partition had pending before: restored if this write fails (a refused
        # zombie's commit must not take away the transaction's earlier offset).
        previous = {key: pending.get(key) for key, _ in accepted}
        for key, value in accepted:
            pending[key] = (value, -1)
        acks = self.config.offsets_commit_required_acks
        outcome = self._write(group_id, records, acks, producer_id, producer_epoch)
        return self._then(
            outcome,
            lambda o: self._txn_commit_written(group, producer_id, accepted, previous, results, o),
            _WRITE_FAILED,
        )

    def _txn_commit_written(
        self,
        group: Group,
        producer_id: int,
        accepted: list[tuple[tuple[str, int], OffsetAndMetadata]],
        previous: dict[tuple[str, int], tuple[OffsetAndMetadata, int] | None],
        results: list[int],
        outcome: AppendOutcome,
    ) -> list[int]:
        """A TxnOffsetCommit's write settled (Kafka's ``onTxnOffsetCommitAppend`` /
        ``failPendingTxnOffsetCommit``): the pending entries learn their batch's position, or,
        if the write failed (and they are still this write's), what was pending before comes
        back."""
        pending = group.pending_txn.get(producer_id)
        if pending is not None:
            for key, value in accepted:
                entry = pending.get(key)
                if entry is None or entry[0] is not value:
                    continue  # superseded by a later commit of the transaction, or removed
                before = previous.get(key)
                if not outcome.error:
                    pending[key] = (value, outcome.first_offset)
                elif before is None:
                    del pending[key]
                else:
                    pending[key] = before
            if not pending:
                del group.pending_txn[producer_id]
        if not outcome.error:
            crash_point("group.txn_offsets.written", group.group_id)
            return results
        code = commit_error(outcome.error)
        log.info("transactional offset commit write failed", group=group.group_id,
                 producer_id=producer_id, append_error=outcome.error, error=code)  # fmt: skip
        return [code if r == NONE else r for r in results]

    def complete_transaction(self, producer_id: int, partition: int, commit: bool) -> int:
        """The marker of ``producer_id``'s transaction was written to offsets partition
        ``partition`` (WriteTxnMarkers, Kafka's ``onTransactionCompleted``): each group of
        that partition with offsets pending in it commits or drops them
        (:meth:`Group.complete_txn`). Returns how many offsets became visible. A partition
        not owned here (loading, or led elsewhere) has nothing to do: its load reads the
        marker from the log."""
        applied = 0
        for group in list(self.groups.values()):
            if producer_id in group.pending_txn and (
                self.store.partition_for(group.group_id) == partition
            ):
                applied += group.complete_txn(producer_id, commit)
        log.debug("transaction offsets completed", producer_id=producer_id,
                  partition=partition, commit=commit, offsets=applied)  # fmt: skip
        return applied

    @staticmethod
    def _validate_commit(
        group: Group,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        transactional: bool = False,
    ) -> int:
        """Kafka's ``validateOffsetCommit``: who may commit, whatever the group state.

        A request naming a member (a generation >= 0, a member id or an instance id) must come
        from a current member -- for an instance id, the member that instance maps to
        (another id: FENCED_INSTANCE_ID; an unknown instance: UNKNOWN_MEMBER_ID) -- of the
        current generation (else ILLEGAL_GENERATION). An anonymous one (-1, "", no instance)
        only while the group is Empty (else UNKNOWN_MEMBER_ID).
        """
        if generation_id >= 0 or member_id or instance_id is not None:
            if instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None:
                    return errors.UnknownMemberId.code
                if known != member_id:
                    return FENCED_INSTANCE_ID
            elif member_id not in group.members:
                return errors.UnknownMemberId.code
            if generation_id != group.generation:
                return errors.IllegalGeneration.code
            return NONE
        if not transactional and group.state is not GroupState.EMPTY:
            return errors.UnknownMemberId.code
        return NONE

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> list[tuple[str, int, OffsetAndMetadata | None]]:
        """OffsetFetch: the committed offset of each partition (None: none); None = all.
        Raises NotCoordinator / CoordinatorLoadInProgress when this coordinator may not answer
        for the group. Commits still being written are not visible (Kafka's getOffsets)."""
        status = self._status(group_id)
        if status:
            raise errors.for_code(status)(f"group {group_id!r}")
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        if partitions is None:
            return [(t, p, v) for (t, p), v in sorted(offsets.items())]
        return [(t, p, offsets.get((t, p))) for t, p in partitions]

    def unstable_offsets(self, group_id: str) -> set[tuple[str, int]]:
        """The partitions of ``group_id`` with a commit still being written or offsets
        pending in a transaction (Kafka's ``hasPendingOffsetCommitsForTopicPartition``): what
        OffsetFetch v7+ with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for."""
        group = self.groups.get(group_id)
        if group is None:
            return set()
        unstable = set(group.pending_commits)
        for pending in group.pending_txn.values():
            unstable.update(pending)
        return unstable

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete (KIP-496): (group error, per-partition error) for existing partitions.

        Kafka's ``handleDeleteOffsets``: an Empty group loses the offsets of every partition
        named; a live ``consumer`` group only those of topics none of its members subscribes
        to (the others: GROUP_SUBSCRIBED_TO_TOPIC); a live group of another protocol type is
        NON_EMPTY_GROUP; an unknown group GROUP_ID_NOT_FOUND. A group error comes without
        partition errors. Partitions without a committed offset are "deleted" too (NONE).
        Tombstones are written before memory changes; an Empty group left without offsets is
        forgotten (its metadata tombstoned), as Kafka turns it Dead.
        """
        if not group_id:
            return errors.InvalidGroupId.code, {}
        status = self._status(group_id)
        if status:
            return status, {}
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return errors.GroupIdNotFound.code, {}
        results: dict[tuple[str, int], int] = {}
        if group.state is GroupState.EMPTY:
            eligible = list(partitions)
        elif group.protocol_type == "consumer":
            subscribed = self._subscribed_topics(group)
            eligible = []
            for tp in partitions:
                if subscribed is None or tp[0] in subscribed:
                    results[tp] = errors.GroupSubscribedToTopic.code
                else:
                    eligible.append(tp)
        else:
            return errors.NonEmptyGroup.code, {}
        removed = sorted({tp for tp in eligible if tp in group.offsets})
        drop_group = group.state is GroupState.EMPTY and len(removed) == len(group.offsets) > 0
        if removed:
            records = [offset_commit_record(group_id, t, p, None) for t, p in removed]
            if drop_group:
                records.append(group_metadata_record(group_id, None))
            error = self._write_tombstones(group_id, records)
            if error:
                log.warning("offset delete write failed", group=group_id, append_error=error)
                return commit_error(error), {}
            if drop_group:
                del self.groups[group_id]
            log.info("offsets deleted", group=group_id, count=len(removed))
        group.remove_offsets(eligible)  # commits in flight for them do not land either
        results.update((tp, NONE) for tp in eligible)
        return NONE, results

    @staticmethod
    def _subscribed_topics(group: Group) -> set[str] | None:
        """The topics the members' ``consumer`` subscriptions name (Kafka's
        ``computeSubscribedTopics``); None when one cannot be read (then every topic counts
        as subscribed, Kafka's safe side)."""
        protocol = group.protocol_name
        if protocol is None:
            return None
        topics: set[str] = set()
        for member in group.members.values():
            try:
                topics.update(decode_subscription(member.metadata_for(protocol)))
            except errors.SluiceError:
                return None
        return topics

    def _write_group_metadata(self, group: Group) -> int | asyncio.Future[int]:
        """Persist the group's membership and assignment (Kafka's ``storeGroup``): an error
        code (0 = ok, else by :func:`group_write_error`), at once or as a future (see
        :meth:`commit_offsets`)."""
        protocol = group.protocol_name
        value = GroupMetadataValue.cls(
            protocol_type=group.protocol_type or "",
            generation=group.generation,
            protocol=protocol,
            leader=group.leader_id,
            current_state_timestamp=self._clock(),
            members=[
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata_for(protocol or ""),
                    assignment=m.assignment,
                )
                for m in group.members.values()
            ],
        )
        outcome = self._write(
            group.group_id,
            [group_metadata_record(group.group_id, value)],
            self.config.offsets_commit_required_acks,
        )

        def written(outcome: AppendOutcome) -> int:
            if outcome.error:
                code = group_write_error(outcome.error)
                log.warning("group metadata write failed", group=group.group_id,
                            append_error=outcome.error, error=code)  # fmt: skip
                return code
            return NONE

        return self._then(outcome, written, _WRITE_FAILED)

    # ------------------------------------------------------------------ admin

    def list_groups(self, states: Iterable[str] = ()) -> list[tuple[str, str, str]]:
        """``(group id, protocol type, state)`` of every group but Dead ones; with ``states``,
        only those in one of them (ListGroups v4's filter: state names compared
        case-insensitively, as Kafka's coordinator does)."""
        wanted = {s.lower() for s in states}
        return [
            (g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if g.state is not GroupState.DEAD and (not wanted or g.state.value.lower() in wanted)
        ]

    def describe_group(self, group_id: str) -> Group | None:
        """The group (None: unknown or Dead). Raises NotCoordinator /
        CoordinatorLoadInProgress when this coordinator may not answer for it."""
        status = self._status(group_id)
        if status:
            raise errors.for_code(status)(f"group {group_id!r}")
        group = self.groups.get(group_id)
        return None if group is None or group.state is GroupState.DEAD else group

    def delete_groups(self, group_ids: list[str]) -> list[int]:
        results = []
        for group_id in group_ids:
            status = self._status(group_id)
            if status:
                results.append(status)
                continue
            group = self.groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                results.append(errors.GroupIdNotFound.code)
                continue
            if group.state is not GroupState.EMPTY:
                results.append(errors.NonEmptyGroup.code)
                continue
            records = [offset_commit_record(group_id, t, p, None) for t, p in group.offsets]
            records.append(group_metadata_record(group_id, None))
            error = self._write_tombstones(group_id, records)
            if error:
                log.warning("group delete write failed", group=group_id, append_error=error)
                results.append(commit_error(error))
                continue
            self._set_state(group, GroupState.DEAD)
            del self.groups[group_id]
            log.info("group deleted", group=group_id)
            results.append(NONE)
        return results

    # ------------------------------------------------------------------ offset expiry

    def _schedule_expiry(self) -> None:
        if self._stopped:
            return
        self._expiry_handle = self._loop.call_later(
            self.config.offsets_retention_check_interval_ms / 1000, self._run_expiry
        )

    def _run_expiry(self) -> None:
        try:
            self.expire_offsets()
        except Exception:
            log.exception("offset expiry failed")
        self._schedule_expiry()

    def expire_offsets(self, now_ms: int | None = None) -> int:
        """Remove offsets past ``offsets.retention.minutes`` (KIP-211); returns how many.

        A group with a protocol type expires all its offsets once it has been Empty that long;
        a group that only stores offsets expires each one that long after its commit.
        """
        now = self._clock() if now_ms is None else now_ms
        retention = self.config.offsets_retention_ms
        removed = 0
        for group in list(self.groups.values()):
            if group.state is not GroupState.EMPTY:
                continue
            if group.protocol_type:
                expired = list(group.offsets) if now - group.state_timestamp >= retention else []
            else:
                expired = [
                    k for k, v in group.offsets.items() if now - v.commit_timestamp >= retention
                ]
            if not expired:
                continue
            # Commits in flight are not expired (Kafka's removeExpiredOffsets).
            expired = [k for k in expired if k not in group.pending_commits]
            if not expired:
                continue
            records = [offset_commit_record(group.group_id, t, p, None) for t, p in expired]
            # A group with offsets still to come (a commit in flight, a transaction's pending
            # offsets) stays (Kafka's ``hasOffsets``).
            drop_group = (
                len(expired) == len(group.offsets)
                and not group.pending_commits
                and not group.pending_txn
            )
            if drop_group:
                records.append(group_metadata_record(group.group_id, None))
            error = self._write_tombstones(group.group_id, records)
            if error:
                log.warning("offset expiry write failed", group=group.group_id,
                            append_error=error)  # fmt: skip
                continue
            group.remove_offsets(expired)
            removed += len(expired)
            if drop_group:
                del self.groups[group.group_id]
            log.info("offsets expired", group=group.group_id, count=len(expired))
        return removed
