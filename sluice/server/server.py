"""The broker process: Config -> Server -> one Connection per client -> Handlers ->
ReplicaManager / GroupCoordinator -> LogManager.

``Server`` owns startup and the shutdown order:

1. startup: open the LogManager on ``log.dirs`` (loads/recovers every partition, removes the
   clean-shutdown marker), start its background tasks, build the ReplicaManager (leader of every
   partition), the group coordinator (loads ``__consumer_offsets``) and the producer id
   manager, then listen (and serve ``/metrics`` with ``sluice.metrics.listener``);
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
import functools
import os
import signal
from typing import TYPE_CHECKING, Any

from sluice.server.api.handlers import Handlers
from sluice.server.config import Config, ConfigError, MetricsListener
from sluice.server.config_def import NO_BOUND
from sluice.server.logging import get_logger
from sluice.server.metadata.producer_id_manager import ProducerIdManager
from sluice.server.metrics.metrics import Metrics
from sluice.server.network.connection import Connection
from sluice.server.network.listener import ListenerSecurity
from sluice.server.network.quotas import ConnectionQuotas, RequestQuota
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
    from sluice.server.security.authenticator import SaslServerAuthenticator
    from sluice.server.security.authorizer import AclAuthorizer, ZkAclStore
    from sluice.server.security.credentials import CredentialStore, ZkCredentialStore
    from sluice.server.storage.log_manager import LogManager
    from sluice.server.storage.vfs import VFS

log = get_logger("sluice.server")
_NOT_SEEN = object()

#: A standalone broker's ACLs (Kafka's ZooKeeper layout as one JSON file) in ``log.dirs``.
ACL_FILE = "sluice-acls.json"
#: A standalone broker's SCRAM credentials in ``log.dirs`` unless
#: ``sluice.security.credentials.file`` says where (``python -m sluice.server.security
#: --credentials-file`` writes it before a start).
CREDENTIALS_FILE = "users.json"


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
        self._should_exit = asyncio.Event()
        self._force_exit = False
        self._stopped = False
        self._shutdown_task: asyncio.Task[None] | None = None
        #: Cluster mode: the ZooKeeper ACL and credential stores (closed before the session).
        self._security_stores: list[ZkAclStore | ZkCredentialStore] = []
        self.host = config.listener.host
        self.port = config.listener.port

    async def start(self) -> None:
        from sluice.server.storage.log_config import CleanerConfig
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
        replicas.startup()
        self.replica_manager = replicas
        await manager.start()
        self.group_coordinator = self._group_coordinator(manager, replicas)
        self.handlers = Handlers(
            config, replicas, self.group_coordinator, ProducerIdManager(), self.metrics
        )
        self.handlers.authorizer = authorizer
        self.handlers.credentials = credentials
        self._make_quotas()
        loop = asyncio.get_running_loop()
        try:
            self._listener_security = self._make_listener_security()
            if config.cluster_mode:
                self._inter_broker_client = self._inter_broker_security()
            for listener in config.listeners:
                server = await loop.create_server(
                    functools.partial(self._make_connection, listener.name),
                    host=listener.host or None,
                    port=listener.port,
                    reuse_address=True,
                    backlog=1024,
                    ssl=self._ssl_contexts.get(listener.name),
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
        cluster.session_started.append(self._start_zk_credentials)
        self.cluster = cluster  # states may be applied while it starts
        try:
            await cluster.start()
            await self._follow_zk_security(cluster, handlers)
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

    def _make_security(self) -> tuple[AclAuthorizer | None, CredentialStore]:
        """The authorizer (``authorizer.class.name`` set) and the SCRAM credential store. A
        standalone broker keeps both in files of its data directory (:data:`ACL_FILE`,
        :data:`CREDENTIALS_FILE`); a cluster member in ZooKeeper, loaded once its session is
        up (:meth:`_follow_zk_security`): until then the ACL cache is empty, so only super
        users (or everyone, with ``allow.everyone.if.no.acl.found``) get in."""
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

    async def _follow_zk_security(self, cluster: ClusterMember, handlers: Handlers) -> None:
        """Cluster mode: ACLs from ZooKeeper, followed through Kafka's change notices (so an ACL
        created through any broker applies at every broker). (The credentials are followed
        from the session's start, :meth:`_start_zk_credentials`.)"""
        from sluice.server.security.authorizer import ZkAclStore

        assert cluster.zk is not None
        if handlers.authorizer is not None:
            acls = ZkAclStore(cluster.zk)
            await acls.start()
            self._security_stores.append(acls)
            handlers.authorizer.store = acls

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

    def _group_coordinator(self, manager: LogManager, replicas: ReplicaManager) -> GroupCoordinator:
        """Consumer groups and committed offsets: writes through the replica layer. Standalone
        it loads (owns) every ``__consumer_offsets`` partition now, so it is built on the running
        loop; in a cluster it owns those this broker leads, as their states arrive."""
        from sluice.server.group.config import GroupConfig
        from sluice.server.group.coordinator import GroupCoordinator
        from sluice.server.group.offsets_store import OffsetsStore
        from sluice.server.replication.offsets_appender import ReplicaAppender

        group_config = GroupConfig.from_properties(self.config.properties)
        coordinator = GroupCoordinator(
            OffsetsStore(
                manager,
                group_config.offsets_topic_num_partitions,
                ReplicaAppender(replicas, group_config.offsets_commit_timeout_ms),
                load_buffer_bytes=group_config.offsets_load_buffer_size,
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
        if (
            c.max_connections_per_ip < NO_BOUND
            or c.max_connections_per_ip_overrides
            or c.max_connections < NO_BOUND
        ):
            self.connection_quotas = ConnectionQuotas(
                c.max_connections_per_ip, c.max_connections_per_ip_overrides, c.max_connections
            )
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
        # 5. flush and close logs; the LogManager writes the clean-shutdown marker last.
        if self.log_manager is not None:
            await self.log_manager.stop()
            self.log_manager.close()
        self._stopped = True
        log.info("stopped", metrics=self.metrics.snapshot())
