"""Consumer-group membership for :class:`sluice.client.consumer.Consumer` (Kafka's classic
protocol).

:class:`GroupMember` runs one background task per subscribed consumer:

1. FindCoordinator (key = group id) -> the coordinator's connection;
2. JoinGroup (v4+: the first join answers MEMBER_ID_REQUIRED with our member id; join again
   with it), offering the ``consumer`` protocol with the assignors in ``assignors`` and a
   ConsumerProtocol subscription (our topics);
3. the leader computes the assignment (range or roundrobin, like Kafka's assignors: every
   member's subscription is read from the JoinGroup response) and sends it in SyncGroup;
   followers get theirs from SyncGroup;
4. the consumer is told its partitions (``on_assign``) and fetches committed offsets for them;
5. Heartbeat every ``heartbeat_interval_ms``; REBALANCE_IN_PROGRESS -> rejoin (the consumer
   commits first if auto-commit is on, via ``on_revoke``), UNKNOWN_MEMBER_ID /
   ILLEGAL_GENERATION -> rejoin with a fresh member id, a broken connection -> rediscover the
   coordinator.

``leave()`` sends LeaveGroup so the partitions move at once instead of after a session timeout.
ConsumerProtocol subscription / assignment blobs are encoded by
:mod:`sluice.protocol.consumer_protocol`.
Single event loop; not thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from sluice.net.connection import Connection
from sluice.protocol import consumer_protocol, messages
from sluice.protocol.errors import KafkaError, ProtocolError, for_code

from .cluster import Cluster, TopicPartition, find_coordinator
from .errors import KafkaConnectionError, KafkaTimeoutError

__all__ = [
    "GroupDescription",
    "GroupMember",
    "MemberDescription",
    "PartitionLag",
    "decode_assignment",
    "decode_subscription",
    "delete_groups",
    "describe_group",
    "encode_assignment",
    "encode_subscription",
    "list_groups",
    "range_assign",
    "roundrobin_assign",
]

JOIN_GROUP = messages.JoinGroup.key
SYNC_GROUP = messages.SyncGroup.key
HEARTBEAT = messages.Heartbeat.key
LEAVE_GROUP = messages.LeaveGroup.key
OFFSET_COMMIT = messages.OffsetCommit.key
OFFSET_FETCH = messages.OffsetFetch.key

MEMBER_ID_REQUIRED = 79
REBALANCE_IN_PROGRESS = 27
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
NOT_COORDINATOR = 16
COORDINATOR_NOT_AVAILABLE = 15


def encode_subscription(topics: Iterable[str]) -> bytes:
    return consumer_protocol.encode_subscription(topics)


def decode_subscription(data: bytes) -> list[str]:
    return consumer_protocol.decode_subscription(data)


def encode_assignment(partitions: Iterable[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return consumer_protocol.encode_assignment(by_topic)


def decode_assignment(data: bytes) -> set[TopicPartition]:
    return {
        TopicPartition(topic, p)
        for topic, parts in consumer_protocol.decode_assignment(data).items()
        for p in parts
    }


def range_assign(
    subscriptions: dict[str, list[str]], partitions: dict[str, int]
) -> dict[str, set[TopicPartition]]:
    """Kafka's RangeAssignor: per topic, members sorted by id take consecutive ranges; the
    first ``n % members`` get one more."""
    out: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    topics = {t for ts in subscriptions.values() for t in ts}
    for topic in sorted(topics):
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        count = partitions.get(topic, 0)
        if not members or not count:
            continue
        per, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            n = per + (1 if i < extra else 0)
            out[member].update(TopicPartition(topic, p) for p in range(start, start + n))
            start += n
    return out


def roundrobin_assign(
    subscriptions: dict[str, list[str]], partitions: dict[str, int]
) -> dict[str, set[TopicPartition]]:
    """Kafka's RoundRobinAssignor: all partitions sorted, dealt to the subscribed members in
    member-id order."""
    out: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    members = sorted(subscriptions)
    i = 0
    for topic in sorted({t for ts in subscriptions.values() for t in ts}):
        for p in range(partitions.get(topic, 0)):
            for _ in range(len(members)):
                member = members[i % len(members)]
                i += 1
                if topic in subscriptions[member]:
                    out[member].add(TopicPartition(topic, p))
                    break
    return out


ASSIGNORS: dict[
    str, Callable[[dict[str, list[str]], dict[str, int]], dict[str, set[TopicPartition]]]
] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
}


class GroupMember:
    """Membership of one consumer in ``group_id`` (see the module docstring)."""

    def __init__(
        self,
        cluster: Cluster,
        group_id: str,
        *,
        topics: list[str],
        on_assign: Callable[[set[TopicPartition]], Awaitable[None]],
        on_revoke: Callable[[set[TopicPartition]], Awaitable[None]],
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 300_000,
        heartbeat_interval_ms: int = 3_000,
        retry_backoff_ms: int = 100,
        assignors: tuple[str, ...] = ("range", "roundrobin"),
        group_instance_id: str | None = None,
        coordinator_timeout_ms: int = 30_000,
    ) -> None:
        for name in assignors:
            if name not in ASSIGNORS:
                raise ValueError(f"unknown assignor {name!r} (range, roundrobin)")
        self.cluster = cluster
        self.group_id = group_id
        self.topics = list(topics)
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.assignors = assignors
        self.group_instance_id = group_instance_id
        self.coordinator_timeout_ms = coordinator_timeout_ms
        self.member_id = ""
        self.generation = -1
        self.assignment: set[TopicPartition] = set()
        self._coordinator: Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._rejoin = asyncio.Event()
        self.joined = asyncio.Event()  # set while the member has a current assignment

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def resubscribe(self, topics: list[str]) -> None:
        self.topics = list(topics)
        self._rejoin.set()

    async def stop(self, *, leave: bool = True) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if leave and self.member_id and self._coordinator is not None:
            body = messages.LeaveGroupRequest(
                group_id=self.group_id,
                member_id=self.member_id,
                members=[
                    messages.LeaveGroupRequest.MemberIdentity(
                        member_id=self.member_id, group_instance_id=self.group_instance_id
                    )
                ],
            )
            with contextlib.suppress(KafkaError, KafkaConnectionError, KafkaTimeoutError):
                await self._coordinator.request(LEAVE_GROUP, body, timeout_ms=5_000)
        self.member_id = ""
        self.generation = -1
        self.joined.clear()

    # --- coordinator -------------------------------------------------------------------------

    async def coordinator(self) -> Connection:
        """The coordinator's connection (FindCoordinator when unknown or broken)."""
        conn = self._coordinator
        if conn is not None and not conn.closed:
            return conn
        self._coordinator = None
        _node, self._coordinator = await find_coordinator(
            self.cluster, self.group_id, 0, f"group {self.group_id!r}", self.coordinator_timeout_ms,
            self.retry_backoff_ms,
        )  # fmt: skip
        return self._coordinator

    # --- the membership loop -----------------------------------------------------------------

    async def _run(self) -> None:
        backoff = self.retry_backoff_ms / 1000
        while True:
            try:
                await self._join_and_sync()
                await self._heartbeat_until_rejoin()
            except asyncio.CancelledError:
                raise
            except (KafkaConnectionError, KafkaTimeoutError):
                self._coordinator = None
                await asyncio.sleep(backoff)
            except KafkaError as exc:
                if exc.code in (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE):
                    self._coordinator = None
                if exc.code in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
                    self.member_id, self.generation = "", -1
                if not exc.retriable and exc.code not in (
                    UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS,
                ):  # fmt: skip
                    raise
                await asyncio.sleep(backoff)

    async def _join_and_sync(self) -> None:
        self._rejoin.clear()
        self.joined.clear()
        if self.assignment:
            await self.on_revoke(self.assignment)
        conn = await self.coordinator()
        metadata = encode_subscription(self.topics)
        proto = messages.JoinGroupRequest.JoinGroupRequestProtocol
        while True:
            body = messages.JoinGroupRequest(
                group_id=self.group_id,
                session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type="consumer",
                protocols=[proto(name=n, metadata=metadata) for n in self.assignors],
            )
            resp = await conn.request(
                JOIN_GROUP, body, timeout_ms=self.rebalance_timeout_ms + 5_000
            )
            if resp.error_code == MEMBER_ID_REQUIRED:
                self.member_id = resp.member_id
                continue
            if resp.error_code:
                raise for_code(resp.error_code)("JoinGroup")
            break
        self.member_id, self.generation = resp.member_id, resp.generation_id
        assignments: list[messages.SyncGroupRequest.SyncGroupRequestAssignment] = []
        if resp.leader == resp.member_id:
            assignments = await self._assign(resp.protocol_name, resp.members)
        sync_body = messages.SyncGroupRequest(
            group_id=self.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            assignments=assignments,
        )
        timeout_ms = self.rebalance_timeout_ms + 5_000
        sync = await conn.request(SYNC_GROUP, sync_body, timeout_ms=timeout_ms)
        if sync.error_code:
            raise for_code(sync.error_code)("SyncGroup")
        self.assignment = decode_assignment(bytes(sync.assignment))
        await self.on_assign(self.assignment)
        self.joined.set()

    async def _assign(
        self, protocol: str, members: list[messages.JoinGroupResponse.JoinGroupResponseMember]
    ) -> list[messages.SyncGroupRequest.SyncGroupRequestAssignment]:
        subscriptions = {m.member_id: decode_subscription(bytes(m.metadata)) for m in members}
        topics = sorted({t for ts in subscriptions.values() for t in ts})
        await self.cluster.refresh(topics)
        counts = {t: self.cluster.partition_count(t) or 0 for t in topics}
        result = ASSIGNORS[protocol](subscriptions, counts)
        item = messages.SyncGroupRequest.SyncGroupRequestAssignment
        return [item(member_id=m, assignment=encode_assignment(tps)) for m, tps in result.items()]

    async def _heartbeat_until_rejoin(self) -> None:
        conn = await self.coordinator()
        interval = self.heartbeat_interval_ms / 1000
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._rejoin.wait()
            if self._rejoin.is_set():
                return
            body = messages.HeartbeatRequest(
                group_id=self.group_id,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
            )
            resp = await conn.request(HEARTBEAT, body)
            if resp.error_code == REBALANCE_IN_PROGRESS:
                return
            if resp.error_code:
                raise for_code(resp.error_code)("Heartbeat")

    # --- offsets -----------------------------------------------------------------------------

    async def commit(self, offsets: dict[TopicPartition, tuple[int, str]]) -> None:
        """OffsetCommit ``{tp: (offset, metadata)}`` with this member's generation (or as a
        standalone consumer when it has none). Raises the first partition error."""
        if not offsets:
            return
        conn = await self.coordinator()
        req = messages.OffsetCommitRequest
        topics: dict[str, list[messages.OffsetCommitRequest.OffsetCommitRequestPartition]] = {}
        for tp, (offset, meta) in offsets.items():
            topics.setdefault(tp.topic, []).append(
                req.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                    partition_index=tp.partition, committed_offset=offset, committed_metadata=meta
                )
            )
        body = req(
            group_id=self.group_id,
            generation_id_or_member_epoch=self.generation,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            topics=[
                req.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()
            ],
        )
        resp = await conn.request(OFFSET_COMMIT, body)
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code:
                    if p.error_code in (
                        REBALANCE_IN_PROGRESS,
                        ILLEGAL_GENERATION,
                        UNKNOWN_MEMBER_ID,
                    ):
                        self._rejoin.set()
                    raise for_code(p.error_code)(f"OffsetCommit {t.name}-{p.partition_index}")

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, str] | None]:
        """OffsetFetch: ``{tp: (offset, metadata)}``, None where nothing is committed."""
        tps = list(partitions)
        conn = await self.coordinator()
        req = messages.OffsetFetchRequest
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        body = req(
            group_id=self.group_id,
            topics=[
                req.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                for t, ps in by_topic.items()
            ],
        )
        resp = await conn.request(OFFSET_FETCH, body)
        if resp.error_code:
            raise for_code(resp.error_code)("OffsetFetch")
        out: dict[TopicPartition, tuple[int, str] | None] = {tp: None for tp in tps}
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code:
                    raise for_code(p.error_code)(f"OffsetFetch {t.name}-{p.partition_index}")
                if p.committed_offset >= 0:
                    out[TopicPartition(t.name, p.partition_index)] = (
                        p.committed_offset,
                        p.metadata or "",
                    )
        return out


