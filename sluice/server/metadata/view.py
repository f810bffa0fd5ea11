"""One interface for what the request handlers read of the cluster (Kafka's ``MetadataCache``):
its id, its live brokers and controller, the topics and, per partition, leader, leader epoch,
replicas and ISR -- and for what they change in it: topics created, grown and deleted, topic
configs, producer ids handed out, a group's coordinator found (the offsets topic created).
:class:`LocalMetadata` answers for a standalone broker -- a one-broker cluster that leads every
partition and is its own controller, changing its LogManager on the spot; :class:`ZkMetadata`
answers from the cache a cluster member keeps of ZooKeeper and changes ZooKeeper. Handlers ask
the interface and never which one it is: their checks (authorization, request validity, the
topic limits) are made once, in the handler, for both.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol

from sluice.protocol import errors
from sluice.server.group.offsets_store import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIG, partition_for
from sluice.server.logging import get_logger
from sluice.server.storage.meta_properties import LEGACY_STANDALONE_CLUSTER_ID
from sluice.server.transaction.state_log import TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from sluice.server.metadata.producer_id_manager import ProducerIdManager
    from sluice.server.metadata.zk_cluster import ClusterMember
    from sluice.server.replication.replica_manager import ReplicaManager
    from sluice.server.storage.log_manager import LogManager

log = get_logger("sluice.metadata")


class BrokerEndpoint(NamedTuple):
    broker_id: int
    host: str
    port: int
    rack: str | None


class PartitionMetadata(NamedTuple):
    """One partition as Metadata answers it; ``leader`` -1: none live (LEADER_NOT_AVAILABLE)."""

    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]


class TopicConfigStore(Protocol):
    """Where topic config overrides live: standalone the LogManager's topic metadata, in a
    cluster ZooKeeper's ``/config/topics/<t>`` (every broker hosting the topic applies it from
    its watch)."""

    def topic_overrides(self, topic: str) -> dict[str, str]:
        """The topic's overrides; UNKNOWN_TOPIC_OR_PARTITION if it does not exist."""
        ...

    async def alter_topic_config(self, topic: str, overrides: Mapping[str, str]) -> None:
        """Replace the topic's overrides with ``overrides`` (already validated)."""
        ...


class LocalTopicConfigs:
    """Standalone: the overrides the LogManager keeps, applied to the open logs on a change."""

    def __init__(self, logs: LogManager) -> None:
        self._logs = logs

    def topic_overrides(self, topic: str) -> dict[str, str]:
        return self._logs.topic_overrides(topic)

    async def alter_topic_config(self, topic: str, overrides: Mapping[str, str]) -> None:
        self._logs.alter_topic_config(topic, overrides)


