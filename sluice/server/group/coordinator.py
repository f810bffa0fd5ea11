"""The classic consumer-group coordinator: membership, rebalances, committed offsets.

This broker coordinates every group (single node). The protocol is Kafka's classic one
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
``__consumer_offsets`` (:mod:`sluice.server.group.offsets_store`), replayed at start-up together
with the last
group metadata (members come back with fresh session timers, so consumers that keep heartbeating
across a broker restart keep their generation). An OffsetCommit is answered after its record is
appended. Offsets of a group expire ``offsets.retention.minutes`` after the group became Empty
(or, for a group that only stores offsets, after the commit) -- Kafka's KIP-211 rule; expiry
writes tombstones.

**Concurrency**: everything runs on the event-loop thread; handlers call the public ``async``
methods, timers are ``loop.call_later`` callbacks. No locks are needed because no method awaits
between reading and updating a group (the awaits only wait for a future this module completes).
"""

from __future__ import annotations

import asyncio
import enum
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sluice.protocol import errors
from sluice.protocol.config_def import ConfigKey, int_in
from sluice.protocol.consumer_protocol import decode_subscription
from sluice.server.group.offsets_store import (
    GroupMetadataValue,
    GroupRecord,
    MemberMetadata,
    OffsetAndMetadata,
    OffsetRecord,
    OffsetsStore,
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


#: The coordinator's broker keys as the broker's Config lists them (text defaults, parsers for
#: load-time checks, docs); collected by sluice.server.core.config. GroupConfig's field defaults
#: are the same values, parsed (a test keeps them equal).
GROUP_OPTIONS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "group.initial.rebalance.delay.ms",
        int_in(0),
        "3000",
        "wait this long for more members before the first rebalance of an empty group",
    ),
    ConfigKey("group.min.session.timeout.ms", int_in(1), "6000", "smallest session timeout"),
    ConfigKey("group.max.session.timeout.ms", int_in(1), "1800000", "largest session timeout"),
    ConfigKey("group.max.size", int_in(1), "2147483647", "members per group"),
    ConfigKey(
        "offsets.topic.num.partitions",
        int_in(1),
        "1",
        "partitions of __consumer_offsets (Kafka: 50; one broker needs few)",
    ),
    ConfigKey(
        "offsets.retention.minutes",
        int_in(1),
        "10080",
        "committed offsets of an empty group expire after this long",
    ),
    ConfigKey(
        "offsets.retention.check.interval.ms",
        int_in(1),
        "600000",
        "how often expired offsets are removed",
    ),
    ConfigKey("offset.metadata.max.bytes", int_in(0), "4096", "largest commit metadata string"),
    ConfigKey(
        "sluice.offsets.compaction.min.records",
        int_in(1),
        "10000",
        "restate __consumer_offsets when it holds this many more records than live offsets",
    ),
)


@dataclass(frozen=True)
class GroupConfig:
    """Broker settings of the coordinator, with Kafka's names and defaults (except
    ``offsets.topic.num.partitions``: 1 instead of 50 -- one broker, and fewer files)."""

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    offsets_topic_num_partitions: int = 1
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096
    max_size: int = 2147483647
    #: compaction (see GroupCoordinator.compact) runs when a partition holds this many more
    #: records than live keys; checked at start-up and every retention check interval
    offsets_compaction_min_records: int = 10000

    KEYS: ClassVar[dict[str, str]] = {
        "group.initial.rebalance.delay.ms": "initial_rebalance_delay_ms",
        "group.min.session.timeout.ms": "min_session_timeout_ms",
        "group.max.session.timeout.ms": "max_session_timeout_ms",
        "offsets.topic.num.partitions": "offsets_topic_num_partitions",
        "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
        "offset.metadata.max.bytes": "offset_metadata_max_bytes",
        "group.max.size": "max_size",
        "sluice.offsets.compaction.min.records": "offsets_compaction_min_records",
    }

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> GroupConfig:
        """From broker properties (Kafka names; ``offsets.retention.minutes`` for retention).

        Raises ValueError for a value that is not an integer or out of range.
        """
        values: dict[str, int] = {}
        for key, attr in cls.KEYS.items():
            if key in props:
                values[attr] = int(props[key])
        if "offsets.retention.minutes" in props:
            values["offsets_retention_ms"] = int(props["offsets.retention.minutes"]) * 60000
        config = cls(**values)
        if config.offsets_topic_num_partitions < 1:
            raise ValueError("offsets.topic.num.partitions must be >= 1")
        if config.initial_rebalance_delay_ms < 0:
            raise ValueError("group.initial.rebalance.delay.ms must be >= 0")
        return config


