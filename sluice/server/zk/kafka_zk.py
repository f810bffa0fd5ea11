"""Kafka's ZooKeeper operations (a subset of Kafka's ``KafkaZkClient``), async, typed.

:class:`KafkaZkClient` wraps a started :class:`~sluice.server.zk.client.ZkClient` and speaks
the znodes of :mod:`sluice.server.zk.data`. Who calls what (spec ``replication.md`` §2):

* **every broker**: :meth:`~KafkaZkClient.create_top_level_paths`,
  :meth:`~KafkaZkClient.register_broker` (its broker epoch is the returned czxid), the readers and
  watchers, topic creation and delete requests (any broker handles CreateTopics/DeleteTopics),
  :meth:`~KafkaZkClient.allocate_producer_id_block`;
* **the partition leader**: :meth:`~KafkaZkClient.update_leader_and_isr`, its ISR changes,
  conditional on the zkVersion it holds;
* **the controller** (after :meth:`~KafkaZkClient.elect_controller`): partition states, topic
  znode deletion, removing delete requests -- every write a multi whose first op checks
  ``/controller_epoch``'s zkVersion (:meth:`~KafkaZkClient.fenced_multi`), so a deposed
  controller's write fails with :class:`ControllerMovedError` and changes nothing.

Fencing, in short (STYLE item 16): the controller epoch fences controllers, the zkVersion of a
partition's state znode (its "partition epoch") fences concurrent state writers (a leader's ISR
change vs. the controller's leader election), the broker epoch (czxid of the registration)
tells a restarted broker from its previous incarnation.

Connection loss: a write whose reply was lost has an unknown outcome. The operations that must
not be repeated blindly recognise their own earlier write (broker registration: the node's
ephemeral owner is our session; election: ``/controller`` is ours at the new epoch; ISR update:
the state equals what we wrote, Kafka 2.6 ``ReplicationUtils.updateLeaderAndIsr``); the others
raise :class:`ConnectionLossError` for the caller to re-read.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from sluice.protocol.structs import TopicPartition
from sluice.server.logging import get_logger

from .client import (
    CheckOp,
    CreateOp,
    DeleteOp,
    Op,
    OpResult,
    SetDataOp,
    WatchCallback,
    Watcher,
    ZkClient,
    ZnodeStat,
)
from .data import (
    BROKER_IDS_PATH,
    CLUSTER_ID_PATH,
    CONTROLLER_EPOCH_PATH,
    CONTROLLER_PATH,
    DELETE_TOPICS_PATH,
    INITIAL_CONTROLLER_EPOCH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    LOG_DIR_EVENT_PREFIX,
    PERSISTENT_PATHS,
    PREFERRED_REPLICA_ELECTION_PATH,
    PRODUCER_ID_BLOCK_PATH,
    REASSIGN_PARTITIONS_PATH,
    TOPICS_PATH,
    BrokerInfo,
    ControllerInfo,
    LogDirEvent,
    PartitionState,
    ProducerIdBlock,
    TopicAssignment,
    TopicConfig,
    broker_path,
    decode_cluster_id,
    decode_controller_epoch,
    decode_log_dir_event,
    decode_partition_reassignment,
    decode_preferred_replica_election,
    delete_topic_path,
    encode_cluster_id,
    encode_controller_epoch,
    encode_log_dir_event,
    encode_partition_reassignment,
    encode_topic_id,
    is_decimal,
    partition_path,
    partition_state_path,
    partitions_path,
    topic_config_path,
    topic_path,
)
from .errors import (
    BadVersionError,
    ClientClosedError,
    ConnectionLossError,
    ControllerMovedError,
    NodeExistsError,
    NoNodeError,
    ZkConnectionError,
    ZkDataError,
    ZkError,
)

__all__ = ["ControllerEpoch", "KafkaZkClient"]

T = TypeVar("T")
log = get_logger("sluice.zk")

#: Partitions whose state znodes one multi creates: two creates each, some 250 bytes, so a
#: multi stays far below ZooKeeper's ``jute.maxbuffer`` (1 MiB by default).
STATES_PER_MULTI = 1000


@dataclass(frozen=True, slots=True)
class ControllerEpoch:
    """What an elected controller fences its writes with: its epoch and the zkVersion of
    ``/controller_epoch`` its election left behind."""

    epoch: int
    zk_version: int


def _setter(event: asyncio.Event) -> WatchCallback:
    """A watch callback that sets ``event`` (bound now, not at call time)."""

    def fire(_: object) -> None:
        event.set()

    return fire


class KafkaZkClient:
    """Kafka's ZooKeeper operations over a started :class:`ZkClient`; see the module docstring.
    Call from the event loop only."""

    def __init__(self, zk: ZkClient) -> None:
        self.zk = zk

    async def get_or_create_cluster_id(self) -> str:
        """The cluster's id (``/cluster/id``), created by the first broker that asks (Kafka's
        ``getOrGenerateClusterId``: a random UUID in Kafka's base64 form); every broker of
        the cluster reads the same one and Metadata reports it."""
        from sluice.protocol.types import random_uuid

        for _ in range(3):
            try:
                data, _ = await self.until_connected(lambda: self.zk.get(CLUSTER_ID_PATH))
                return decode_cluster_id(data)
            except NoNodeError:
                pass
            proposed = encode_topic_id(random_uuid())
            try:
                await self.zk.create(
                    CLUSTER_ID_PATH, encode_cluster_id(proposed), make_parents=True
                )
                log.info("cluster id created", cluster_id=proposed)
                return proposed
            except (NodeExistsError, ConnectionLossError):
                continue  # another broker won, or our reply was lost: read what is there
        raise ZkError("no cluster id after 3 attempts")

    async def get_cluster_id(self) -> str | None:
        """``/cluster/id``, or None while there is none (a new or reset ZooKeeper)."""
        try:
            data, _ = await self.until_connected(lambda: self.zk.get(CLUSTER_ID_PATH))
        except NoNodeError:
            return None
        return decode_cluster_id(data)

    async def create_top_level_paths(self) -> None:
        """Make sure the persistent parents exist (Kafka's ``createTopLevelPaths``)."""
        for path in PERSISTENT_PATHS:
            await self.until_connected(functools.partial(self.zk.ensure_path, path))

    async def until_connected(
        self, request: Callable[[], Awaitable[T]], budget: float | None = None
    ) -> T:
        """Send an **idempotent** request again after a lost connection, once reconnected
        (Kafka's ``retryRequestsUntilConnected``): a ping missed on a loaded machine drops the
        connection but not the session, and a broker starting up then must not give up.
        Bounded by ``budget`` seconds (default: twice the session timeout)."""
        budget = budget if budget is not None else 2 * self.zk.session_timeout + 1.0
        deadline = time.monotonic() + budget
        while True:
            try:
                return await request()
            except ConnectionLossError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise
                log.info("zookeeper connection lost: request sent again once reconnected")
                await self.zk.wait_connected(remaining)

    # --- brokers ----------------------------------------------------------------------------

    async def register_broker(self, info: BrokerInfo, *, wait: float | None = None) -> int:
        """Create ``/brokers/ids/<id>`` (ephemeral) and return the **broker epoch**, its czxid.

        If the node exists and our session owns it, our own create went through (a lost reply):
        that is the registration. If another session owns it -- our previous incarnation whose
        session has not expired yet, after a quick restart -- wait up to ``wait`` seconds
        (default: twice the session timeout) for it to go, then create ours; still there after
        that, it is another live broker with our id: :class:`NodeExistsError`.
        """
        path = broker_path(info.broker_id)
        data = info.encode()
        budget = wait if wait is not None else 2 * self.zk.session_timeout + 1.0
        deadline = time.monotonic() + budget
        while True:
            try:
                _, stat = await self.zk.create(path, data, ephemeral=True)
                log.info("broker registered", broker_id=info.broker_id, broker_epoch=stat.czxid)
                return stat.czxid
            except NodeExistsError:
                pass
            except ConnectionLossError:  # applied or not: look
                await self.zk.wait_connected(max(0.0, deadline - time.monotonic()))
            gone = asyncio.Event()
            try:
                _, stat = await self.zk.get(path, watch=_setter(gone))
            except NoNodeError:
                continue
            if stat.ephemeral_owner == self.zk.session_id:
                return stat.czxid
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NodeExistsError(
                    f"broker id {info.broker_id} is registered by another live session "
                    f"({stat.ephemeral_owner:#x}) after waiting {budget:.1f}s",
                    path=path,
                )
            log.info(
                "waiting for a previous registration to expire",
                broker_id=info.broker_id,
                owner=hex(stat.ephemeral_owner),
            )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await gone.wait()

    async def update_broker_info(self, info: BrokerInfo) -> None:
        """Rewrite our own registration's data (Kafka's ``updateBrokerInfo``: any version; the
        czxid, our broker epoch, stays). :class:`NoNodeError` when it is gone (a lost session:
        the next registration carries ``info``'s content)."""
        await self.zk.set(broker_path(info.broker_id), info.encode())

    async def get_broker(self, broker_id: int) -> BrokerInfo | None:
        """A live broker's registration with its epoch (czxid), or None."""
        try:
            data, stat = await self.zk.get(broker_path(broker_id))
        except NoNodeError:
            return None
        return BrokerInfo.decode(broker_id, data, epoch=stat.czxid)

    async def get_broker_ids(self, watch: WatchCallback | None = None) -> list[int]:
        """Live broker ids, sorted; ``watch`` fires once when the set changes."""
        try:
            children = await self.zk.get_children(BROKER_IDS_PATH, watch=watch)
        except NoNodeError:
            return []
        return sorted(int(c) for c in children if is_decimal(c))

    async def get_all_brokers(self, watch: WatchCallback | None = None) -> dict[int, BrokerInfo]:
        """Every live broker's registration (a broker gone between the listing and the read is
        left out); ``watch`` as for :meth:`get_broker_ids`."""
        ids = await self.get_broker_ids(watch)
        infos = await asyncio.gather(*(self.get_broker(i) for i in ids))
        return {info.broker_id: info for info in infos if info is not None}

    def watch_brokers(
        self, callback: Callable[[dict[int, BrokerInfo]], Awaitable[None] | None]
    ) -> Watcher:
        """Follow the live brokers: ``callback({id: BrokerInfo})`` now and at every change of
        the set (re-armed after reconnects; see :meth:`ZkClient.watch_children`)."""

        async def changed(children: list[str] | None) -> None:
            ids = sorted(int(c) for c in children or () if is_decimal(c))
            infos = await asyncio.gather(*(self.get_broker(i) for i in ids))
            result = callback({i.broker_id: i for i in infos if i is not None})
            if result is not None:
                await result

        return self.zk.watch_children(BROKER_IDS_PATH, changed)

    # --- controller -------------------------------------------------------------------------

    async def get_controller_epoch(self) -> ControllerEpoch | None:
        """``/controller_epoch`` and its zkVersion, None before the first election."""
        try:
            data, stat = await self.zk.get(CONTROLLER_EPOCH_PATH)
        except NoNodeError:
            return None
        return ControllerEpoch(decode_controller_epoch(data), stat.version)

    async def get_controller(self, watch: WatchCallback | None = None) -> ControllerInfo | None:
        """The current controller, or None; ``watch`` fires once when ``/controller`` is
        created, changed or deleted (an exists watch: set whether or not there is one)."""
        stat = await self.zk.exists(CONTROLLER_PATH, watch=watch)
        if stat is None:
            return None
        try:
            data, stat = await self.zk.get(CONTROLLER_PATH)
        except NoNodeError:
            return None
        return ControllerInfo.decode(data, stat.version)

    async def elect_controller(self, broker_id: int) -> ControllerEpoch | None:
        """Try to become controller (Kafka's ``registerControllerAndIncrementControllerEpoch``).

        Read ``/controller_epoch`` (e, v) -- creating it at 0 if absent --, then one multi:
        create ``/controller`` (ephemeral) and set ``/controller_epoch`` to e+1 at version v.
        NodeExists (someone is controller) or BadVersion (someone was elected since our read)
        means we lost: None. After a lost reply, ``/controller`` owned by our session at epoch
        e+1 means we won. Returns the new epoch and the zkVersion to fence writes with.
        """
        current = await self.get_controller_epoch()
        if current is None:
            current = await self._create_controller_epoch()
        new_epoch = current.epoch + 1
        info = ControllerInfo(broker_id)
        try:
            results = await self.zk.multi(
                [
                    CreateOp(CONTROLLER_PATH, info.encode(), ephemeral=True),
                    SetDataOp(
                        CONTROLLER_EPOCH_PATH,
                        encode_controller_epoch(new_epoch),
                        current.zk_version,
                    ),
                ]
            )
        except (NodeExistsError, BadVersionError):
            return await self._check_controller_and_epoch(broker_id, new_epoch)
        except ConnectionLossError:
            await self.zk.wait_connected(self.zk.request_timeout)
            return await self._check_controller_and_epoch(broker_id, new_epoch)
        stat = results[1]
        assert isinstance(stat, ZnodeStat)
        log.info("elected controller", broker_id=broker_id, controller_epoch=new_epoch)
        return ControllerEpoch(new_epoch, stat.version)

    async def _create_controller_epoch(self) -> ControllerEpoch:
        try:
            _, stat = await self.zk.create(
                CONTROLLER_EPOCH_PATH, encode_controller_epoch(INITIAL_CONTROLLER_EPOCH)
            )
            return ControllerEpoch(INITIAL_CONTROLLER_EPOCH, stat.version)
        except NodeExistsError:
            current = await self.get_controller_epoch()
            if current is None:
                raise ZkError(f"{CONTROLLER_EPOCH_PATH} existed and went away") from None
            return current

    async def _check_controller_and_epoch(
        self, broker_id: int, new_epoch: int
    ) -> ControllerEpoch | None:
        try:
            data, stat = await self.zk.get(CONTROLLER_PATH)
        except NoNodeError:
            return None
        controller = ControllerInfo.decode(data, stat.version)
        if controller.broker_id != broker_id or stat.ephemeral_owner != self.zk.session_id:
            return None
        current = await self.get_controller_epoch()
        if current is not None and current.epoch == new_epoch:
            return current
        return None

    async def resign_controller(self, fence: ControllerEpoch) -> None:
        """Delete ``/controller`` if we are still the controller (fenced); a no-op otherwise."""
        with contextlib.suppress(ControllerMovedError, NoNodeError):
            await self.fenced_multi(fence, [DeleteOp(CONTROLLER_PATH)])

    async def fenced_multi(self, fence: ControllerEpoch, ops: Sequence[Op]) -> list[OpResult]:
        """Apply ``ops`` atomically, only while ``/controller_epoch`` is still at
        ``fence.zk_version`` (Kafka's controller-epoch check before every controller write).

        :class:`ControllerMovedError` if another controller was elected since; any other
        failure is raised with ``op_index`` counting the caller's ops (not the check).
        """
        try:
            results = await self.zk.multi([CheckOp(CONTROLLER_EPOCH_PATH, fence.zk_version), *ops])
        except ZkError as exc:
            if exc.op_index is None or isinstance(exc, ZkConnectionError):
                raise
            if exc.op_index == 0:
                raise ControllerMovedError(
                    f"controller epoch {fence.epoch} (zkVersion {fence.zk_version}) is stale",
                    path=CONTROLLER_EPOCH_PATH,
                ) from exc
            raise type(exc)(exc.message, path=exc.path, op_index=exc.op_index - 1) from exc
        return results[1:]

    # --- topics -----------------------------------------------------------------------------

    async def create_topic(
        self, assignment: TopicAssignment, config: Mapping[str, str] | None = None
    ) -> TopicAssignment:
        """Write a new topic's config overrides and assignment (Kafka's
        ``AdminZkClient.createTopicWithAssignment``); the controller, watching
        ``/brokers/topics``, then creates its partition states. :class:`NodeExistsError` if the
        topic exists. Returns the assignment with its zkVersion."""
        topic = assignment.topic
        if await self.zk.exists(topic_path(topic)) is not None:
            raise NodeExistsError(f"topic {topic!r} already exists", path=topic_path(topic))
        await self.set_topic_config(topic, config or {})
        _, stat = await self.zk.create(topic_path(topic), assignment.encode(), make_parents=True)
        return replace(assignment, zk_version=stat.version)

    async def get_topics(self, watch: WatchCallback | None = None) -> list[str]:
        """Every topic with an assignment, sorted; ``watch`` fires once on a change."""
        try:
            return sorted(await self.zk.get_children(TOPICS_PATH, watch=watch))
        except NoNodeError:
            return []

    async def get_topic_assignment(
        self, topic: str, watch: WatchCallback | None = None
    ) -> TopicAssignment | None:
        """A topic's assignment with its zkVersion, or None; ``watch`` fires once when it changes
        or is deleted (only set if it exists)."""
        try:
            data, stat = await self.zk.get(topic_path(topic), watch=watch)
        except NoNodeError:
            return None
        return TopicAssignment.decode(topic, data, stat.version)

    async def get_topic_assignments(self, topics: Iterable[str]) -> dict[str, TopicAssignment]:
        """The assignments of ``topics`` that exist (read concurrently)."""
        names = list(topics)
        found = await asyncio.gather(*(self.get_topic_assignment(t) for t in names))
        return {t: a for t, a in zip(names, found, strict=True) if a is not None}

    async def add_partitions(self, assignment: TopicAssignment) -> TopicAssignment:
        """Any broker (CreatePartitions) writes a topic's grown assignment, as Kafka's
        ``AdminZkClient.addPartitions`` does -- not fenced (it is no controller decision), but
        conditional on ``assignment.zk_version`` (:class:`BadVersionError` if the topic changed
        since it was read). The controller's watch on the znode then creates the new
        partitions' states."""
        path = topic_path(assignment.topic)
        stat = await self.zk.set(path, assignment.encode(), assignment.zk_version)
        return replace(assignment, zk_version=stat.version)

    async def set_topic_assignment(
        self, assignment: TopicAssignment, fence: ControllerEpoch
    ) -> TopicAssignment:
        """The controller rewrites an assignment (added partitions, reassignment), conditional
        on ``assignment.zk_version`` and fenced."""
        (stat,) = await self.fenced_multi(
            fence,
            [SetDataOp(topic_path(assignment.topic), assignment.encode(), assignment.zk_version)],
        )
        assert isinstance(stat, ZnodeStat)
        return replace(assignment, zk_version=stat.version)

    # --- partition state --------------------------------------------------------------------

    async def create_partition_states(
        self, topic: str, states: Mapping[int, PartitionState], fence: ControllerEpoch
    ) -> dict[int, PartitionState | ZkError]:
        """The controller creates a new topic's partition state znodes (Kafka's
        ``createTopicPartitionStatesRaw``): ``.../partitions/<p>`` and its ``state`` for every
        partition in one fenced multi (up to :data:`STATES_PER_MULTI` partitions each), so
        ZooKeeper holds none or all of them -- as Kafka's controller sends a new topic's
        partitions to the brokers in one batch. If one of them exists already (a partition
        another controller created), each partition of that multi is created again in one of
        its own, so the others still get theirs. Returns each partition's created state (with
        zkVersion 0) or its error (:class:`NodeExistsError` if it already had one). A stale
        fence raises :class:`ControllerMovedError` for the lot, a topic without an assignment
        znode :class:`NoNodeError`."""
        with contextlib.suppress(NodeExistsError):
            await self.fenced_multi(fence, [CreateOp(partitions_path(topic))])
        out: dict[int, PartitionState | ZkError] = {}
        ordered = sorted(states.items())
        for start in range(0, len(ordered), STATES_PER_MULTI):
            chunk = ordered[start : start + STATES_PER_MULTI]
            try:
                await self.fenced_multi(
                    fence, [op for p, s in chunk for op in _state_ops(topic, p, s)]
                )
            except NodeExistsError:
                for partition, state in chunk:
                    try:
                        await self.fenced_multi(fence, _state_ops(topic, partition, state))
                        out[partition] = replace(state, zk_version=0)
                    except NodeExistsError as exc:
                        out[partition] = exc
            else:
                out.update((partition, replace(state, zk_version=0)) for partition, state in chunk)
        return out

    async def get_partition_state(
        self, tp: TopicPartition, watch: WatchCallback | None = None
    ) -> PartitionState | None:
        """A partition's state with its zkVersion, or None; ``watch`` fires once when it changes
        (only set if it exists)."""
        path = partition_state_path(tp)
        try:
            data, stat = await self.zk.get(path, watch=watch)
        except NoNodeError:
            return None
        return replace(PartitionState.decode(data, stat.version, what=path), mzxid=stat.mzxid)

    async def get_partition_states(
        self, tps: Iterable[TopicPartition]
    ) -> dict[TopicPartition, PartitionState]:
        """The states of ``tps`` that exist (read concurrently)."""
        wanted = list(tps)
        found = await asyncio.gather(*(self.get_partition_state(tp) for tp in wanted))
        return {tp: s for tp, s in zip(wanted, found, strict=True) if s is not None}

    def watch_partition_state(
        self,
        tp: TopicPartition,
        callback: Callable[[PartitionState | None], Awaitable[None] | None],
    ) -> Watcher:
        """Follow a partition's state (the broker's replacement for LeaderAndIsr requests):
        ``callback(state)`` now and after every change, None while it does not exist. The
        caller applies a state only if its ``(leader_epoch, zk_version)`` is newer than the one
        it holds."""
        path = partition_state_path(tp)

        def decoded(value: tuple[bytes, ZnodeStat] | None) -> Awaitable[None] | None:
            if value is None:
                return callback(None)
            data, stat = value
            return callback(
                replace(PartitionState.decode(data, stat.version, what=path), mzxid=stat.mzxid)
            )

        return self.zk.watch_data(path, decoded)

    async def update_leader_and_isr(
        self, tp: TopicPartition, new_state: PartitionState
    ) -> tuple[bool, int]:
        """The leader's conditional state write (Kafka 2.6 ``ReplicationUtils
        .updateLeaderAndIsr``): set the state znode to ``new_state`` only if it is still at
        ``new_state.zk_version`` (the version the leader read).

        Returns ``(True, new zkVersion)`` on success, ``(False, -1)`` if someone else wrote the
        state first (the controller elected another leader, or changed the ISR): the leader
        keeps its ISR and waits for the new state. BadVersion is not always a conflict: if our
        first attempt was applied and its reply lost, the retry finds a newer version -- so on
        BadVersion we re-read, and **equal data means the write was ours**: success with the
        version found (Kafka's ``checkLeaderAndIsrZkData``). A connection loss is retried (on
        reconnect) within the client's ``request_timeout``.
        """
        path = partition_state_path(tp)
        data = new_state.encode()
        deadline = time.monotonic() + self.zk.request_timeout
        while True:
            try:
                stat = await self.zk.set(path, data, new_state.zk_version)
                return True, stat.version
            except BadVersionError:
                return await self._check_state_written(tp, new_state)
            except NoNodeError:
                return False, -1
            except ClientClosedError:
                raise
            except ZkConnectionError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise
                await self.zk.wait_connected(remaining)

    async def _check_state_written(
        self, tp: TopicPartition, expected: PartitionState
    ) -> tuple[bool, int]:
        written = await self.get_partition_state(tp)
        if written is not None and written.same_data(expected):
            return True, written.zk_version
        return False, -1

    async def set_partition_states(
        self, topic: str, states: Mapping[int, PartitionState], fence: ControllerEpoch
    ) -> dict[int, PartitionState | ZkError]:
        """The controller's state writes (leader election, ISR shrink of a dead broker): per
        partition a fenced set conditional on ``state.zk_version``. Returns the written state
        (new zkVersion) or the error: :class:`BadVersionError` means the leader changed the
        ISR since the controller's read -- re-read and decide again (Kafka's
        ``partitionsToRetry``). A stale fence raises :class:`ControllerMovedError`."""
        out: dict[int, PartitionState | ZkError] = {}
        for partition, state in sorted(states.items()):
            tp = TopicPartition(topic, partition)
            try:
                (stat,) = await self.fenced_multi(
                    fence, [SetDataOp(partition_state_path(tp), state.encode(), state.zk_version)]
                )
                assert isinstance(stat, ZnodeStat)
                out[partition] = replace(state, zk_version=stat.version)
            except (BadVersionError, NoNodeError) as exc:
                out[partition] = exc
        return out

    # --- reassignment and preferred election requests (the tools' znodes) --------------------

    async def get_partition_reassignment(
        self, watch: WatchCallback | None = None
    ) -> dict[TopicPartition, tuple[int, ...]] | None:
        """``/admin/reassign_partitions``, or None without one; ``watch`` fires once when it is
        created, changed or deleted (set on its existence either way)."""
        return await self._get_admin(REASSIGN_PARTITIONS_PATH, decode_partition_reassignment, watch)

    async def get_preferred_replica_election(
        self, watch: WatchCallback | None = None
    ) -> set[TopicPartition] | None:
        """``/admin/preferred_replica_election``, as :meth:`get_partition_reassignment`."""
        return await self._get_admin(
            PREFERRED_REPLICA_ELECTION_PATH, decode_preferred_replica_election, watch
        )

    async def _get_admin(
        self, path: str, decode: Callable[[bytes], T], watch: WatchCallback | None
    ) -> T | None:
        while True:
            if await self.zk.exists(path, watch=watch) is None:
                return None
            try:
                data, _ = await self.zk.get(path)
            except NoNodeError:
                continue  # deleted between the two reads: the watch is set, look again
            return decode(data)

    async def create_partition_reassignment(
        self, reassignment: Mapping[TopicPartition, Sequence[int]]
    ) -> None:
        """A tool's request (as Kafka's old ``--zookeeper`` tool wrote it);
        :class:`NodeExistsError` while one is pending."""
        await self.zk.create(
            REASSIGN_PARTITIONS_PATH, encode_partition_reassignment(reassignment), make_parents=True
        )

    async def set_partition_reassignment(
        self, reassignment: Mapping[TopicPartition, Sequence[int]], fence: ControllerEpoch
    ) -> None:
        """The controller's rewrite of the pending request (entries done or failed removed);
        empty: the znode is deleted (Kafka's ``maybeRemoveFromZkReassignment``)."""
        path = REASSIGN_PARTITIONS_PATH
        with contextlib.suppress(NoNodeError):
            if reassignment:
                await self.fenced_multi(
                    fence, [SetDataOp(path, encode_partition_reassignment(reassignment))]
                )
            else:
                await self.fenced_multi(fence, [DeleteOp(path)])

    async def delete_preferred_replica_election(self, fence: ControllerEpoch) -> None:
        with contextlib.suppress(NoNodeError):
            await self.fenced_multi(fence, [DeleteOp(PREFERRED_REPLICA_ELECTION_PATH)])

    # --- log dir events ---------------------------------------------------------------------

    async def propagate_log_dir_event(self, event: LogDirEvent) -> str:
        """A broker's storage-failure notice for the controller (Kafka's
        ``propagateLogDirEvent``: a persistent sequential child of
        ``/log_dir_event_notification``); returns its path."""
        path, _ = await self.zk.create(
            f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{LOG_DIR_EVENT_PREFIX}",
            encode_log_dir_event(event),
            sequence=True,
            make_parents=True,
        )
        return path

    async def get_log_dir_events(
        self, watch: WatchCallback | None = None
    ) -> list[tuple[str, int, LogDirEvent | None]]:
        """The pending notices as (child name, its czxid, the notice; None: unreadable) in
        sequence order; ``watch`` fires once when the children change."""
        try:
            names = await self.zk.get_children(LOG_DIR_EVENT_NOTIFICATION_PATH, watch=watch)
        except NoNodeError:
            return []
        out: list[tuple[str, int, LogDirEvent | None]] = []
        for name in sorted(n for n in names if n.startswith(LOG_DIR_EVENT_PREFIX)):
            path = f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{name}"
            try:
                data, stat = await self.zk.get(path)
            except NoNodeError:
                continue
            try:
                out.append((name, stat.czxid, decode_log_dir_event(data, path)))
            except ZkDataError as exc:
                log.warning("unreadable log dir event notification", path=path, error=str(exc))
                out.append((name, stat.czxid, None))
        return out

    async def delete_log_dir_events(self, names: Iterable[str], fence: ControllerEpoch) -> None:
        """Delete processed notices (fenced, as Kafka's ``deleteLogDirEventNotifications``);
        one already gone is fine."""
        for name in names:
            with contextlib.suppress(NoNodeError):
                await self.fenced_multi(
                    fence, [DeleteOp(f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{name}")]
                )

    # --- topic config -----------------------------------------------------------------------

    async def get_topic_config(self, topic: str) -> TopicConfig:
        """A topic's config overrides (empty if none) with the znode's zkVersion (-1 if none)."""
        path = topic_config_path(topic)
        try:
            data, stat = await self.zk.get(path)
        except NoNodeError:
            return TopicConfig({})
        return TopicConfig.decode(data, stat.version, what=path)

    async def set_topic_config(self, topic: str, config: Mapping[str, str]) -> TopicConfig:
        """Replace a topic's config overrides (Kafka's ``setOrCreateEntityConfigs``: set, or
        create if absent)."""
        path = topic_config_path(topic)
        value = TopicConfig(dict(config))
        try:
            stat = await self.zk.set(path, value.encode())
        except NoNodeError:
            try:
                _, stat = await self.zk.create(path, value.encode(), make_parents=True)
            except NodeExistsError:  # created meanwhile: ours wins, as a set would
                stat = await self.zk.set(path, value.encode())
        return replace(value, zk_version=stat.version)

    # --- topic deletion ---------------------------------------------------------------------

    async def request_topic_deletion(self, topic: str) -> None:
        """Ask the controller to delete ``topic`` (``/admin/delete_topics/<t>``, empty data);
        a request already pending is fine."""
        with contextlib.suppress(NodeExistsError):
            await self.zk.create(delete_topic_path(topic), make_parents=True)

    async def get_topic_deletions(self, watch: WatchCallback | None = None) -> list[str]:
        """Topics with a pending delete request, sorted; ``watch`` fires once on a change."""
        try:
            return sorted(await self.zk.get_children(DELETE_TOPICS_PATH, watch=watch))
        except NoNodeError:
            return []

    async def delete_topic(self, topic: str, fence: ControllerEpoch) -> None:
        """The controller's last step of a deletion: remove the topic's znodes (assignment,
        partition states, config) and the delete request, in one fenced multi, so a topic is
        never half-deleted in ZooKeeper."""
        paths: list[str] = []
        await self._collect_subtree(topic_path(topic), paths)
        for extra in (topic_config_path(topic), delete_topic_path(topic)):
            if await self.zk.exists(extra) is not None:
                paths.append(extra)
        if paths:
            await self.fenced_multi(fence, [DeleteOp(p) for p in paths])

    async def _collect_subtree(self, path: str, out: list[str]) -> None:
        """``path`` and its descendants, children before parents (the order deletes need)."""
        try:
            children = await self.zk.get_children(path)
        except NoNodeError:
            return
        for child in sorted(children):
            await self._collect_subtree(f"{path}/{child}", out)
        out.append(path)

    # --- producer ids -----------------------------------------------------------------------

    async def allocate_producer_id_block(
        self, broker_id: int, size: int = ProducerIdBlock.DEFAULT_SIZE, attempts: int = 20
    ) -> ProducerIdBlock:
        """Take the next block of producer ids (Kafka's ``ZkProducerIdManager``): read
        ``/latest_producer_id_block``, write the block after it conditionally on the version
        read; a concurrent taker makes us read again. Blocks never overlap. A lost reply
        raises :class:`ConnectionLossError`; calling again takes the next block (a skipped
        block is harmless, a repeated one would not be)."""
        for _ in range(attempts):
            try:
                data, stat = await self.zk.get(PRODUCER_ID_BLOCK_PATH)
            except NoNodeError:
                data, stat = b"", None
            first = ProducerIdBlock.decode(data).last + 1 if data else 0
            block = ProducerIdBlock(broker_id, first, first + size - 1)
            try:
                if stat is None:
                    await self.zk.create(PRODUCER_ID_BLOCK_PATH, block.encode())
                else:
                    await self.zk.set(PRODUCER_ID_BLOCK_PATH, block.encode(), stat.version)
            except (BadVersionError, NodeExistsError):
                continue
            return block
        raise ZkError(f"no producer id block after {attempts} attempts: too much contention")


def _state_ops(topic: str, partition: int, state: PartitionState) -> list[Op]:
    tp = TopicPartition(topic, partition)
    return [CreateOp(partition_path(tp)), CreateOp(partition_state_path(tp), state.encode())]
