"""One handler per Kafka API: decoded request body in, response body out (or None = no response).
The handlers live by API family (:mod:`sluice.server.api.base` lists them); :class:`Handlers` joins
the families and registers each handler in the typed table (:mod:`sluice.server.api.registry`).

Handlers run on the event loop thread, one request at a time per connection (the connection
awaits each before decoding the next). They decode, call the
:class:`~sluice.server.replication.replica_manager.ReplicaManager` (partition leadership, appends,
reads, parked requests), the group coordinator or the metadata view
(:class:`~sluice.server.metadata.view.MetadataView`: what the cluster is, and topic admin, one
path for a standalone broker and a cluster member), and encode.

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
from typing import TYPE_CHECKING, Any

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol.framing import (
    UnsupportedVersionError,
    unsupported_version_response,
)
from sluice.protocol.messages import RequestHeader
from sluice.server.api.cluster import ClusterApis
from sluice.server.api.configs import ConfigApis
from sluice.server.api.groups import GroupApis
from sluice.server.api.produce_fetch import ProduceFetchApis
from sluice.server.api.quotas import ClientQuotaApis
from sluice.server.api.security import SecurityApis
from sluice.server.api.topics import TopicApis
from sluice.server.api.transactional import TransactionalApis
from sluice.server.api.transactions import TransactionApis

if TYPE_CHECKING:
    from sluice.server.config import Config
    from sluice.server.group.coordinator import GroupCoordinator
    from sluice.server.metadata.producer_id_manager import ProducerIdManager
    from sluice.server.metadata.zk_cluster import ClusterMember
    from sluice.server.metrics.metrics import Metrics
    from sluice.server.replication.replica_manager import ReplicaManager


class Handlers(
    ClusterApis,
    ProduceFetchApis,
    TopicApis,
    GroupApis,
    ConfigApis,
    SecurityApis,
    ClientQuotaApis,
    TransactionApis,
    TransactionalApis,
):
    """Every API family, dispatched by API key through the typed table. Created by ``Server``
    once; shared by every connection (it is their ``network.request.RequestHandler``)."""

    def __init__(
        self,
        config: Config,
        replicas: ReplicaManager,
        groups: GroupCoordinator,
        producer_ids: ProducerIdManager,
        metrics: Metrics,
    ) -> None:
        super().__init__(config, replicas, groups, producer_ids, metrics)
        registry = self._dispatch
        registry.register(m.ApiVersions, self.api_versions)
        registry.register(m.Metadata, self.metadata)
        registry.register(m.Produce, self.produce)
        registry.register(m.Fetch, self.fetch)
        registry.register(m.ListOffsets, self.list_offsets)
        registry.register(m.CreateTopics, self.create_topics)
        registry.register(m.DeleteTopics, self.delete_topics)
        registry.register(m.DeleteRecords, self.delete_records)
        registry.register(m.InitProducerId, self.init_producer_id)
        registry.register(m.OffsetForLeaderEpoch, self.offset_for_leader_epoch)
        registry.register(m.FindCoordinator, self.find_coordinator)
        registry.register(m.JoinGroup, self.join_group)
        registry.register(m.SyncGroup, self.sync_group)
        registry.register(m.Heartbeat, self.heartbeat)
        registry.register(m.LeaveGroup, self.leave_group)
        registry.register(m.OffsetCommit, self.offset_commit)
        registry.register(m.OffsetFetch, self.offset_fetch)
        registry.register(m.ListGroups, self.list_groups)
        registry.register(m.DescribeGroups, self.describe_groups)
        registry.register(m.DeleteGroups, self.delete_groups)
        registry.register(m.OffsetDelete, self.offset_delete)
        registry.register(m.DescribeConfigs, self.describe_configs)
        registry.register(m.AlterConfigs, self.alter_configs)
        registry.register(m.IncrementalAlterConfigs, self.incremental_alter_configs)
        registry.register(m.DescribeCluster, self.describe_cluster)
        registry.register(m.DescribeTopicPartitions, self.describe_topic_partitions)
        registry.register(m.CreatePartitions, self.create_partitions)
        registry.register(m.DescribeLogDirs, self.describe_log_dirs)
        registry.register(m.DescribeAcls, self.describe_acls)
        registry.register(m.CreateAcls, self.create_acls)
        registry.register(m.DeleteAcls, self.delete_acls)
        registry.register(m.DescribeClientQuotas, self.describe_client_quotas)
        registry.register(m.AlterClientQuotas, self.alter_client_quotas)
        registry.register(m.DescribeUserScramCredentials, self.describe_user_scram_credentials)
        registry.register(m.AlterUserScramCredentials, self.alter_user_scram_credentials)
        registry.register(m.SaslHandshake, self.sasl_handshake)
        registry.register(m.SaslAuthenticate, self.sasl_authenticate)
        registry.register(m.AddPartitionsToTxn, self.add_partitions_to_txn)
        registry.register(m.AddOffsetsToTxn, self.add_offsets_to_txn)
        registry.register(m.EndTxn, self.end_txn)
        registry.register(m.DescribeTransactions, self.describe_transactions)
        registry.register(m.ListTransactions, self.list_transactions)
        registry.register(m.WriteTxnMarkers, self.write_txn_markers)
        registry.register(m.TxnOffsetCommit, self.txn_offset_commit)
        registry.register(m.DescribeProducers, self.describe_producers)

    # --- SaslHandshake (17) / SaslAuthenticate (36) outside a login ----------------------------
    # During a login the connection's authenticator answers them; these are what reaches the
    # handlers otherwise (a listener without SASL, a second handshake too soon for KIP-368
    # re-authentication, an authenticate after the login), answered as Kafka's KafkaApis does.

    def sasl_handshake(
        self, header: RequestHeader, body: m.SaslHandshakeRequest
    ) -> m.SaslHandshakeResponse:
        return m.SaslHandshakeResponse(error_code=errors.IllegalSaslState.code, mechanisms=[])

    def sasl_authenticate(
        self, header: RequestHeader, body: m.SaslAuthenticateRequest
    ) -> m.SaslAuthenticateResponse:
        return m.SaslAuthenticateResponse(
            error_code=errors.IllegalSaslState.code,
            error_message="SaslAuthenticate request received after successful authentication",
            auth_bytes=b"",
        )

    def join_cluster(self, cluster: ClusterMember) -> None:
        """Cluster mode from now on: answers come from the cluster, and the controller's APIs
        (ControlledShutdown, ElectLeaders, Alter/ListPartitionReassignments; a standalone
        broker has no controller and does not advertise them) are served."""
        super().join_cluster(cluster)
        self._dispatch.register(m.ControlledShutdown, self.controlled_shutdown)
        self._dispatch.register(m.ElectLeaders, self.elect_leaders)
        self._dispatch.register(m.AlterPartitionReassignments, self.alter_partition_reassignments)
        self._dispatch.register(m.ListPartitionReassignments, self.list_partition_reassignments)

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
