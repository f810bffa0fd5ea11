"""The partition and group side of transactions (KIP-98, KIP-447): WriteTxnMarkers (the
transaction coordinator ends a transaction in each partition it touched), TxnOffsetCommit (a
transactional producer commits a group's offsets inside its transaction) and DescribeProducers
(the active producers of a partition, for ``kafka-transactions describe-producers``).

The coordinator itself (FindCoordinator key type 1, InitProducerId with a transactional id,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, ``__transaction_state``) lives elsewhere; it is a
client of :meth:`TransactionalApis.write_txn_markers` like any Kafka broker's marker sender.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol.messages import RequestHeader
from sluice.server.api.base import ApiBase, _code, _commit_topics, log
from sluice.server.api.registry import Answer
from sluice.server.crash_points import crash_point
from sluice.server.group.offsets_store import OFFSETS_TOPIC
from sluice.server.replication.partition import TxnMarker
from sluice.server.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from sluice.server.replication.delayed import AppendResult, DelayedProduce

#: How long a marker append waits for the ISR (Kafka passes ``request.timeout.ms``, default
#: 30 s, to ``appendRecords``); the coordinator's marker sender retries what timed out.
MARKER_APPEND_TIMEOUT_MS = 30_000

_MarkerEntry = tuple[str, int, TxnMarker]


class TransactionalApis(ApiBase):
    """This family's handlers (module docstring); mixed into ``Handlers``."""

    # --- WriteTxnMarkers (27) --------------------------------------------------------------------

    def write_txn_markers(
        self, header: RequestHeader, body: m.WriteTxnMarkersRequest
    ) -> Answer[m.WriteTxnMarkersResponse]:
        """Append each marker's COMMIT/ABORT control batch to each of its partitions this
        broker leads, as Kafka's ``handleWriteTxnMarkersRequest``: Alter or ClusterAction on
        the cluster (else CLUSTER_AUTHORIZATION_FAILED for every partition); a partition
        without a local log -> UNKNOWN_TOPIC_OR_PARTITION; then the leader append with
        ``acks=-1`` (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, and the producer state's
        INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED per partition), answered once
        every append is replicated to the ISR (or timed out: REQUEST_TIMED_OUT). For
        ``__consumer_offsets`` partitions whose marker is written, the group coordinator then
        makes the transaction's pending offsets visible (commit) or drops them (abort)."""
        if not self.allowed(AclOperation.ALTER, audit=False) and not self.allowed(
            AclOperation.CLUSTER_ACTION
        ):
            code = errors.ClusterAuthorizationFailed.code
            return _markers_response(
                [(mk, [(t.name, p, code) for t in mk.topics for p in t.partition_indexes])
                 for mk in body.markers]
            )  # fmt: skip
        return self.write_markers(body)

    def write_markers(self, body: m.WriteTxnMarkersRequest) -> Answer[m.WriteTxnMarkersResponse]:
        """:meth:`write_txn_markers` once authorized: what this broker's own transaction
        coordinator calls in-process for the partitions it leads
        (:mod:`sluice.server.replication.txn_markers`)."""
        entries: list[_MarkerEntry] = []
        answers: list[tuple[m.WriteTxnMarkersRequest.WritableTxnMarker, list[int | None]]] = []
        for mk in body.markers:
            marker = TxnMarker(
                mk.producer_id, mk.producer_epoch, mk.coordinator_epoch, mk.transaction_result
            )
            slots: list[int | None] = []  # index into entries; None: not hosted here
            for t in mk.topics:
                for p in t.partition_indexes:
                    if self.replicas.get_partition(t.name, p) is None:
                        slots.append(None)
                    else:
                        slots.append(len(entries))
                        entries.append((t.name, p, marker))
            answers.append((mk, slots))
        results, delayed = self.replicas.append_txn_markers(entries, MARKER_APPEND_TIMEOUT_MS)
        if delayed is None:
            return self._markers_done(entries, results, answers)
        return self._markers_wait(entries, delayed, answers)

    async def _markers_wait(
        self,
        entries: list[_MarkerEntry],
        delayed: DelayedProduce,
        answers: list[tuple[m.WriteTxnMarkersRequest.WritableTxnMarker, list[int | None]]],
    ) -> m.WriteTxnMarkersResponse:
        await self.replicas.produce_purgatory.wait(delayed, MARKER_APPEND_TIMEOUT_MS / 1000)
        return self._markers_done(entries, delayed.results, answers)

    def _markers_done(
        self,
        entries: list[_MarkerEntry],
        results: list[AppendResult],
        answers: list[tuple[m.WriteTxnMarkersRequest.WritableTxnMarker, list[int | None]]],
    ) -> m.WriteTxnMarkersResponse:
        """The response once every append is settled; the offsets partitions' markers that
        were written complete the group coordinator's pending transactional offsets first
        (Kafka's ``onTransactionCompleted``; a failure there answers UNKNOWN_SERVER_ERROR
        for those partitions, and the coordinator retries the marker)."""
        codes: dict[int, int] = {}
        for i, ((topic, index, marker), result) in enumerate(zip(entries, results, strict=True)):
            code = result.error
            if code:
                log.info("transaction marker not written", topic=topic, partition=index,
                         producer_id=marker.producer_id, error=code,
                         message=result.message)  # fmt: skip
            elif topic == OFFSETS_TOPIC:
                try:
                    self.groups.complete_transaction(marker.producer_id, index, marker.commit)
                except Exception:
                    log.exception("completing transactional offsets failed", partition=index,
                                  producer_id=marker.producer_id)  # fmt: skip
                    code = errors.UnknownServerError.code
            codes[i] = code
        for topic in sorted({topic for topic, _index, _marker in entries}):
            crash_point("partition.markers.written", topic)
        out = []
        for mk, slots in answers:
            parts: list[tuple[str, int, int]] = []
            it = iter(slots)
            for t in mk.topics:
                for p in t.partition_indexes:
                    slot = next(it)
                    code = errors.UnknownTopicOrPartition.code if slot is None else codes[slot]
                    parts.append((t.name, p, code))
            out.append((mk, parts))
        return _markers_response(out)

    # --- TxnOffsetCommit (28) --------------------------------------------------------------------

    def txn_offset_commit(
        self, header: RequestHeader, body: m.TxnOffsetCommitRequest
    ) -> Answer[m.TxnOffsetCommitResponse]:
        """Commit a group's offsets inside the producer's transaction (Kafka's
        ``handleTxnOffsetCommitRequest``): Write on the transactional id (else
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED everywhere), Read on the group (else
        GROUP_AUTHORIZATION_FAILED everywhere), Read on each topic (else
        TOPIC_AUTHORIZATION_FAILED for its partitions); then the group coordinator writes them
        as a transactional batch, pending until the transaction's marker
        (``GroupCoordinator.txn_commit_offsets``)."""
        wanted = [
            (t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
             p.committed_metadata)
            for t in body.topics
            for p in t.partitions
        ]  # fmt: skip
        refused = 0
        if not self.allowed(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id
        ):
            refused = errors.TransactionalIdAuthorizationFailed.code
        elif not self.allowed(AclOperation.READ, ResourceType.GROUP, body.group_id):
            refused = errors.GroupAuthorizationFailed.code
        if refused:
            return _txn_commit_response(wanted, [refused] * len(wanted))
        readable = {t.name for t in body.topics
                    if self.allowed(AclOperation.READ, ResourceType.TOPIC, t.name)}  # fmt: skip
        allowed = [w for w in wanted if w[0] in readable]
        denied = [w for w in wanted if w[0] not in readable]
        codes = self.groups.txn_commit_offsets(
            group_id=body.group_id,
            producer_id=body.producer_id,
            producer_epoch=body.producer_epoch,
            generation_id=body.generation_id,
            member_id=body.member_id,
            group_instance_id=body.group_instance_id,
            offsets=allowed,
        ) if allowed else []  # fmt: skip
        self.metrics.inc("groups.txn_offset_commits")
        refusals = [errors.TopicAuthorizationFailed.code] * len(denied)
        if isinstance(codes, list):
            return _txn_commit_response(allowed + denied, codes + refusals)
        return self._txn_commit_later(allowed + denied, codes, refusals)

    @staticmethod
    async def _txn_commit_later(
        wanted: list[Any], codes: Awaitable[list[int]], refusals: list[int]
    ) -> m.TxnOffsetCommitResponse:
        return _txn_commit_response(wanted, (await codes) + refusals)

    # --- DescribeProducers (61) ------------------------------------------------------------------

    def describe_producers(
        self, header: RequestHeader, body: m.DescribeProducersRequest
    ) -> m.DescribeProducersResponse:
        """The active producers of each partition (Kafka's ``handleDescribeProducersRequest``
        and ``Partition.activeProducerState``): Read on the topic (else
        TOPIC_AUTHORIZATION_FAILED), a partition not hosted here -> UNKNOWN_TOPIC_OR_PARTITION
        / NOT_LEADER_OR_FOLLOWER, and the producer state of the leader's log (a last
        timestamp of -1: no batch of the producer since the state was loaded from a
        snapshot)."""
        cls = m.DescribeProducersResponse
        topic_cls = cls.TopicResponse
        part_cls = cls.TopicResponse.PartitionResponse
        state_cls = part_cls.ProducerState
        topics = []
        for t in body.topics:
            denied = self.denied_code(AclOperation.READ, ResourceType.TOPIC, t.name)
            parts = []
            for p in t.partition_indexes:
                code, message, active = denied, None, []
                partition = None if denied else self.replicas.get_partition(t.name, p)
                if denied:
                    pass
                elif partition is None:
                    code = self.replicas.missing_partition_code(t.name, p)
                else:
                    try:
                        producers = partition.local_log().producer_state()
                    except Exception as exc:
                        if not isinstance(exc, errors.KafkaError):
                            log.exception("describe producers failed", topic=t.name, partition=p)
                        code, message = _code(exc), str(exc)
                    else:
                        active = [
                            state_cls(
                                producer_id=e.producer_id,
                                producer_epoch=e.epoch,
                                last_sequence=e.last_seq,
                                last_timestamp=e.last_timestamp,
                                coordinator_epoch=e.coordinator_epoch,
                                current_txn_start_offset=e.current_txn_first_offset,
                            )
                            for e in producers.producers.values()
                        ]
                parts.append(part_cls(partition_index=p, error_code=code, error_message=message,
                                      active_producers=active))  # fmt: skip
            topics.append(topic_cls(name=t.name, partitions=parts))
        return cls(throttle_time_ms=0, topics=topics)


def _txn_commit_response(wanted: list[Any], codes: list[int]) -> m.TxnOffsetCommitResponse:
    topic_cls = m.TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    part_cls = topic_cls.TxnOffsetCommitResponsePartition
    topics = _commit_topics(wanted, codes, topic_cls, part_cls)
    return m.TxnOffsetCommitResponse(throttle_time_ms=0, topics=topics)


def _markers_response(
    markers: list[tuple[m.WriteTxnMarkersRequest.WritableTxnMarker, list[tuple[str, int, int]]]],
) -> m.WriteTxnMarkersResponse:
    cls = m.WriteTxnMarkersResponse
    result_cls = cls.WritableTxnMarkerResult
    topic_cls = result_cls.WritableTxnMarkerTopicResult
    part_cls = topic_cls.WritableTxnMarkerPartitionResult
    out = []
    for mk, parts in markers:
        by_topic: dict[str, list[Any]] = {}
        for name, index, code in parts:
            by_topic.setdefault(name, []).append(part_cls(partition_index=index, error_code=code))
        out.append(result_cls(producer_id=mk.producer_id, topics=[
            topic_cls(name=name, partitions=ps) for name, ps in by_topic.items()
        ]))  # fmt: skip
    return cls(markers=out)
