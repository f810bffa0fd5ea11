"""Cluster mode, this broker's side: ZooKeeper registration, the metadata cache, partition state.

``shared/spec/replication.md`` §2 and §4. With ``zookeeper.connect`` set, the broker holds a
:class:`ClusterMember` that

1. opens a ZooKeeper session (:class:`~sluice.server.zk.client.ZkClient`), creates Kafka's
   top-level paths and **registers** ``/brokers/ids/<id>`` (ephemeral; its czxid is the broker
   epoch);
2. **watches** (instead of Kafka's UpdateMetadata/LeaderAndIsr requests from the controller) the
   live brokers, ``/controller``, the topic list, each topic's assignment and config, and each
   partition's state znode, keeping a :class:`MetadataCache` that the request handlers read;
3. for each partition assigned here, creates its log (``LogManager.create_log``, with the topic
   id of the topic znode, recorded in the log's ``partition.metadata``; a log holding another
   id belongs to an earlier topic of the same name and is neither led nor followed: Kafka's
   INCONSISTENT_TOPIC_ID) the first time a state arrives, **applies the state** to the
   :class:`~sluice.server.replication.replica_manager.ReplicaManager` (which ignores a state not
   newer than the one it holds, by ``(leader_epoch, zkVersion)``) and then starts or stops the
   follower fetcher for it, and tells the leadership listeners (the group coordinator);
4. writes the leader's **ISR changes** to the state znode conditionally on the zkVersion it
   holds (:meth:`KafkaZkClient.update_leader_and_isr`), and runs the ISR shrink check every
   ``replica.lag.time.max.ms / 2``;
5. reports a log taken offline by an I/O error: in its registration (which every controller
   and every broker's Metadata read), then to the controller with a log dir event
   notification (:meth:`ClusterMember._on_log_offline`), which moves its leadership elsewhere;
6. on **session loss** gives up leadership of everything at once (another broker may be elected
   while we cannot hear about it), then, on the new session, checks that ZooKeeper still holds
   this cluster (the ``/cluster/id`` joined: a ZooKeeper restarted on an empty data dir does
   not, and its empty topic list must not delete anything), registers again and re-reads and
   re-applies the state of every hosted partition (a watch does not re-deliver an unchanged
   znode).

A topic gone from ``/brokers/topics`` (deleted by the controller) has its local logs deleted. A
local topic ZooKeeper has no record of when the broker starts (a reset ZooKeeper, another
chroot, a standalone data dir) is kept and reported, never deleted: Kafka's stray logs (see
:meth:`ClusterMember._check_strays`).

Concurrency: everything runs on the event loop; ZooKeeper callbacks arrive there through the
ZkClient. Partition state is applied in the order each watcher delivers it; a state may be
re-applied (after a new session), which the ReplicaManager's fencing makes harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from sluice.protocol import errors
from sluice.protocol.structs import TopicPartition
from sluice.server.logging import get_logger
from sluice.server.metadata.producer_id_manager import BlockProducerIdManager
from sluice.server.replication.partition import IsrUpdate
from sluice.server.replication.replica_fetcher import FetcherConfig, ReplicaFetcherManager

if TYPE_CHECKING:
    from sluice.net.security import ClientSecurity
    from sluice.server.config import Config

    # re-exported for the handlers' annotations (the api room does not import the controller)
    from sluice.server.controller.controller import Controller as Controller
    from sluice.server.replication.partition import Partition
    from sluice.server.replication.replica_manager import ReplicaManager
    from sluice.server.zk.client import SessionEvent, Watcher, ZkClient, ZkTls, ZnodeStat
    from sluice.server.zk.data import BrokerInfo, PartitionState, TopicAssignment
    from sluice.server.zk.kafka_zk import KafkaZkClient

log = get_logger("sluice.cluster")

#: Called after a partition state was applied here (the partition's new leadership).
LeadershipListener = Callable[["Partition"], None]


class MetadataCache:
    """What this broker knows of the cluster (Kafka's ``MetadataCache``), fed by ZooKeeper
    watches; read by the request handlers. Possibly behind ZooKeeper by a watch round trip;
    clients cope with that as they do with Kafka's (they retry on NOT_LEADER_OR_FOLLOWER).

    **A topic's new partitions become visible together.** :attr:`assignments` is every topic
    ZooKeeper has (what CreateTopics, DeleteTopics and the topic bounds check against);
    :attr:`published` is what Metadata shows: a topic's assignment once every one of its
    partitions has a state here. Each state znode has a watch of its own, so the states of a
    new topic (or of partitions just added) arrive one by one; Kafka's controller sends all of
    them to every broker in one UpdateMetadata, and clients rely on that: a client must see a
    new topic either not yet or with a leader for every partition, never partitions 0-2 with
    leaders and partition 3 with none (librdkafka's offsetsForTimes then fails:
    LEADER_NOT_AVAILABLE or UNKNOWN_PARTITION). Until then the topic is answered
    LEADER_NOT_AVAILABLE without partitions (or, when partitions were added, with its
    partitions as before). Once published, a partition stays visible whatever its state: a
    partition that loses its leader later shows -1, as in Kafka. A partition the controller
    could not give a first state (none of its replicas alive) keeps its topic (or its added
    partitions) unpublished until it has one."""

    def __init__(self, local_id: int) -> None:
        self.local_id = local_id
        #: The listener :meth:`address` looks up by default (``inter.broker.listener.name``).
        self.listener = "PLAINTEXT"
        self.brokers: dict[int, BrokerInfo] = {}
        #: The partitions whose log is offline, by broker, as each live broker's registration
        #: says (:attr:`BrokerInfo.offline_partitions`, followed by a data watch per broker:
        #: Kafka's ``replicasOnOfflineDirs`` that its controller sends in UpdateMetadata).
        self.offline: dict[int, frozenset[TopicPartition]] = {}
        self.controller_id = -1
        self.assignments: dict[str, TopicAssignment] = {}
        #: Topic id -> name, of the assignments that have one.
        self.topic_names: dict[uuid.UUID, str] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.published: dict[str, TopicAssignment] = {}
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []

    def address(self, broker_id: int, listener: str | None = None) -> tuple[str, int] | None:
        """Where a live broker listens on ``listener`` (default: :attr:`listener`, the
        inter-broker one), or None: not live, or without that listener (Kafka leaves such a
        broker out of the Metadata of that listener's clients)."""
        info = self.brokers.get(broker_id)
        if info is None:
            return None
        name = listener or self.listener
        endpoint = next((e for e in info.endpoints if e.listener == name), None)
        return None if endpoint is None else (endpoint.host, endpoint.port)

    def topics(self) -> dict[str, int]:
        """Topic -> partition count, for every topic with an assignment."""
        return {t: len(a.partitions) for t, a in self.assignments.items()}

    def has_partition(self, topic: str, partition: int) -> bool:
        assignment = self.assignments.get(topic)
        return assignment is not None and partition in assignment.partitions

    def replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        assignment = self.assignments.get(topic)
        if assignment is None or partition not in assignment.partitions:
            return ()
        return assignment.replicas(partition)

    def state(self, topic: str, partition: int) -> PartitionState | None:
        return self.states.get((topic, partition))

    def offline_replicas(self, topic: str, partition: int) -> list[int]:
        """The partition's replicas that cannot serve (Metadata's ``offline_replicas``, Kafka's
        ``!isReplicaOnline``): on a broker not registered, or whose log of it is offline."""
        tp = TopicPartition(topic, partition)
        return [
            r
            for r in self.replicas(topic, partition)
            if r not in self.brokers or tp in self.offline.get(r, ())
        ]

    def leader(self, topic: str, partition: int) -> int:
        """The partition's live leader, or -1."""
        state = self.states.get((topic, partition))
        if state is None or state.leader not in self.brokers:
            return -1
        return state.leader

    def set_assignment(self, topic: str, assignment: TopicAssignment) -> None:
        held = self.assignments.get(topic)
        if held is not None and held.topic_id is not None:
            self.topic_names.pop(held.topic_id, None)
        self.assignments[topic] = assignment
        if assignment.topic_id is not None:
            self.topic_names[assignment.topic_id] = topic
        self._publish(topic)

    def set_state(self, key: tuple[str, int], state: PartitionState) -> None:
        """Hold ``state`` unless the one held is newer (by leader epoch, then zkVersion); the
        topic is published if this was the last of its partitions without a state."""
        held = self.states.get(key)
        if held is None or (state.leader_epoch, state.zk_version) >= (
            held.leader_epoch,
            held.zk_version,
        ):
            self.states[key] = state
        self._publish(key[0])

    def remove_topic(self, topic: str) -> TopicAssignment | None:
        """Forget a deleted topic; its assignment as held, if any."""
        self.configs.pop(topic, None)
        self.published.pop(topic, None)
        for key in [k for k in self.states if k[0] == topic]:
            del self.states[key]
        held = self.assignments.pop(topic, None)
        if held is not None and held.topic_id is not None:
            self.topic_names.pop(held.topic_id, None)
        return held

    def _publish(self, topic: str) -> None:
        assignment = self.assignments.get(topic)
        if assignment is None or self.published.get(topic) == assignment:
            return
        if all((topic, p) in self.states for p in assignment.partitions):
            self.published[topic] = assignment

    def has_leaders(self, topic: str, partitions: int = 1) -> bool:
        """``topic`` is published with at least ``partitions`` partitions, each with a live
        leader (CreateTopics and CreatePartitions wait for this)."""
        assignment = self.published.get(topic)
        return (
            assignment is not None
            and len(assignment.partitions) >= partitions
            and all(self.leader(topic, p) >= 0 for p in assignment.partitions)
        )

    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait (bounded) until ``predicate()`` holds after some change; its last value."""
        if predicate():
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (predicate, future)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(timeout):
                await future
        except TimeoutError:
            pass
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(entry)
        return predicate()

    def changed(self) -> None:
        """Wake the waiters whose predicate now holds."""
        for predicate, future in list(self._waiters):
            if not future.done() and predicate():
                future.set_result(None)


class ClusterMember:
    """This broker in a ZooKeeper-coordinated cluster; see the module docstring.

    ``start()`` connects, registers and starts the watches; ``stop()`` stops the fetchers and
    the watches and closes the session (the registration goes with it).
    """

    def __init__(
        self,
        config: Config,
        replicas: ReplicaManager,
        advertised: Callable[[], list[tuple[str, str, int]]],
        security: ClientSecurity | None = None,
    ) -> None:
        self.config = config
        self.replicas = replicas
        self.logs = replicas.logs
        self.local_id = config.node_id
        self.cache = MetadataCache(self.local_id)
        self.cache.listener = config.inter_broker_listener
        #: TLS and SASL of the inter-broker client (None: the inter-broker listener is
        #: PLAINTEXT).
        self.security = security
        replicas.known_partition = self.cache.has_partition
        self._advertised = advertised
        self.fetchers = ReplicaFetcherManager(
            replicas,
            self.cache.address,
            FetcherConfig(
                wait_max_ms=config.replica_fetch_wait_max_ms,
                min_bytes=config.replica_fetch_min_bytes,
                max_bytes=config.replica_fetch_max_bytes,
                response_max_bytes=config.replica_fetch_response_max_bytes,
                backoff_ms=config.replica_fetch_backoff_ms,
                request_timeout_ms=config.replica_socket_timeout_ms,
                security=security,
            ),
        )
        self.leadership_listeners: list[LeadershipListener] = []
        #: Awaited with the ZooKeeper client once its session is up, before this broker
        #: registers (the server starts the ZooKeeper credential store here).
        self.session_started: list[Callable[[ZkClient], Awaitable[None]]] = []
        self.producer_ids = BlockProducerIdManager(self._allocate_producer_ids)
        self.zk: ZkClient | None = None
        self.kzk: KafkaZkClient | None = None
        #: Every broker campaigns; the elected one acts (sluice.server.controller).
        self.controller: Controller | None = None
        self.broker_epoch = -1
        #: What the current registration says of ``may_have_lost_unflushed`` (a rewrite of it
        #: keeps it: :meth:`_report_offline`).
        self._registered_lost = False
        #: ``/cluster/id``, shared by every broker of the cluster (Metadata's cluster_id).
        self.cluster_id = ""
        self._watchers: list[Watcher] = []
        #: A data watch on each live broker's registration (its offline partitions).
        self._registration_watchers: dict[int, Watcher] = {}
        #: Serializes the reports of offline logs: the last one written names them all.
        self._report_lock = asyncio.Lock()
        self._topic_watchers: dict[str, list[Watcher]] = {}
        self._state_watchers: dict[tuple[str, int], Watcher] = {}
        #: Partitions whose state watch has reported once (a state, or none yet).
        self._states_read: set[tuple[str, int]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._topics_seen = asyncio.Event()
        #: Whether the ZooKeeper watched is known to hold this cluster's state (the /cluster/id
        #: joined). A new session may be on a ZooKeeper that lost it (a wiped data dir): until
        #: the id is checked, topics gone from /brokers/topics keep their local partitions.
        self._same_cluster = True
        self._stopping = False
        self._leaving = False  # controlled shutdown: no more fetching
        #: Changes of the ISR of partitions led here, stored by this leader or applied from the
        #: controller (a dead follower removed): Kafka's IsrShrinksPerSec / IsrExpandsPerSec.
        self.isr_shrinks = 0
        self.isr_expands = 0

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        from sluice.server.zk.client import ZkClient
        from sluice.server.zk.kafka_zk import KafkaZkClient
        from sluice.server.zk.sasl import zookeeper_sasl

        config = self.config
        assert config.zookeeper_connect is not None
        session = config.zookeeper_session_timeout_ms / 1000
        connect = config.zookeeper_connection_timeout_ms or config.zookeeper_session_timeout_ms
        self.zk = zk = ZkClient(
            config.zookeeper_connect,
            session_timeout=session,
            connect_timeout=connect / 1000,
            tls=self._zookeeper_tls(),
            sasl=zookeeper_sasl(os.environ),  # KAFKA_OPTS' JAAS file, checked by Config.load
            secure_acls=config.zookeeper_set_acl,
        )
        await zk.start()
        self.kzk = kzk = KafkaZkClient(zk)
        await kzk.create_top_level_paths()
        self.cluster_id = await kzk.get_or_create_cluster_id()
        self.logs.ensure_meta_properties(self.local_id, self.cluster_id)
        for hook in self.session_started:  # e.g. the credentials, before others may log in
            await hook(zk)
        # Only this first registration may say so: a later one (a new session of this process)
        # lost nothing.
        lost = self._registered_lost = self.logs.may_have_lost_unflushed
        self.broker_epoch = await kzk.register_broker(self._broker_info(lost))
        zk.add_session_listener(self._on_session)
        self.replicas.set_isr_writer(self._write_isr)
        self.logs.offline_listeners.append(self._on_log_offline)
        self._watchers.append(kzk.watch_brokers(self._on_brokers))
        from sluice.server.zk.data import CONTROLLER_PATH, TOPICS_PATH

        self._watchers.append(zk.watch_data(CONTROLLER_PATH, self._on_controller))
        self._watchers.append(zk.watch_children(TOPICS_PATH, self._on_topics))
        self._spawn(self._shrink_loop(), "isr-shrink")
        from sluice.server.controller.controller import Controller, ControllerSettings

        self.controller = Controller(kzk, self.local_id, ControllerSettings.from_config(config))
        await self.controller.start()
        # Serve Metadata with the cluster's topics and this broker from the first request on
        # (bounded: the watches deliver asynchronously): every topic's partitions with the
        # states they have, so that the topics are published (MetadataCache).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(session):
                await self._topics_seen.wait()
        await self.cache.wait_for(lambda: self.local_id in self.cache.brokers, session)
        await self.cache.wait_for(self._caught_up, session)
        log.info(
            "joined cluster",
            broker_id=self.local_id,
            broker_epoch=self.broker_epoch,
            zookeeper=config.zookeeper_connect,
            topics=len(self.cache.assignments),
            published=len(self.cache.published),
        )

    def _zookeeper_tls(self) -> ZkTls | None:
        """Kafka's ``zookeeper.ssl.*`` keys (``zookeeper.ssl.client.enable``)."""
        from sluice.server.zk.client import ZkTls

        config = self.config
        if not config.zookeeper_ssl_client_enable:
            return None
        return ZkTls(
            truststore=config.zookeeper_ssl_truststore_location,
            keystore=config.zookeeper_ssl_keystore_location,
            keystore_password=config.zookeeper_ssl_keystore_password,
            check_hostname=config.zookeeper_ssl_endpoint_identification_algorithm == "https",
        )

    async def stop(self) -> None:
        self._stopping = True
        with contextlib.suppress(ValueError):
            self.logs.offline_listeners.remove(self._on_log_offline)
        if self.controller is not None:
            await self.controller.stop()  # resigns at once: another broker takes over
        for watcher in self._all_watchers():
            watcher.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.fetchers.shutdown()
        if self.zk is not None:
            await self.zk.close()

    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move this broker's leadership elsewhere before it stops
        (Kafka's ``KafkaServer.controlledShutdown``): ControlledShutdown (API 7) to the
        controller, up to ``controlled.shutdown.max.retries`` times,
        ``controlled.shutdown.retry.backoff.ms`` apart, until nothing replicated is left led
        here; then wait (bounded by the backoff) for the new states to arrive, so this broker
        stops answering as a leader before it closes. Returns whether it succeeded; a failure
        is logged and the broker stops anyway (as Kafka does)."""
        from sluice.net.connection import Connection
        from sluice.net.errors import KafkaConnectionError, KafkaTimeoutError
        from sluice.protocol import messages as m

        config = self.config
        backoff = config.controlled_shutdown_retry_backoff_ms / 1000
        # Stop following first (Kafka's controller sends StopReplica): a follower that kept
        # fetching could be taken back into an ISR the controller just removed it from.
        self._leaving = True
        await self.fetchers.shutdown()
        for attempt in range(1, config.controlled_shutdown_max_retries + 1):
            controller = self.cache.controller_id
            address = self.cache.address(controller) if controller >= 0 else None
            outcome = "no controller"
            if address is not None:
                try:
                    conn = await Connection.open(
                        *address,
                        client_id=f"broker-{self.local_id}",
                        request_timeout_ms=10_000,
                        security=self.security,
                    )
                    try:
                        request = m.ControlledShutdownRequest(
                            broker_id=self.local_id, broker_epoch=self.broker_epoch
                        )
                        resp = await conn.request(m.ControlledShutdown.key, request)
                    finally:
                        conn.close()
                except (KafkaConnectionError, KafkaTimeoutError) as exc:
                    outcome = repr(exc)
                else:
                    remaining = [
                        f"{p.topic_name}-{p.partition_index}" for p in resp.remaining_partitions
                    ]
                    if resp.error_code == 0 and not remaining:
                        await self.cache.wait_for(self._leads_nothing_replicated, backoff)
                        log.info("controlled shutdown done", attempt=attempt, controller=controller)
                        return True
                    outcome = f"error {resp.error_code}, still leading {remaining}"
            log.warning(
                "controlled shutdown not done yet",
                attempt=attempt,
                controller=controller,
                outcome=outcome,
            )
            if attempt < config.controlled_shutdown_max_retries:
                await asyncio.sleep(backoff)
        log.error("controlled shutdown failed: stopping anyway (clients see a failover)")
        return False

    def _caught_up(self) -> bool:
        """Every topic's assignment and every partition's state read once."""
        return all(t in self.cache.assignments for t in self._topic_watchers) and all(
            key in self._states_read for key in self._state_watchers
        )

    def _leads_nothing_replicated(self) -> bool:
        return not any(p.is_leader and len(p.replicas) > 1 for p in self.replicas.partitions())

    def _all_watchers(self) -> list[Watcher]:
        out = list(self._watchers) + list(self._state_watchers.values())
        out.extend(self._registration_watchers.values())
        for watchers in self._topic_watchers.values():
            out.extend(watchers)
        return out

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("cluster task failed", task=task.get_name(), error=repr(task.exception()))

    def rack_of(self, broker_id: int) -> str | None:
        """A live broker's ``broker.rack`` (None: none, or not registered)."""
        info = self.cache.brokers.get(broker_id)
        return None if info is None else info.rack

    def _racks(self) -> dict[int, str | None]:
        """The live brokers' racks (``broker.rack``; None: none), what replica placement
        spreads over (Kafka's ``getBrokerMetadatas``)."""
        return {broker_id: info.rack for broker_id, info in self.cache.brokers.items()}

    def _broker_info(self, may_have_lost_unflushed: bool = False) -> BrokerInfo:
        from sluice.server.zk.data import BrokerInfo, EndPoint

        protocol = self.config.security_protocol
        endpoints = tuple(
            EndPoint(name, host, port, protocol(name).value)
            for name, host, port in self._advertised()
        )
        return BrokerInfo(
            self.local_id,
            endpoints,
            rack=self.config.broker_rack,
            may_have_lost_unflushed=may_have_lost_unflushed,
            offline_partitions=tuple(self.logs.offline_logs()),
        )

    # --- watches -----------------------------------------------------------------------------

    def _on_brokers(self, brokers: dict[int, BrokerInfo]) -> None:
        from sluice.server.zk.data import broker_path

        gone = set(self.cache.brokers) - set(brokers)
        came = set(brokers) - set(self.cache.brokers)
        self.cache.brokers = dict(brokers)
        if gone or came:
            log.info(
                "live brokers", brokers=sorted(brokers), joined=sorted(came), left=sorted(gone)
            )
        assert self.zk is not None
        for broker_id in sorted(set(self._registration_watchers) - set(brokers)):
            self._registration_watchers.pop(broker_id).cancel()
            self.cache.offline.pop(broker_id, None)
        for broker_id in sorted(set(brokers) - set(self._registration_watchers)):
            self._registration_watchers[broker_id] = self.zk.watch_data(
                broker_path(broker_id), functools.partial(self._on_registration, broker_id)
            )
        self.cache.changed()

    def _on_registration(self, broker_id: int, value: tuple[bytes, ZnodeStat] | None) -> None:
        """A live broker's registration (re)written: its offline partitions (Kafka's
        ``BrokerModificationsHandler`` watches the same znode). Membership stays the broker
        list's (:meth:`_on_brokers`); this watch only follows what a registration says."""
        from sluice.server.zk.data import BrokerInfo
        from sluice.server.zk.errors import ZkDataError

        offline: frozenset[TopicPartition] = frozenset()
        if value is not None:
            try:
                info = BrokerInfo.decode(broker_id, value[0], epoch=value[1].czxid)
            except ZkDataError as exc:
                log.error("unreadable broker registration", broker_id=broker_id, error=str(exc))
                return
            offline = frozenset(info.offline_partitions)
        if offline == self.cache.offline.get(broker_id, frozenset()):
            return
        if offline:
            self.cache.offline[broker_id] = offline
            log.warning("replicas offline on a broker", broker_id=broker_id,
                        partitions=sorted(f"{t.topic}-{t.partition}" for t in offline))  # fmt: skip
        else:
            self.cache.offline.pop(broker_id, None)
        self.cache.changed()

    def _on_controller(self, value: tuple[bytes, ZnodeStat] | None) -> None:
        from sluice.server.zk.data import ControllerInfo
        from sluice.server.zk.errors import ZkDataError

        controller = -1
        if value is not None:
            try:
                controller = ControllerInfo.decode(value[0]).broker_id
            except ZkDataError as exc:
                log.error("unreadable /controller", error=str(exc))
        self.cache.controller_id = controller
        self.cache.changed()

    def _on_topics(self, children: list[str] | None) -> None:
        from sluice.server.zk.data import topic_config_path, topic_path

        assert self.zk is not None
        names = set(children or ())
        for topic in sorted(names - set(self._topic_watchers)):
            self._topic_watchers[topic] = [
                self.zk.watch_data(
                    topic_config_path(topic), functools.partial(self._on_topic_config, topic)
                ),
                self.zk.watch_data(
                    topic_path(topic), functools.partial(self._on_assignment, topic)
                ),
            ]
        for topic in sorted(set(self._topic_watchers) - names):
            self._topic_gone(topic, delete_local=self._same_cluster)
        if not self._topics_seen.is_set():
            self._topics_seen.set()
            self._check_strays(names)
        self.cache.changed()

    def _check_strays(self, names: set[str]) -> None:
        """Local partitions of topics ZooKeeper has no record of are kept, never deleted: Kafka's
        stray logs. A broker deletes a partition only when told to (the topic gone from
        ``/brokers/topics`` while it watches, the end of a DeleteTopics; the controller does
        not finish a deletion while a replica's broker is down). A topic ZooKeeper does not
        know may be one deleted in a way this broker missed, or ZooKeeper may have been reset
        or ``zookeeper.connect`` point elsewhere: deleting would then destroy the cluster's
        data, so the partitions are reported, not served, and left for the operator."""
        strays = {
            t: self.logs.hosted_partitions(t) for t in sorted(set(self.logs.topics()) - names)
        }
        if not strays:
            return
        why = (
            "ZooKeeper has no topics at all (a new or reset ZooKeeper, or zookeeper.connect "
            "names another cluster or chroot?)"
            if not names
            else "ZooKeeper has no record of these topics"
        )
        log.warning(
            "stray partitions kept: not served, not deleted; remove their directories by hand "
            "once sure they are not wanted",
            reason=why,
            partitions=[f"{t}-{p}" for t, parts in strays.items() for p in parts],
            zookeeper=self.config.zookeeper_connect,
        )

    def _on_topic_config(self, topic: str, value: tuple[bytes, ZnodeStat] | None) -> None:
        from sluice.server.zk.data import TopicConfig
        from sluice.server.zk.errors import ZkDataError

        config: dict[str, str] = {}
        if value is not None:
            try:
                config = dict(TopicConfig.decode(value[0]).config)
            except ZkDataError as exc:
                log.error(
                    "unreadable topic config: keeping the one held", topic=topic, error=str(exc)
                )
                return
        self.cache.configs[topic] = config
        if self.logs.hosted_partitions(topic) and self.logs.topic_overrides(topic) != config:
            try:
                self.logs.alter_topic_config(topic, config)
                log.info("topic config applied", topic=topic, config=config)
            except Exception as exc:
                log.error("topic config not applied", topic=topic, error=repr(exc))

    def _on_assignment(self, topic: str, value: tuple[bytes, ZnodeStat] | None) -> None:
        from sluice.server.zk.data import TopicAssignment
        from sluice.server.zk.errors import ZkDataError

        if value is None:
            return  # deleted: the topic list watch says so too
        try:
            assignment = TopicAssignment.decode(topic, value[0], value[1].version)
        except ZkDataError as exc:
            log.error("unreadable topic assignment", topic=topic, error=str(exc))
            return
        assert self.kzk is not None
        self.cache.set_assignment(topic, assignment)
        topic_id = assignment.topic_id
        if (
            topic_id is not None
            and self.logs.hosted_partitions(topic)
            and self.logs.topic_id(topic) != topic_id
        ):
            # The controller gave the topic (made by an older Sluice) its id just now.
            for other in self.logs.set_topic_id(topic, topic_id):
                self._inconsistent(topic, other, "log of another topic id")
        for partition in sorted(assignment.partitions):
            key = (topic, partition)
            if key not in self._state_watchers:
                self._state_watchers[key] = self.kzk.watch_partition_state(
                    TopicPartition(topic, partition), functools.partial(self._on_state, key)
                )
        self._follow_reassignment(topic, assignment)
        self.cache.changed()

    def _follow_reassignment(self, topic: str, assignment: TopicAssignment) -> None:
        """A reassignment changed which partitions of ``topic`` are assigned here (Sluice's
        LeaderAndIsr / StopReplica: the brokers watch the topic znode).

        * No longer a replica: stop fetching, give up the partition and delete its log
          (Kafka's StopReplica with ``delete``; the controller has moved leadership and the
          ISR to the target replicas, which hold every acknowledged record). Not on a
          ZooKeeper not known to hold this cluster (see :meth:`_topic_gone`). Also at start-up,
          for a broker that was down when its replica was reassigned away: Kafka's ZooKeeper
          mode never sends that broker its StopReplica and leaves the log as a stray for good;
          here the topic znode says it is not a replica, so it goes.
        * Newly a replica of a partition whose state is held: apply it now, creating the
          log (the controller bumps the epoch as well; this covers the state arriving first).
        """
        if self._stopping:
            return
        hosted = set(self.logs.hosted_partitions(topic))
        for partition, replicas in sorted(assignment.partitions.items()):
            key = (topic, partition)
            if partition in hosted and self.local_id not in replicas.replicas:
                if not self._same_cluster:
                    continue
                self.fetchers.unfollow([key])
                stopped = self.replicas.stop_replica(topic, partition)
                log.info(
                    "replica removed by a reassignment: log deleted",
                    topic=topic,
                    partition=partition,
                    replicas=list(replicas.replicas),
                )
                if stopped is not None:
                    for listener in self.leadership_listeners:
                        try:
                            listener(stopped)
                        except Exception:
                            log.exception(
                                "leadership listener failed", topic=topic, partition=partition
                            )
            elif (
                partition not in hosted
                and self.local_id in replicas.replicas
                and (state := self.cache.state(topic, partition)) is not None
            ):
                self._spawn(self._apply(key, state), f"apply-{topic}-{partition}")

    def _topic_gone(self, topic: str, *, delete_local: bool = True) -> None:
        for watcher in self._topic_watchers.pop(topic, []):
            watcher.cancel()
        held = self.cache.remove_topic(topic)
        count = 0 if held is None else len(held.partitions)
        for key in [k for k in self._state_watchers if k[0] == topic]:
            self._state_watchers.pop(key).cancel()
            self._states_read.discard(key)
        hosted = self.logs.hosted_partitions(topic)
        if hosted:
            self.fetchers.unfollow([(topic, p) for p in hosted])
        if not delete_local:
            log.warning(
                "topic gone from a ZooKeeper not known to hold this cluster's state: its local "
                "partitions are kept (stray, not served)",
                topic=topic,
                partitions=[f"{topic}-{p}" for p in hosted],
            )
            return
        if hosted:
            self.replicas.delete_topic(topic)
        log.info("topic deleted from the cluster", topic=topic, partitions=count, local=hosted)

    async def _on_state(self, key: tuple[str, int], state: PartitionState | None) -> None:
        if state is None:
            if key not in self._states_read:
                self._states_read.add(key)
                self.cache.changed()
            return
        try:
            await self._apply(key, state)
        finally:
            # Held (and its topic possibly published) once applied here: Metadata from this
            # broker does not name it leader of a partition it does not lead yet.
            self.cache.set_state(key, state)
            self._states_read.add(key)
            self.cache.changed()

    async def _apply(self, key: tuple[str, int], state: PartitionState) -> None:
        topic, index = key
        replicas = self.cache.replicas(topic, index)
        if self.local_id not in replicas or self._stopping:
            return
        topic_id = self.cache.assignments[topic].topic_id
        partition = self.replicas.get_partition(topic, index)
        if partition is None:
            if self.logs.get_log(topic, index) is None:
                overrides = self.cache.configs.get(topic)
                if overrides is None:
                    assert self.kzk is not None
                    overrides = dict((await self.kzk.get_topic_config(topic)).config)
                if self.cache.replicas(topic, index) != replicas:
                    return  # the topic changed while we read its config
                try:
                    self.logs.create_log(
                        topic,
                        index,
                        len(self.cache.assignments[topic].partitions),
                        overrides,
                        topic_id,
                    )
                except errors.InconsistentTopicId as exc:
                    self._inconsistent(topic, index, str(exc))
                    return
            partition = self.replicas.host(topic, index)
        if topic_id is not None and topic_id != self.logs.topic_id(topic):
            # A topic an older Sluice created, given its id by the controller since.
            refused = self.logs.set_topic_id(topic, topic_id)
            for other in refused:
                self._inconsistent(topic, other, "log of another topic id")
            if index in refused:
                return
        if state.leader == self.local_id and 0 <= state.mzxid < self.broker_epoch:
            # Leadership given to an earlier incarnation of this broker (a restart faster than
            # the controller, or a new session): that one's log may be gone (a power loss), and
            # leading on it would make the followers truncate to it. The controller sees this
            # broker re-registered and elects again (Controller._reconcile); wait for that.
            log.info(
                "leadership older than this broker's registration: waiting for the controller",
                topic=topic,
                partition=index,
                leader_epoch=state.leader_epoch,
                state_zxid=state.mzxid,
                broker_epoch=self.broker_epoch,
            )
            return
        was_leader, isr_size = partition.is_leader, len(partition.isr)
        applied = self.replicas.apply_partition_state(
            topic,
            index,
            state.leader,
            state.leader_epoch,
            replicas,
            state.isr,
            state.zk_version,
            state.controller_epoch,
        )
        if applied:
            if was_leader and partition.is_leader:
                # The controller changed the ISR of a partition led here (a dead follower
                # removed): a shrink or expansion of this leader's ISR as well.
                self._count_isr_change(isr_size, len(partition.isr))
            self._after_state(partition)

    def _inconsistent(self, topic: str, index: int, why: str) -> None:
        """Kafka's ReplicaManager answers INCONSISTENT_TOPIC_ID to a LeaderAndIsr for a
        partition whose log has another topic id, and neither leads nor follows it."""
        self.fetchers.unfollow([(topic, index)])
        self.replicas.forget(topic, index)
        log.error(
            "partition not led or followed: its log belongs to another topic id "
            "(INCONSISTENT_TOPIC_ID)",
            topic=topic,
            partition=index,
            error=why,
        )

    def _count_isr_change(self, before: int, after: int) -> None:
        if after < before:
            self.isr_shrinks += 1
        elif after > before:
            self.isr_expands += 1

    def _after_state(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        if partition.is_leader or partition.leader_id < 0 or self._leaving or partition.log.offline:
            self.fetchers.unfollow([key])
        else:
            self.fetchers.follow(key, partition.leader_id, partition.leader_epoch)
        for listener in self.leadership_listeners:
            try:
                listener(partition)
            except Exception:
                log.exception("leadership listener failed", topic=key[0], partition=key[1])

    # --- storage failures ------------------------------------------------------------------------

    def _on_log_offline(self, topic: str, index: int) -> None:
        """A log went offline (an I/O error: ``Log._go_offline``): Kafka's
        ``ReplicaManager.handleLogDirFailure`` at the granularity of one log. Its fetcher
        stops, and the controller is told (:meth:`_report_offline`) so that it moves the
        leadership to an in-sync follower and takes this replica out of the ISR.

        Kafka fails the whole log directory and halts the broker when none is left; Sluice
        keeps one directory and takes offline only the log whose in-memory state the error
        broke, so the broker goes on serving every other partition (and stays registered).
        The next start recovers the log (a half-done segment swap completed or rolled
        back) and the replica catches up as any follower."""
        partition = self.replicas.get_partition(topic, index)
        if partition is not None and not partition.is_leader and partition.leader_id >= 0:
            log.error("replica fetching stopped: the local log is offline", topic=topic,
                      partition=index, leader=partition.leader_id)  # fmt: skip
        self.fetchers.unfollow([(topic, index)])
        if self._stopping:
            return
        self._spawn(self._report_offline(), f"log-dir-event-{topic}-{index}")

    async def _report_offline(self) -> None:
        """State every log offline here now in this broker's registration (Kafka's
        ``updateBrokerInfo``; what any controller, also one elected later, and every broker's
        Metadata read: :attr:`BrokerInfo.offline_partitions`), then write the log dir event
        notification that brings the controller to read it (the notice names them too, for
        a controller of an earlier Sluice). Reports run one at a time, each naming every
        offline log, so the last written is complete. A registration gone meanwhile (a lost
        session) is written again by the next registration, with them."""
        from sluice.server.zk.data import LogDirEvent
        from sluice.server.zk.errors import NoNodeError

        assert self.kzk is not None
        kzk = self.kzk
        async with self._report_lock:
            info = self._broker_info(self._registered_lost)
            offline = info.offline_partitions
            with contextlib.suppress(NoNodeError):
                await kzk.until_connected(lambda: kzk.update_broker_info(info))
            event = LogDirEvent(self.local_id, offline)
            path = await kzk.until_connected(lambda: kzk.propagate_log_dir_event(event))
        log.error(
            "log dir failure reported to the controller",
            notification=path,
            partitions=[f"{tp.topic}-{tp.partition}" for tp in offline],
        )

    # --- topic admin (any broker: CreateTopics, DeleteTopics, auto-creation) -------------------

    def validate_new_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignment: Mapping[int, list[int]] | None,
        configs: Mapping[str, str],
    ) -> dict[int, list[int]]:
        """Kafka's checks of a new topic (``AdminZkClient.validateTopicCreate``) against what
        this broker knows; returns the replica assignment (computed with Kafka's placement
        over the live brokers unless given). Raises the KafkaError CreateTopics answers."""
        from sluice.server.controller.assignment import assign_replicas, validate_assignment
        from sluice.server.storage.log_config import LogConfig
        from sluice.server.storage.log_manager import MAX_PARTITIONS, LogManager

        LogManager.validate_topic_name(name)
        if name in self.cache.assignments:
            raise errors.TopicAlreadyExists(f"Topic '{name}' already exists.")
        normalized = name.replace(".", "_")
        for existing in self.cache.assignments:
            if existing.replace(".", "_") == normalized:
                raise errors.InvalidTopic(
                    f"Topic '{name}' collides with existing topic: {existing}"
                )
        LogConfig.from_properties(configs, self.logs.default_config)  # InvalidConfig
        live = sorted(self.cache.brokers)
        if assignment:
            validate_assignment(assignment, live)
            result = {p: list(r) for p, r in assignment.items()}
        else:
            result = assign_replicas(self._racks(), num_partitions, replication_factor)
        if len(result) > MAX_PARTITIONS:
            raise errors.InvalidPartitions(
                f"number of partitions must be in [1, {MAX_PARTITIONS}], not {len(result)}"
            )
        return result

    async def create_topic(
        self,
        name: str,
        assignment: Mapping[int, list[int]],
        configs: Mapping[str, str],
        timeout_ms: int,
    ) -> None:
        """Write a validated topic's assignment and config to ZooKeeper (the controller then
        elects its leaders), and wait up to ``timeout_ms`` for every partition to have a live
        leader here (Kafka's DelayedCreatePartitions); REQUEST_TIMED_OUT if they did not (the
        topic is still being created)."""
        from sluice.protocol.types import random_uuid
        from sluice.server.zk.data import ReplicaAssignment, TopicAssignment
        from sluice.server.zk.errors import NodeExistsError

        assert self.kzk is not None
        topic = TopicAssignment(
            name,
            random_uuid(),
            {p: ReplicaAssignment(tuple(r)) for p, r in sorted(assignment.items())},
        )
        try:
            await self.kzk.create_topic(topic, dict(configs))
        except NodeExistsError:
            raise errors.TopicAlreadyExists(f"Topic '{name}' already exists.") from None
        log.info(
            "topic created in the cluster",
            topic=name,
            partitions=len(assignment),
            assignment={str(p): r for p, r in sorted(assignment.items())},
            config=dict(configs),
        )
        if timeout_ms <= 0:
            return
        if not await self.cache.wait_for(lambda: self.cache.has_leaders(name), timeout_ms / 1000):
            raise errors.RequestTimedOut(
                f"Topic '{name}' was created but not every partition had a leader within "
                f"{timeout_ms} ms"
            )

    async def add_partitions(
        self,
        name: str,
        count: int,
        assignments: list[list[int]] | None,
        timeout_ms: int,
        validate_only: bool,
    ) -> None:
        """CreatePartitions in a cluster (Kafka's ``ZkAdminManager.createPartitions``): read
        the topic's assignment from ZooKeeper, check ``count`` against it, place the new
        partitions (``assignments``, else Kafka's placement continued from the existing
        partitions at the topic's replication factor) and write the grown assignment,
        conditional on the version read (:meth:`KafkaZk.add_partitions`; a concurrent change
        is re-read and checked again). The controller then elects the new partitions' leaders;
        the answer waits up to ``timeout_ms`` for them (REQUEST_TIMED_OUT if they did not)."""
        from dataclasses import replace

        from sluice.server.controller.assignment import assign_replicas, validate_assignment
        from sluice.server.storage.log_manager import MAX_PARTITIONS
        from sluice.server.zk.data import ReplicaAssignment
        from sluice.server.zk.errors import BadVersionError

        assert self.kzk is not None
        for _ in range(5):
            current = await self.kzk.get_topic_assignment(name)
            if current is None:
                raise errors.UnknownTopicOrPartition(f"The topic '{name}' does not exist.")
            have = len(current.partitions)
            if count < have:
                raise errors.InvalidPartitions(
                    f"Topic currently has {have} partitions, which is higher than the "
                    f"requested {count}."
                )
            if count == have:
                raise errors.InvalidPartitions(f"Topic already has {have} partitions.")
            if count > MAX_PARTITIONS:
                raise errors.InvalidPartitions(
                    f"number of partitions must be in [1, {MAX_PARTITIONS}], not {count}"
                )
            rf = len(current.replicas(min(current.partitions)))
            live = sorted(self.cache.brokers)
            if assignments is not None:
                if len(assignments) != count - have:
                    raise errors.InvalidReplicaAssignment(
                        f"Increasing the number of partitions by {count - have} but "
                        f"{len(assignments)} assignments provided."
                    )
                added = {have + i: list(r) for i, r in enumerate(assignments)}
                # Kafka checks the whole topic's assignment as one (same replication factor).
                whole = {p: list(current.replicas(p)) for p in current.partitions}
                validate_assignment({**whole, **added}, set(live) | _replica_ids(whole))
                unknown = sorted(_replica_ids(added) - set(live))
                if unknown:
                    raise errors.InvalidReplicaAssignment(
                        f"Unknown broker(s) in replica assignment: {unknown}."
                    )
            else:
                added = assign_replicas(self._racks(), count - have, rf, start_partition=have)
            if validate_only:
                return
            grown = replace(
                current,
                partitions={
                    **current.partitions,
                    **{p: ReplicaAssignment(tuple(r)) for p, r in added.items()},
                },
            )
            try:
                await self.kzk.add_partitions(grown)
                break
            except BadVersionError:
                continue  # changed since read: check again against what is there now
        else:
            raise errors.RequestTimedOut(f"Topic '{name}' kept changing while adding partitions")
        log.info(
            "partitions added in the cluster",
            topic=name,
            partitions=count,
            assignment={str(p): r for p, r in sorted(added.items())},
        )
        if timeout_ms <= 0:
            return
        cache = self.cache

        if not await cache.wait_for(lambda: cache.has_leaders(name, count), timeout_ms / 1000):
            raise errors.RequestTimedOut(
                f"Partitions were added to '{name}' but not every one had a leader within "
                f"{timeout_ms} ms"
            )

    async def delete_topic(self, name: str) -> None:
        """Ask the controller to delete ``name`` (``/admin/delete_topics/<name>``), as
        Kafka's ZooKeeper-mode DeleteTopics does; UNKNOWN_TOPIC_OR_PARTITION if unknown."""
        assert self.kzk is not None
        if name not in self.cache.assignments:
            raise errors.UnknownTopicOrPartition(f"unknown topic {name!r}")
        await self.kzk.request_topic_deletion(name)
        log.info("topic deletion requested", topic=name)

    async def _allocate_producer_ids(self) -> tuple[int, int]:
        assert self.kzk is not None
        block = await self.kzk.allocate_producer_id_block(self.local_id)
        log.info("producer id block taken", first=block.first, last=block.last)
        return block.first, block.last

    # --- the leader's ISR writes -------------------------------------------------------------

    async def _write_isr(self, update: IsrUpdate) -> int | None:
        """Store a leader's ISR change (conditional on the partition epoch it was computed
        over), with the eligible leader replicas it implies (KIP-966,
        :func:`~sluice.server.controller.election.next_elr`): computed from the state held,
        which the write's condition guarantees is the one it replaces."""
        from sluice.server.controller.election import next_elr
        from sluice.server.zk.data import PartitionState

        assert self.kzk is not None
        held = self.replicas.get_partition(update.topic, update.partition)
        known = self.cache.state(update.topic, update.partition)
        elr: tuple[int, ...] = ()
        if held is not None and known is not None and known.zk_version == update.partition_epoch:
            # The bound below which the high watermark stops (Partition's rule, capped at the
            # replication factor): eligible replicas are safe exactly while it cannot move.
            elr = next_elr(
                held.isr,
                known.eligible_leader_replicas,
                update.isr,
                min(held.min_insync_replicas, len(held.replicas)),
            )
        state = PartitionState(
            leader=update.leader,
            leader_epoch=update.leader_epoch,
            isr=update.isr,
            controller_epoch=update.controller_epoch,
            zk_version=update.partition_epoch,
            eligible_leader_replicas=elr,
        )
        ok, version = await self.kzk.update_leader_and_isr(
            TopicPartition(update.topic, update.partition), state
        )
        if ok:
            # Counted once stored, as Kafka's leader marks its rates after the ZooKeeper write;
            # the partition still holds the ISR the update was computed from.
            held = self.replicas.get_partition(update.topic, update.partition)
            if held is not None:
                self._count_isr_change(len(held.isr), len(update.isr))
            log.info(
                "ISR stored",
                topic=update.topic,
                partition=update.partition,
                isr=list(update.isr),
                eligible_leader_replicas=list(elr),
                partition_epoch=version,
            )
            return version
        return None

    async def _shrink_loop(self) -> None:
        interval = max(self.config.replica_lag_time_max_ms / 2, 10) / 1000
        while True:
            await asyncio.sleep(interval)
            self.replicas.maybe_shrink_isr()

    # --- session -----------------------------------------------------------------------------

    def _on_session(self, event: SessionEvent) -> None:
        from sluice.server.zk.client import SessionState

        if self._stopping:
            return
        if event.state is SessionState.LOST:
            self._same_cluster = False  # until the new session's ZooKeeper is checked
            for partition in self.replicas.resign_all():
                self._after_state(partition)
        elif event.state is SessionState.CONNECTED and event.new_session:
            self._same_cluster = False
            self._spawn(self._rejoin(), "zk-rejoin")

    async def _rejoin(self) -> None:
        """A new session: register again, then re-read and re-apply every hosted partition's
        state (those we led were resigned when the old session was lost)."""
        assert self.kzk is not None
        await self._check_same_cluster()
        await self.kzk.create_top_level_paths()  # gone if ZooKeeper lost its state
        async with self._report_lock:  # a log going offline meanwhile: its report follows
            self._registered_lost = False
            self.broker_epoch = await self.kzk.register_broker(self._broker_info())
        log.info("re-registered", broker_id=self.local_id, broker_epoch=self.broker_epoch)
        for partition in self.replicas.partitions():
            key = (partition.topic, partition.index)
            state = await self.kzk.get_partition_state(TopicPartition(*key))
            if state is not None:
                await self._on_state(key, state)

    async def _check_same_cluster(self) -> None:
        """A lost session may mean a ZooKeeper that lost everything (restarted on an empty data
        dir): its /brokers/topics is empty, and deleting what is gone from it would delete the
        cluster's data. Same /cluster/id: topics gone meanwhile are deleted now (a re-read of
        the topic list). Otherwise they stay, kept as stray partitions until a restart."""
        assert self.kzk is not None
        found = await self.kzk.get_cluster_id()
        if found != self.cluster_id:
            log.error(
                "ZooKeeper does not hold this cluster's state after a new session: topics "
                "missing from it keep their local partitions (stray, not served)",
                cluster_id=self.cluster_id,
                zookeeper_cluster_id=found,
                zookeeper=self.config.zookeeper_connect,
            )
            return
        self._same_cluster = True
        self._on_topics(await self.kzk.get_topics())


def _replica_ids(assignment: Mapping[int, list[int]]) -> set[int]:
    return {b for replicas in assignment.values() for b in replicas}
