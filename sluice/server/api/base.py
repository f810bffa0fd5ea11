"""The state and helpers every API family shares (:class:`ApiBase`), and the constants of the
handlers. The families: :mod:`~sluice.server.api.cluster` (ApiVersions, Metadata, DescribeCluster,
DescribeLogDirs, ControlledShutdown), :mod:`~sluice.server.api.produce_fetch` (Produce, Fetch,
ListOffsets, OffsetForLeaderEpoch, DeleteRecords), :mod:`~sluice.server.api.topics`
(CreateTopics, CreatePartitions, DeleteTopics), :mod:`~sluice.server.api.groups` (the group and
offset APIs), :mod:`~sluice.server.api.transactions` (the transaction coordinator's:
InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions,
ListTransactions), :mod:`~sluice.server.api.transactional` (the partition and group side:
WriteTxnMarkers, TxnOffsetCommit, DescribeProducers), :mod:`~sluice.server.api.configs`,
:mod:`~sluice.server.api.security` and :mod:`~sluice.server.api.quotas` (the client quota APIs);
:mod:`~sluice.server.api.handlers` joins them.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

from sluice.protocol import acl as acl_bits
from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.server.api.config_resources import ConfigResources
from sluice.server.api.registry import HandlerRegistry
from sluice.server.config_def import NO_BOUND
from sluice.server.logging import get_logger
from sluice.server.metadata.view import LocalMetadata, MetadataView, ZkMetadata
from sluice.server.network.request import REQUEST_CONTEXT
from sluice.server.security.acl import (
    CLUSTER_NAME,
    AclOperation,
    ResourceType,
    authorization_error,
    name_of,
)

if TYPE_CHECKING:
    from sluice.server.config import Config
    from sluice.server.group.coordinator import GroupCoordinator
    from sluice.server.metadata.producer_id_manager import ProducerIdManager
    from sluice.server.metadata.zk_cluster import ClusterMember
    from sluice.server.metrics.metrics import Metrics
    from sluice.server.replication.replica_manager import ReplicaManager
    from sluice.server.security.authorizer import AclAuthorizer
    from sluice.server.transaction.coordinator import TransactionCoordinator

log = get_logger("sluice.handlers")

#: Kafka's ``GroupType.CLASSIC`` name: the JoinGroup/SyncGroup protocol, the only one served.
GROUP_TYPE_CLASSIC = "classic"
#: ``replica_id`` of a consumer's ListOffsets / OffsetForLeaderEpoch (Kafka's names).
CONSUMER_REPLICA_ID = -1
#: ``replica_id`` of a debugging client (ListOffsets: may read a follower, bounded by LEO).
DEBUGGING_REPLICA_ID = -2

#: The one client id whose Produce may append to an internal topic (Kafka's
#: ``AdminUtils.AdminClientId``, checked in ``KafkaApis.handleProduceRequest``): a repair tool.
ADMIN_CLIENT_ID = "__admin_client"


@functools.cache
def _fetch_isolation(isolation_level: int, replica_id: int = -1) -> Any:
    """The Log read bound of a Fetch: a follower (``replica_id`` = its broker id) reads up to
    LEO; a consumer below HW (``isolation_level`` 1 = read_committed)."""
    from sluice.server.storage.log import Isolation  # lazy, as elsewhere in this module

    if replica_id >= 0:
        return Isolation.LOG_END
    return Isolation.TXN_COMMITTED if isolation_level == 1 else Isolation.HIGH_WATERMARK


#: What :meth:`Handlers._read_fetch` returns.
_FetchRead = tuple[m.FetchResponse, int, bool, list[tuple[str, int, int]]]


def _commit_topics(wanted: list[Any], codes: list[int], topic_cls: Any, part_cls: Any) -> list[Any]:
    """The topics of an OffsetCommit / TxnOffsetCommit answer: one code per wanted
    ``(topic, partition, ...)``, grouped by topic in request order."""
    topics: dict[str, list[Any]] = {}
    for (topic, part, *_rest), code in zip(wanted, codes, strict=True):
        topics.setdefault(topic, []).append(part_cls(partition_index=part, error_code=code))
    return [topic_cls(name=n, partitions=ps) for n, ps in topics.items()]


def _code(exc: BaseException) -> int:
    return exc.code if isinstance(exc, errors.KafkaError) else errors.UnknownServerError.code


def _topic_failure(exc: Exception, what: str, topic: str) -> tuple[int, str | None]:
    """One topic of an admin request failed: ``(error code, message)``. A KafkaError is the
    client's answer as it is; anything else is logged with its traceback (call this from the
    ``except`` block) and answered UNKNOWN_SERVER_ERROR with the exception's type."""
    if isinstance(exc, errors.KafkaError):
        return exc.code, str(exc.args[0]) if exc.args else None
    log.exception(what, topic=topic)
    return _code(exc), type(exc).__name__


