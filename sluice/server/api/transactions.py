"""The transaction APIs over the transaction coordinator (:mod:`sluice.server.transaction`):
InitProducerId with a transactional id (22), AddPartitionsToTxn (24), AddOffsetsToTxn (25),
EndTxn (26), DescribeTransactions (65), ListTransactions (66).

Authorization is Kafka's ``KafkaApis``: Write on the TransactionalId for the producer's
requests (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), Write on each topic added (the others
OPERATION_NOT_ATTEMPTED), Read on the group of AddOffsetsToTxn, Describe on the TransactionalId
for the admin APIs (ListTransactions leaves out what the principal may not describe). Clients
older than PRODUCER_FENCED (InitProducerId v0-3, the others v0-1) get INVALID_PRODUCER_EPOCH
in its place, as Kafka answers them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol.messages import RequestHeader
from sluice.server.api.base import ApiBase, log
from sluice.server.api.registry import Answer
from sluice.server.group.offsets_store import OFFSETS_TOPIC, partition_for
from sluice.server.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from sluice.server.transaction.coordinator import TransactionCoordinator
    from sluice.server.transaction.metadata import TxnState


def _fenced_for(version: int, first_version: int, code: int) -> int:
    """PRODUCER_FENCED for clients that know it (from ``first_version``), else
    INVALID_PRODUCER_EPOCH."""
    if code == errors.ProducerFenced.code and version < first_version:
        return errors.InvalidProducerEpoch.code
    return code


class TransactionApis(ApiBase):
    """This family's handlers (module docstring); mixed into ``Handlers``."""

    def _coordinator(self) -> TransactionCoordinator | None:
        return self.transactions

    def _txn_denied(self, txn_id: str, operation: AclOperation = AclOperation.WRITE) -> int:
        return self.denied_code(operation, ResourceType.TRANSACTIONAL_ID, txn_id)

    def init_producer_id(
        self, header: RequestHeader, body: m.InitProducerIdRequest
    ) -> Answer[m.InitProducerIdResponse]:
        """A fresh producer id, epoch 0, for an idempotent producer; with a transactional id,
        the transaction coordinator's answer (:meth:`init_transactional_producer_id`).

        The id comes from the metadata view (standalone the broker's counter; in a cluster the
        block this broker took from ZooKeeper); COORDINATOR_NOT_AVAILABLE (retriable) when none
        can be had. Sequence and epoch checks on append are the storage layer's
        (sluice.server.storage.producer_state via Log).
        """
        cls = m.InitProducerIdResponse
        if body.transactional_id is None and not self._may_write_idempotently():
            return cls(throttle_time_ms=0, error_code=errors.ClusterAuthorizationFailed.code,
                       producer_id=-1, producer_epoch=-1)  # fmt: skip
        if body.transactional_id is not None and not self.allowed(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id
        ):
            return cls(throttle_time_ms=0,
                       error_code=errors.TransactionalIdAuthorizationFailed.code,
                       producer_id=-1, producer_epoch=-1)  # fmt: skip
        if body.transactional_id is not None:
            return self.init_transactional_producer_id(header, body)
        return self._allocate_producer_id()

    def _may_write_idempotently(self) -> bool:
        """IdempotentWrite on the cluster or, failing that, Write on some topic (KIP-679:
        ``authorizeByResourceType``), as ``KafkaApis.handleInitProducerIdRequest``."""
        return self.allowed(AclOperation.IDEMPOTENT_WRITE, audit=False) or (
            self.allowed_by_resource_type(AclOperation.WRITE, ResourceType.TOPIC)
        )

    async def _allocate_producer_id(self) -> m.InitProducerIdResponse:
        cls = m.InitProducerIdResponse
        try:
            producer_id = await self.metadata_view.allocate_producer_id()
        except Exception as exc:
            # ZooKeeper unreachable (or too contended): retriable for the client.
            log.warning("no producer id block", error=repr(exc))
            return cls(throttle_time_ms=0, error_code=errors.CoordinatorNotAvailable.code,
                       producer_id=-1, producer_epoch=-1)  # fmt: skip
        self.metrics.inc("producer_ids.allocated")
        return cls(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)

    async def init_transactional_producer_id(
        self, header: RequestHeader, body: m.InitProducerIdRequest
    ) -> m.InitProducerIdResponse:
        """InitProducerId with a transactional id (the authorization is the caller's)."""
        cls = m.InitProducerIdResponse
        coordinator = self._coordinator()
        assert body.transactional_id is not None
        if coordinator is None:
            return cls(throttle_time_ms=0, error_code=errors.CoordinatorNotAvailable.code,
                       producer_id=-1, producer_epoch=-1)  # fmt: skip
        expected = None
        if header.api_version >= 3 and body.producer_id != -1:
            expected = (body.producer_id, body.producer_epoch)
        result = await coordinator.init_producer_id(
            body.transactional_id, body.transaction_timeout_ms, expected
        )
        return cls(
            throttle_time_ms=0,
            error_code=_fenced_for(header.api_version, 4, result.error),
            producer_id=result.producer_id,
            producer_epoch=result.producer_epoch,
        )

    async def add_partitions_to_txn(
        self, header: RequestHeader, body: m.AddPartitionsToTxnRequest
    ) -> m.AddPartitionsToTxnResponse:
        wanted = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
        txn_id = body.v3_and_below_transactional_id
        codes: dict[tuple[str, int], int] = {}
        denied = self._txn_denied(txn_id)
        coordinator = self._coordinator()
        if denied:
            codes = dict.fromkeys(wanted, denied)
        elif coordinator is None:
            codes = dict.fromkeys(wanted, errors.CoordinatorNotAvailable.code)
        else:
            topics = self.metadata_view.topics()
            for topic, index in wanted:
                if not self.allowed(AclOperation.WRITE, ResourceType.TOPIC, topic):
                    codes[(topic, index)] = errors.TopicAuthorizationFailed.code
                elif not 0 <= index < topics.get(topic, 0):
                    codes[(topic, index)] = errors.UnknownTopicOrPartition.code
            if codes:
                for tp in wanted:
                    codes.setdefault(tp, errors.OperationNotAttempted.code)
            else:
                code = await coordinator.add_partitions(
                    txn_id, body.v3_and_below_producer_id, body.v3_and_below_producer_epoch,
                    set(wanted),
                )  # fmt: skip
                codes = dict.fromkeys(wanted, _fenced_for(header.api_version, 2, code))
        cls = m.AddPartitionsToTxnResponse
        topic_cls = cls.AddPartitionsToTxnTopicResult
        part_cls = cls.AddPartitionsToTxnPartitionResult
        by_topic: dict[
            str, list[m.AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult]
        ] = {}
        for (topic, index), code in codes.items():
            by_topic.setdefault(topic, []).append(
                part_cls(partition_index=index, partition_error_code=code)
            )
        return cls(
            throttle_time_ms=0,
            results_by_topic_v3_and_below=[
                topic_cls(name=t, results_by_partition=parts) for t, parts in by_topic.items()
            ],
        )

    def _offsets_partition(self, group: str) -> int:
        """The group's ``__consumer_offsets`` partition (the topic's count where it exists)."""
        count = self.metadata_view.topics().get(OFFSETS_TOPIC)
        return partition_for(group, count or self.groups.config.offsets_topic_num_partitions)

    async def add_offsets_to_txn(
        self, header: RequestHeader, body: m.AddOffsetsToTxnRequest
    ) -> m.AddOffsetsToTxnResponse:
        """The group's offsets partition joins the transaction (its TxnOffsetCommits become
        visible with the COMMIT marker written there)."""
        cls = m.AddOffsetsToTxnResponse
        code = self._txn_denied(body.transactional_id) or self.denied_code(
            AclOperation.READ, ResourceType.GROUP, body.group_id
        )
        coordinator = self._coordinator()
        if not code and coordinator is None:
            code = errors.CoordinatorNotAvailable.code
        elif not code and coordinator is not None:
            partition = (OFFSETS_TOPIC, self._offsets_partition(body.group_id))
            code = await coordinator.add_partitions(
                body.transactional_id, body.producer_id, body.producer_epoch, {partition}
            )
            code = _fenced_for(header.api_version, 2, code)
        return cls(throttle_time_ms=0, error_code=code)

    async def end_txn(self, header: RequestHeader, body: m.EndTxnRequest) -> m.EndTxnResponse:
        cls = m.EndTxnResponse
        code = self._txn_denied(body.transactional_id)
        coordinator = self._coordinator()
        if not code and coordinator is None:
            code = errors.CoordinatorNotAvailable.code
        elif not code and coordinator is not None:
            code = await coordinator.end_txn(
                body.transactional_id, body.producer_id, body.producer_epoch, body.committed
            )
            code = _fenced_for(header.api_version, 2, code)
        return cls(throttle_time_ms=0, error_code=code)

    def describe_transactions(
        self, header: RequestHeader, body: m.DescribeTransactionsRequest
    ) -> m.DescribeTransactionsResponse:
        cls = m.DescribeTransactionsResponse
        state_cls = cls.TransactionState
        topic_cls = cls.TopicData
        coordinator = self._coordinator()
        out = []
        for txn_id in body.transactional_ids:
            code = self._txn_denied(txn_id, AclOperation.DESCRIBE)
            meta = None
            if not code:
                if coordinator is None:
                    code = errors.CoordinatorNotAvailable.code
                else:
                    code, meta = coordinator.describe(txn_id)
            if meta is None:
                out.append(state_cls(error_code=code, transactional_id=txn_id,
                                     transaction_state="", transaction_timeout_ms=0,
                                     transaction_start_time_ms=-1, producer_id=-1,
                                     producer_epoch=-1, topics=[]))  # fmt: skip
                continue
            by_topic: dict[str, list[int]] = {}
            for topic, index in sorted(meta.partitions):
                if self.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, topic, audit=False):
                    by_topic.setdefault(topic, []).append(index)
            out.append(
                state_cls(
                    error_code=0,
                    transactional_id=txn_id,
                    transaction_state=meta.state.kafka_name,
                    transaction_timeout_ms=meta.timeout_ms,
                    transaction_start_time_ms=meta.start_ms,
                    producer_id=meta.producer_id,
                    producer_epoch=meta.producer_epoch,
                    topics=[topic_cls(topic=t, partitions=ps) for t, ps in by_topic.items()],
                )
            )
        return cls(throttle_time_ms=0, transaction_states=out)

    def list_transactions(
        self, header: RequestHeader, body: m.ListTransactionsRequest
    ) -> m.ListTransactionsResponse:
        from sluice.server.transaction.metadata import TxnState

        cls = m.ListTransactionsResponse
        coordinator = self._coordinator()
        states: set[TxnState] = set()
        unknown = []
        for name in body.state_filters:
            state = TxnState.from_kafka_name(name)
            if state is None:
                unknown.append(name)
            else:
                states.add(state)
        if coordinator is None:
            return cls(throttle_time_ms=0, error_code=errors.CoordinatorNotAvailable.code,
                       unknown_state_filters=unknown, transaction_states=[])  # fmt: skip
        if unknown and not states:
            # only unknown filters: nothing can match (Kafka answers an empty list)
            return cls(throttle_time_ms=0, error_code=0, unknown_state_filters=unknown,
                       transaction_states=[])  # fmt: skip
        code, found = coordinator.list_transactions(states, set(body.producer_id_filters))
        listed = [
            cls.TransactionState(transactional_id=t.transactional_id, producer_id=t.producer_id,
                                 transaction_state=t.state.kafka_name)
            for t in found
            if self.allowed(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                            t.transactional_id, audit=False)
        ]  # fmt: skip
        return cls(throttle_time_ms=0, error_code=code, unknown_state_filters=unknown,
                   transaction_states=listed)  # fmt: skip