# --- group administration: the calls behind ``sluice groups`` ---------------------------------


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One partition of a group: committed offset (None: none), log end offset, lag
    (log end - committed; None without a commit) and the member consuming it (None: nobody)."""

    tp: TopicPartition
    committed: int | None
    log_end_offset: int
    lag: int | None
    member_id: str | None


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    partitions: tuple[PartitionLag, ...]


EndOffsets = Callable[[list[TopicPartition]], Awaitable[dict[TopicPartition, int]]]


async def _coordinator_for(cluster: Cluster, group_id: str) -> Connection:
    member = GroupMember(cluster, group_id, topics=[], on_assign=_nothing, on_revoke=_nothing)
    return await member.coordinator()


async def _nothing(_partitions: set[TopicPartition]) -> None:
    return None


async def list_groups(cluster: Cluster) -> list[tuple[str, str]]:
    """``(group_id, protocol_type)`` of every group of every broker."""
    await cluster.refresh([])
    out: list[tuple[str, str]] = []
    for node in sorted(cluster.brokers):
        conn = await cluster.connection(node)
        resp = await conn.request(messages.ListGroups.key, messages.ListGroupsRequest())
        if resp.error_code:
            raise for_code(resp.error_code)("ListGroups")
        out += [(g.group_id, g.protocol_type) for g in resp.groups]
    return sorted(out)


async def describe_group(
    cluster: Cluster, group_id: str, end_offsets: EndOffsets
) -> GroupDescription:
    """State, members and per-partition lag of ``group_id`` (like kafka-consumer-groups
    --describe): partitions with a committed offset or assigned to a member."""
    conn = await _coordinator_for(cluster, group_id)
    resp = await conn.request(
        messages.DescribeGroups.key, messages.DescribeGroupsRequest(groups=[group_id])
    )
    (g,) = resp.groups
    if g.error_code:
        raise for_code(g.error_code)(f"DescribeGroups {group_id}")
    members = []
    for m in g.members:
        assigned: set[TopicPartition] = set()
        if g.protocol_type == "consumer" and m.member_assignment:
            with contextlib.suppress(ProtocolError):
                assigned = decode_assignment(bytes(m.member_assignment))
        members.append(
            MemberDescription(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, frozenset(assigned)
            )
        )
    fetch = await conn.request(
        OFFSET_FETCH, messages.OffsetFetchRequest(group_id=group_id, topics=None)
    )
    if fetch.error_code:
        raise for_code(fetch.error_code)(f"OffsetFetch {group_id}")
    committed = {
        TopicPartition(t.name, p.partition_index): p.committed_offset
        for t in fetch.topics
        for p in t.partitions
        if p.committed_offset >= 0
    }
    owner = {tp: m.member_id for m in members for tp in m.assignment}
    tps = sorted(set(committed) | set(owner))
    ends = await end_offsets(tps) if tps else {}
    rows = []
    for tp in tps:
        end = ends.get(tp, -1)
        done = committed.get(tp)
        lag = max(end - done, 0) if done is not None and end >= 0 else None
        rows.append(PartitionLag(tp, done, end, lag, owner.get(tp)))
    return GroupDescription(
        group_id, g.group_state, g.protocol_type, g.protocol_data, tuple(members), tuple(rows)
    )


async def delete_groups(cluster: Cluster, group_ids: list[str]) -> dict[str, KafkaError | None]:
    """DeleteGroups (each must be empty): the error of each group, None when deleted."""
    out: dict[str, KafkaError | None] = {}
    for group_id in group_ids:
        conn = await _coordinator_for(cluster, group_id)
        resp = await conn.request(
            messages.DeleteGroups.key, messages.DeleteGroupsRequest(groups_names=[group_id])
        )
        for r in resp.results:
            out[r.group_id] = for_code(r.error_code)(r.group_id) if r.error_code else None
    return out