class MetadataView(TopicConfigStore, Protocol):
    """What the handlers read of the cluster, standalone and clustered alike."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def controller_id(self) -> int: ...

    def brokers(self) -> list[BrokerEndpoint]:
        """The live brokers, by id."""
        ...

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The topic's id (None: no such topic, or one without an id yet)."""
        ...

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The topic with that id, or None (UNKNOWN_TOPIC_ID)."""
        ...

    def topics(self) -> dict[str, int]:
        """Topic -> partition count, every topic of the cluster."""
        ...

    def published_topics(self) -> dict[str, int]:
        """Topic -> partition count as Metadata shows them: a cluster shows a new topic (and
        added partitions) only once every partition has its state here
        (:class:`~sluice.server.metadata.zk_cluster.MetadataCache`), so no answer lists some
        partitions with leaders and others without; standalone, :meth:`topics`."""
        ...

    def being_created(self, name: str) -> bool:
        """``name`` exists in the cluster but is not published here yet (its leaders are on
        their way)."""
        ...

    def partition(self, topic: str, index: int) -> PartitionMetadata | None:
        """The partition's leadership as known here; None: not known (yet)."""
        ...

    def auto_create_topic(self, name: str, partitions: int, created: Callable[[], None]) -> int:
        """Create ``name`` for a Metadata request (``auto.create.topics.enable``); the code to
        answer now: 0 when it exists already (standalone: created on the spot),
        LEADER_NOT_AVAILABLE while it is being created, else why not. ``created`` is called once
        it exists."""
        ...

    async def allocate_producer_id(self) -> int:
        """A producer id no other broker of the cluster hands out (InitProducerId); raises when
        none can be had now (a cluster's ZooKeeper unreachable: retriable for the client)."""
        ...

    def group_coordinator(self, group: str) -> tuple[int, BrokerEndpoint | None]:
        """FindCoordinator for a consumer group: (0, the broker leading the group's
        ``__consumer_offsets`` partition), or (error code, None) while there is none, the
        offsets topic being created if it does not exist yet."""
        ...

    def transaction_coordinator(self, transactional_id: str) -> tuple[int, BrokerEndpoint | None]:
        """FindCoordinator for a transactional id: as :meth:`group_coordinator`, over
        ``__transaction_state``."""
        ...

    async def delete_topic(self, name: str) -> None:
        """Delete ``name`` (standalone now; a cluster's controller deletes it in the
        background); raises why not."""
        ...

    async def wait_deleted(self, names: list[str], timeout_ms: int) -> set[str]:
        """Wait, bounded by ``timeout_ms``, until ``names`` are gone from this broker's view
        (Kafka's DelayedDeleteTopics); those still there."""
        ...

    async def add_partitions(
        self,
        name: str,
        count: int,
        assignments: list[list[int]] | None,
        timeout_ms: int,
        validate_only: bool,
    ) -> None:
        """CreatePartitions: grow ``name`` to ``count`` partitions (``assignments``: one
        replica list per new partition), or only check it can be (``validate_only``); a
        cluster's answer waits, bounded by ``timeout_ms``, for the new leaders. Raises why
        not, with Kafka's messages."""
        ...

    def validate_new_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignment: Mapping[int, list[int]] | None,
        configs: Mapping[str, str],
    ) -> dict[int, list[int]]:
        """CreateTopics' checks of a new topic (Kafka's ``validateTopicCreate``: name, not
        there yet, configs, partitions, replicas); its replica assignment, ``assignment`` or
        Kafka's placement over the live brokers. Raises the KafkaError to answer."""
        ...

    async def create_topic(
        self,
        name: str,
        assignment: Mapping[int, list[int]],
        configs: Mapping[str, str],
        timeout_ms: int,
    ) -> None:
        """Create a validated topic; returns once it is published on this broker (a cluster:
        bounded by ``timeout_ms``, REQUEST_TIMED_OUT while its leaders are on their way)."""
        ...