#: Records per batch when compaction restates a partition (well under message.max.bytes).
_COMPACTION_CHUNK = 2000


class GroupError(Exception):
    """A Kafka error code answered for a whole group request."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


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
    persisted: Any = None  # the last GroupMetadataValue written (or loaded): compaction restates it

    def all_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_future is not None for m in self.members.values()
        )

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)


def _now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinator:
    """Every consumer group of this broker. Create, :meth:`load`, serve, :meth:`shutdown`.

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

    # ------------------------------------------------------------------ lifecycle

    def load(self) -> None:
        """Replay ``__consumer_offsets`` (if it exists): offsets, then each group's metadata."""
        offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        metadata: dict[str, Any] = {}
        count = 0
        for rec in self.store.replay():
            count += 1
            if isinstance(rec, OffsetRecord):
                group_offsets = offsets.setdefault(rec.group, {})
                if rec.value is None:
                    group_offsets.pop((rec.topic, rec.partition), None)
                else:
                    group_offsets[(rec.topic, rec.partition)] = rec.value
            elif isinstance(rec, GroupRecord):
                metadata[rec.group] = rec.value
        for group_id in set(offsets) | set(metadata):
            value = metadata.get(group_id)
            group_offsets = offsets.get(group_id, {})
            if value is None and not group_offsets:
                continue
            group = Group(group_id, offsets=dict(group_offsets), state_timestamp=self._clock())
            if value is not None:
                self._restore(group, value)
            self.groups[group_id] = group
        log.info("groups loaded", groups=len(self.groups), records=count)
        self.compact()
        self._schedule_expiry()

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
        group.persisted = value
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
        """Cancel timers; waiting JoinGroup/SyncGroup requests answer NOT_COORDINATOR."""
        self._stopped = True
        if self._expiry_handle is not None:
            self._expiry_handle.cancel()
        for group in self.groups.values():
            if group.rebalance_handle is not None:
                group.rebalance_handle.cancel()
            for handle in group.pending_members.values():
                handle.cancel()
            for member in group.members.values():
                if member.heartbeat_handle is not None:
                    member.heartbeat_handle.cancel()
                self._complete_join(member, JoinResult(errors.NotCoordinator.code))
                self._complete_sync(member, errors.NotCoordinator.code, b"")

    # ------------------------------------------------------------------ helpers

    def _check_running(self) -> None:
        if self._stopped:
            raise GroupError(errors.NotCoordinator.code)

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
        if self._stopped:
            return JoinResult(errors.NotCoordinator.code, member_id=member_id)
        if not group_id:
            return JoinResult(errors.InvalidGroupId.code, member_id=member_id)
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
                error = self._write_group_metadata(group)
                if error:
                    # Not persisted: the old incarnation stays the member (Kafka's rollback).
                    self._replace_member(group, member, old)
                    return JoinResult(error, group.generation, group.protocol_name or "",
                                      current_leader or "", "")  # fmt: skip
                return JoinResult(NONE, group.generation, group.protocol_name or "",
                                  current_leader or "", member.member_id)  # fmt: skip
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
        self._check_running()
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
        """SyncGroup: (error code, this member's assignment); followers wait for the leader."""
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
            error = self._write_group_metadata(group)
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
        return await fut

    def heartbeat(
        self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> int:
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
        if self._stopped:
            return errors.NotCoordinator.code, []
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
    ) -> list[int]:
        """OffsetCommit of (topic, partition, offset, leader_epoch, metadata); per-partition codes.

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
        if self._stopped:
            return [errors.NotCoordinator.code] * len(offsets)
        if not group_id:
            return [errors.InvalidGroupId.code] * len(offsets)
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
        if records:
            try:
                self.store.append(group_id, records)
            except Exception as exc:
                if not isinstance(exc, errors.KafkaError):
                    log.exception("offset commit write failed", group=group_id)
                failed = errors.CoordinatorNotAvailable.code
                return [failed if r == NONE else r for r in results]
            for key, value in accepted:
                group.offsets[key] = value
        return results

    @staticmethod
    def _validate_commit(
        group: Group, generation_id: int, member_id: str, instance_id: str | None
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
        if group.state is not GroupState.EMPTY:
            return errors.UnknownMemberId.code
        return NONE

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> list[tuple[str, int, OffsetAndMetadata | None]]:
        """OffsetFetch: the committed offset of each partition (None: none); None = all."""
        self._check_running()
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        if partitions is None:
            return [(t, p, v) for (t, p), v in sorted(offsets.items())]
        return [(t, p, offsets.get((t, p))) for t, p in partitions]

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
        if self._stopped:
            return errors.NotCoordinator.code, {}
        if not group_id:
            return errors.InvalidGroupId.code, {}
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
            try:
                self.store.append(group_id, records)
            except Exception:
                log.exception("offset delete write failed", group=group_id)
                return errors.CoordinatorNotAvailable.code, {}
            for tp in removed:
                del group.offsets[tp]
            if drop_group:
                del self.groups[group_id]
            log.info("offsets deleted", group=group_id, count=len(removed))
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

    def _write_group_metadata(self, group: Group) -> int:
        """Persist the group's membership and assignment; returns an error code (0 = ok)."""
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
        try:
            self.store.append(group.group_id, [group_metadata_record(group.group_id, value)])
        except Exception:
            log.exception("group metadata write failed", group=group.group_id)
            return errors.CoordinatorNotAvailable.code
        group.persisted = value
        return NONE

    # ------------------------------------------------------------------ admin

    def list_groups(self) -> list[tuple[str, str]]:
        return [
            (g.group_id, g.protocol_type or "")
            for g in self.groups.values()
            if g.state is not GroupState.DEAD
        ]

    def describe_group(self, group_id: str) -> Group | None:
        group = self.groups.get(group_id)
        return None if group is None or group.state is GroupState.DEAD else group

    def delete_groups(self, group_ids: list[str]) -> list[int]:
        results = []
        for group_id in group_ids:
            if self._stopped:
                results.append(errors.NotCoordinator.code)
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
            try:
                self.store.append(group_id, records)
            except Exception:
                log.exception("group delete write failed", group=group_id)
                results.append(errors.CoordinatorNotAvailable.code)
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
            self.compact()
        except Exception:
            log.exception("offset expiry / compaction failed")
        self._schedule_expiry()

    # ------------------------------------------------------------------ compaction

    def compact(self, min_records: int | None = None) -> int:
        """Minimal compaction of ``__consumer_offsets`` (Kafka compacts it with its log cleaner,
        which Sluice does not have). Per partition, when the records since the log start
        offset outnumber the live keys by ``min_records`` and by 2x: append every live value of
        the partition's groups again (their offsets and last persisted group metadata, original
        timestamps kept), then move the log start offset to the first restated record
        (``Log.delete_records``). Replay then starts there; the retention pass deletes the
        segments wholly below it (disk is reclaimed once the active segment has rolled).

        Crash-safe at every step: the restated records carry the same values, so a replay
        that sees old records, some or all restated ones, or only the restated ones rebuilds
        the same state. Returns the number of partitions compacted.
        """
        threshold = (
            self.config.offsets_compaction_min_records if min_records is None else min_records
        )
        if self._stopped or not self.store.open():
            return 0
        by_partition: dict[int, list[Group]] = {}
        for group in self.groups.values():
            by_partition.setdefault(self.store.partition_for(group.group_id), []).append(group)
        compacted = 0
        for partition in range(self.store.num_partitions):
            log_ = self.store.log(partition)
            records: list[tuple[bytes, bytes | None]] = []
            for group in by_partition.get(partition, ()):
                for (topic, part), value in sorted(group.offsets.items()):
                    records.append(offset_commit_record(group.group_id, topic, part, value))
                if group.persisted is not None:
                    records.append(group_metadata_record(group.group_id, group.persisted))
            span = log_.log_end_offset - log_.log_start_offset
            if span < threshold + len(records) or span < 2 * len(records):
                continue
            start = log_.log_end_offset
            for i in range(0, len(records), _COMPACTION_CHUNK):
                self.store.append_to(partition, records[i : i + _COMPACTION_CHUNK])
            log_.delete_records(start)
            compacted += 1
            log.info("offsets partition compacted", partition=partition, records_before=span,
                     live=len(records), log_start_offset=start)  # fmt: skip
        return compacted

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
            records = [offset_commit_record(group.group_id, t, p, None) for t, p in expired]
            drop_group = len(expired) == len(group.offsets)
            if drop_group:
                records.append(group_metadata_record(group.group_id, None))
            try:
                self.store.append(group.group_id, records)
            except Exception:
                log.exception("offset expiry write failed", group=group.group_id)
                continue
            for key in expired:
                del group.offsets[key]
            removed += len(expired)
            if drop_group:
                del self.groups[group.group_id]
            log.info("offsets expired", group=group.group_id, count=len(expired))
        return removed
