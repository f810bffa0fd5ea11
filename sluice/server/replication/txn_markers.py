"""The transaction coordinator's marker sender (Kafka's ``TransactionMarkerChannelManager``), as
the broker supplies it to :data:`sluice.server.transaction.coordinator.MarkerWriter`.

A marker goes to each partition's leader as a WriteTxnMarkers request, one per broker (the
partitions grouped by leader, as Kafka's channel manager does), and its answer is the error code
of each partition; the coordinator retries what did not succeed.

**The local broker takes a shortcut**: where Kafka sends the request to itself over the network,
the request for the partitions this broker leads is handed to the WriteTxnMarkers handler
in-process (``local``; the handler's work without its authorization, as the broker is its own
principal). The append, the wait for the ISR and the group coordinator's completion of
transactional offsets are the handler's, exactly as for a request from another broker; what is
saved is a connection, a frame each way and a codec round trip per transaction -- which,
standalone, is every marker. Other brokers get the request over the inter-broker listener
(``address_of`` and ``security``), one cached connection each, dropped on any failure (the
partitions then answer NOT_LEADER_OR_FOLLOWER and are retried, after new metadata if the leader
moved). A partition with no live leader answers NOT_LEADER_OR_FOLLOWER too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.server.crash_points import crash_point
from sluice.server.logging import get_logger

if TYPE_CHECKING:
    from sluice.net.connection import Connection
    from sluice.net.security import ClientSecurity

log = get_logger("sluice.transactions")

TopicPartition = tuple[str, int]
LocalMarkers = Callable[[m.WriteTxnMarkersRequest], Awaitable[m.WriteTxnMarkersResponse]]


def markers_request(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    partitions: list[TopicPartition],
) -> m.WriteTxnMarkersRequest:
    """One WriteTxnMarkers request for one marker, its partitions grouped by topic."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    marker = m.WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transaction_result=commit,
        topics=[
            m.WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
            for t, ps in by_topic.items()
        ],
        coordinator_epoch=coordinator_epoch,
    )
    return m.WriteTxnMarkersRequest(markers=[marker])


def response_codes(response: m.WriteTxnMarkersResponse) -> dict[TopicPartition, int]:
    return {
        (t.name, p.partition_index): p.error_code
        for mk in response.markers
        for t in mk.topics
        for p in t.partitions
    }


class MarkerChannel:
    """A :data:`~sluice.server.transaction.coordinator.MarkerWriter`: ``local_id`` is this
    broker, ``leader_of`` a partition's leader (-1: none), ``address_of`` a broker's
    inter-broker address (None: not live)."""

    def __init__(
        self,
        local_id: int,
        local: LocalMarkers,
        leader_of: Callable[[str, int], int],
        address_of: Callable[[int], tuple[str, int] | None] = lambda _b: None,
        *,
        security: ClientSecurity | None = None,
        request_timeout_ms: int = 30_000,
    ) -> None:
        self._local_id = local_id
        self._local = local
        self._leader_of = leader_of
        self._address_of = address_of
        #: The inter-broker client's TLS/SASL (set once the broker has built it).
        self.security = security
        self._timeout_ms = request_timeout_ms
        self._connections: dict[int, Connection] = {}

    async def __call__(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, int]:
        by_broker: dict[int, list[TopicPartition]] = {}
        answers: dict[TopicPartition, int] = {}
        for tp in partitions:
            leader = self._leader_of(*tp)
            if leader < 0:
                answers[tp] = errors.NotLeaderOrFollower.code
            else:
                by_broker.setdefault(leader, []).append(tp)
        brokers = list(by_broker)

        async def send(broker: int) -> dict[TopicPartition, int]:
            request = markers_request(
                producer_id, producer_epoch, commit, coordinator_epoch, by_broker[broker]
            )
            codes = await self._send(broker, request)
            if len(brokers) > 1 and codes and not any(codes.values()):
                for topic in sorted({t for t, _ in by_broker[broker]}):
                    crash_point("txn.markers.acknowledged", topic)
            return codes

        sends = [send(b) for b in brokers]
        for broker, outcome in zip(brokers, await asyncio.gather(*sends), strict=True):
            for tp in by_broker[broker]:
                answers[tp] = outcome.get(tp, errors.NotLeaderOrFollower.code)
        return answers

    async def _send(
        self, broker: int, request: m.WriteTxnMarkersRequest
    ) -> dict[TopicPartition, int]:
        """One broker's answer (empty when it could not be had: every partition retried)."""
        if broker == self._local_id:
            return response_codes(await self._local(request))
        try:
            conn = await self._connection(broker)
            if conn is None:
                return {}
            return response_codes(await conn.request(m.WriteTxnMarkers.key, request))
        except Exception as exc:
            log.info("sending transaction markers failed", broker=broker, error=repr(exc))
            dropped = self._connections.pop(broker, None)
            if dropped is not None:
                dropped.close()
            return {}

    async def _connection(self, broker: int) -> Connection | None:
        conn = self._connections.get(broker)
        if conn is not None and not conn.closed:
            return conn
        address = self._address_of(broker)
        if address is None:
            return None
        # Imported here: only a cluster member sends markers to other brokers (a plain
        # standalone start never loads the inter-broker client).
        from sluice.net.connection import Connection

        conn = await Connection.open(
            *address,
            client_id=f"txn-marker-sender-{self._local_id}",
            request_timeout_ms=self._timeout_ms,
            security=self.security,
        )
        self._connections[broker] = conn
        return conn

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