class LocalMetadata(LocalTopicConfigs):
    """A standalone broker as a one-broker cluster: the broker (``node.id`` at its advertised
    address) is every partition's only replica, leader and ISR, and the controller."""

    def __init__(
        self,
        node_id: int,
        advertised: Callable[[], tuple[str, int]],
        logs: LogManager,
        replicas: ReplicaManager,
        producer_ids: ProducerIdManager,
        groups_ready: Callable[[], int],
        *,
        rack: str | None = None,
    ) -> None:
        self._node_id = node_id
        self._rack = rack  # broker.rack, shown in Metadata and DescribeCluster
        self._advertised = advertised
        self._logs = logs
        self._replicas = replicas
        self._producer_ids = producer_ids
        #: The group coordinator's ``ensure_ready``: creates the offsets topic here if needed.
        self._groups_ready = groups_ready
        #: The transaction coordinator's ``ensure_ready`` (set by the broker once it exists).
        self.transactions_ready: Callable[[], int] = lambda: errors.CoordinatorNotAvailable.code

    @property
    def cluster_id(self) -> str:
        """The data directory's (``meta.properties``)."""
        return self._logs.cluster_id or LEGACY_STANDALONE_CLUSTER_ID

    def topic_id(self, name: str) -> uuid.UUID | None:
        return self._logs.topic_id(name)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._logs.topic_name(topic_id)

    @property
    def controller_id(self) -> int:
        return self._node_id

    def brokers(self) -> list[BrokerEndpoint]:
        host, port = self._advertised()
        return [BrokerEndpoint(self._node_id, host, port, self._rack)]

    def topics(self) -> dict[str, int]:
        return self._logs.topics()

    def published_topics(self) -> dict[str, int]:
        return self._logs.topics()

    def being_created(self, name: str) -> bool:
        return False

    def partition(self, topic: str, index: int) -> PartitionMetadata | None:
        partition = self._replicas.get_partition(topic, index)
        if partition is None:  # listed by the LogManager but not open: no leader to offer
            return None
        return PartitionMetadata(
            partition.leader_id,
            partition.leader_epoch,
            list(partition.replicas),
            list(partition.isr),
            [],
        )

    def auto_create_topic(self, name: str, partitions: int, created: Callable[[], None]) -> int:
        try:
            self._logs.create_topic(name, partitions)
        except errors.KafkaError as exc:
            return exc.code
        created()
        log.info("auto-created topic", topic=name, partitions=partitions)
        return 0

    async def allocate_producer_id(self) -> int:
        return self._producer_ids.generate()

    def group_coordinator(self, group: str) -> tuple[int, BrokerEndpoint | None]:
        """This broker coordinates every group."""
        code = self._groups_ready()
        if code:
            return code, None
        return 0, self.brokers()[0]

    def transaction_coordinator(self, transactional_id: str) -> tuple[int, BrokerEndpoint | None]:
        """This broker coordinates every transactional id."""
        code = self.transactions_ready()
        if code:
            return code, None
        return 0, self.brokers()[0]

    async def delete_topic(self, name: str) -> None:
        self._replicas.delete_topic(name)  # parked fetches answer (with an error) now
        log.info("deleted topic", topic=name)

    async def wait_deleted(self, names: list[str], timeout_ms: int) -> set[str]:
        return set()  # deleted on the spot

    async def add_partitions(
        self,
        name: str,
        count: int,
        assignments: list[list[int]] | None,
        timeout_ms: int,
        validate_only: bool,
    ) -> None:
        """Added now (``LogManager.add_partitions``) and led here."""
        current = self._logs.validate_new_partition_count(name, count)
        if assignments is not None:
            self._check_assignments(assignments, count - current)
        if not validate_only:
            made = self._logs.add_partitions(name, count)
            self._replicas.lead([(made_log.topic, made_log.partition) for made_log in made])
            log.info("partitions added", topic=name, partitions=count)

    def validate_new_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignment: Mapping[int, list[int]] | None,
        configs: Mapping[str, str],
    ) -> dict[int, list[int]]:
        """A one-broker cluster: every partition's only replica is this broker."""
        node = self._node_id
        if assignment:
            for replicas in assignment.values():
                if list(replicas) != [node]:
                    raise errors.InvalidReplicaAssignment(
                        f"single broker: every partition's replicas must be [{node}]"
                    )
            num_partitions = len(assignment)
        else:
            if replication_factor != 1:
                raise errors.InvalidReplicationFactor(
                    f"replication factor {replication_factor}: a single broker supports only 1"
                )
            if num_partitions <= 0:
                raise errors.InvalidPartitions(
                    f"number of partitions must be > 0, got {num_partitions}"
                )
        self._logs.validate_new_topic(name, num_partitions, configs)
        return {p: [node] for p in range(num_partitions)}

    async def create_topic(
        self,
        name: str,
        assignment: Mapping[int, list[int]],
        configs: Mapping[str, str],
        timeout_ms: int,
    ) -> None:
        """Created now (``LogManager.create_topic``) and led here (``ReplicaManager.lead``)."""
        made = self._logs.create_topic(name, len(assignment), configs)
        self._replicas.lead([(made_log.topic, made_log.partition) for made_log in made])
        log.info("created topic", topic=name, partitions=len(assignment))

    def _check_assignments(self, assignments: list[list[int]], added: int) -> None:
        if len(assignments) != added:
            raise errors.InvalidReplicaAssignment(
                f"Increasing the number of partitions by {added} but "
                f"{len(assignments)} assignments provided."
            )
        node = self._node_id
        for replicas in assignments:
            if replicas != [node]:
                raise errors.InvalidReplicaAssignment(
                    f"single broker: every new partition's replicas must be [{node}], "
                    f"not {replicas}"
                )


