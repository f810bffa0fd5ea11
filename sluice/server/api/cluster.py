"""The cluster APIs: ApiVersions, Metadata, DescribeCluster, DescribeLogDirs and the
broker-to-controller ControlledShutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING

from sluice.protocol import acl, errors
from sluice.protocol import messages as m
from sluice.protocol.framing import (
    api_versions_response,
)
from sluice.protocol.messages import RequestHeader
from sluice.server.group.offsets_store import OFFSETS_TOPIC
from sluice.server.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from sluice.server.metadata.zk_cluster import ClusterMember

from sluice.server.api.base import ApiBase, log


class ClusterApis(ApiBase):
    """This family\'s handlers (module docstring); mixed into ``Handlers``."""

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
        names = self._metadata_names(body, existing)
        allow_auto = getattr(body, "allow_auto_topic_creation", True)
        topics = []
        for name in names:
            error = 0
            count = existing.get(name) if name is not None else None
            if name is not None and not self._describable(name, body):
                topics.append(self._unauthorized_topic(name))
                continue
            if count is None:
                error = errors.UnknownTopicOrPartition.code
                if name is not None and allow_auto and self.config.auto_create_topics_enable:
                    if not self._may_create(name):
                        topics.append(self._unauthorized_topic(name))
                        continue
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
                    topic_authorized_operations=self._topic_operations(body, name),
                )
            )
        return cls(
            throttle_time_ms=0,
            brokers=[broker_cls(node_id=node, host=host, port=port, rack=None)],
            cluster_id=self._cluster_id(),
            controller_id=node,
            topics=topics,
            cluster_authorized_operations=self.authorized_operations(
                body.include_cluster_authorized_operations, ResourceType.CLUSTER
            ),
        )

    # Metadata's authorization (Kafka's ``KafkaApis.handleTopicMetadataRequest``): every
    # topic asked for needs Describe; all topics means those the principal may describe; an
    # unknown topic is auto-created only with Create on the cluster or on the topic.

    def _metadata_names(self, body: m.MetadataRequest, existing: Iterable[str]) -> list[str]:
        if body.topics is not None:
            return [t.name for t in body.topics]
        names = sorted(existing)
        if self.authorizer is None:
            return names
        return [n for n in names if self.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, n,
                                                 audit=False)]  # fmt: skip

    def _describable(self, name: str, body: m.MetadataRequest) -> bool:
        return body.topics is None or self.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name)

    def _may_create(self, name: str) -> bool:
        return self.allowed(AclOperation.CREATE, ResourceType.CLUSTER, audit=False) or self.allowed(
            AclOperation.CREATE, ResourceType.TOPIC, name
        )

    @staticmethod
    def _unauthorized_topic(name: str) -> m.MetadataResponse.MetadataResponseTopic:
        return m.MetadataResponse.MetadataResponseTopic(
            error_code=errors.TopicAuthorizationFailed.code,
            name=name,
            is_internal=name == OFFSETS_TOPIC,
            partitions=[],
            topic_authorized_operations=acl.NOT_REQUESTED,
        )

    def _topic_operations(self, body: m.MetadataRequest, name: str | None) -> int:
        if name is None:
            return acl.NOT_REQUESTED
        requested = bool(body.include_topic_authorized_operations)
        return self.authorized_operations(requested, ResourceType.TOPIC, name)

    def _cluster_metadata(
        self, cluster: ClusterMember, body: m.MetadataRequest
    ) -> m.MetadataResponse:
        """Metadata from the cluster's cache (Kafka's ``MetadataCache``): live brokers, the
        controller, and per partition its leader (-1 with LEADER_NOT_AVAILABLE when it has
        none), leader epoch, replicas, ISR and the replicas on dead brokers. The topics and
        partitions are the published ones (:class:`MetadataCache`: a new topic's partitions
        all at once). An unknown topic may be auto-created (in ZooKeeper; answered
        LEADER_NOT_AVAILABLE meanwhile, as Kafka). A topic being created (in ZooKeeper, not
        published here yet) is LEADER_NOT_AVAILABLE without partitions, auto-creation allowed
        or not: it exists, its leaders are on their way. (Kafka's cache has no such topic for
        the moment between the controller's writes and its UpdateMetadata, and answers
        UNKNOWN_TOPIC_OR_PARTITION to a client not auto-creating; here each broker learns of
        a topic by its own watches, so that moment lasts longer, and a client that met it just
        after CreateTopics answered would give up -- librdkafka's offsetsForTimes fails with
        UNKNOWN_PARTITION -- where LEADER_NOT_AVAILABLE makes every client ask again.)"""
        cls = m.MetadataResponse
        topic_cls = m.MetadataResponse.MetadataResponseTopic
        part_cls = m.MetadataResponse.MetadataResponsePartition
        cache = cluster.cache
        names = self._metadata_names(body, cache.published)
        allow_auto = getattr(body, "allow_auto_topic_creation", True)
        topics = []
        for name in names:
            assignment = cache.published.get(name) if name is not None else None
            partitions = []
            error = 0
            if name is not None and not self._describable(name, body):
                topics.append(self._unauthorized_topic(name))
                continue
            if name is not None and assignment is None and name in cache.assignments:
                error = errors.LeaderNotAvailable.code  # being created
            elif assignment is None:
                error = errors.UnknownTopicOrPartition.code
                if name is not None and allow_auto and self.config.auto_create_topics_enable:
                    if not self._may_create(name):
                        topics.append(self._unauthorized_topic(name))
                        continue
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
                    topic_authorized_operations=self._topic_operations(body, name),
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
            cluster_authorized_operations=self.authorized_operations(
                body.include_cluster_authorized_operations, ResourceType.CLUSTER
            ),
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
        if not self.allowed(AclOperation.DESCRIBE):
            return cls(throttle_time_ms=0, error_code=errors.ClusterAuthorizationFailed.code,
                       results=[])  # fmt: skip
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
        if not self.allowed(AclOperation.CLUSTER_ACTION):
            return cls(error_code=errors.ClusterAuthorizationFailed.code, remaining_partitions=[])
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
        if not self.allowed(AclOperation.DESCRIBE):
            return cls(throttle_time_ms=0, error_code=errors.ClusterAuthorizationFailed.code,
                       error_message=None, cluster_id=self._cluster_id(), controller_id=-1,
                       brokers=[])  # fmt: skip
        ops = self.authorized_operations(
            body.include_cluster_authorized_operations, ResourceType.CLUSTER
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
