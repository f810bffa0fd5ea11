"""The broker process: Config -> Server -> one Connection per client -> Handlers ->
ReplicaManager / GroupCoordinator -> LogManager.

``Server`` owns startup and the shutdown order:

1. startup: open the LogManager on ``log.dirs`` (loads/recovers every partition, removes the
   clean-shutdown marker), start its background tasks, build the ReplicaManager (leader of every
   partition), the group coordinator (loads ``__consumer_offsets``) and the producer id
   manager, then bind the listeners (and serve ``/metrics`` with ``sluice.metrics.listener``),
   in a cluster join it (ACLs and credentials loaded from ZooKeeper, then the registration),
   and only then accept connections;
2. shutdown (first SIGTERM/SIGINT, or :meth:`shutdown`): stop accepting connections (and
   scrapes) -> stop
   reading new requests and complete parked fetches and produces, stop the group coordinator ->
   let in-flight requests finish, bounded by
   ``sluice.shutdown.timeout.ms`` -> close the connections -> stop the LogManager's tasks and
   close it (flush, checkpoints, clean-shutdown marker);
3. a second SIGINT while shutting down forces it: connections are aborted at once (the logs are
   still flushed and closed, which is quick and keeps the next start from a full recovery).

Everything runs on one event loop thread (uvloop when the entrypoint runs it); the storage layer
is synchronous and called only from that thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import signal
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sluice.protocol import messages as m
from sluice.server.api.handlers import Handlers
from sluice.server.config import Config, ConfigError, MetricsListener
from sluice.server.config_def import NO_BOUND
from sluice.server.logging import get_logger
from sluice.server.metadata.producer_id_manager import ProducerIdManager
from sluice.server.metrics.metrics import Metrics
from sluice.server.network.connection import Connection
from sluice.server.network.listener import ListenerSecurity
from sluice.server.network.quotas import ClientQuotas, ConnectionQuotas, RequestQuota
from sluice.server.network.request import CloseConnection
from sluice.server.replication.partition import ReplicationSettings
from sluice.server.replication.replica_manager import ReplicaManager
from sluice.server.security.errors import SecurityError

if TYPE_CHECKING:
    import ssl

    from sluice.net.security import ClientSecurity
    from sluice.server.group.coordinator import GroupCoordinator
    from sluice.server.metadata.zk_cluster import ClusterMember
    from sluice.server.metrics.prometheus import MetricsEndpoint
    from sluice.server.replication.partition import Partition
    from sluice.server.replication.txn_markers import MarkerChannel
    from sluice.server.security.authenticator import SaslServerAuthenticator
    from sluice.server.security.authorizer import AclAuthorizer, ZkAclStore
    from sluice.server.security.credentials import CredentialStore, ZkCredentialStore
    from sluice.server.security.entity_configs import EntityConfigs, ZkEntityConfigs
    from sluice.server.storage.log_manager import LogManager
    from sluice.server.storage.vfs import VFS
    from sluice.server.transaction.coordinator import TransactionCoordinator

log = get_logger("sluice.server")
#: Kafka's ``request.timeout.ms`` default: how long the transaction coordinator's log writes and
#: markers wait for replication before they are retried.
_REQUEST_TIMEOUT_MS = 30_000
_NOT_SEEN = object()

#: A standalone broker's ACLs (Kafka's ZooKeeper layout as one JSON file) in ``log.dirs``.
ACL_FILE = "sluice-acls.json"
#: A standalone broker's SCRAM credentials in ``log.dirs`` unless
#: ``sluice.security.credentials.file`` says where (``python -m sluice.server.security
#: --credentials-file`` writes it before a start).
CREDENTIALS_FILE = "users.json"
#: A standalone broker's client quotas and dynamic broker configs (Kafka keeps them in ZooKeeper).
ENTITY_CONFIGS_FILE = "entity-configs.json"


class Server:
    """A single Sluice broker. ``await start()`` then ``await serve_forever()`` (or ``shutdown()``).

    ``port`` is the bound port after :meth:`start` (useful with ``listeners=...:0``).
    """

    def __init__(self, config: Config, *, vfs: VFS | None = None) -> None:
        """``vfs``: the storage layer's file system (default: the OS); tests pass one that
        fails writes (a full disk)."""
        self.config = config
        self._vfs = vfs
        self.metrics = Metrics()
        self.log_manager: LogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.transaction_coordinator: TransactionCoordinator | None = None
        self._marker_channel: MarkerChannel | None = None
        self.handlers: Handlers | None = None
        #: Cluster mode (``zookeeper.connect``): this broker's ZooKeeper side.
        self.cluster: ClusterMember | None = None
        #: The Prometheus endpoint (``sluice.metrics.listener``), once started.
        self.metrics_endpoint: MetricsEndpoint | None = None
        self._server: asyncio.Server | None = None
        #: One server per listener, in ``listeners`` order.
        self._servers: list[asyncio.Server] = []
        #: The bound port of each listener (by name), after :meth:`start`.
        self.ports: dict[str, int] = {}
        #: Where SASL logins are checked: the file store standalone, ZooKeeper's in a cluster
        #: (built only with a SASL listener or the users' admin APIs).
        self.credentials: CredentialStore | None = None
        self._listener_security: dict[str, ListenerSecurity] = {}
        self._ssl_contexts: dict[str, ssl.SSLContext] = {}
        self._inter_broker_client: ClientSecurity | None = None
        self._credentials_seen: object = _NOT_SEEN
        self._connections: set[Connection] = set()
        #: ``max.connections*`` and ``sluice.quota.requests.per.second`` (None: no bound set).
        self.connection_quotas: ConnectionQuotas | None = None
        self.request_quota: RequestQuota | None = None
        #: Client quotas (``producer_byte_rate``...), fed by the entity configs.
        self.client_quotas: ClientQuotas | None = None
        #: Client quotas and dynamic broker configs: a file standalone, ZooKeeper in a cluster.
        self.entity_configs: EntityConfigs | None = None
        self._should_exit = asyncio.Event()
        self._force_exit = False
        self._stopped = False
        self._shutdown_task: asyncio.Task[None] | None = None
        self._idle_task: asyncio.Task[None] | None = None
        #: Cluster mode: the ZooKeeper ACL and credential stores (closed before the session).
        self._security_stores: list[ZkAclStore | ZkCredentialStore | ZkEntityConfigs] = []
        self.host = config.listener.host
        self.port = config.listener.port

    async def start(self) -> None:
        from sluice.server.storage.log_config import CleanerConfig, ProducerStateManagerConfig
        from sluice.server.storage.log_manager import LogManager
        from sluice.server.storage.vfs import DEFAULT_VFS

        config = self.config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        # Before the logs open: an unreadable ACL or credentials file stops the start here.
        authorizer, credentials = self._make_security()
        # Kafka's default flush scheduler interval is "never"; ours also flushes rolled segments
        # (as Kafka does on roll), so keep the storage layer's default unless set explicitly.
        flush_check_ms = 1_000
        if "log.flush.scheduler.interval.ms" in config.properties:
            flush_check_ms = min(config.log_flush_scheduler_interval_ms, 86_400_000)
        manager = LogManager(
            config.data_dir,
            config.log_config(),
            retention_check_interval_ms=config.log_retention_check_interval_ms,
            checkpoint_interval_ms=config.log_checkpoint_interval_ms,
            flush_check_interval_ms=flush_check_ms,
            vfs=DEFAULT_VFS if self._vfs is None else self._vfs,
            max_open_files=config.log_open_files_max,
            cleaner_config=CleanerConfig.from_broker_properties(config.log_properties()),
            producer_config=ProducerStateManagerConfig.from_broker_properties(
                config.log_properties()
            ),
            producer_id_expiration_check_interval_ms=(
                config.producer_id_expiration_check_interval_ms
            ),
        )
        manager.open()
        if not config.cluster_mode:  # a cluster member's come from ZooKeeper once it joined
            manager.ensure_meta_properties(config.node_id)
            manager.assign_missing_topic_ids()
        manager.flush_listener = self.metrics.log_flush.observe
        self.log_manager = manager
        # Standalone: leader of every partition (Kafka's makeLeader): HW = LEO, which matters
        # after an unclean stop, when the checkpointed HW lags the recovered log. In a cluster,
        # leadership comes from ZooKeeper once the broker has joined.
        replicas = ReplicaManager(
            manager,
            config.node_id,
            ReplicationSettings(replica_lag_time_max_ms=config.replica_lag_time_max_ms),
            standalone=not config.cluster_mode,
        )
        replicas.rack_aware_selector = config.replica_selector_class is not None
        for quota in (replicas.leader_quota, replicas.follower_quota):
            quota.samples = config.replication_quota_window_num
            quota.window_s = config.replication_quota_window_size_seconds
        self._apply_replication_throttles(replicas, config.properties)
        replicas.startup()
        self.replica_manager = replicas
        await manager.start()
        self.group_coordinator = self._group_coordinator(manager, replicas)
        self.handlers = Handlers(
            config, replicas, self.group_coordinator, ProducerIdManager(), self.metrics
        )
        self.transaction_coordinator = self._transaction_coordinator(manager, replicas)
        self.handlers.authorizer = authorizer
        self.handlers.credentials = credentials
        self._make_quotas()
        self.handlers.config_resources.dynamic.appliers.append(self._apply_dynamic_config)
        if not config.cluster_mode:
            from sluice.server.security.entity_configs import LocalEntityConfigs

            self._use_entity_configs(LocalEntityConfigs(config.data_dir / ENTITY_CONFIGS_FILE))
        loop = asyncio.get_running_loop()
        try:
            self._listener_security = self._make_listener_security()
            if config.cluster_mode:
                self._inter_broker_client = self._inter_broker_security()
                if self._marker_channel is not None:
                    self._marker_channel.security = self._inter_broker_client
            for listener in config.listeners:
                server = await loop.create_server(
                    functools.partial(self._make_connection, listener.name),
                    host=listener.host or None,
                    port=listener.port,
                    reuse_address=True,
                    backlog=1024,
                    ssl=self._ssl_contexts.get(listener.name),
                    start_serving=False,  # bound (the port is known), accepting later
                )
                self._servers.append(server)
                self.ports[listener.name] = server.sockets[0].getsockname()[1]
            self._server = self._servers[0]
            if config.metrics_listener is not None:
                await self._start_metrics(config.metrics_listener)
        except (OSError, SecurityError, ValueError):
            # e.g. address in use, a keystore that does not load: leave the data dir as
            # cleanly as we found it.
            for server in self._servers:
                server.close()
            await manager.stop()
            manager.close()
            self.log_manager = None
            raise
        self.port = self.ports[config.listener.name]
        for endpoint in config.advertised_endpoints():
            if endpoint.port == 0:
                # listeners=...:0: advertise the port the OS picked.
                self.handlers.set_advertised(
                    endpoint.host, self.ports[endpoint.name], endpoint.name
                )
        if config.cluster_mode:
            await self._join_cluster(replicas, self.handlers)
        # Only now are connections accepted: in a cluster, after the ACLs and credentials are
        # loaded from ZooKeeper and the broker has joined (Kafka enables request processing
        # once the authorizer is ready, at the end of its start-up); until then a client's
        # connection is refused, and it retries.
        for server in self._servers:
            await server.start_serving()
        if config.connections_max_idle_ms >= 0:
            self._idle_task = loop.create_task(
                self._close_idle_connections(config.connections_max_idle_ms / 1000)
            )
        log.info(
            "listening",
            host=self.host,
            port=self.port,
            ports=self.ports,
            protocols={name: self.config.security_protocol(name).value for name in self.ports},
            data_dir=str(config.data_dir),
            node_id=config.node_id,
            zero_copy=config.fetch_zero_copy,
            topics=len(manager.topics()),
        )

    async def _start_metrics(self, listener: MetricsListener) -> None:
        from sluice.server.metrics.prometheus import MetricsEndpoint

        endpoint = MetricsEndpoint(listener, self)
        endpoint.start()
        self.metrics_endpoint = endpoint

    async def _close_idle_connections(self, max_idle: float) -> None:
        """``connections.max.idle.ms``: close connections idle that long (Kafka's
        ``IdleExpiryManager``), checked every tenth of it (at most every second), so one is
        closed between ``max_idle`` and ``max_idle`` plus a tenth (or a second)."""
        from time import monotonic

        interval = min(1.0, max(0.01, max_idle / 10))
        while True:
            await asyncio.sleep(interval)
            now = monotonic()
            for conn in [c for c in self._connections if c.idle_for(now) >= max_idle]:
                conn.close_idle()

    @property
    def connections(self) -> set[Connection]:
        """The open client connections (read by the metrics collector)."""
        return self._connections

    async def _join_cluster(self, replicas: ReplicaManager, handlers: Handlers) -> None:
        """Register in ZooKeeper and follow the cluster's state (after listening: the
        registration advertises the bound port). A failure leaves nothing running."""
        from sluice.server.metadata.zk_cluster import ClusterMember

        cluster = ClusterMember(
            self.config, replicas, handlers.advertised_endpoints, self._inter_broker_client
        )
        cluster.leadership_listeners.append(self._offsets_leadership)
        replicas.rack_of = cluster.rack_of
        cluster.leadership_listeners.append(self._transaction_state_leadership)
        cluster.session_started.append(self._start_zk_credentials)
        cluster.session_started.append(self._start_zk_acls)
        cluster.session_started.append(self._start_zk_entity_configs)
        self.cluster = cluster  # states may be applied while it starts
        try:
            await cluster.start()
            await self._compact_old_offsets_topic(cluster)
            self._apply_dynamic_config(handlers.config_resources.dynamic.effective())
        except BaseException:
            for store in self._security_stores:
                await store.close()
            self.cluster = None
            await cluster.stop()
            for server in self._servers:
                server.close()
            if self.metrics_endpoint is not None:
                await self.metrics_endpoint.stop()
            assert self.log_manager is not None
            await self.log_manager.stop()
            self.log_manager.close()
            self.log_manager = None
            raise
        handlers.join_cluster(cluster)

    async def _compact_old_offsets_topic(self, cluster: ClusterMember) -> None:
        """Cluster mode: an offsets topic an older Sluice created with ``cleanup.policy=delete``
        gets ``compact`` in ``/config/topics/__consumer_offsets`` (every broker hosting it
        applies that from its watch; brokers starting together write the same overrides).
        Standalone, the coordinator does it in its load (``OffsetsStore.compact_old_topic``).
        A ZooKeeper failure here is logged and the start goes on: the next start tries again."""
        from sluice.server.group.offsets_store import (
            OFFSETS_TOPIC,
            compacted_overrides,
            log_compacted_old_topic,
        )
        from sluice.server.storage.log_config import LogConfig

        kzk = cluster.kzk
        if kzk is None:
            return
        try:
            if await kzk.get_topic_assignment(OFFSETS_TOPIC) is None:
                return
            current = dict((await kzk.get_topic_config(OFFSETS_TOPIC)).config)
            compact = LogConfig.from_properties(current, self.config.log_config()).compact
            new = compacted_overrides(current, compact)
            if new is None:
                return
            await kzk.set_topic_config(OFFSETS_TOPIC, new)
        except Exception as exc:
            log.warning("could not switch __consumer_offsets to compact", error=repr(exc))
            return
        log_compacted_old_topic(current, new)

    def _make_security(self) -> tuple[AclAuthorizer | None, CredentialStore]:
        """The authorizer (``authorizer.class.name`` set) and the SCRAM credential store. A
        standalone broker keeps both in files of its data directory (:data:`ACL_FILE`,
        :data:`CREDENTIALS_FILE`); a cluster member in ZooKeeper, loaded once its session is
        up (:meth:`_start_zk_acls`, :meth:`_start_zk_credentials`), before it registers and
        before its listeners accept a connection."""
        from sluice.server.security.authorizer import AclAuthorizer, AclStore, FileAclStore
        from sluice.server.security.credentials import CredentialStore, FileCredentialStore

        config = self.config
        standalone = not config.cluster_mode
        authorizer = None
        if config.authorizer_class_name:
            store = FileAclStore(config.data_dir / ACL_FILE) if standalone else AclStore()
            authorizer = AclAuthorizer(
                store,
                super_users=config.super_users,
                allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found,
            )
            log.info(
                "authorizer enabled",
                authorizer=config.authorizer_class_name,
                super_users=";".join(config.super_users),
                acls=str(config.data_dir / ACL_FILE) if standalone else "ZooKeeper",
            )
        credentials: CredentialStore = CredentialStore()  # a cluster's: ZooKeeper's, once up
        if standalone:
            path = config.credentials_file or config.data_dir / CREDENTIALS_FILE
            credentials = FileCredentialStore(path)
        # One store for SASL logins (PLAIN and SCRAM) and the SCRAM admin APIs alike.
        self.credentials = credentials
        self._reload_credentials_file()  # remember the file as loaded
        return authorizer, credentials

    async def _start_zk_acls(self, zk: Any) -> None:  # the cluster's ZkClient
        """Cluster mode: ACLs from ZooKeeper, followed through Kafka's change notices (so an ACL
        created through any broker applies at every broker); loaded whole before this broker
        registers or serves anyone (an empty cache would let everyone in with
        ``allow.everyone.if.no.acl.found``)."""
        from sluice.server.security.authorizer import ZkAclStore

        authorizer = self.handlers.authorizer if self.handlers is not None else None
        if authorizer is not None:
            acls = ZkAclStore(zk)
            await acls.start()
            self._security_stores.append(acls)
            authorizer.store = acls

    def _offsets_leadership(self, partition: Partition) -> None:
        """Cluster mode: the group coordinator serves the groups of the offsets partitions this
        broker leads (Kafka's onElection / onResignation)."""
        from sluice.server.group.offsets_store import OFFSETS_TOPIC

        coordinator = self.group_coordinator
        if partition.topic != OFFSETS_TOPIC or coordinator is None:
            return
        if self.cluster is not None:  # the cluster's partition count places the groups
            count = self.cluster.cache.topics().get(OFFSETS_TOPIC)
            if count:
                coordinator.store.num_partitions = count
        if partition.is_leader:
            coordinator.on_elected(partition.index, partition.leader_epoch)
        else:
            coordinator.on_resigned(partition.index, partition.leader_epoch)

    def _transaction_state_leadership(self, partition: Partition) -> None:
        """Cluster mode: the transaction coordinator serves the transactional ids of the
        ``__transaction_state`` partitions this broker leads; coordinator epoch = leader epoch."""
        from sluice.server.transaction.state_log import TRANSACTION_STATE_TOPIC

        coordinator = self.transaction_coordinator
        if partition.topic != TRANSACTION_STATE_TOPIC or coordinator is None:
            return
        if self.cluster is not None:
            count = self.cluster.cache.topics().get(TRANSACTION_STATE_TOPIC)
            if count:
                coordinator.log.num_partitions = count
        if partition.is_leader:
            coordinator.on_elected(partition.index, partition.leader_epoch)
        else:
            coordinator.on_resigned(partition.index, partition.leader_epoch)

    def _transaction_coordinator(
        self, manager: LogManager, replicas: ReplicaManager
    ) -> TransactionCoordinator:
        """Transactions: ``__transaction_state`` written through the replica layer, markers
        through :class:`~sluice.server.replication.txn_markers.MarkerWriter`. Standalone it owns
        every partition now; in a cluster those this broker leads."""
        from sluice.server.replication.offsets_appender import ReplicaAppender
        from sluice.server.replication.txn_markers import MarkerChannel
        from sluice.server.transaction.config import TransactionConfig
        from sluice.server.transaction.coordinator import TransactionCoordinator
        from sluice.server.transaction.state_log import (
            TRANSACTION_STATE_TOPIC,
            TxnStateLog,
            topic_config,
        )

        handlers = self.handlers
        assert handlers is not None
        txn_config = TransactionConfig.from_properties(self.config.properties)
        rf = txn_config.state_log_replication_factor if self.config.cluster_mode else 1
        configs = topic_config(txn_config.state_log_min_isr, rf, txn_config.state_log_segment_bytes)
        state_log = TxnStateLog(
            manager,
            txn_config.state_log_num_partitions,
            configs,
            ReplicaAppender(replicas, _REQUEST_TIMEOUT_MS, TRANSACTION_STATE_TOPIC),
            load_buffer_bytes=txn_config.state_log_load_buffer_size,
        )

        def leader_of(topic: str, index: int) -> int:
            found = handlers.metadata_view.partition(topic, index)
            return -1 if found is None else found.leader

        async def local_markers(request: m.WriteTxnMarkersRequest) -> m.WriteTxnMarkersResponse:
            answer = handlers.write_markers(request)
            if not isinstance(answer, m.WriteTxnMarkersResponse):
                assert answer is not None and not isinstance(answer, CloseConnection)
                answer = await answer
            assert isinstance(answer, m.WriteTxnMarkersResponse)
            return answer

        def address_of(broker_id: int) -> tuple[str, int] | None:
            return None if self.cluster is None else self.cluster.cache.address(broker_id)

        self._marker_channel = MarkerChannel(
            self.config.node_id,
            local_markers,
            leader_of,
            address_of,
            request_timeout_ms=_REQUEST_TIMEOUT_MS,
        )
        coordinator = TransactionCoordinator(
            state_log,
            txn_config,
            lambda: handlers.metadata_view.allocate_producer_id(),
            self._marker_channel,
            topic_exists=lambda topic: topic in handlers.metadata_view.topics(),
        )
        handlers.set_transactions(coordinator, (txn_config.state_log_num_partitions, rf, configs))
        if not self.config.cluster_mode:
            coordinator.load()
        return coordinator

    def _group_coordinator(self, manager: LogManager, replicas: ReplicaManager) -> GroupCoordinator:
        """Consumer groups and committed offsets: writes through the replica layer. Standalone
        it loads (owns) every ``__consumer_offsets`` partition now, so it is built on the running
        loop; in a cluster it owns those this broker leads, as their states arrive."""
        from sluice.server.group.config import GroupConfig
        from sluice.server.group.coordinator import GroupCoordinator
        from sluice.server.group.offsets_store import OffsetsStore
        from sluice.server.replication.offsets_appender import ReplicaAppender

        group_config = GroupConfig.from_properties(
            self.config.properties, cluster=self.config.cluster_mode
        )
        coordinator = GroupCoordinator(
            OffsetsStore(
                manager,
                group_config.offsets_topic_num_partitions,
                ReplicaAppender(replicas, group_config.offsets_commit_timeout_ms),
                load_buffer_bytes=group_config.offsets_load_buffer_size,
                segment_bytes=group_config.offsets_topic_segment_bytes,
                compression=group_config.offsets_topic_compression_codec,
            ),
            group_config,
            topic_exists=self._topic_exists,
        )
        if not self.config.cluster_mode:
            coordinator.load()
        return coordinator

    def _topic_exists(self, topic: str, partition: int) -> bool:
        """OffsetCommit's check: the partition exists (anywhere in a cluster)."""
        if self.cluster is not None:
            return self.cluster.cache.has_partition(topic, partition)
        assert self.log_manager is not None
        return self.log_manager.get_log(topic, partition) is not None

    def _make_quotas(self) -> None:
        """The connection and request bounds, when any is set (module ``quotas``); with none
        set, connections skip the bookkeeping altogether."""
        c = self.config
        # Always: the bounds are dynamic broker configs (max.connections...), set at run time.
        self.connection_quotas = ConnectionQuotas(
            c.max_connections_per_ip, c.max_connections_per_ip_overrides, c.max_connections
        )
        # Client quotas are set at run time (AlterClientQuotas): always ready, idle until set.
        self.client_quotas = ClientQuotas(c.quota_window_num, c.quota_window_size_seconds)
        if c.quota_requests_per_second < NO_BOUND:
            self.request_quota = RequestQuota(
                c.quota_requests_per_second, c.quota_window_num, c.quota_window_size_seconds
            )

    # --- security ----------------------------------------------------------------------------

    def _uses_sasl(self) -> bool:
        return any(
            self.config.security_protocol(lst.name).uses_sasl for lst in self.config.listeners
        )

    def _make_listener_security(self) -> dict[str, ListenerSecurity]:
        """Each listener's TLS context, principal mapping and SASL set-up (module
        ``network.listener``); raises SecurityError / ValueError for settings that do not load
        (a keystore, a rule)."""
        from sluice.server.security.tls import SslPrincipalMapper, server_context

        config = self.config
        out = {}
        for listener in config.listeners:
            protocol = config.security_protocol(listener.name)
            settings = config.listener_security_settings(listener.name)
            mapper = None
            if protocol.uses_tls:
                self._ssl_contexts[listener.name] = server_context(settings)
                mapper = SslPrincipalMapper(settings.get("ssl.principal.mapping.rules"))
            sasl = None
            if protocol.uses_sasl:
                sasl = functools.partial(
                    self._authenticator,
                    config.sasl_mechanisms(listener.name),
                    int(settings["sasl.server.max.receive.size"]),
                    int(settings["connections.max.reauth.ms"]),
                )
            out[listener.name] = ListenerSecurity(
                name=listener.name,
                tls=protocol.uses_tls,
                principal_mapper=mapper,
                sasl=sasl,
                failed_authentication_delay_ms=config.connection_failed_authentication_delay_ms,
            )
        return out

    def _authenticator(
        self, mechanisms: tuple[str, ...], max_receive_size: int, reauth_ms: int, peer: str
    ) -> SaslServerAuthenticator:
        from sluice.server.security.authenticator import SaslServerAuthenticator
        from sluice.server.security.credentials import CredentialStore

        handlers = self.handlers
        assert handlers is not None
        self._reload_credentials_file()
        return SaslServerAuthenticator(
            mechanisms,
            self.credentials or CredentialStore(),  # a cluster's, once ZooKeeper answered
            api_versions=lambda request: handlers.dispatch(request.header, request.body),
            max_receive_size=max_receive_size,
            reauth_ms=reauth_ms,
            peer=peer,
        )

    def _reload_credentials_file(self) -> None:
        """Standalone: users added with ``python -m sluice.server.security --credentials-file``
        while the broker runs log in from their next connection (one ``stat`` per SASL
        connection; a file that does not parse keeps the users already loaded)."""
        from sluice.server.security.credentials import FileCredentialStore

        store = self.credentials
        if not isinstance(store, FileCredentialStore):
            return
        try:
            stat = os.stat(store.path)
            seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except OSError:
            seen = None
        if seen == self._credentials_seen:
            return
        first = self._credentials_seen is _NOT_SEEN
        self._credentials_seen = seen
        if first:
            return  # loaded at start-up
        try:
            store.reload()
        except SecurityError as exc:
            log.warning("credentials file not reloaded", path=str(store.path), error=str(exc))
            return
        log.info("credentials file reloaded", path=str(store.path), users=len(store.users()))

    async def _start_zk_credentials(self, zk: Any) -> None:  # the cluster's ZkClient
        from sluice.server.security.credentials import ZkCredentialStore

        store = ZkCredentialStore(zk)
        await store.start()
        self._security_stores.append(store)  # closed before the session
        self.credentials = store
        if self.handlers is not None:
            self.handlers.credentials = store

    async def _start_zk_entity_configs(self, zk: Any) -> None:  # the cluster's ZkClient
        from sluice.server.security.entity_configs import ZkEntityConfigs

        store = ZkEntityConfigs(zk)
        self._use_entity_configs(store)
        await store.start()  # loads every entity: the listeners apply them
        self._security_stores.append(store)  # closed before the session

    def _use_entity_configs(self, store: EntityConfigs) -> None:
        """Client quotas (and dynamic broker configs) come from ``store`` from now on."""
        self.entity_configs = store
        listeners = []
        if self.client_quotas is not None:
            listeners.append(self.client_quotas.update)
        if self.handlers is not None:
            self.handlers.entity_configs = store
            dynamic = self.handlers.config_resources.dynamic
            dynamic.use_store(store)
            listeners.append(dynamic.update)
        store.listeners.extend(listeners)
        for path, config in store.items():  # what a file store loaded already
            for listener in listeners:
                listener(path, config)

    @staticmethod
    def _apply_replication_throttles(
        replicas: ReplicaManager, effective: Mapping[str, str]
    ) -> None:
        """``leader/follower.replication.throttled.rate`` (``replication.throttle``): from
        server.properties at start, then from every dynamic config change."""
        from sluice.server.config import BROKER_CONFIG
        from sluice.server.replication.throttle import FOLLOWER_RATE, LEADER_RATE

        for key, quota in ((LEADER_RATE, replicas.leader_quota),
                           (FOLLOWER_RATE, replicas.follower_quota)):  # fmt: skip
            text = effective.get(key)
            rate = BROKER_CONFIG[key].parse(text) if text else BROKER_CONFIG.default(key)
            if rate != quota.bound:
                quota.set_bound(rate)
                log.info("replication throttle changed", key=key, rate=rate)

    def _apply_dynamic_config(self, effective: Mapping[str, str]) -> None:
        """A dynamic broker config changed (``api.broker_configs``): apply what it sets live."""
        from sluice.server.config import BROKER_CONFIG
        from sluice.server.storage.log_config import SERVER_LOG_CONFIG, LogConfig

        manager = self.log_manager
        log_props = {k: v for k, v in effective.items() if k in SERVER_LOG_CONFIG}
        default = LogConfig.from_broker_properties(log_props)
        if manager is not None and default != manager.default_config:
            manager.set_default_config(default)
            log.info("log defaults changed", config=log_props)
        if manager is not None and manager.producer_config.update(log_props):
            log.info(
                "producer state config changed",
                producer_id_expiration_ms=manager.producer_config.producer_id_expiration_ms,
            )
        # The controller's default for unclean elections (topics without an override). Until
        # the controller exists it has server.properties' (re-applied once it does).
        controller = self.cluster.controller if self.cluster is not None else None
        unclean = default.unclean_leader_election_enable
        if controller is not None and controller.settings.unclean_leader_election_enable != unclean:
            controller.settings = dataclasses.replace(
                controller.settings, unclean_leader_election_enable=unclean
            )
        if self.replica_manager is not None:
            self._apply_replication_throttles(self.replica_manager, effective)
        quotas = self.connection_quotas
        if quotas is not None:
            bound = {
                key: BROKER_CONFIG[key].parse(effective[key]) if key in effective
                else BROKER_CONFIG.default(key)
                for key in ("max.connections.per.ip", "max.connections.per.ip.overrides",
                            "max.connections")
            }  # fmt: skip
            quotas.reconfigure(bound["max.connections.per.ip"],
                               bound["max.connections.per.ip.overrides"],
                               bound["max.connections"])  # fmt: skip

    def _inter_broker_security(self) -> ClientSecurity | None:
        """How this broker's replica fetchers and controller requests reach the others: the
        inter-broker listener's TLS (its ``ssl.*`` keys: truststore, host name check, a
        keystore for mTLS) and SASL login (``sasl.mechanism.inter.broker.protocol`` with the
        ``sasl.jaas.config`` of that listener and mechanism, Kafka's place for it)."""
        from sluice.net.security import ClientSecurity, parse_jaas_login
        from sluice.server.security.listeners import mechanism_settings
        from sluice.server.security.tls import client_context

        config = self.config
        name = config.inter_broker_listener
        protocol = config.security_protocol(name)
        if protocol.value == "PLAINTEXT":
            return None
        settings = config.listener_security_settings(name)
        context = client_context(settings) if protocol.uses_tls else None
        if not protocol.uses_sasl:
            return ClientSecurity(ssl_context=context)
        mechanism = config.sasl_mechanism_inter_broker_protocol
        jaas = mechanism_settings(settings, name, mechanism).get("sasl.jaas.config")
        if not jaas:
            raise ConfigError(
                f"the inter-broker listener {name} uses SASL: set "
                f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config to the "
                'broker\'s login (... required username="..." password="...";)'
            )
        username, password = parse_jaas_login(jaas)
        return ClientSecurity(context, mechanism, username, password)

    def _make_connection(self, listener_name: str) -> Connection:
        assert self.handlers is not None
        c = self.config
        security = self._listener_security.get(listener_name)
        return Connection(
            self.handlers,
            self.metrics,
            max_frame_size=c.socket_request_max_bytes,
            max_queued_requests=c.queued_max_requests,
            max_unsent_bytes=c.max_unsent_bytes,
            # os.sendfile bypasses TLS: a TLS listener's Fetch copies its records instead
            zero_copy=c.fetch_zero_copy and not (security is not None and security.tls),
            registry=self._connections,
            send_buffer_bytes=c.socket_send_buffer_bytes,
            receive_buffer_bytes=c.socket_receive_buffer_bytes,
            connection_quotas=self.connection_quotas,
            request_quota=self.request_quota,
            client_quotas=self.client_quotas,
            listener=security,
        )

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.handle_exit, sig)

    def handle_exit(self, sig: int) -> None:
        """First signal: graceful shutdown. A second SIGINT during it: force."""
        if self._should_exit.is_set() and sig == signal.SIGINT:
            log.warning("second SIGINT: forcing shutdown")
            self._force_exit = True
            for conn in list(self._connections):
                conn.abort()
        log.info("shutdown requested", signal=signal.Signals(sig).name)
        self._should_exit.set()

    async def serve_forever(self) -> None:
        """Serve until a signal (or :meth:`request_exit`), then shut down in order."""
        if self._server is None:
            await self.start()
        await self._should_exit.wait()
        await self.shutdown()

    def request_exit(self) -> None:
        self._should_exit.set()

    async def shutdown(self) -> None:
        """Graceful, ordered shutdown (idempotent; concurrent callers wait for the first)."""
        if self._shutdown_task is None:
            self._shutdown_task = asyncio.get_running_loop().create_task(self._shutdown())
        await asyncio.shield(self._shutdown_task)

    async def _shutdown(self) -> None:
        self._should_exit.set()
        # 0. a cluster member first hands its leadership over (still serving meanwhile).
        cluster = self.cluster
        if cluster is not None and self.config.controlled_shutdown_enable and not self._force_exit:
            await cluster.controlled_shutdown()
        # 1. stop accepting (and serving scrapes: they read state that is about to close).
        for server in self._servers:
            server.close()
        if self._idle_task is not None:
            self._idle_task.cancel()
        if self.metrics_endpoint is not None:
            await self.metrics_endpoint.stop()
        # 2. stop reading new requests; wake long-polls so they answer with what they have.
        connections = list(self._connections)
        for conn in connections:
            conn.stop_reading_requests()
        if self.handlers is not None:
            self.handlers.shutting_down()
        if self.group_coordinator is not None:
            self.group_coordinator.shutdown()
        if self.transaction_coordinator is not None:
            self.transaction_coordinator.shutdown()
        if self._marker_channel is not None:
            self._marker_channel.close()
        # 3. finish in-flight requests within a bound.
        waits = [asyncio.ensure_future(conn.wait_idle()) for conn in connections]
        if waits and not self._force_exit:
            _done, pending = await asyncio.wait(
                waits, timeout=self.config.shutdown_timeout_ms / 1000
            )
            if pending:
                log.warning("in-flight requests did not finish in time", count=len(pending))
        for w in waits:
            w.cancel()
        for conn in list(self._connections):
            conn.abort()
        for server in self._servers:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await server.wait_closed()
        # 4. leave the cluster: fetchers stop (before their logs close), the session closes and
        # the registration goes with it at once.
        for store in self._security_stores:
            await store.close()
        if self.cluster is not None:
            await self.cluster.stop()
        self._abort_late_connections()
        # 5. flush and close logs; the LogManager writes the clean-shutdown marker last.
        if self.log_manager is not None:
            await self.log_manager.stop()
            self.log_manager.close()
        self._abort_late_connections()
        self._stopped = True
        log.info("stopped", metrics=self.metrics.snapshot())

    def _abort_late_connections(self) -> None:
        """Close the connections made after step 3 closed them all: a connection accepted just
        before the listener closed registers itself when its ``connection_made`` runs, an event
        loop iteration or two later, and with no request in flight step 3 does not wait at all.
        Left open it would be served by a stopped broker and its socket never closed."""
        late = list(self._connections)
        if late:
            log.info("closing connections accepted during shutdown", count=len(late))
        for conn in late:
            conn.abort()