class ZkMetadata:
    """A cluster member's view: its cache of ZooKeeper (brokers, controller, assignments,
    partition states). Possibly a watch round trip behind; clients retry as with Kafka's."""

    def __init__(
        self,
        cluster: ClusterMember,
        default_replication_factor: int,
        creating: set[str],
        tasks: set[asyncio.Task[None]],
        offsets_topic: tuple[int, int],
        listener: Callable[[], str | None] = lambda: None,
        transaction_topic: tuple[int, int, dict[str, str]] = (50, 3, {}),
        *,
        offsets_topic_config: Mapping[str, str] = OFFSETS_TOPIC_CONFIG,
    ) -> None:
        self._cluster = cluster
        #: The offsets topic's settings (``offsets.topic.segment.bytes``...) at its creation.
        self._offsets_topic_config = dict(offsets_topic_config)
        #: The listener of the request being answered: brokers are listed at their endpoints
        #: on it (None: the inter-broker one).
        self._listener = listener
        self._replication_factor = default_replication_factor
        #: ``offsets.topic.num.partitions`` and ``offsets.topic.replication.factor``.
        self._offsets_topic = offsets_topic
        #: ``transaction.state.log.num.partitions``, its replication factor, topic configs.
        self._transaction_topic = transaction_topic
        #: Topics being created in the background, shared with the broker's other creators
        #: (the group coordinator's offsets topic), so that one topic is created once.
        self._auto_creating = creating
        self._background = tasks

    @property
    def cluster_id(self) -> str:
        return self._cluster.cluster_id

    def topic_id(self, name: str) -> uuid.UUID | None:
        assignment = self._cluster.cache.assignments.get(name)
        return None if assignment is None else assignment.topic_id

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._cluster.cache.topic_names.get(topic_id)

    @property
    def controller_id(self) -> int:
        return self._cluster.cache.controller_id

    def brokers(self) -> list[BrokerEndpoint]:
        cache = self._cluster.cache
        out = []
        for broker_id, info in sorted(cache.brokers.items()):
            address = cache.address(broker_id, self._listener())
            if address is not None:
                out.append(BrokerEndpoint(broker_id, address[0], address[1], info.rack))
        return out

    def topics(self) -> dict[str, int]:
        return self._cluster.cache.topics()

    def published_topics(self) -> dict[str, int]:
        return {t: len(a.partitions) for t, a in self._cluster.cache.published.items()}

    def being_created(self, name: str) -> bool:
        cache = self._cluster.cache
        return name in cache.assignments and name not in cache.published

    def partition(self, topic: str, index: int) -> PartitionMetadata | None:
        cache = self._cluster.cache
        if not cache.has_partition(topic, index):
            return None
        replicas = list(cache.replicas(topic, index))
        state = cache.state(topic, index)
        return PartitionMetadata(
            cache.leader(topic, index),
            -1 if state is None else state.leader_epoch,
            replicas,
            [] if state is None else list(state.isr),
            cache.offline_replicas(topic, index),
        )

    def auto_create_topic(self, name: str, partitions: int, created: Callable[[], None]) -> int:
        """Written to ZooKeeper in the background; LEADER_NOT_AVAILABLE meanwhile, as Kafka."""
        cluster = self._cluster
        try:
            assignment = cluster.validate_new_topic(
                name, partitions, self._replication_factor, None, {}
            )
        except errors.KafkaError as exc:
            return exc.code
        if name not in self._auto_creating:
            self._create_in_background(name, assignment, {}, "auto-creating a topic", created)
        return errors.LeaderNotAvailable.code

    async def allocate_producer_id(self) -> int:
        """From the block this broker holds, a new block from ZooKeeper when it is used up
        (Kafka's ``ZkProducerIdManager``)."""
        return await self._cluster.producer_ids.generate()

    async def delete_topic(self, name: str) -> None:
        await self._cluster.delete_topic(name)

    async def wait_deleted(self, names: list[str], timeout_ms: int) -> set[str]:
        """A timeout of 0 does not wait: the deletions were asked, nothing is reported late."""
        cache = self._cluster.cache
        if not names or timeout_ms <= 0:
            return set()
        gone = await cache.wait_for(
            lambda: not any(n in cache.assignments for n in names), timeout_ms / 1000
        )
        return set() if gone else {n for n in names if n in cache.assignments}

    async def add_partitions(
        self,
        name: str,
        count: int,
        assignments: list[list[int]] | None,
        timeout_ms: int,
        validate_only: bool,
    ) -> None:
        """The grown assignment written to ZooKeeper (:meth:`ClusterMember.add_partitions`)."""
        await self._cluster.add_partitions(name, count, assignments, timeout_ms, validate_only)

    def validate_new_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignment: Mapping[int, list[int]] | None,
        configs: Mapping[str, str],
    ) -> dict[int, list[int]]:
        """Against this broker's cache (:meth:`ClusterMember.validate_new_topic`)."""
        return self._cluster.validate_new_topic(
            name, num_partitions, replication_factor, assignment, configs
        )

    async def create_topic(
        self,
        name: str,
        assignment: Mapping[int, list[int]],
        configs: Mapping[str, str],
        timeout_ms: int,
    ) -> None:
        """Written to ZooKeeper, the controller electing the leaders
        (:meth:`ClusterMember.create_topic`)."""
        await self._cluster.create_topic(name, assignment, configs, timeout_ms)

    def topic_overrides(self, topic: str) -> dict[str, str]:
        """From the cache (any broker answers for any topic)."""
        cache = self._cluster.cache
        if topic not in cache.assignments:
            raise errors.UnknownTopicOrPartition(f"unknown topic {topic!r}")
        return dict(cache.configs.get(topic, {}))

    async def alter_topic_config(self, topic: str, overrides: Mapping[str, str]) -> None:
        """The znode written; the brokers hosting the topic apply it from their watches."""
        kzk = self._cluster.kzk
        assert kzk is not None
        await kzk.set_topic_config(topic, overrides)

    def group_coordinator(self, group: str) -> tuple[int, BrokerEndpoint | None]:
        """The leader of ``partitionFor(group)``; COORDINATOR_NOT_AVAILABLE while the offsets
        topic has no live leader there, or does not exist yet (then it is created, with
        ``offsets.topic.replication.factor`` replicas once that many brokers are alive, as
        Kafka's ``createInternalTopic``)."""
        partitions, rf = self._offsets_topic
        return self._coordinator(OFFSETS_TOPIC, group, partitions, rf, self._offsets_topic_config)

    def transaction_coordinator(self, transactional_id: str) -> tuple[int, BrokerEndpoint | None]:
        """The leader of the id's ``__transaction_state`` partition (as :meth:`group_coordinator`,
        with ``transaction.state.log.*``)."""
        partitions, rf, configs = self._transaction_topic
        return self._coordinator(TRANSACTION_STATE_TOPIC, transactional_id, partitions, rf, configs)

    def _coordinator(
        self, topic: str, key: str, num_partitions: int, rf: int, configs: Mapping[str, str]
    ) -> tuple[int, BrokerEndpoint | None]:
        cache = self._cluster.cache
        assignment = cache.assignments.get(topic)
        unavailable = errors.CoordinatorNotAvailable.code, None
        if assignment is None:
            self._create_internal_topic(topic, num_partitions, rf, configs)
            return unavailable
        partition = partition_for(key, len(assignment.partitions))
        leader = cache.leader(topic, partition)
        address = cache.address(leader, self._listener()) if leader >= 0 else None
        if address is None:
            return unavailable
        broker = cache.brokers.get(leader)
        return 0, BrokerEndpoint(
            leader, address[0], address[1], None if broker is None else broker.rack
        )

    def _create_internal_topic(
        self, topic: str, num_partitions: int, rf: int, configs: Mapping[str, str]
    ) -> None:
        cluster = self._cluster
        if topic in self._auto_creating:
            return
        if len(cluster.cache.brokers) < rf:
            log.warning(
                "cannot create an internal topic yet",
                topic=topic,
                live_brokers=len(cluster.cache.brokers),
                replication_factor=rf,
            )
            return
        try:
            assignment = cluster.validate_new_topic(topic, num_partitions, rf, None, configs)
        except errors.TopicAlreadyExists:
            return
        self._create_in_background(topic, assignment, configs, "creating an internal topic")

    def _create_in_background(
        self,
        topic: str,
        assignment: Mapping[int, list[int]],
        configs: Mapping[str, str],
        what: str,
        created: Callable[[], None] | None = None,
    ) -> None:
        """Write a validated topic to ZooKeeper in a background task (one at a time per name:
        ``_auto_creating``); a topic created meanwhile by someone else is no failure."""
        cluster = self._cluster
        self._auto_creating.add(topic)

        async def create() -> None:
            try:
                await cluster.create_topic(topic, assignment, configs, 0)
                if created is not None:
                    created()
            except errors.TopicAlreadyExists:
                pass
            except Exception as exc:
                log.warning(f"{what} failed", topic=topic, error=repr(exc))
            finally:
                self._auto_creating.discard(topic)

        task = asyncio.get_running_loop().create_task(create())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
