"""The log APIs: Produce, Fetch (long poll included), ListOffsets, OffsetForLeaderEpoch,
DeleteRecords (InitProducerId is the transaction family's:
:mod:`sluice.server.api.transactions`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol.messages import RequestHeader
from sluice.protocol.records import (
    HEADER_SIZE,
    first_transactional_batch,
    has_transactional_batch,
    parse_header,
)
from sluice.server.api.fetch_ids import FETCH_TOPIC_IDS_VERSION, fetch_by_topic_id
from sluice.server.api.registry import Answer
from sluice.server.network.request import CLOSE_CONNECTION, CloseConnection
from sluice.server.replication.replica_manager import INTERNAL_TOPICS
from sluice.server.security.acl import AclOperation, ResourceType
from sluice.server.storage.log import Isolation

if TYPE_CHECKING:
    from sluice.server.replication.delayed import AppendResult, DelayedProduce
    from sluice.server.storage.log import Log
    from sluice.server.storage.segment import FetchSlice

from sluice.server.api.base import (
    ADMIN_CLIENT_ID,
    CONSUMER_REPLICA_ID,
    DEBUGGING_REPLICA_ID,
    ApiBase,
    _code,
    _fetch_isolation,
    _FetchRead,
    log,
)


def _aborted_transactions(
    log_: Log, start: int, records: FetchSlice | None, lso: int
) -> list[m.FetchResponse.AbortedTransaction]:
    """A read_committed fetch's ``aborted_transactions`` (the ``Log`` class docstring): the
    aborted transactions overlapping the batches returned, ``[start, offset after the last
    batch)``. Searched up to the LSO first (nothing more to do in the usual case of none);
    only when some are found are the returned batches' headers walked for the exact bound."""
    found = log_.collect_aborted_transactions(start, lso)
    if not found:
        return []
    upper = start
    if records is not None and records.size:
        position, end = records.position, records.position + records.size
        while end - position >= HEADER_SIZE:
            header = parse_header(records.file.pread(HEADER_SIZE, position))
            upper = header.next_offset
            position += header.size
    cls = m.FetchResponse.AbortedTransaction
    return [
        cls(producer_id=t.producer_id, first_offset=t.first_offset)
        for t in found
        if t.first_offset < upper
    ]


#: Verification errors a producer must retry, answered as NOT_ENOUGH_REPLICAS (retriable for
#: every producer), as Kafka's ``ReplicaManager`` does for Produce up to v11.
_VERIFY_RETRIABLE = dict.fromkeys(
    (errors.CoordinatorLoadInProgress.code, errors.ConcurrentTransactions.code,
     errors.CoordinatorNotAvailable.code, errors.NotCoordinator.code),
    errors.NotEnoughReplicas.code,
)  # fmt: skip