class _Granted:
    """Topics (and their partitions) one CreateTopics request has been granted so far, for
    :meth:`Handlers._check_topic_limits` while the broker's counts do not show them yet."""

    __slots__ = ("partitions",)

    def __init__(self) -> None:
        self.partitions: dict[str, int] = {}

    def add(self, name: str, count: int) -> None:
        self.partitions[name] = count

    def discard(self, name: str) -> None:
        self.partitions.pop(name, None)

    def totals(self) -> tuple[int, int]:
        return len(self.partitions), sum(self.partitions.values())


#: The bit fields without an authorizer: every operation the resource type supports.
_ALL_BITS = {
    ResourceType.TOPIC: acl_bits.TOPIC_AUTHORIZED,
    ResourceType.GROUP: acl_bits.GROUP_AUTHORIZED,
    ResourceType.CLUSTER: acl_bits.CLUSTER_AUTHORIZED,
}


def _host(client_host: str) -> str:
    """The host an ACL names (``127.0.0.1``) from the context's ``/127.0.0.1``."""
    return client_host[1:] if client_host.startswith("/") else client_host


class ApiBase:
    """What every API family shares: the broker's parts the handlers call, the cluster once
    joined, the typed handler table (filled by :class:`~sluice.server.api.handlers.Handlers`).
    Created once by ``Server`` (as ``Handlers``); shared by every connection.

    **Authorization** goes through one place, :meth:`allowed` (and :meth:`check`, which raises
    the resource type's *_AUTHORIZATION_FAILED error, and :meth:`authorized_operations` for the
    bit fields): each handler asks it for the operation and resource Kafka's table names
    (:data:`sluice.server.security.acl.API_OPERATIONS`), for the principal and host of the
    request's context (:data:`~sluice.server.network.request.REQUEST_CONTEXT`). With no
    ``authorizer`` (``authorizer.class.name`` empty) everything is allowed and the bit fields
    are every operation the resource supports, as Kafka's ``AuthHelper`` answers."""

    def __init__(
        self,
        config: Config,
        replicas: ReplicaManager,
        groups: GroupCoordinator,
        producer_ids: ProducerIdManager,
        metrics: Metrics,
    ) -> None:
        self.config = config
        self.replicas = replicas
        self.logs = replicas.logs
        self.groups = groups
        self.producer_ids = producer_ids
        self.metrics = metrics
        self.config_resources = ConfigResources(config, replicas.logs, lambda: self.metadata_view)
        self._stopping = False
        #: Cluster mode: set by the Server once the broker has joined (None standalone). Only
        #: the controller's APIs read it (``api/cluster.py``); the rest goes through
        #: ``metadata_view``.
        self.cluster: ClusterMember | None = None
        self._auto_creating: set[str] = set()
        self._background: set[asyncio.Task[None]] = set()
        endpoints = config.advertised_endpoints()
        #: listener name -> (host, port) advertised to the clients of that listener.
        self._endpoints = {e.name: (e.host, e.port) for e in endpoints}
        self._first_listener = endpoints[0].name
        self._dispatch = HandlerRegistry()
        #: What the handlers read of the cluster: a one-broker cluster of its own standalone,
        #: ZooKeeper's view once the broker joined one.
        self.metadata_view: MetadataView = LocalMetadata(
            config.node_id,
            lambda: self._advertised,
            replicas.logs,
            replicas,
            producer_ids,
            groups.ensure_ready,
            rack=config.broker_rack,
        )
        #: Kafka's ``AclAuthorizer`` when ``authorizer.class.name`` is set (set by ``Server``).
        self.authorizer: AclAuthorizer | None = None
        #: The transaction coordinator (set by ``Server`` with :meth:`set_transactions`).
        self.transactions: TransactionCoordinator | None = None
        #: ``(transaction.state.log.num.partitions, its replication factor, topic configs)``
        #: for a cluster's FindCoordinator to create the topic with.
        self._transaction_topic: tuple[int, int, dict[str, str]] = (50, 3, {})
        self.config_resources.check = self.check
        # Counter names built once (one per request otherwise), by the API's name.
        self._request_metric = {key: f"requests.{m.APIS[key].name}" for key in m.APIS}

    # --- authorization ---------------------------------------------------------------------

    def allowed(
        self,
        operation: AclOperation,
        resource_type: ResourceType = ResourceType.CLUSTER,
        name: str = CLUSTER_NAME,
        *,
        audit: bool = True,
    ) -> bool:
        """Whether the request's principal may do ``operation`` on the resource (always, with
        no authorizer). Denials are logged by the authorizer, as Kafka's audit log, unless
        ``audit`` is false (a filter, such as Metadata leaving out topics, is no denial)."""
        authorizer = self.authorizer
        if authorizer is None:
            return True
        ctx = REQUEST_CONTEXT.get()
        return authorizer.authorize(
            ctx.principal, _host(ctx.client_host), operation, resource_type, name, audit=audit
        )

    def allowed_by_resource_type(
        self, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether some resource of the type could allow ``operation`` (KIP-679)."""
        authorizer = self.authorizer
        if authorizer is None:
            return True
        ctx = REQUEST_CONTEXT.get()
        return authorizer.authorize_by_resource_type(
            ctx.principal, _host(ctx.client_host), operation, resource_type
        )

    def check(
        self,
        operation: AclOperation,
        resource_type: ResourceType = ResourceType.CLUSTER,
        name: str = CLUSTER_NAME,
    ) -> None:
        """:meth:`allowed`, or raise the resource type's *_AUTHORIZATION_FAILED error."""
        if not self.allowed(operation, resource_type, name):
            raise self.denial(operation, resource_type, name)

    @staticmethod
    def denial(
        operation: AclOperation, resource_type: ResourceType, name: str = CLUSTER_NAME
    ) -> errors.KafkaError:
        """The error answering a refused ``operation`` (Kafka's messages name the resource)."""
        what = "the cluster" if resource_type == ResourceType.CLUSTER else repr(name)
        return authorization_error(resource_type)(
            f"Not authorized to {name_of(operation)} {name_of(resource_type)} {what}"
        )

    def denied_code(
        self, operation: AclOperation, resource_type: ResourceType, name: str = CLUSTER_NAME
    ) -> int:
        """0 when allowed, else the resource type's *_AUTHORIZATION_FAILED code."""
        if self.allowed(operation, resource_type, name):
            return 0
        return authorization_error(resource_type).code

    def authorized_operations(
        self, requested: bool, resource_type: ResourceType, name: str = CLUSTER_NAME
    ) -> int:
        """An authorized-operations field: NOT_REQUESTED unless asked; every supported
        operation without an authorizer; otherwise those the principal's ACLs allow."""
        if not requested:
            return acl_bits.NOT_REQUESTED
        authorizer = self.authorizer
        if authorizer is None:
            return _ALL_BITS[resource_type]
        ctx = REQUEST_CONTEXT.get()
        return acl_bits.to_bitfield(
            authorizer.authorized_operations(
                ctx.principal, _host(ctx.client_host), resource_type, name
            )
        )

    def set_advertised(self, host: str, port: int, listener: str | None = None) -> None:
        """Advertise ``host:port`` for ``listener`` (the first one by default), e.g. the port the
        OS picked for ``listeners=...:0``."""
        self._endpoints[listener or self._first_listener] = (host, port)

    @property
    def _listener(self) -> str:
        """The listener of the request being handled (the first one outside a connection)."""
        return REQUEST_CONTEXT.get().listener_name or self._first_listener

    @property
    def _advertised(self) -> tuple[str, int]:
        """This broker's (host, port) as the current request's listener advertises it."""
        endpoints = self._endpoints
        return endpoints.get(self._listener) or endpoints[self._first_listener]

    def advertised_endpoints(self) -> list[tuple[str, str, int]]:
        """``[(listener, host, port)]`` of every listener (the ZooKeeper registration)."""
        return [(name, host, port) for name, (host, port) in self._endpoints.items()]

    def set_transactions(
        self, coordinator: TransactionCoordinator, topic: tuple[int, int, dict[str, str]]
    ) -> None:
        """Serve transactions with ``coordinator``; ``topic`` is how a cluster creates
        ``__transaction_state`` (partitions, replication factor, configs)."""
        self.transactions = coordinator
        self._transaction_topic = topic
        if isinstance(self.metadata_view, LocalMetadata):
            self.metadata_view.transactions_ready = coordinator.ensure_ready

    def join_cluster(self, cluster: ClusterMember) -> None:
        """Cluster mode from now on: answers come from the cluster, and ControlledShutdown (a
        broker-to-controller API, never advertised by a standalone broker) is served."""
        self.cluster = cluster
        self.metadata_view = ZkMetadata(
            cluster,
            self.config.default_replication_factor,
            self._auto_creating,
            self._background,
            (
                self.groups.config.offsets_topic_num_partitions,
                self.groups.config.offsets_topic_replication_factor,
            ),
            lambda: self._listener,
            self._transaction_topic,
            offsets_topic_config=self.groups.store.topic_config,
        )

    def advertised(self) -> tuple[str, int]:
        """Where clients of the first listener reach this broker (host, port)."""
        return self._endpoints[self._first_listener]

    def shutting_down(self) -> None:
        """Server shutdown: long-polls answer now with what they have (and do not park again)."""
        self._stopping = True
        self.replicas.shutdown()

    @property
    def served_api_keys(self) -> frozenset[int]:
        """API keys with a handler: ApiVersions advertises the codec's versions of exactly these."""
        return frozenset(self._dispatch)

    def _check_topic_limits(self, name: str, count: int, granted: _Granted | None = None) -> None:
        """Raise if topic ``name`` having ``count`` partitions (created, or grown to that) would
        pass ``sluice.max.partitions.per.topic`` (INVALID_PARTITIONS), ``sluice.max.topics`` or
        ``sluice.max.partitions`` (POLICY_VIOLATION, what Kafka answers when a CreateTopics
        policy refuses, or when one request asks more than its 10,000 partitions).

        Kafka itself has no such bounds (KIP-578 proposed them); without them any client may
        auto-create topics by the thousand with Metadata requests. Counted over the topics this
        broker knows (in a cluster: its cache of ZooKeeper's, so each broker applies its own
        setting to the requests it receives, and two requests racing at two brokers may both
        pass), internal topics included, plus ``granted``: what earlier topics of the same
        request take but the counts do not show yet."""
        c = self.config
        if count > c.max_partitions_per_topic:
            raise errors.InvalidPartitions(
                f"topic {name!r} cannot have {count} partitions: the limit is "
                f"{c.max_partitions_per_topic} (sluice.max.partitions.per.topic)"
            )
        if c.max_topics >= NO_BOUND and c.max_partitions >= NO_BOUND:
            return
        counts = self.metadata_view.topics()
        extra_topics, extra_partitions = (0, 0) if granted is None else granted.totals()
        current = counts.get(name)
        if current is None:
            topics = len(counts) + extra_topics + 1
            if topics > c.max_topics:
                raise errors.PolicyViolation(
                    f"cannot create topic {name!r}: the broker has {topics - 1} topics, the "
                    f"limit is {c.max_topics} (sluice.max.topics)"
                )
        added = count - (current or 0)
        total = sum(counts.values()) + extra_partitions
        if added > 0 and total + added > c.max_partitions:
            raise errors.PolicyViolation(
                f"cannot add {added} partitions for topic {name!r}: the broker has {total} "
                f"partitions, the limit is {c.max_partitions} (sluice.max.partitions)"
            )
