"""One handler per Kafka API: decoded request body in, response body out (or None = no response).

Handlers run on the event loop thread, one request at a time per connection (the connection
awaits each before decoding the next). They decode, call the
:class:`~sluice.server.replication.replica_manager.ReplicaManager` (partition leadership, appends,
reads, parked requests), the group coordinator or the LogManager (topic admin), and encode.

Errors: storage raises ``sluice.protocol.errors.KafkaError`` subclasses, which become the
per-partition or per-topic error code; anything else is a bug, logged with its traceback and
answered with UNKNOWN_SERVER_ERROR for that partition only. Every code comes from the registry
in :mod:`sluice.protocol.errors`, every API key from :mod:`sluice.protocol.messages`.

Fetch long-poll: a fetch that has fewer than ``min_bytes`` parks a ``DelayedFetch`` in the
ReplicaManager's fetch purgatory for up to ``max_wait_ms``; an append that makes new data
readable on one of its partitions completes it, and the fetch reads again.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from sluice.protocol import acl, errors
from sluice.protocol import messages as m
from sluice.protocol.config_def import NO_BOUND
from sluice.protocol.framing import (
    UnsupportedVersionError,
    api_versions_response,
    unsupported_version_response,
)
from sluice.protocol.messages import RequestHeader
from sluice.server.api.config_resources import ConfigResources
from sluice.server.group.offsets_store import OFFSETS_TOPIC
from sluice.server.logging import get_logger
from sluice.server.network.request import CLOSE_CONNECTION, REQUEST_CONTEXT

if TYPE_CHECKING:
    from sluice.server.config import Config
    from sluice.server.group.coordinator import GroupCoordinator
    from sluice.server.metadata.producer_id_manager import ProducerIdManager
    from sluice.server.metadata.zk_cluster import ClusterMember
    from sluice.server.metrics.metrics import Metrics
    from sluice.server.replication.delayed import AppendResult, DelayedProduce
    from sluice.server.replication.replica_manager import ReplicaManager

log = get_logger("sluice.handlers")

CLUSTER_ID = "sluice-single-node"
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
_FetchRead = tuple[Any, int, bool, list[tuple[str, int]]]


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

    def totals(self) -> tuple[int, int]:
        return len(self.partitions), sum(self.partitions.values())


class Handlers:
    """Dispatch by API key. Created by ``Server`` once; shared by every connection."""

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
        self.config_resources = ConfigResources(config, replicas.logs)
        self._stopping = False
        #: Cluster mode: set by the Server once the broker has joined (None standalone).
        self.cluster: ClusterMember | None = None
        self._auto_creating: set[str] = set()
        self._background: set[asyncio.Task[None]] = set()
        advertised = config.advertised_listener
        self._advertised = (advertised.host, advertised.port)
        self._dispatch: dict[int, Callable[[Any, Any], Any]] = {
            m.ApiVersions.key: self.api_versions,
            m.Metadata.key: self.metadata,
            m.Produce.key: self.produce,
            m.Fetch.key: self.fetch,
            m.ListOffsets.key: self.list_offsets,
            m.CreateTopics.key: self.create_topics,
            m.DeleteTopics.key: self.delete_topics,
            m.DeleteRecords.key: self.delete_records,
            m.InitProducerId.key: self.init_producer_id,
            m.OffsetForLeaderEpoch.key: self.offset_for_leader_epoch,
            m.FindCoordinator.key: self.find_coordinator,
            m.JoinGroup.key: self.join_group,
            m.SyncGroup.key: self.sync_group,
            m.Heartbeat.key: self.heartbeat,
            m.LeaveGroup.key: self.leave_group,
            m.OffsetCommit.key: self.offset_commit,
            m.OffsetFetch.key: self.offset_fetch,
            m.ListGroups.key: self.list_groups,
            m.DescribeGroups.key: self.describe_groups,
            m.DeleteGroups.key: self.delete_groups,
            m.OffsetDelete.key: self.offset_delete,
            m.DescribeConfigs.key: self.describe_configs,
            m.AlterConfigs.key: self.alter_configs,
            m.IncrementalAlterConfigs.key: self.incremental_alter_configs,
            m.DescribeCluster.key: self.describe_cluster,
            m.CreatePartitions.key: self.create_partitions,
            m.DescribeLogDirs.key: self.describe_log_dirs,
        }
        # Counter names built once (one per request otherwise), by the API's name.
        self._request_metric = {key: f"requests.{m.APIS[key].name}" for key in m.APIS}

    def set_advertised(self, host: str, port: int) -> None:
        self._advertised = (host, port)

    def join_cluster(self, cluster: ClusterMember) -> None:
        """Cluster mode from now on: answers come from the cluster, and ControlledShutdown (a
        broker-to-controller API, never advertised by a standalone broker) is served."""
        self.cluster = cluster
        self.config_resources.cluster = cluster
        self._dispatch[m.ControlledShutdown.key] = self.controlled_shutdown

    def _cluster_id(self) -> str:
        return CLUSTER_ID if self.cluster is None else self.cluster.cluster_id

    def advertised(self) -> tuple[str, int]:
        """Where clients reach this broker (host, port)."""
        return self._advertised

    def _brokers(self) -> tuple[list[tuple[int, str, int, str | None]], int]:
        """``([(id, host, port, rack)], controller id)``: this broker alone standalone, the
        live brokers in a cluster."""
        cluster = self.cluster
        if cluster is None:
            host, port = self._advertised
            node = self.config.node_id
            return [(node, host, port, None)], node
        out = []
        for broker_id, info in sorted(cluster.cache.brokers.items()):
            address = cluster.cache.address(broker_id)
            if address is not None:
                out.append((broker_id, address[0], address[1], info.rack))
        return out, cluster.cache.controller_id

    def shutting_down(self) -> None:
        """Server shutdown: long-polls answer now with what they have (and do not park again)."""
        self._stopping = True
        self.replicas.shutdown()

    async def handle(self, header: Any, body: Any) -> Any:
        """Response body for ``body``; None: send nothing; :data:`CLOSE_CONNECTION`: close.

        Never raises for a Kafka error (those become error codes in the body).
        """
        result = self.dispatch(header, body)
        if asyncio.iscoroutine(result):
            result = await result
        return result

    def dispatch(self, header: Any, body: Any) -> Any:
        """:meth:`handle` without the coroutine: the result, or a coroutine to await for it
        (handlers that wait: long-poll Fetch, group joins). The connection's per-request path
        calls this, so most requests cost no coroutine at all."""
        api_key = header.api_key
        self.metrics.inc(self._request_metric[api_key])
        return self._dispatch[api_key](header, body)  # callers check serves() first

    @property
    def served_api_keys(self) -> frozenset[int]:
        """API keys with a handler: ApiVersions advertises the codec's versions of exactly these."""
        return frozenset(self._dispatch)

    def serves(self, api_key: int) -> bool:
        """False for an API the codec knows but no handler serves (it is not advertised)."""
        return api_key in self._dispatch

    def unsupported_version(self, exc: UnsupportedVersionError) -> list[Any] | None:
        """Response parts answering an unsupported request, or None = close the connection.

        Only ApiVersions has a defined answer: a v0 body with UNSUPPORTED_VERSION and our
        version list, so the client can pick a version it shares with us (KIP-511).
        """
        self.metrics.inc("requests.unsupported_version")
        return unsupported_version_response(exc, self.served_api_keys)

    # --- ApiVersions (18) ------------------------------------------------------------------------

    def api_versions(
        self, header: RequestHeader, body: m.ApiVersionsRequest
    ) -> m.ApiVersionsResponse:
        return api_versions_response(0, self.served_api_keys)

    # --- Metadata (3) ----------------------------------------------------------------------------

    def metadata(self, header: RequestHeader, body: m.MetadataRequest) -> m.MetadataResponse:
        if self.cluster is not None:
            return self._cluster_metadata(self.cluster, body)
        cls = m.MetadataResponse
        broker_cls = m.MetadataResponse.MetadataResponseBroker
        topic_cls = m.MetadataResponse.MetadataResponseTopic
        part_cls = m.MetadataResponse.MetadataResponsePartition
        node = self.config.node_id
        host, port = self._advertised
        existing = self.logs.topics()
        names = sorted(existing) if body.topics is None else [t.name for t in body.topics]
        allow_auto = getattr(body, "allow_auto_topic_creation", True)
        # v8+: without an authorizer, every operation a resource supports (Kafka's AuthHelper).
        topic_ops = (
            acl.TOPIC_AUTHORIZED
            if body.include_topic_authorized_operations
            else (acl.NOT_REQUESTED)
        )
        cluster_ops = (
            acl.CLUSTER_AUTHORIZED
            if body.include_cluster_authorized_operations
            else (acl.NOT_REQUESTED)
        )
        topics = []
        for name in names:
            error = 0
            count = existing.get(name) if name is not None else None
            if count is None:
                error = errors.UnknownTopicOrPartition.code
                if name is not None and allow_auto and self.config.auto_create_topics_enable:
                    try:
                        self._check_topic_limits(name, self.config.num_partitions)
                        self.logs.create_topic(name, self.config.num_partitions)
                        count = self.config.num_partitions
                        error = 0
                        self.metrics.inc("topics.auto_created")
                        log.info("auto-created topic", topic=name, partitions=count)
                    except errors.KafkaError as exc:
                        error = exc.code
                    existing = self.logs.topics()
            partitions = [self._partition_metadata(part_cls, name, i) for i in range(count or 0)]
            topics.append(
                topic_cls(
                    error_code=error,
                    name=name,
                    is_internal=name == OFFSETS_TOPIC,
                    partitions=partitions,
                    topic_authorized_operations=topic_ops,
                )
            )
        return cls(
            throttle_time_ms=0,
            brokers=[broker_cls(node_id=node, host=host, port=port, rack=None)],
            cluster_id=self._cluster_id(),
            controller_id=node,
            topics=topics,
            cluster_authorized_operations=cluster_ops,
        )

    def _cluster_metadata(
        self, cluster: ClusterMember, body: m.MetadataRequest
    ) -> m.MetadataResponse:
        """Metadata from the cluster's cache (Kafka's ``MetadataCache``): live brokers, the
        controller, and per partition its leader (-1 with LEADER_NOT_AVAILABLE when it has
        none), leader epoch, replicas, ISR and the replicas on dead brokers. An unknown topic
        may be auto-created (in ZooKeeper; answered LEADER_NOT_AVAILABLE meanwhile, as Kafka)."""
        cls = m.MetadataResponse
        topic_cls = m.MetadataResponse.MetadataResponseTopic
        part_cls = m.MetadataResponse.MetadataResponsePartition
        cache = cluster.cache
        names = sorted(cache.assignments) if body.topics is None else [t.name for t in body.topics]
        allow_auto = getattr(body, "allow_auto_topic_creation", True)
        topic_ops = (
            acl.TOPIC_AUTHORIZED if body.include_topic_authorized_operations else acl.NOT_REQUESTED
        )
        cluster_ops = (
            acl.CLUSTER_AUTHORIZED
            if body.include_cluster_authorized_operations
            else acl.NOT_REQUESTED
        )
        topics = []
        for name in names:
            assignment = cache.assignments.get(name) if name is not None else None
            partitions = []
            error = 0
            if assignment is None:
                error = errors.UnknownTopicOrPartition.code
                if name is not None and allow_auto and self.config.auto_create_topics_enable:
                    error = self._auto_create(cluster, name)
            else:
                for index in sorted(assignment.partitions):
                    replicas = list(assignment.replicas(index))
                    state = cache.state(name, index)
                    leader = cache.leader(name, index)
                    partitions.append(
                        part_cls(
                            error_code=0 if leader >= 0 else errors.LeaderNotAvailable.code,
                            partition_index=index,
                            leader_id=leader,
                            leader_epoch=-1 if state is None else state.leader_epoch,
                            replica_nodes=replicas,
                            isr_nodes=[] if state is None else list(state.isr),
                            offline_replicas=[r for r in replicas if r not in cache.brokers],
                        )
                    )
            topics.append(
                topic_cls(
                    error_code=error,
                    name=name,
                    is_internal=name == OFFSETS_TOPIC,
                    partitions=partitions,
                    topic_authorized_operations=topic_ops,
                )
            )
        brokers, controller = self._brokers()
        broker_cls = m.MetadataResponse.MetadataResponseBroker
        return cls(
            throttle_time_ms=0,
            brokers=[broker_cls(node_id=b, host=h, port=p, rack=r) for b, h, p, r in brokers],
            cluster_id=self._cluster_id(),
            controller_id=controller,
            topics=topics,
            cluster_authorized_operations=cluster_ops,
        )

    def _auto_create(self, cluster: ClusterMember, name: str) -> int:
        """Start creating ``name`` with the broker defaults; the code Metadata answers now."""
        try:
            self._check_topic_limits(name, self.config.num_partitions)
            assignment = cluster.validate_new_topic(
                name, self.config.num_partitions, self.config.default_replication_factor, None, {}
            )
        except errors.KafkaError as exc:
            return exc.code
        if name not in self._auto_creating:
            self._auto_creating.add(name)

            async def create() -> None:
                try:
                    await cluster.create_topic(name, assignment, {}, 0)
                    self.metrics.inc("topics.auto_created")
                except errors.TopicAlreadyExists:
                    pass
                except Exception as exc:
                    log.warning("auto-creating a topic failed", topic=name, error=repr(exc))
                finally:
                    self._auto_creating.discard(name)

            task = asyncio.get_running_loop().create_task(create())
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        return errors.LeaderNotAvailable.code

    def _partition_metadata(
        self, part_cls: type[m.MetadataResponse.MetadataResponsePartition], topic: str, index: int
    ) -> m.MetadataResponse.MetadataResponsePartition:
        partition = self.replicas.get_partition(topic, index)
        if partition is None:  # listed by the LogManager but not open: no leader to offer
            return part_cls(error_code=errors.LeaderNotAvailable.code, partition_index=index,
                            leader_id=-1, leader_epoch=-1, replica_nodes=[], isr_nodes=[],
                            offline_replicas=[])  # fmt: skip
        return part_cls(
            error_code=0,
            partition_index=index,
            leader_id=partition.leader_id,
            leader_epoch=partition.leader_epoch,
            replica_nodes=list(partition.replicas),
            isr_nodes=list(partition.isr),
            offline_replicas=[],
        )

    # --- Produce (0) -----------------------------------------------------------------------------

    def produce(self, header: RequestHeader, body: m.ProduceRequest) -> Any:
        """The response (None for acks=0), or a coroutine for it when acks=-1 has to wait for
        the high watermark (never on a single broker: the ISR is just the leader)."""
        topic_data = body.topic_data
        results, delayed = self.replicas.append_records(
            [(t.name, pd.index, pd.records) for t in topic_data for pd in t.partition_data],
            body.acks,
            body.timeout_ms,
            internal_topics_allowed=header.client_id == ADMIN_CLIENT_ID,
        )
        if delayed is None:
            return self._produce_response(body, results)
        return self._produce_wait(body, delayed)

    async def _produce_wait(
        self, body: m.ProduceRequest, delayed: DelayedProduce
    ) -> m.ProduceResponse | None:
        self.metrics.inc("produce.delayed")
        await self.replicas.produce_purgatory.wait(delayed, max(body.timeout_ms, 0) / 1000)
        return self._produce_response(body, delayed.results)

    def _produce_response(
        self, body: m.ProduceRequest, results: list[AppendResult]
    ) -> m.ProduceResponse | None:
        cls = m.ProduceResponse
        topic_cls = m.ProduceResponse.TopicProduceResponse
        part_cls = m.ProduceResponse.PartitionProduceResponse
        responses = []
        failed = 0
        records = 0
        # Kafka's BrokerTopicMetrics: the request's (validated) batch bytes and records.
        bytes_in = self.metrics.bytes_in
        messages_in = self.metrics.messages_in
        it = iter(results)
        for topic in body.topic_data:
            parts = []
            name = topic.name
            for _ in topic.partition_data:
                r = next(it)
                info = r.info
                if r.error or info is None:
                    failed += 1
                    if r.error:
                        self.metrics.request_errors[(m.Produce.key, r.error)] += 1
                    parts.append(part_cls(index=r.partition, error_code=r.error, base_offset=-1,
                                          log_append_time_ms=-1, log_start_offset=-1,
                                          error_message=r.message))  # fmt: skip
                    continue
                records += info.record_count
                bytes_in[name] += info.valid_bytes
                messages_in[name] += info.record_count
                parts.append(
                    part_cls(
                        index=r.partition,
                        error_code=0,
                        base_offset=info.first_offset,
                        log_append_time_ms=info.log_append_time,
                        log_start_offset=r.log_start_offset,
                        error_message=None,
                    )
                )
            responses.append(topic_cls(name=topic.name, partition_responses=parts))
        if records:
            self.metrics.inc("produce.records", records)
        if failed:
            self.metrics.inc("produce.errors", failed)
        if body.acks == 0:
            # acks=0: the client expects no response at all (Kafka sends none). On an error
            # Kafka closes the connection instead, the only way such a client can notice.
            self.metrics.inc("produce.acks0")
            if failed:
                log.info("acks=0 produce failed: closing the connection", errors=failed)
                return CLOSE_CONNECTION
            return None
        return cls(responses=responses, throttle_time_ms=0)

    # --- Fetch (1) -------------------------------------------------------------------------------

    def fetch(self, header: RequestHeader, body: m.FetchRequest) -> Any:
        """The response, or a coroutine for it when the request has to wait (long poll).

        Not a coroutine function: the usual fetch (data there, or ``max_wait_ms`` 0) is answered
        without creating and driving a coroutine; :meth:`handle` awaits what needs awaiting.

        ``fetch.max.bytes`` caps what any request may ask for (``max_bytes``, and ``min_bytes``
        below it), followers' too, as Kafka's ``KafkaApis.handleFetchRequest``: the bound on
        what one response holds in memory (copy path) or in flight (zero copy), whatever a
        client asks; the first batch may still exceed it (KIP-74).
        """
        cap = self.config.fetch_max_bytes
        if body.max_bytes > cap:
            body.max_bytes = cap  # (the decoded request is this call's own)
        if body.min_bytes > body.max_bytes:
            body.min_bytes = body.max_bytes
        isolation = _fetch_isolation(body.isolation_level, body.replica_id)
        wanted = [
            (t.topic, p.partition, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch)
            for t in body.topics
            for p in t.partitions
        ]
        deadline = time.monotonic() + max(body.max_wait_ms, 0) / 1000
        read = self._read_fetch(body, wanted, isolation)
        if read[1] >= body.min_bytes or read[2] or not wanted or self._stopping:
            return self._fetch_answer(body, read)
        if time.monotonic() >= deadline:
            return self._fetch_answer(body, read)
        return self._fetch_wait(body, wanted, isolation, deadline)

    def _fetch_answer(self, body: m.FetchRequest, read: _FetchRead) -> m.FetchResponse:
        """The response of a read that is sent: count its bytes per topic (Kafka's
        BytesOutPerSec; a follower's ReplicationBytesOutPerSec) and its errors."""
        response, _size, had_error, sent = read
        metrics = self.metrics
        if sent:
            if body.replica_id >= 0:
                metrics.replication_bytes_out += sum(size for _, size in sent)
            else:
                bytes_out = metrics.bytes_out
                for topic, size in sent:
                    bytes_out[topic] += size
        if had_error:
            metrics.count_errors(m.Fetch.key, response)
        return response

    async def _fetch_wait(
        self,
        body: m.FetchRequest,
        wanted: list[tuple[str, int, int, int, int]],
        isolation: Any,
        deadline: float,
    ) -> m.FetchResponse:
        """Long poll: park until new data on a wanted partition (or the deadline), re-read."""
        keys = [(topic, part) for topic, part, *_ in wanted]
        purgatory = self.replicas.fetch_purgatory
        while True:
            delayed = self.replicas.delayed_fetch(keys, isolation)
            if not await purgatory.wait(delayed, deadline - time.monotonic()):
                # timed out: one last read, whatever it holds
                return self._fetch_answer(body, self._read_fetch(body, wanted, isolation, False))
            self.metrics.inc("fetch.woken")
            read = self._read_fetch(body, wanted, isolation, False)
            _, size, had_error, _ = read
            done = size >= body.min_bytes or had_error or self._stopping
            if done or time.monotonic() >= deadline:
                return self._fetch_answer(body, read)

    def _read_fetch(
        self,
        body: m.FetchRequest,
        wanted: list[tuple[str, int, int, int, int]],
        isolation: Any,
        record_follower: bool = True,
    ) -> _FetchRead:
        """``(response, record bytes, whether a partition has an error, [(topic, record bytes)]
        of the partitions with data)``. A long poll's re-reads pass ``record_follower=False``:
        a follower's fetch is recorded once per request (``ReplicaManager.fetch_messages``)."""
        # Hot path (every Fetch, every partition): classes resolved once, one response object
        # per partition.
        cls = m.FetchResponse
        topic_cls = cls.FetchableTopicResponse
        part_cls = cls.PartitionData
        had_error = False
        sent: list[tuple[str, int]] = []
        total = 0
        topics: dict[str, list[m.FetchResponse.PartitionData]] = {}
        reads = self.replicas.fetch_messages(
            wanted, body.max_bytes, isolation, body.replica_id, record_follower
        )
        for (topic, part, *_), (partition, info, exc) in zip(wanted, reads, strict=True):
            entry: m.FetchResponse.PartitionData
            if partition is None:
                had_error = True
                entry = part_cls(
                    partition_index=part,
                    error_code=self.replicas.missing_partition_code(topic, part),
                    high_watermark=-1,
                    last_stable_offset=-1,
                    log_start_offset=-1,
                    aborted_transactions=None,
                    preferred_read_replica=-1,
                    records=b"",  # Kafka sends empty (not null) records with an error
                )
            elif info is None:
                had_error = True
                log_ = partition.log
                entry = part_cls(
                    partition_index=part,
                    error_code=_code(exc) if exc is not None else errors.UnknownServerError.code,
                    high_watermark=log_.high_watermark,
                    last_stable_offset=log_.high_watermark,
                    log_start_offset=log_.log_start_offset,
                    aborted_transactions=None,
                    preferred_read_replica=-1,
                    records=b"",  # Kafka sends empty (not null) records with an error
                )
            else:
                records = info.slice
                hw = info.high_watermark
                size = records.size if records is not None else 0
                if size:
                    total += size
                    sent.append((topic, size))
                entry = part_cls(
                    partition_index=part,
                    error_code=0,
                    high_watermark=hw,
                    last_stable_offset=hw,
                    log_start_offset=info.log_start_offset,
                    aborted_transactions=None,
                    preferred_read_replica=-1,
                    records=records if size else b"",
                )
            entries = topics.get(topic)
            if entries is None:
                topics[topic] = [entry]
            else:
                entries.append(entry)
        response = cls(
            throttle_time_ms=0,
            error_code=0,
            session_id=0,
            responses=[topic_cls(topic=name, partitions=parts) for name, parts in topics.items()],
        )
        return response, total, had_error, sent

    # --- ListOffsets (2) -------------------------------------------------------------------------

    def list_offsets(
        self, header: RequestHeader, body: m.ListOffsetsRequest
    ) -> m.ListOffsetsResponse:
        """Kafka's rules by ``replica_id``: a consumer (-1) reads below HW (or the committed
        bound with read_committed) and must reach the leader; a broker (>= 0) is bounded by
        LEO; the debugging id (-2) is bounded by LEO and may ask a follower. v4+ carries
        ``current_leader_epoch`` (checked) and answers the offset's leader epoch."""
        cls = m.ListOffsetsResponse
        topic_cls = m.ListOffsetsResponse.ListOffsetsTopicResponse
        part_cls = m.ListOffsetsResponse.ListOffsetsPartitionResponse
        isolation = None
        if body.replica_id == CONSUMER_REPLICA_ID:
            isolation = _fetch_isolation(body.isolation_level)
        require_leader = body.replica_id != DEBUGGING_REPLICA_ID
        topics = []
        for topic in body.topics:
            parts = []
            for p in topic.partitions:
                partition = self.replicas.get_partition(topic.name, p.partition_index)
                code, ts, offset, epoch = 0, -1, -1, -1
                if partition is None:
                    code = self.replicas.missing_partition_code(topic.name, p.partition_index)
                else:
                    try:
                        found = partition.fetch_offset_for_timestamp(
                            p.timestamp, isolation, p.current_leader_epoch, require_leader
                        )
                    except Exception as exc:
                        if not isinstance(exc, errors.KafkaError):
                            log.exception("list offsets failed", topic=topic.name)
                        code = _code(exc)
                    else:
                        if found is not None:
                            ts, offset, epoch = found
                parts.append(
                    part_cls(
                        partition_index=p.partition_index,
                        error_code=code,
                        timestamp=ts,
                        offset=offset,
                        leader_epoch=epoch,
                    )
                )
            topics.append(topic_cls(name=topic.name, partitions=parts))
        return cls(throttle_time_ms=0, topics=topics)

    # --- OffsetForLeaderEpoch (23) ---------------------------------------------------------------

    def offset_for_leader_epoch(
        self, header: RequestHeader, body: m.OffsetForLeaderEpochRequest
    ) -> m.OffsetForLeaderEpochResponse:
        """The end offset of each asked epoch in the leader's log (KIP-101/KIP-279 for
        followers, KIP-320 for consumers validating their position after an epoch change).

        Leader only for every ``replica_id`` -- consumer (-1), broker (>= 0) and the debugging
        id (-2, what v0-2 mean) alike: Kafka's ``ReplicaManager.lastOffsetForLeaderEpoch``
        always requires the leader, and uses the replica id only to choose the permission it
        checks (none here). Per partition, in Kafka's order: UNKNOWN_TOPIC_OR_PARTITION,
        FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH (v2+ ``current_leader_epoch``),
        NOT_LEADER_OR_FOLLOWER; else NONE with ``(epoch, end offset)``, ``(-1, -1)`` when the
        epoch is undefined (asked above every epoch, or -1)."""
        cls = m.OffsetForLeaderEpochResponse
        topic_cls = m.OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
        part_cls = m.OffsetForLeaderEpochResponse.EpochEndOffset
        lookup = self.replicas.last_offset_for_leader_epoch
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                code, epoch, end = lookup(t.topic, p.partition, p.current_leader_epoch,
                                          p.leader_epoch)  # fmt: skip
                parts.append(
                    part_cls(error_code=code, partition=p.partition, leader_epoch=epoch,
                             end_offset=end)
                )  # fmt: skip
            topics.append(topic_cls(topic=t.topic, partitions=parts))
        return cls(throttle_time_ms=0, topics=topics)

    # --- CreateTopics (19) -----------------------------------------------------------------------

    @staticmethod
    def _creatable_configs(t: m.CreateTopicsRequest.CreatableTopic) -> dict[str, str]:
        configs: dict[str, str] = {}
        for c in t.configs:
            if c.value is None:
                raise errors.InvalidConfig(f"null value for config {c.name!r}")
            configs[c.name] = c.value
        return configs

    @staticmethod
    def _duplicates(body: m.CreateTopicsRequest) -> set[str]:
        seen: dict[str, int] = {}
        for t in body.topics:
            seen[t.name] = seen.get(t.name, 0) + 1
        return {name for name, count in seen.items() if count > 1}

    def create_topics(self, header: RequestHeader, body: m.CreateTopicsRequest) -> Any:
        """Standalone: create the logs now. In a cluster: a coroutine (the topics are written
        to ZooKeeper and the answer waits for their leaders, bounded by ``timeout_ms``)."""
        if self.cluster is not None:
            return self._cluster_create_topics(self.cluster, body)
        cls = m.CreateTopicsResponse
        result_cls = m.CreateTopicsResponse.CreatableTopicResult
        duplicates = self._duplicates(body)
        results = []
        # validate_only creates nothing: what the request's earlier topics would take.
        granted = _Granted()
        for t in body.topics:
            code, message = 0, None
            try:
                if t.name in duplicates:
                    raise errors.InvalidRequest(f"topic {t.name!r} appears more than once")
                partitions = self._partitions_for(t)
                configs = self._creatable_configs(t)
                self._check_topic_limits(t.name, partitions, granted)
                if body.validate_only:
                    granted.add(t.name, partitions)
                    self.logs.validate_new_topic(t.name, partitions, configs)
                else:
                    self.logs.create_topic(t.name, partitions, configs)
                    log.info("created topic", topic=t.name, partitions=partitions)
            except Exception as exc:
                code, message = _topic_failure(exc, "create topic failed", t.name)
            results.append(result_cls(name=t.name, error_code=code, error_message=message))
        return cls(throttle_time_ms=0, topics=results)

    async def _cluster_create_topics(
        self, cluster: ClusterMember, body: m.CreateTopicsRequest
    ) -> m.CreateTopicsResponse:
        result_cls = m.CreateTopicsResponse.CreatableTopicResult
        duplicates = self._duplicates(body)
        # The cache learns of the request's topics only once they are written: count them here.
        granted = _Granted()

        async def one(t: m.CreateTopicsRequest.CreatableTopic) -> tuple[int, str | None]:
            try:
                if t.name in duplicates:
                    raise errors.InvalidRequest(f"topic {t.name!r} appears more than once")
                configs = self._creatable_configs(t)
                explicit = None
                n, rf = t.num_partitions, t.replication_factor
                if t.assignments:
                    if n != -1 or rf != -1:
                        raise errors.InvalidRequest(
                            "num_partitions and replication_factor must be -1 with assignments"
                        )
                    explicit = {a.partition_index: list(a.broker_ids) for a in t.assignments}
                else:
                    n = self.config.num_partitions if n == -1 else n
                    rf = self.config.default_replication_factor if rf == -1 else rf
                self._check_topic_limits(t.name, len(explicit) if explicit else n, granted)
                planned = cluster.validate_new_topic(t.name, n, rf, explicit, configs)
                granted.add(t.name, len(explicit) if explicit else n)
                if not body.validate_only:
                    await cluster.create_topic(t.name, planned, configs, body.timeout_ms)
            except Exception as exc:
                return _topic_failure(exc, "create topic failed", t.name)
            return 0, None

        outcomes = await asyncio.gather(*(one(t) for t in body.topics))
        return m.CreateTopicsResponse(
            throttle_time_ms=0,
            topics=[
                result_cls(name=t.name, error_code=code, error_message=message)
                for t, (code, message) in zip(body.topics, outcomes, strict=True)
            ],
        )

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
        counts = self.cluster.cache.topics() if self.cluster is not None else self.logs.topics()
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

    def _partitions_for(self, t: m.CreateTopicsRequest.CreatableTopic) -> int:
        node = self.config.node_id
        if t.assignments:
            if t.num_partitions != -1 or t.replication_factor != -1:
                raise errors.InvalidRequest(
                    "num_partitions and replication_factor must be -1 with assignments"
                )
            for a in t.assignments:
                if list(a.broker_ids) != [node]:
                    raise errors.InvalidReplicaAssignment(
                        f"single broker: every partition's replicas must be [{node}]"
                    )
            return len(t.assignments)
        rf = t.replication_factor
        if rf == -1:
            rf = self.config.default_replication_factor
        if rf != 1:
            raise errors.InvalidReplicationFactor(
                f"replication factor {rf}: a single broker supports only 1"
            )
        n = t.num_partitions
        if n == -1:
            n = self.config.num_partitions
        if n <= 0:
            raise errors.InvalidPartitions(f"number of partitions must be > 0, got {n}")
        return int(n)

    # --- CreatePartitions (37) -------------------------------------------------------------------

    def create_partitions(self, header: RequestHeader, body: m.CreatePartitionsRequest) -> Any:
        """Grow topics (Kafka's ``ZkAdminManager.createPartitions`` checks and messages): a
        count that does not grow the topic is INVALID_PARTITIONS, an unknown topic
        UNKNOWN_TOPIC_OR_PARTITION, a topic named twice INVALID_REQUEST, ``assignments`` (one
        replica list per new partition) that do not fit INVALID_REPLICA_ASSIGNMENT;
        ``validate_only`` checks without adding. ``__consumer_offsets`` is refused
        (INVALID_REQUEST): the group coordinator places groups by its partition count. (Kafka's
        broker does not check it, ``ZkAdminManager.createPartitions`` 2.8; ``kafka-topics.sh``
        refuses it client-side, ``TopicCommand``: "The number of partitions for the internal
        topic ... cannot be changed".)
        Standalone the logs are added now (``LogManager.add_partitions``); in a cluster a
        coroutine writes the grown assignment to ZooKeeper and waits for the new leaders."""
        seen: dict[str, int] = {}
        for t in body.topics:
            seen[t.name] = seen.get(t.name, 0) + 1
        cluster = self.cluster

        async def in_cluster(
            cluster: ClusterMember, t: m.CreatePartitionsRequest.CreatePartitionsTopic
        ) -> tuple[int, str | None]:
            try:
                self._check_partitions_request(t, seen)
                if t.name in cluster.cache.assignments:  # else add_partitions says unknown
                    self._check_topic_limits(t.name, t.count)
                assignments = (
                    None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
                )
                await cluster.add_partitions(
                    t.name, t.count, assignments, body.timeout_ms, body.validate_only
                )
            except Exception as exc:
                return _topic_failure(exc, "create partitions failed", t.name)
            return 0, None

        def standalone(
            t: m.CreatePartitionsRequest.CreatePartitionsTopic,
        ) -> tuple[int, str | None]:
            try:
                self._check_partitions_request(t, seen)
                current = self.logs.validate_new_partition_count(t.name, t.count)
                self._check_topic_limits(t.name, t.count)
                if t.assignments is not None:
                    self._check_local_assignments(t, current)
                if not body.validate_only:
                    self.logs.add_partitions(t.name, t.count)
                    log.info("partitions added", topic=t.name, partitions=t.count)
            except Exception as exc:
                return _topic_failure(exc, "create partitions failed", t.name)
            return 0, None

        def response(outcomes: list[tuple[int, str | None]]) -> m.CreatePartitionsResponse:
            result_cls = m.CreatePartitionsResponse.CreatePartitionsTopicResult
            return m.CreatePartitionsResponse(
                throttle_time_ms=0,
                results=[
                    result_cls(name=t.name, error_code=code, error_message=message)
                    for t, (code, message) in zip(body.topics, outcomes, strict=True)
                ],
            )

        if cluster is None:
            return response([standalone(t) for t in body.topics])

        async def gathered() -> m.CreatePartitionsResponse:
            outcomes = await asyncio.gather(*(in_cluster(cluster, t) for t in body.topics))
            return response(list(outcomes))

        return gathered()

    @staticmethod
    def _check_partitions_request(
        t: m.CreatePartitionsRequest.CreatePartitionsTopic, seen: dict[str, int]
    ) -> None:
        if seen[t.name] > 1:
            raise errors.InvalidRequest("Duplicate topic in request.")
        if t.name == OFFSETS_TOPIC:
            raise errors.InvalidRequest(
                f"cannot add partitions to {OFFSETS_TOPIC}: groups are placed by its "
                "partition count (offsets.topic.num.partitions)"
            )

    def _check_local_assignments(
        self, t: m.CreatePartitionsRequest.CreatePartitionsTopic, current: int
    ) -> None:
        assert t.assignments is not None
        if len(t.assignments) != t.count - current:
            raise errors.InvalidReplicaAssignment(
                f"Increasing the number of partitions by {t.count - current} but "
                f"{len(t.assignments)} assignments provided."
            )
        node = self.config.node_id
        for a in t.assignments:
            if list(a.broker_ids) != [node]:
                raise errors.InvalidReplicaAssignment(
                    f"single broker: every new partition's replicas must be [{node}], "
                    f"not {list(a.broker_ids)}"
                )

    # --- DeleteTopics (20) -----------------------------------------------------------------------

    def delete_topics(self, header: RequestHeader, body: m.DeleteTopicsRequest) -> Any:
        """Delete topics (standalone now; in a cluster through the controller).

        ``__consumer_offsets`` is refused with TOPIC_AUTHORIZATION_FAILED, the rest of the
        request served. Kafka's broker has no internal-topic check of its own here
        (``KafkaApis.handleDeleteTopicsRequest``, 2.8 and 3.x ``ControllerApis.deleteTopics``):
        what refuses a deletion of an existing topic is the authorizer, with that code, and
        ``kafka-topics.sh`` refuses internal topics client-side (``TopicCommand``: "is a kafka
        internal topic and is not allowed to be marked for deletion"). Sluice has no ACLs, so
        it answers what a Kafka cluster denying DELETE on internal topics answers: every
        committed offset would otherwise be gone (and groups placed on a topic recreated)."""
        if self.cluster is not None and self.config.delete_topic_enable:
            return self._cluster_delete_topics(self.cluster, body)
        cls = m.DeleteTopicsResponse
        result_cls = m.DeleteTopicsResponse.DeletableTopicResult
        results = []
        for name in body.topic_names:
            code = 0
            if not self.config.delete_topic_enable:
                code = errors.TopicDeletionDisabled.code
            elif name == OFFSETS_TOPIC:
                code = self._refuse_internal_deletion(name)
            else:
                try:
                    self.replicas.delete_topic(name)  # parked fetches answer (with an error) now
                    log.info("deleted topic", topic=name)
                except Exception as exc:
                    if not isinstance(exc, errors.KafkaError):
                        log.exception("delete topic failed", topic=name)
                    code = _code(exc)
            results.append(result_cls(name=name, error_code=code))
        return cls(throttle_time_ms=0, responses=results)

    async def _cluster_delete_topics(
        self, cluster: ClusterMember, body: m.DeleteTopicsRequest
    ) -> m.DeleteTopicsResponse:
        """Ask the controller to delete each topic, then wait (bounded by ``timeout_ms``) until
        it is gone from this broker's view (Kafka's DelayedDeleteTopics)."""
        result_cls = m.DeleteTopicsResponse.DeletableTopicResult
        codes: dict[str, int] = {}
        for name in body.topic_names:
            if name == OFFSETS_TOPIC:
                codes[name] = self._refuse_internal_deletion(name)
                continue
            try:
                await cluster.delete_topic(name)
                codes[name] = 0
            except Exception as exc:
                if not isinstance(exc, errors.KafkaError):
                    log.exception("delete topic failed", topic=name)
                codes[name] = _code(exc)
        requested = [n for n, code in codes.items() if code == 0]
        if requested and body.timeout_ms > 0:
            cache = cluster.cache
            gone = await cache.wait_for(
                lambda: not any(n in cache.assignments for n in requested),
                body.timeout_ms / 1000,
            )
            if not gone:
                for name in requested:
                    if name in cache.assignments:
                        codes[name] = errors.RequestTimedOut.code
        return m.DeleteTopicsResponse(
            throttle_time_ms=0,
            responses=[result_cls(name=n, error_code=codes[n]) for n in body.topic_names],
        )

    @staticmethod
    def _refuse_internal_deletion(name: str) -> int:
        log.warning("refused to delete an internal topic", topic=name)
        return errors.TopicAuthorizationFailed.code

    # --- DeleteRecords (21) ----------------------------------------------------------------------

    def delete_records(
        self, header: RequestHeader, body: m.DeleteRecordsRequest
    ) -> m.DeleteRecordsResponse:
        """Move each partition's log start offset (on the leader; followers follow).

        ``__consumer_offsets`` is refused with INVALID_TOPIC_EXCEPTION, "Cannot delete records
        of internal topic", before the partition is looked up, as Kafka's
        ``ReplicaManager.deleteRecords`` does (2.6 to 3.x)."""
        cls = m.DeleteRecordsResponse
        topic_cls = m.DeleteRecordsResponse.DeleteRecordsTopicResult
        part_cls = m.DeleteRecordsResponse.DeleteRecordsPartitionResult
        topics = []
        for topic in body.topics:
            parts = []
            for p in topic.partitions:
                partition = self.replicas.get_partition(topic.name, p.partition_index)
                code, low = 0, -1
                if topic.name == OFFSETS_TOPIC:
                    code = errors.InvalidTopic.code
                    log.warning("refused to delete records of an internal topic",
                                topic=topic.name)  # fmt: skip
                elif partition is None:
                    code = self.replicas.missing_partition_code(topic.name, p.partition_index)
                else:
                    try:
                        # The leader moves it; followers follow from their fetches.
                        low = partition.local_log().delete_records(p.offset)
                    except Exception as exc:
                        if not isinstance(exc, errors.KafkaError):
                            log.exception("delete records failed", topic=topic.name)
                        code = _code(exc)
                parts.append(
                    part_cls(partition_index=p.partition_index, low_watermark=low, error_code=code)
                )
            topics.append(topic_cls(name=topic.name, partitions=parts))
        return cls(throttle_time_ms=0, topics=topics)

    # --- InitProducerId (22) ---------------------------------------------------------------------

    def init_producer_id(self, header: RequestHeader, body: m.InitProducerIdRequest) -> Any:
        """A fresh producer id, epoch 0, for an idempotent producer.

        Transactions are not implemented: a transactional id gets INVALID_REQUEST. Sequence and
        epoch checks on append are the storage layer's (sluice.server.storage.producer_state via
        Log).
        """
        cls = m.InitProducerIdResponse
        if body.transactional_id is not None:
            return cls(throttle_time_ms=0, error_code=errors.InvalidRequest.code,
                       producer_id=-1, producer_epoch=-1)  # fmt: skip
        if self.cluster is not None:
            return self._cluster_init_producer_id(self.cluster)
        producer_id = self.producer_ids.generate()
        self.metrics.inc("producer_ids.allocated")
        return cls(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)

    async def _cluster_init_producer_id(self, cluster: ClusterMember) -> m.InitProducerIdResponse:
        cls = m.InitProducerIdResponse
        try:
            producer_id = await cluster.producer_ids.generate()
        except Exception as exc:
            # ZooKeeper unreachable (or too contended): retriable for the client.
            log.warning("no producer id block", error=repr(exc))
            return cls(throttle_time_ms=0, error_code=errors.CoordinatorNotAvailable.code,
                       producer_id=-1, producer_epoch=-1)  # fmt: skip
        self.metrics.inc("producer_ids.allocated")
        return cls(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)

    # --- Consumer groups (10-16, 42) and committed offsets (8, 9): sluice.server.group.coordinator
    # --

    def find_coordinator(
        self, header: RequestHeader, body: m.FindCoordinatorRequest
    ) -> m.FindCoordinatorResponse:
        """Standalone this broker coordinates every group (key type 0); in a cluster the leader
        of the group's ``__consumer_offsets`` partition does. Transactions (1) are not served."""
        cls = m.FindCoordinatorResponse
        host, port = self._advertised
        if self.cluster is not None and body.key_type == 0:
            return self._cluster_coordinator(self.cluster, body.key)
        if body.key_type == 0:
            code = self.groups.ensure_ready()
        else:
            code = errors.CoordinatorNotAvailable.code
        if code:
            message = "transactions are not supported" if body.key_type else None
            return cls(throttle_time_ms=0, error_code=code, error_message=message, node_id=-1,
                       host="", port=-1)  # fmt: skip
        return cls(throttle_time_ms=0, error_code=0, error_message=None,
                   node_id=self.config.node_id, host=host, port=port)  # fmt: skip

    def _cluster_coordinator(self, cluster: ClusterMember, group: str) -> m.FindCoordinatorResponse:
        """The leader of ``partitionFor(group)``; COORDINATOR_NOT_AVAILABLE while the offsets
        topic has no live leader there, or does not exist yet (then it is created, with
        ``offsets.topic.replication.factor`` replicas once that many brokers are alive, as
        Kafka's ``createInternalTopic``)."""
        cls = m.FindCoordinatorResponse
        cache = cluster.cache
        assignment = cache.assignments.get(OFFSETS_TOPIC)
        unavailable = cls(throttle_time_ms=0, error_code=errors.CoordinatorNotAvailable.code,
                          error_message=None, node_id=-1, host="", port=-1)  # fmt: skip
        if assignment is None:
            self._create_offsets_topic(cluster)
            return unavailable
        from sluice.server.group.offsets_store import partition_for

        partition = partition_for(group, len(assignment.partitions))
        leader = cache.leader(OFFSETS_TOPIC, partition)
        address = cache.address(leader) if leader >= 0 else None
        if address is None:
            return unavailable
        return cls(throttle_time_ms=0, error_code=0, error_message=None, node_id=leader,
                   host=address[0], port=address[1])  # fmt: skip

    def _create_offsets_topic(self, cluster: ClusterMember) -> None:
        from sluice.server.group.offsets_store import OFFSETS_TOPIC_CONFIG

        if OFFSETS_TOPIC in self._auto_creating:
            return
        group_config = self.groups.config
        rf = group_config.offsets_topic_replication_factor
        if len(cluster.cache.brokers) < rf:
            log.warning(
                "cannot create the offsets topic yet",
                live_brokers=len(cluster.cache.brokers),
                replication_factor=rf,
            )
            return
        try:
            assignment = cluster.validate_new_topic(
                OFFSETS_TOPIC, group_config.offsets_topic_num_partitions, rf, None,
                OFFSETS_TOPIC_CONFIG,
            )  # fmt: skip
        except errors.TopicAlreadyExists:
            return
        self._auto_creating.add(OFFSETS_TOPIC)

        async def create() -> None:
            try:
                await cluster.create_topic(OFFSETS_TOPIC, assignment, OFFSETS_TOPIC_CONFIG, 0)
            except errors.TopicAlreadyExists:
                pass
            except Exception as exc:
                log.warning("creating the offsets topic failed", error=repr(exc))
            finally:
                self._auto_creating.discard(OFFSETS_TOPIC)

        task = asyncio.get_running_loop().create_task(create())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def join_group(
        self, header: RequestHeader, body: m.JoinGroupRequest
    ) -> m.JoinGroupResponse:
        cls = m.JoinGroupResponse
        member_cls = m.JoinGroupResponse.JoinGroupResponseMember
        result = await self.groups.join_group(
            group_id=body.group_id,
            member_id=body.member_id,
            group_instance_id=body.group_instance_id,
            client_id=header.client_id or "",
            client_host=REQUEST_CONTEXT.get().client_host,
            session_timeout_ms=body.session_timeout_ms,
            rebalance_timeout_ms=body.rebalance_timeout_ms,
            protocol_type=body.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
            require_known_member_id=header.api_version >= 4,
        )
        self.metrics.inc("groups.joins")
        return cls(
            throttle_time_ms=0,
            error_code=result.error_code,
            generation_id=result.generation_id,
            protocol_name=result.protocol_name,
            leader=result.leader,
            member_id=result.member_id,
            members=[
                member_cls(member_id=m, group_instance_id=i, metadata=md)
                for m, i, md in result.members
            ],
        )

    async def sync_group(
        self, header: RequestHeader, body: m.SyncGroupRequest
    ) -> m.SyncGroupResponse:
        code, assignment = await self.groups.sync_group(
            group_id=body.group_id,
            generation_id=body.generation_id,
            member_id=body.member_id,
            group_instance_id=body.group_instance_id,
            assignments=[(a.member_id, bytes(a.assignment)) for a in body.assignments],
        )
        return m.SyncGroupResponse(throttle_time_ms=0, error_code=code, assignment=assignment)

    def heartbeat(self, header: RequestHeader, body: m.HeartbeatRequest) -> m.HeartbeatResponse:
        code = self.groups.heartbeat(
            group_id=body.group_id,
            generation_id=body.generation_id,
            member_id=body.member_id,
            group_instance_id=body.group_instance_id,
        )
        return m.HeartbeatResponse(throttle_time_ms=0, error_code=code)

    def leave_group(self, header: RequestHeader, body: m.LeaveGroupRequest) -> m.LeaveGroupResponse:
        cls = m.LeaveGroupResponse
        member_cls = m.LeaveGroupResponse.MemberResponse
        if header.api_version >= 3:
            who = [(m.member_id, m.group_instance_id) for m in body.members]
        else:
            who = [(body.member_id, None)]
        code, results = self.groups.leave_group(body.group_id, who)
        if header.api_version < 3 and code == 0 and results:
            code = results[0]
        return cls(
            throttle_time_ms=0,
            error_code=code,
            members=[
                member_cls(member_id=m, group_instance_id=i, error_code=c)
                for (m, i), c in zip(who, results, strict=False)
            ],
        )

    def offset_commit(
        self, header: RequestHeader, body: m.OffsetCommitRequest
    ) -> m.OffsetCommitResponse | Awaitable[m.OffsetCommitResponse]:
        wanted = [
            (t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
             p.committed_metadata)
            for t in body.topics
            for p in t.partitions
        ]  # fmt: skip
        codes = self.groups.commit_offsets(
            group_id=body.group_id,
            generation_id=body.generation_id_or_member_epoch,
            member_id=body.member_id,
            group_instance_id=body.group_instance_id,
            offsets=wanted,
        )
        self.metrics.inc("groups.offset_commits")
        if not isinstance(codes, list):  # answered once the offsets topic's replicas have it
            return self._offset_commit_later(wanted, codes)
        return self._offset_commit_response(wanted, codes)

    async def _offset_commit_later(
        self, wanted: list[Any], codes: Awaitable[list[int]]
    ) -> m.OffsetCommitResponse:
        return self._offset_commit_response(wanted, await codes)

    def _offset_commit_response(
        self, wanted: list[Any], codes: list[int]
    ) -> m.OffsetCommitResponse:
        cls = m.OffsetCommitResponse
        topic_cls = m.OffsetCommitResponse.OffsetCommitResponseTopic
        part_cls = m.OffsetCommitResponse.OffsetCommitResponsePartition
        topics: dict[str, list[m.OffsetCommitResponse.OffsetCommitResponsePartition]] = {}
        for (topic, part, *_rest), code in zip(wanted, codes, strict=True):
            topics.setdefault(topic, []).append(part_cls(partition_index=part, error_code=code))
        return cls(
            throttle_time_ms=0,
            topics=[topic_cls(name=n, partitions=ps) for n, ps in topics.items()],
        )

    def offset_fetch(
        self, header: RequestHeader, body: m.OffsetFetchRequest
    ) -> m.OffsetFetchResponse:
        cls = m.OffsetFetchResponse
        topic_cls = m.OffsetFetchResponse.OffsetFetchResponseTopic
        part_cls = m.OffsetFetchResponse.OffsetFetchResponsePartition
        wanted = (
            None
            if body.topics is None
            else [(t.name, p) for t in body.topics for p in t.partition_indexes]
        )
        try:
            found = self.groups.fetch_offsets(body.group_id, wanted)
        except Exception as exc:
            return cls(throttle_time_ms=0, topics=[], error_code=_code(exc))
        topics: dict[str, list[m.OffsetFetchResponse.OffsetFetchResponsePartition]] = {}
        for topic, part, value in found:
            topics.setdefault(topic, []).append(
                part_cls(
                    partition_index=part,
                    committed_offset=value.offset if value else -1,
                    committed_leader_epoch=value.leader_epoch if value else -1,
                    metadata=value.metadata if value else "",
                    error_code=0,
                )
            )
        return cls(
            throttle_time_ms=0,
            topics=[topic_cls(name=n, partitions=ps) for n, ps in topics.items()],
            error_code=0,
        )

    def list_groups(self, header: RequestHeader, body: m.ListGroupsRequest) -> m.ListGroupsResponse:
        """The groups this broker coordinates, with their state (v4+, KIP-518) and type (v5+,
        KIP-848: every group here is a ``classic`` one). ``states_filter`` / ``types_filter``
        keep the groups whose state / type is listed (case-insensitive, as Kafka compares);
        empty means all."""
        cls = m.ListGroupsResponse
        group_cls = m.ListGroupsResponse.ListedGroup
        listed = self.groups.list_groups(body.states_filter)
        types = {t.lower() for t in body.types_filter}
        if types and GROUP_TYPE_CLASSIC not in types:
            listed = []
        return cls(
            throttle_time_ms=0,
            # Kafka: the groups it has, and this error while some offsets partition loads.
            error_code=errors.CoordinatorLoadInProgress.code if self.groups.loading else 0,
            groups=[
                group_cls(group_id=g, protocol_type=t, group_state=s, group_type=GROUP_TYPE_CLASSIC)
                for g, t, s in listed
            ],
        )

    def describe_groups(
        self, header: RequestHeader, body: m.DescribeGroupsRequest
    ) -> m.DescribeGroupsResponse:
        cls = m.DescribeGroupsResponse
        group_cls = m.DescribeGroupsResponse.DescribedGroup
        member_cls = m.DescribeGroupsResponse.DescribedGroupMember
        described = []
        ops = acl.GROUP_AUTHORIZED if body.include_authorized_operations else acl.NOT_REQUESTED
        for group_id in body.groups:
            try:
                group = self.groups.describe_group(group_id)
            except errors.KafkaError as exc:  # not the coordinator (now) of this group
                described.append(group_cls(error_code=exc.code, group_id=group_id, group_state="",
                                           members=[], authorized_operations=ops))  # fmt: skip
                continue
            if group is None:
                # Kafka (v0-5): an unknown group is described as Dead, without an error.
                described.append(group_cls(error_code=0, group_id=group_id, group_state="Dead",
                                           members=[], authorized_operations=ops))  # fmt: skip
                continue
            stable = group.state.value == "Stable"
            protocol = group.protocol_name or ""
            described.append(
                group_cls(
                    error_code=0,
                    group_id=group_id,
                    group_state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol_data=protocol if stable else "",
                    members=[
                        member_cls(
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata_for(protocol) if stable else b"",
                            member_assignment=m.assignment if stable else b"",
                        )
                        for m in group.members.values()
                    ],
                    authorized_operations=ops,
                )
            )
        return cls(throttle_time_ms=0, groups=described)

    def delete_groups(
        self, header: RequestHeader, body: m.DeleteGroupsRequest
    ) -> m.DeleteGroupsResponse:
        cls = m.DeleteGroupsResponse
        result_cls = m.DeleteGroupsResponse.DeletableGroupResult
        codes = self.groups.delete_groups(list(body.groups_names))
        return cls(
            throttle_time_ms=0,
            results=[
                result_cls(group_id=g, error_code=c)
                for g, c in zip(body.groups_names, codes, strict=True)
            ],
        )

    def offset_delete(
        self, header: RequestHeader, body: m.OffsetDeleteRequest
    ) -> m.OffsetDeleteResponse:
        """OffsetDelete (47): a partition of a topic that does not exist is
        UNKNOWN_TOPIC_OR_PARTITION (Kafka's KafkaApis check); the rest is the coordinator's."""
        cls = m.OffsetDeleteResponse
        topic_cls = m.OffsetDeleteResponse.OffsetDeleteResponseTopic
        part_cls = m.OffsetDeleteResponse.OffsetDeleteResponsePartition
        existing = self.logs.topics()
        codes: dict[tuple[str, int], int] = {}
        known: list[tuple[str, int]] = []
        for t in body.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if 0 <= p.partition_index < existing.get(t.name, 0):
                    known.append(tp)
                else:
                    codes[tp] = errors.UnknownTopicOrPartition.code
        group_code, found = self.groups.delete_offsets(body.group_id, known)
        if group_code:
            return cls(error_code=group_code, throttle_time_ms=0, topics=[])
        codes.update(found)
        topics: dict[str, list[m.OffsetDeleteResponse.OffsetDeleteResponsePartition]] = {}
        for (topic, part), code in codes.items():
            topics.setdefault(topic, []).append(part_cls(partition_index=part, error_code=code))
        listed = [topic_cls(name=n, partitions=ps) for n, ps in topics.items()]
        return cls(error_code=0, throttle_time_ms=0, topics=listed)

    # --- Configs (32, 33, 44): sluice.server.api.config_resources -------------------------------

    def describe_configs(
        self, header: RequestHeader, body: m.DescribeConfigsRequest
    ) -> m.DescribeConfigsResponse:
        return self.config_resources.describe(body, header.api_version)

    def alter_configs(self, header: RequestHeader, body: m.AlterConfigsRequest) -> Any:
        return self.config_resources.alter(body)

    def incremental_alter_configs(
        self, header: RequestHeader, body: m.IncrementalAlterConfigsRequest
    ) -> Any:
        return self.config_resources.incremental_alter(body)

    # --- DescribeLogDirs (35) ---------------------------------------------------------------------

    def describe_log_dirs(
        self, header: RequestHeader, body: m.DescribeLogDirsRequest
    ) -> m.DescribeLogDirsResponse:
        """The one log dir (``log.dirs``, absolute) with the size of each partition hosted here
        (``topics`` None: all; otherwise those asked for that exist here, as Kafka omits the
        rest). ``offset_lag`` is Kafka's for a current log, ``max(HW - LEO, 0)``: 0 on a
        leader and a follower alike; no future logs (no AlterReplicaLogDirs), so
        ``is_future_key`` is false. v4: the volume's total and usable bytes (``statvfs``)."""
        import os

        cls = m.DescribeLogDirsResponse
        part_cls = cls.DescribeLogDirsPartition
        wanted: list[tuple[str, int]]
        if body.topics is None:
            wanted = sorted(self.logs.logs)
        else:
            wanted = [(t.topic, p) for t in body.topics for p in t.partitions]
        topics: dict[str, list[m.DescribeLogDirsResponse.DescribeLogDirsPartition]] = {}
        for topic, index in wanted:
            log_ = self.logs.get_log(topic, index)
            if log_ is None:
                continue
            lag = max(log_.high_watermark - log_.log_end_offset, 0)
            size = log_.size_in_bytes
            part = part_cls(partition_index=index, partition_size=size, offset_lag=lag,
                            is_future_key=False)  # fmt: skip
            topics.setdefault(topic, []).append(part)
        log_dir = self.logs.log_dir.resolve()
        total = usable = -1
        try:
            fs = os.statvfs(log_dir)
            total, usable = fs.f_blocks * fs.f_frsize, fs.f_bavail * fs.f_frsize
        except OSError as exc:
            log.warning("statvfs of the log dir failed", log_dir=str(log_dir), error=str(exc))
        result = cls.DescribeLogDirsResult(
            error_code=0,
            log_dir=str(log_dir),
            topics=[cls.DescribeLogDirsTopic(name=n, partitions=ps) for n, ps in topics.items()],
            total_bytes=total,
            usable_bytes=usable,
        )
        return cls(throttle_time_ms=0, error_code=0, results=[result])

    # --- ControlledShutdown (7): broker -> controller ----------------------------------------

    async def controlled_shutdown(
        self, header: RequestHeader, body: m.ControlledShutdownRequest
    ) -> m.ControlledShutdownResponse:
        """A broker stopping gracefully asks the controller to move its leadership first
        (Kafka's ``KafkaApis.handleControlledShutdownRequest``); NOT_CONTROLLER here unless this
        broker is the controller. ``remaining_partitions``: what it still leads."""
        cls = m.ControlledShutdownResponse
        controller = self.cluster.controller if self.cluster is not None else None
        if controller is None or not controller.is_active:
            return cls(error_code=errors.NotController.code, remaining_partitions=[])
        try:
            remaining = await controller.controlled_shutdown(body.broker_id, body.broker_epoch)
        except errors.KafkaError as exc:
            return cls(error_code=exc.code, remaining_partitions=[])
        part_cls = cls.RemainingPartition
        return cls(
            error_code=0,
            remaining_partitions=[
                part_cls(topic_name=tp.topic, partition_index=tp.partition) for tp in remaining
            ],
        )

    # --- DescribeCluster (60) --------------------------------------------------------------------

    def describe_cluster(
        self, header: RequestHeader, body: m.DescribeClusterRequest
    ) -> m.DescribeClusterResponse:
        """What Kafka's admin clients use for brokers, controller and cluster id (KIP-700). This
        broker is all three; it serves broker endpoints only (v1 ``endpoint_type`` 1)."""
        cls = m.DescribeClusterResponse
        if body.endpoint_type != 1:
            return cls(throttle_time_ms=0, error_code=errors.MismatchedEndpointType.code,
                       error_message="this is a broker endpoint", cluster_id=self._cluster_id(),
                       controller_id=-1, brokers=[])  # fmt: skip
        ops = (
            acl.CLUSTER_AUTHORIZED
            if body.include_cluster_authorized_operations
            else (acl.NOT_REQUESTED)
        )
        brokers, controller = self._brokers()
        return cls(
            throttle_time_ms=0,
            error_code=0,
            error_message=None,
            cluster_id=self._cluster_id(),
            controller_id=controller,
            brokers=[
                cls.DescribeClusterBroker(broker_id=b, host=h, port=p, rack=r)
                for b, h, p, r in brokers
            ],
            cluster_authorized_operations=ops,
        )
