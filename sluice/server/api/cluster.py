"""The cluster APIs: ApiVersions, Metadata, DescribeCluster, DescribeLogDirs, the
broker-to-controller ControlledShutdown, and the controller's admin APIs ElectLeaders,
AlterPartitionReassignments and ListPartitionReassignments.

The last three are served by the controller only, as in Kafka's ZooKeeper mode (admin clients
send them to the controller named in Metadata): another broker answers NOT_CONTROLLER (per
partition for ElectLeaders, at the top for the others), which makes clients look the controller
up again and retry."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from sluice.protocol import acl, errors
from sluice.protocol import messages as m
from sluice.protocol.framing import (
    api_versions_response,
)
from sluice.protocol.messages import RequestHeader
from sluice.protocol.structs import TopicPartition
from sluice.protocol.types import ZERO_UUID
from sluice.server.replication.replica_manager import INTERNAL_TOPICS
from sluice.server.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from sluice.server.metadata.zk_cluster import Controller

from sluice.server.api.base import ApiBase, log

#: Kafka's ``EndpointType`` ids (DescribeCluster v1 ``endpoint_type``).
_BROKER_ENDPOINT = 1
_CONTROLLER_ENDPOINT = 2

#: Kafka's ``max.request.partition.size.limit`` default: the most partitions one
#: DescribeTopicPartitions answer holds.
DESCRIBE_TOPIC_PARTITIONS_LIMIT = 2000


class ClusterApis(ApiBase):
    """This family\'s handlers (module docstring); mixed into ``Handlers``."""

    # --- ApiVersions (18) ------------------------------------------------------------------------

    def api_versions(
        self, header: RequestHeader, body: m.ApiVersionsRequest
    ) -> m.ApiVersionsResponse:
        return api_versions_response(0, self.served_api_keys)

    # --- Metadata (3) ----------------------------------------------------------------------------

    def metadata(self, header: RequestHeader, body: m.MetadataRequest) -> m.MetadataResponse:
        """Brokers, controller and, per partition, its leader (-1 with LEADER_NOT_AVAILABLE when
        it has none), leader epoch, replicas, ISR and the replicas on dead brokers, from the
        metadata view (standalone: this broker alone). The topics and partitions are the
        published ones (a new topic's partitions all at once). An unknown topic may be
        auto-created: standalone at once, in a cluster in ZooKeeper (answered
        LEADER_NOT_AVAILABLE meanwhile, as Kafka). A topic being created (in ZooKeeper, not
        published here yet) is LEADER_NOT_AVAILABLE without partitions, auto-creation allowed
        or not: it exists, its leaders are on their way. (Kafka's cache has no such topic for
        the moment between the controller's writes and its UpdateMetadata, and answers
        UNKNOWN_TOPIC_OR_PARTITION to a client not auto-creating; here each broker learns of
        a topic by its own watches, so that moment lasts longer, and a client that met it just
        after CreateTopics answered would give up -- librdkafka's offsetsForTimes fails with
        UNKNOWN_PARTITION -- where LEADER_NOT_AVAILABLE makes every client ask again.)

        Topic ids (v10+): every topic answered carries its id (zero for one that does not
        exist or may not be described). v12 may ask by id instead (Kafka's
        ``handleTopicMetadataRequest``): an unknown id is UNKNOWN_TOPIC_ID with a null name,
        a known one is answered as if asked by name, never auto-created (names beside ids are
        ignored, as Kafka does); an id or a null name below v12 is INVALID_REQUEST."""
        cls = m.MetadataResponse
        topic_cls = m.MetadataResponse.MetadataResponseTopic
        part_cls = m.MetadataResponse.MetadataResponsePartition
        view = self.metadata_view
        existing = view.published_topics()
        topics = []
        names: list[str]
        allow_auto = getattr(body, "allow_auto_topic_creation", True)
        by_id = [t.topic_id for t in body.topics or () if t.topic_id != ZERO_UUID]
        if by_id or any(t.name is None for t in body.topics or ()):
            if header.api_version < 12:
                return self._invalid_metadata_request(body)
            names = []
            allow_auto = False
            for topic_id in by_id:
                name = view.topic_name(topic_id)
                if name is None:
                    topics.append(topic_cls(error_code=errors.UnknownTopicId.code, name=None,
                                            topic_id=topic_id, partitions=[]))  # fmt: skip
                elif not self.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                    topics.append(
                        topic_cls(
                            error_code=errors.TopicAuthorizationFailed.code,
                            name=None,
                            topic_id=topic_id,
                            partitions=[],
                            topic_authorized_operations=acl.NOT_REQUESTED,
                        )
                    )
                else:
                    names.append(name)
        else:
            names = self._metadata_names(body, existing)
        for name in names:
            count = existing.get(name) if name is not None else None
            error = 0
            if name is not None and not self._describable(name, body):
                topics.append(self._unauthorized_topic(name))
                continue
            if count is None and name is not None and view.being_created(name):
                error = errors.LeaderNotAvailable.code
            elif count is None:
                error = errors.UnknownTopicOrPartition.code
                if name is not None and allow_auto and self.config.auto_create_topics_enable:
                    if not self._may_create(name):
                        topics.append(self._unauthorized_topic(name))
                        continue
                    error = self._auto_create(name)
                    existing = view.published_topics()
                    count = existing.get(name) if error == 0 else None
            partitions = [self._partition_metadata(part_cls, name, i) for i in range(count or 0)]
            known_id = view.topic_id(name) if count is not None else None
            topics.append(
                topic_cls(
                    error_code=error,
                    name=name,
                    topic_id=known_id or ZERO_UUID,
                    is_internal=name in INTERNAL_TOPICS,
                    partitions=partitions,
                    topic_authorized_operations=self._topic_operations(body, name),
                )
            )
        broker_cls = m.MetadataResponse.MetadataResponseBroker
        return cls(
            throttle_time_ms=0,
            brokers=[
                broker_cls(node_id=b, host=h, port=p, rack=r) for b, h, p, r in view.brokers()
            ],
            cluster_id=view.cluster_id,
            controller_id=view.controller_id,
            topics=topics,
            cluster_authorized_operations=self._cluster_operations(
                body.include_cluster_authorized_operations
            ),
        )

    # Metadata's authorization (Kafka's ``KafkaApis.handleTopicMetadataRequest``): every
    # topic asked for needs Describe; all topics means those the principal may describe; an
    # unknown topic is auto-created only with Create on the cluster or on the topic.

    def _metadata_names(self, body: m.MetadataRequest, existing: Iterable[str]) -> list[str]:
        if body.topics is not None:
            return [t.name for t in body.topics if t.name is not None]
        names = sorted(existing)
        if self.authorizer is None:
            return names
        return [n for n in names if self.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, n,
                                                 audit=False)]  # fmt: skip

    def _invalid_metadata_request(self, body: m.MetadataRequest) -> m.MetadataResponse:
        """Kafka: "Topic IDs are not supported in requests for version N"."""
        view = self.metadata_view
        topic_cls = m.MetadataResponse.MetadataResponseTopic
        return m.MetadataResponse(
            throttle_time_ms=0,
            brokers=[],
            cluster_id=view.cluster_id,
            controller_id=view.controller_id,
            topics=[
                topic_cls(
                    error_code=errors.InvalidRequest.code,
                    name=t.name,
                    topic_id=t.topic_id,
                    partitions=[],
                )
                for t in body.topics or ()
            ],
        )

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
            is_internal=name in INTERNAL_TOPICS,
            partitions=[],
            topic_authorized_operations=acl.NOT_REQUESTED,
        )

    def _topic_operations(self, body: m.MetadataRequest, name: str | None) -> int:
        if name is None:
            return acl.NOT_REQUESTED
        requested = bool(body.include_topic_authorized_operations)
        return self.authorized_operations(requested, ResourceType.TOPIC, name)

    def _auto_create(self, name: str) -> int:
        """Create ``name`` with the broker defaults; the code Metadata answers now."""
        try:
            self._check_topic_limits(name, self.config.num_partitions)
        except errors.KafkaError as exc:
            return exc.code
        return self.metadata_view.auto_create_topic(
            name, self.config.num_partitions, lambda: self.metrics.inc("topics.auto_created")
        )

    def _partition_metadata(
        self, part_cls: type[m.MetadataResponse.MetadataResponsePartition], topic: str, index: int
    ) -> m.MetadataResponse.MetadataResponsePartition:
        info = self.metadata_view.partition(topic, index)
        if info is None:  # listed but not known here yet: no leader to offer
            return part_cls(error_code=errors.LeaderNotAvailable.code, partition_index=index,
                            leader_id=-1, leader_epoch=-1, replica_nodes=[], isr_nodes=[],
                            offline_replicas=[])  # fmt: skip
        return part_cls(
            error_code=0 if info.leader >= 0 else errors.LeaderNotAvailable.code,
            partition_index=index,
            leader_id=info.leader,
            leader_epoch=info.leader_epoch,
            replica_nodes=info.replicas,
            isr_nodes=info.isr,
            offline_replicas=info.offline_replicas,
        )

    # --- DescribeTopicPartitions (75) -------------------------------------------------------------

    def describe_topic_partitions(
        self, header: RequestHeader, body: m.DescribeTopicPartitionsRequest
    ) -> m.DescribeTopicPartitionsResponse:
        """What Kafka 3.9's ``Admin.describeTopics`` (``kafka-topics --describe``) asks: topics
        with their ids and partitions, paged (Kafka's ``DescribeTopicPartitionsRequestHandler``
        and ``getTopicMetadataForDescribeTopicResponse``): no topics asked = every topic the
        principal may describe; topics from the cursor's on, sorted by name, the cursor's
        from its partition; at most ``response_partition_limit`` partitions (capped by Kafka's
        ``max.request.partition.size.limit`` default, 2000), then ``next_cursor`` names where
        to go on. A topic asked for that does not exist is UNKNOWN_TOPIC_OR_PARTITION (its
        partitions count nowhere); one the principal may not describe is
        TOPIC_AUTHORIZATION_FAILED with a zero id. A cursor outside the topics asked for, or
        with a negative partition, is INVALID_REQUEST."""
        cls = m.DescribeTopicPartitionsResponse
        topic_cls = cls.DescribeTopicPartitionsResponseTopic
        part_cls = cls.DescribeTopicPartitionsResponsePartition
        view = self.metadata_view
        existing = view.published_topics()
        cursor = body.cursor
        start = cursor.topic_name if cursor is not None else ""
        fetch_all = not body.topics
        asked = sorted(existing) if fetch_all else sorted({t.name for t in body.topics})
        names = [n for n in asked if n >= start]
        if cursor is not None and (
            cursor.partition_index < 0 or (not fetch_all and cursor.topic_name not in names)
        ):
            return cls(throttle_time_ms=0, topics=[
                topic_cls(error_code=errors.InvalidRequest.code, name=t.name, partitions=[])
                for t in body.topics
            ])  # fmt: skip
        remaining = max(min(DESCRIBE_TOPIC_PARTITIONS_LIMIT, body.response_partition_limit), 1)
        topics = []
        refused = []
        next_cursor = None
        for name in names:
            if not self.allowed(
                AclOperation.DESCRIBE, ResourceType.TOPIC, name, audit=not fetch_all
            ):
                if not fetch_all:
                    refused.append(topic_cls(error_code=errors.TopicAuthorizationFailed.code,
                                             name=name, partitions=[]))  # fmt: skip
                continue
            if remaining == 0:
                next_cursor = cls.Cursor(topic_name=name, partition_index=0)
                break
            count = existing.get(name)
            if count is None:
                if not fetch_all:
                    code = errors.UnknownTopicOrPartition.code
                    if view.being_created(name):
                        code = errors.LeaderNotAvailable.code
                    topics.append(topic_cls(error_code=code, name=name, partitions=[],
                                            is_internal=name in INTERNAL_TOPICS))  # fmt: skip
                continue
            first = cursor.partition_index if cursor is not None and name == start else 0
            last = min(count, first + remaining)
            partitions = []
            for index in range(first, last):
                info = self._partition_metadata(m.MetadataResponse.MetadataResponsePartition,
                                                name, index)  # fmt: skip
                partitions.append(part_cls(
                    error_code=info.error_code, partition_index=index, leader_id=info.leader_id,
                    leader_epoch=info.leader_epoch, replica_nodes=info.replica_nodes,
                    isr_nodes=info.isr_nodes, eligible_leader_replicas=[], last_known_elr=[],
                    offline_replicas=info.offline_replicas,
                ))  # fmt: skip
            topics.append(
                topic_cls(
                    error_code=0,
                    name=name,
                    topic_id=view.topic_id(name) or ZERO_UUID,
                    is_internal=name in INTERNAL_TOPICS,
                    partitions=partitions,
                    topic_authorized_operations=self.authorized_operations(
                        True, ResourceType.TOPIC, name
                    ),
                )
            )
            if last < count:
                next_cursor = cls.Cursor(topic_name=name, partition_index=last)
                break
            remaining -= last - first
        return cls(throttle_time_ms=0, topics=topics + refused, next_cursor=next_cursor)

    # --- DescribeLogDirs (35) ---------------------------------------------------------------------

    def describe_log_dirs(
        self, header: RequestHeader, body: m.DescribeLogDirsRequest
    ) -> m.DescribeLogDirsResponse:
        """The one log dir (``log.dirs``, absolute) with the size of each partition hosted here
        (``topics`` None: all; otherwise those asked for that exist here, as Kafka omits the
        rest). ``offset_lag`` is Kafka's for a current log, ``max(HW - LEO, 0)``: 0 on a
        leader and a follower alike; no future logs (no AlterReplicaLogDirs), so
        ``is_future_key`` is false. v4: the volume's total and usable bytes (``statvfs``).

        A log taken offline by an I/O error (:attr:`Log.offline`) is not listed: Kafka lists
        only the logs of its online dirs (``ReplicaManager.describeLogDirs`` over
        ``LogManager.allLogs``, which a dir failure empties of that dir's logs), so an admin
        client's ``describeReplicaLogDirs`` reports an offline replica in no dir -- as here.
        Kafka's failed dir itself answers KAFKA_STORAGE_ERROR without partitions; Sluice's
        dir stays online with its other logs (one log is the unit that fails), so it answers
        NONE with those."""
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
            if log_ is None or log_.offline:
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
        controller = self._active_controller()
        if controller is None:
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

    def _active_controller(self) -> Controller | None:
        """This broker's controller while it is the active one (None standalone or otherwise)."""
        controller = self.cluster.controller if self.cluster is not None else None
        return controller if controller is not None and controller.is_active else None

    # --- ElectLeaders (43) -----------------------------------------------------------------------

    async def elect_leaders(
        self, header: RequestHeader, body: m.ElectLeadersRequest
    ) -> m.ElectLeadersResponse:
        """Kafka's ``handleElectLeaders``: Alter on the cluster; election type 0 preferred, 1
        unclean (v0: preferred). ``topic_partitions`` null means every partition, and then the
        partitions that needed no election are left out of the answer."""
        cls = m.ElectLeadersResponse
        election_type = body.election_type if header.api_version >= 1 else 0
        wanted = (
            None
            if body.topic_partitions is None
            else [TopicPartition(t.topic, p) for t in body.topic_partitions for p in t.partitions]
        )
        top: errors.KafkaError | None = None
        results: Mapping[TopicPartition, errors.KafkaError | None]
        if not self.allowed(AclOperation.ALTER):
            top = errors.ClusterAuthorizationFailed()
            results = dict.fromkeys(wanted or (), top)
        elif election_type not in (0, 1):
            top = errors.InvalidRequest(f"unknown election type {election_type}")
            results = dict.fromkeys(wanted or (), top)
        elif (controller := self._active_controller()) is None:
            results = dict.fromkeys(wanted or (), errors.NotController())
        else:
            try:
                results = await controller.elect_leaders(wanted, unclean=election_type == 1)
            except errors.KafkaError as exc:
                results = dict.fromkeys(wanted or (), exc)
            if wanted is None:
                results = {
                    tp: e
                    for tp, e in results.items()
                    if not isinstance(e, errors.ElectionNotNeeded)
                }
        by_topic: dict[str, list[m.ElectLeadersResponse.PartitionResult]] = {}
        for tp, error in sorted(results.items()):
            by_topic.setdefault(tp.topic, []).append(
                cls.PartitionResult(
                    partition_id=tp.partition,
                    error_code=0 if error is None else error.code,
                    error_message=None if error is None else error.args[0],
                )
            )
        return cls(
            throttle_time_ms=0,
            error_code=0 if top is None else top.code,
            replica_election_results=[
                cls.ReplicaElectionResult(topic=t, partition_result=ps)
                for t, ps in by_topic.items()
            ],
        )

    # --- AlterPartitionReassignments (45) / ListPartitionReassignments (46) ---------------------

    async def alter_partition_reassignments(
        self, header: RequestHeader, body: m.AlterPartitionReassignmentsRequest
    ) -> m.AlterPartitionReassignmentsResponse:
        """Kafka's ``handleAlterPartitionReassignmentsRequest``: Alter on the cluster; per
        partition the target replicas, or null to cancel. Accepted means started: the move
        goes on in the background (ListPartitionReassignments shows it until it completes)."""
        cls = m.AlterPartitionReassignmentsResponse
        if not self.allowed(AclOperation.ALTER):
            return cls(error_code=errors.ClusterAuthorizationFailed.code, responses=[])
        controller = self._active_controller()
        if controller is None:
            return cls(error_code=errors.NotController.code, responses=[])
        wanted = {
            TopicPartition(t.name, p.partition_index): p.replicas
            for t in body.topics
            for p in t.partitions
        }
        try:
            results = await controller.alter_partition_reassignments(wanted)
        except errors.KafkaError as exc:
            return cls(error_code=exc.code, error_message=exc.args[0], responses=[])
        by_topic: dict[
            str, list[m.AlterPartitionReassignmentsResponse.ReassignablePartitionResponse]
        ]
        by_topic = {}
        for tp, error in sorted(results.items()):
            by_topic.setdefault(tp.topic, []).append(
                cls.ReassignablePartitionResponse(
                    partition_index=tp.partition,
                    error_code=0 if error is None else error.code,
                    error_message=None if error is None else error.args[0],
                )
            )
        return cls(
            error_code=0,
            responses=[
                cls.ReassignableTopicResponse(name=t, partitions=ps) for t, ps in by_topic.items()
            ],
        )

    async def list_partition_reassignments(
        self, header: RequestHeader, body: m.ListPartitionReassignmentsRequest
    ) -> m.ListPartitionReassignmentsResponse:
        """Kafka's ``handleListPartitionReassignmentsRequest``: Describe on the cluster; the
        partitions asked for (all when null) that are being reassigned, with RS, AR and RR."""
        cls = m.ListPartitionReassignmentsResponse
        if not self.allowed(AclOperation.DESCRIBE):
            return cls(error_code=errors.ClusterAuthorizationFailed.code, topics=[])
        controller = self._active_controller()
        if controller is None:
            return cls(error_code=errors.NotController.code, topics=[])
        wanted = (
            None
            if body.topics is None
            else [TopicPartition(t.name, p) for t in body.topics for p in t.partition_indexes]
        )
        try:
            found = await controller.list_partition_reassignments(wanted)
        except errors.KafkaError as exc:
            return cls(error_code=exc.code, error_message=exc.args[0], topics=[])
        by_topic: dict[str, list[m.ListPartitionReassignmentsResponse.OngoingPartitionReassignment]]
        by_topic = {}
        for tp, assignment in sorted(found.items()):
            by_topic.setdefault(tp.topic, []).append(
                cls.OngoingPartitionReassignment(
                    partition_index=tp.partition,
                    replicas=list(assignment.replicas),
                    adding_replicas=list(assignment.adding),
                    removing_replicas=list(assignment.removing),
                )
            )
        return cls(
            error_code=0,
            topics=[
                cls.OngoingTopicReassignment(name=t, partitions=ps) for t, ps in by_topic.items()
            ],
        )

    # --- DescribeCluster (60) --------------------------------------------------------------------

    def describe_cluster(
        self, header: RequestHeader, body: m.DescribeClusterRequest
    ) -> m.DescribeClusterResponse:
        """What Kafka's admin clients use for brokers, controller and cluster id (KIP-700). This
        broker serves broker endpoints only (v1 ``endpoint_type`` 1, BROKER).

        As Kafka's ``AuthHelper.computeDescribeClusterResponse``, the answer needs no ACL:
        Describe on the cluster decides only ``cluster_authorized_operations`` when asked for
        (0 without it; the schema's default, INT32_MIN, when not asked); a controller id not
        among the brokers is answered as -1."""
        cls = m.DescribeClusterResponse
        view = self.metadata_view
        if body.endpoint_type not in (_BROKER_ENDPOINT, _CONTROLLER_ENDPOINT):
            return cls(throttle_time_ms=0, error_code=errors.UnsupportedEndpointType.code,
                       error_message=f"Unsupported endpoint type {body.endpoint_type}",
                       cluster_id=view.cluster_id, brokers=[])  # fmt: skip
        if body.endpoint_type != _BROKER_ENDPOINT:
            return cls(throttle_time_ms=0, error_code=errors.MismatchedEndpointType.code,
                       error_message="The request was sent to an endpoint of type BROKER, but we "
                       "wanted an endpoint of type CONTROLLER",
                       cluster_id=view.cluster_id, brokers=[])  # fmt: skip
        brokers = [
            cls.DescribeClusterBroker(broker_id=b, host=h, port=p, rack=r)
            for b, h, p, r in view.brokers()
        ]
        controller_id = view.controller_id
        if all(b.broker_id != controller_id for b in brokers):
            controller_id = -1
        return cls(
            throttle_time_ms=0,
            error_code=0,
            error_message=None,
            cluster_id=view.cluster_id,
            controller_id=controller_id,
            brokers=brokers,
            cluster_authorized_operations=self._cluster_operations(
                body.include_cluster_authorized_operations
            ),
        )

    def _cluster_operations(self, requested: bool) -> int:
        """Metadata's and DescribeCluster's ``cluster_authorized_operations``, as Kafka: the
        schema default unless asked for; 0 without Describe on the cluster; else the
        principal's operations on it."""
        if requested and not self.allowed(AclOperation.DESCRIBE):
            return 0
        return self.authorized_operations(requested, ResourceType.CLUSTER)