class ProduceFetchApis(ApiBase):
    """This family\'s handlers (module docstring); mixed into ``Handlers``."""

    # --- Produce (0) -----------------------------------------------------------------------------

    def produce(self, header: RequestHeader, body: m.ProduceRequest) -> Answer[m.ProduceResponse]:
        """The response (None for acks=0), or a coroutine for it when acks=-1 has to wait for
        the high watermark (never on a single broker: the ISR is just the leader).

        Transactional records are refused whole, as Kafka's ``handleProduceRequest`` refuses
        them without a transactional id the client may Write (TRANSACTIONAL_ID_AUTHORIZATION_
        FAILED); with one, each partition's transaction is verified at the coordinator first
        (:meth:`_unverified`)."""
        denied: list[tuple[m.ProduceRequest.TopicProduceData, int]] = []
        refusal = self._transactional_refusal(body)
        if refusal > 0:
            denied = [(t, refusal) for t in body.topic_data]
            body.topic_data = []  # (the decoded request is this call's own)
        if refusal < 0:
            denied = self._unverified(body)
        if self.authorizer is not None:  # Write on each topic; the others are appended
            allowed: list[m.ProduceRequest.TopicProduceData] = []
            for t in body.topic_data:
                if self.allowed(AclOperation.WRITE, ResourceType.TOPIC, t.name):
                    allowed.append(t)
                else:
                    denied.append((t, errors.TopicAuthorizationFailed.code))
            body.topic_data = allowed
        topic_data = body.topic_data
        results, delayed = self.replicas.append_records(
            [(t.name, pd.index, pd.records) for t in topic_data for pd in t.partition_data],
            body.acks,
            body.timeout_ms,
            internal_topics_allowed=header.client_id == ADMIN_CLIENT_ID,
        )
        if delayed is None:
            return self._produce_response(body, results, denied)
        return self._produce_wait(body, delayed, denied)

    def _transactional_refusal(self, body: m.ProduceRequest) -> int:
        """0 (no transactional batch), -1 (some, to verify), or the code refusing a request
        holding transactional batches (:meth:`produce`): TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        without a transactional id the client may Write (Kafka's ``handleProduceRequest``)."""
        if not any(
            has_transactional_batch(pd.records) for t in body.topic_data for pd in t.partition_data
        ):
            return 0
        tid = body.transactional_id
        if tid is None or not self.allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
            return errors.TransactionalIdAuthorizationFailed.code
        return -1

    def _unverified(
        self, body: m.ProduceRequest
    ) -> list[tuple[m.ProduceRequest.TopicProduceData, int]]:
        """KIP-890's verification (Kafka 3.6+, ``transaction.partition.verification.enable``):
        a partition's transactional batch is appended only if the coordinator has the partition
        in the producer's ongoing transaction; otherwise Kafka's verification error
        (INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED,
        CONCURRENT_TRANSACTIONS), the partition taken out of ``body``. Without it a batch
        written by a producer that skipped AddPartitionsToTxn (or of an aborted transaction,
        arriving late) opens a transaction no marker ever ends, and read_committed readers
        stop at it for good. Verified where the id's coordinator is this broker (standalone:
        always); a coordinator elsewhere would need AddPartitionsToTxn v4 (not implemented),
        so such batches are appended unverified, as Kafka before 3.6 did."""
        coordinator = self.transactions
        tid = body.transactional_id
        if coordinator is None or tid is None:
            return []
        denied = []
        kept = []
        cls = m.ProduceRequest.TopicProduceData
        for t in body.topic_data:
            good: list[tuple[m.ProduceRequest.PartitionProduceData, int]] = []
            bad: list[tuple[m.ProduceRequest.PartitionProduceData, int]] = []
            for pd in t.partition_data:
                found = first_transactional_batch(pd.records)
                code = 0
                if found is not None:
                    code = coordinator.verify(tid, found.producer_id, found.producer_epoch,
                                              (t.name, pd.index))  # fmt: skip
                    code = _VERIFY_RETRIABLE.get(code, code)
                (bad if code else good).append((pd, code))
            if good:
                kept.append(cls(name=t.name, partition_data=[pd for pd, _ in good]))
            for pd, code in bad:
                denied.append((cls(name=t.name, partition_data=[pd]), code))
        body.topic_data = kept
        return denied

    async def _produce_wait(
        self,
        body: m.ProduceRequest,
        delayed: DelayedProduce,
        denied: list[tuple[m.ProduceRequest.TopicProduceData, int]],
    ) -> m.ProduceResponse | CloseConnection | None:
        self.metrics.inc("produce.delayed")
        await self.replicas.produce_purgatory.wait(delayed, max(body.timeout_ms, 0) / 1000)
        return self._produce_response(body, delayed.results, denied)

    def _produce_response(
        self,
        body: m.ProduceRequest,
        results: list[AppendResult],
        denied: list[tuple[m.ProduceRequest.TopicProduceData, int]],
    ) -> m.ProduceResponse | CloseConnection | None:
        cls = m.ProduceResponse
        topic_cls = m.ProduceResponse.TopicProduceResponse
        part_cls = m.ProduceResponse.PartitionProduceResponse
        responses = []
        failed = 0
        for topic, code in denied:
            failed += len(topic.partition_data)
            responses.append(topic_cls(name=topic.name, partition_responses=[
                part_cls(index=pd.index, error_code=code, base_offset=-1, log_append_time_ms=-1,
                         log_start_offset=-1, error_message=None)
                for pd in topic.partition_data
            ]))  # fmt: skip
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

    def fetch(self, header: RequestHeader, body: m.FetchRequest) -> Answer[m.FetchResponse]:
        """The response, or a coroutine for it when the request has to wait (long poll).

        Not a coroutine function: the usual fetch (data there, or ``max_wait_ms`` 0) is answered
        without creating and driving a coroutine; :meth:`handle` awaits what needs awaiting.

        ``fetch.max.bytes`` caps what any request may ask for (``max_bytes``, and ``min_bytes``
        below it), followers' too, as Kafka's ``KafkaApis.handleFetchRequest``: the bound on
        what one response holds in memory (copy path) or in flight (zero copy), whatever a
        client asks; the first batch may still exceed it (KIP-74).
        """
        if header.api_version >= FETCH_TOPIC_IDS_VERSION:  # topics by id: resolved to names
            return fetch_by_topic_id(header, body, self.metadata_view, self.logs, self.fetch)
        cap = self.config.fetch_max_bytes
        if body.max_bytes > cap:
            body.max_bytes = cap  # (the decoded request is this call's own)
        if body.min_bytes > body.max_bytes:
            body.min_bytes = body.max_bytes
        isolation = _fetch_isolation(body.isolation_level, body.replica_id)
        denied: list[tuple[str, int]] = []
        if self.authorizer is not None:
            denied = self._fetch_denied(body)
        wanted = [
            (t.topic, p.partition, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch)
            for t in body.topics
            for p in t.partitions
        ]
        deadline = time.monotonic() + max(body.max_wait_ms, 0) / 1000
        # KIP-392: a consumer's rack from v11 on ("" if it has none) lets followers serve it.
        rack = body.rack_id if header.api_version >= 11 and body.replica_id < 0 else None
        # v12+: the epoch of the last batch the fetcher has (KIP-595; -1 from most clients).
        last_epochs = (
            {
                (t.topic, p.partition): p.last_fetched_epoch
                for t in body.topics
                for p in t.partitions
                if p.last_fetched_epoch >= 0
            }
            if header.api_version >= 12
            else None
        ) or None
        read = self._read_fetch(body, wanted, isolation, rack=rack, last_epochs=last_epochs)
        if read[1] >= body.min_bytes or read[2] or not wanted or self._stopping:
            return self._fetch_answer(body, read, denied)
        if time.monotonic() >= deadline:
            return self._fetch_answer(body, read, denied)
        return self._fetch_wait(body, wanted, isolation, deadline, denied, rack, last_epochs)

    def _fetch_denied(self, body: m.FetchRequest) -> list[tuple[str, int]]:
        """Take out of ``body`` the partitions the principal may not read (a follower: every
        partition without ClusterAction on the cluster); they are answered
        TOPIC_AUTHORIZATION_FAILED (``KafkaApis.handleFetchRequest``)."""
        follower_ok = body.replica_id < 0 or self.allowed(AclOperation.CLUSTER_ACTION)
        denied: list[tuple[str, int]] = []
        allowed: list[m.FetchRequest.FetchTopic] = []
        for t in body.topics:
            if follower_ok and (
                body.replica_id >= 0 or self.allowed(AclOperation.READ, ResourceType.TOPIC, t.topic)
            ):
                allowed.append(t)
            else:
                denied.extend((t.topic, p.partition) for p in t.partitions)
        body.topics = allowed  # (the decoded request is this call's own)
        return denied

    def _fetch_answer(
        self, body: m.FetchRequest, read: _FetchRead, denied: list[tuple[str, int]]
    ) -> m.FetchResponse:
        """The response of a read that is sent: count its bytes per topic (Kafka's
        BytesOutPerSec; a follower's ReplicationBytesOutPerSec) and its errors; the
        partitions refused by authorization are added."""
        response, _size, had_error, sent = read
        if denied:
            had_error = True
            by_topic: dict[str, list[m.FetchResponse.PartitionData]] = {}
            for topic, part in denied:
                by_topic.setdefault(topic, []).append(m.FetchResponse.PartitionData(
                    partition_index=part, error_code=errors.TopicAuthorizationFailed.code,
                    high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                    aborted_transactions=None, preferred_read_replica=-1, records=b"",
                ))  # fmt: skip
            response.responses.extend(
                m.FetchResponse.FetchableTopicResponse(topic=name, partitions=parts)
                for name, parts in by_topic.items()
            )
        metrics = self.metrics
        if sent:
            if body.replica_id >= 0:
                metrics.replication_bytes_out += sum(size for _, _, size in sent)
                if self.replicas.leader_quota.throttling:
                    self.replicas.record_leader_throttled(sent)
            else:
                bytes_out = metrics.bytes_out
                for topic, _, size in sent:
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
        denied: list[tuple[str, int]],
        rack: str | None,
        last_epochs: dict[tuple[str, int], int] | None = None,
    ) -> m.FetchResponse:
        """Long poll: park until new data on a wanted partition (or the deadline), re-read."""
        keys = [(topic, part) for topic, part, *_ in wanted]
        purgatory = self.replicas.fetch_purgatory
        while True:
            delayed = self.replicas.delayed_fetch(keys, isolation)
            if not await purgatory.wait(delayed, deadline - time.monotonic()):
                # timed out: one last read, whatever it holds
                read = self._read_fetch(body, wanted, isolation, False, rack, last_epochs)
                return self._fetch_answer(body, read, denied)
            self.metrics.inc("fetch.woken")
            read = self._read_fetch(body, wanted, isolation, False, rack, last_epochs)
            _, size, had_error, _ = read
            done = size >= body.min_bytes or had_error or self._stopping
            if done or time.monotonic() >= deadline:
                return self._fetch_answer(body, read, denied)

    def _read_fetch(
        self,
        body: m.FetchRequest,
        wanted: list[tuple[str, int, int, int, int]],
        isolation: Any,
        record_follower: bool = True,
        rack: str | None = None,
        last_epochs: dict[tuple[str, int], int] | None = None,
    ) -> _FetchRead:
        """``(response, record bytes, whether to answer at once (a partition has an error, or
        the consumer is sent to another replica), [(topic, partition, record bytes)] of the
        partitions with data)``. A long poll's re-reads pass ``record_follower=False``: a
        follower's fetch is recorded once per request (``ReplicaManager.fetch_messages``).
        ``rack``: the consumer's, KIP-392 (:meth:`ReplicaManager.fetch_messages`).
        ``last_epochs``: the partitions whose fetcher named the epoch of its last batch (v12+),
        checked first (:meth:`_diverged`)."""
        # Hot path (every Fetch, every partition): classes resolved once, one response object
        # per partition.
        cls = m.FetchResponse
        topic_cls = cls.FetchableTopicResponse
        part_cls = cls.PartitionData
        had_error = False
        sent: list[tuple[str, int, int]] = []
        total = 0
        topics: dict[str, list[m.FetchResponse.PartitionData]] = {}
        early: dict[tuple[str, int], m.FetchResponse.PartitionData] = {}
        if last_epochs:
            for topic, part, offset, _max, current_epoch in wanted:
                last = last_epochs.get((topic, part))
                if last is not None:
                    answer = self._diverged(topic, part, offset, current_epoch, last)
                    if answer is not None:
                        early[(topic, part)] = answer
        to_read = [w for w in wanted if (w[0], w[1]) not in early] if early else wanted
        reads = iter(self.replicas.fetch_messages(
            to_read, body.max_bytes, isolation, body.replica_id, record_follower, rack
        ))  # fmt: skip
        committed = isolation is Isolation.TXN_COMMITTED
        for topic, part, offset, *_ in wanted:
            entry: m.FetchResponse.PartitionData
            if early and (topic, part) in early:
                had_error = True  # answered at once, as Kafka answers a diverging epoch
                entry = early[(topic, part)]
                entries = topics.get(topic)
                if entries is None:
                    topics[topic] = [entry]
                else:
                    entries.append(entry)
                continue
            partition, info, exc, preferred = next(reads)
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
                    last_stable_offset=log_.last_stable_offset_if_known,
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
                    sent.append((topic, part, size))
                if preferred >= 0:
                    had_error = True  # not an error: answered at once, like Kafka
                aborted = None
                if committed:
                    lso = partition.log.last_stable_offset
                    aborted = _aborted_transactions(partition.log, offset, records, lso)
                else:
                    lso = partition.log.last_stable_offset_if_known
                entry = part_cls(
                    partition_index=part,
                    error_code=0,
                    high_watermark=hw,
                    last_stable_offset=lso,
                    log_start_offset=info.log_start_offset,
                    aborted_transactions=aborted,
                    preferred_read_replica=preferred,
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

    def _diverged(
        self, topic: str, part: int, offset: int, current_epoch: int, last_epoch: int
    ) -> m.FetchResponse.PartitionData | None:
        """The answer to a fetch at ``offset`` whose fetcher's last batch had ``last_epoch``,
        if it is not a read (Kafka's ``Partition.readRecords``, KIP-595 style): the log's end
        of that epoch (``end_offset_for_epoch``: the largest epoch <= it, where it ends) below
        ``offset``, or an older epoch than the fetcher's, means the fetcher holds records this
        log does not -- answered with ``diverging_epoch`` (that epoch and end offset) and no
        records, so it truncates there; an epoch this log cannot place, or ``offset`` below
        the log start, is OFFSET_OUT_OF_RANGE. None: read as usual (also when the partition
        or the leader epoch check fails: the read answers that error)."""
        partition = self.replicas.get_partition(topic, part)
        if partition is None:
            return None
        try:
            log_ = partition.local_log(current_epoch, require_leader=False)
            epoch, end = log_.end_offset_for_epoch(last_epoch)
        except errors.KafkaError:
            return None
        cls = m.FetchResponse.PartitionData
        if epoch < 0 or end < 0 or offset < log_.log_start_offset:
            code, diverging = errors.OffsetOutOfRange.code, None
        elif epoch < last_epoch or end < offset:
            code, diverging = 0, cls.EpochEndOffset(epoch=epoch, end_offset=end)
        else:
            return None
        entry = cls(
            partition_index=part,
            error_code=code,
            high_watermark=log_.high_watermark,
            last_stable_offset=log_.last_stable_offset_if_known,
            log_start_offset=log_.log_start_offset,
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=b"",
        )
        if diverging is not None:
            entry.diverging_epoch = diverging
        return entry

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
            denied = self.denied_code(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name)
            for p in topic.partitions:
                partition = self.replicas.get_partition(topic.name, p.partition_index)
                code, ts, offset, epoch = denied, -1, -1, -1
                if denied:
                    pass
                elif partition is None:
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
        # A follower needs ClusterAction on the cluster, or Describe on each topic (Kafka).
        follower = body.replica_id >= 0 and self.allowed(AclOperation.CLUSTER_ACTION, audit=False)
        topics = []
        for t in body.topics:
            parts = []
            denied = (
                0
                if follower
                else self.denied_code(AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic)
            )
            for p in t.partitions:
                if denied:
                    code, epoch, end = denied, -1, -1
                else:
                    code, epoch, end = lookup(t.topic, p.partition, p.current_leader_epoch,
                                              p.leader_epoch)  # fmt: skip
                parts.append(
                    part_cls(error_code=code, partition=p.partition, leader_epoch=epoch,
                             end_offset=end)
                )  # fmt: skip
            topics.append(topic_cls(topic=t.topic, partitions=parts))
        return cls(throttle_time_ms=0, topics=topics)

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
            denied = self.denied_code(AclOperation.DELETE, ResourceType.TOPIC, topic.name)
            for p in topic.partitions:
                partition = self.replicas.get_partition(topic.name, p.partition_index)
                code, low = denied, -1
                if denied:
                    pass
                elif topic.name in INTERNAL_TOPICS:
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
