"""The transaction coordinator's marker writes (Kafka's ``TransactionMarkerChannelManager``
sending WriteTxnMarkers), as the broker supplies them to
:data:`sluice.server.transaction.coordinator.MarkerWriter`.

**Local partitions take a shortcut**: a partition this broker leads gets its marker through
:meth:`ReplicaManager.append_txn_markers` directly, where Kafka sends a WriteTxnMarkers request
to itself over the network. The write is the same one the WriteTxnMarkers handler does (leader
append of the control batch with the coordinator epoch, acks=all: answered once the high
watermark passed it), without a connection, a frame and a codec round trip per transaction --
which standalone is every partition. Partitions led elsewhere go to their leader, grouped per
broker, through ``remote`` (one WriteTxnMarkers request per broker); without one (or with no
known leader) they answer NOT_LEADER_OR_FOLLOWER and the coordinator retries them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from sluice.protocol import errors
from sluice.server.replication.partition import TxnMarker
from sluice.server.replication.replica_manager import ReplicaManager

TopicPartition = tuple[str, int]
#: Sends one marker to ``broker_id`` for ``partitions``: ``(broker_id, producer_id,
#: producer_epoch, commit, coordinator_epoch, partitions) -> error code per partition``.
RemoteMarkerSender = Callable[
    [int, int, int, bool, int, list[TopicPartition]], Awaitable[dict[TopicPartition, int]]
]


class MarkerWriter:
    """Markers to local partitions through the replica manager, to others through ``remote``.
    ``leader_of`` answers a partition's leader id (-1: none known); ``timeout_ms`` bounds the
    wait for replication (Kafka's ``request.timeout.ms``)."""

    def __init__(
        self,
        replicas: ReplicaManager,
        timeout_ms: int,
        leader_of: Callable[[str, int], int] | None = None,
        remote: RemoteMarkerSender | None = None,
    ) -> None:
        self._replicas = replicas
        self._timeout_ms = timeout_ms
        self._timeout_s = timeout_ms / 1000
        self._leader_of = leader_of
        self.remote = remote

    async def __call__(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, int]:
        local: list[TopicPartition] = []
        remote: dict[int, list[TopicPartition]] = {}
        answers: dict[TopicPartition, int] = {}
        for tp in partitions:
            partition = self._replicas.get_partition(*tp)
            if partition is not None and partition.is_leader:
                local.append(tp)
                continue
            leader = -1 if self._leader_of is None else self._leader_of(*tp)
            if leader < 0 or self.remote is None:
                answers[tp] = (
                    errors.UnknownTopicOrPartition.code
                    if partition is None and leader < 0
                    else errors.NotLeaderOrFollower.code
                )
            else:
                remote.setdefault(leader, []).append(tp)
        sends = [
            self.remote(broker, producer_id, producer_epoch, commit, coordinator_epoch, tps)
            for broker, tps in remote.items()
            if self.remote is not None
        ]
        if local:
            marker = TxnMarker(producer_id, producer_epoch, coordinator_epoch, commit)
            results, delayed = self._replicas.append_txn_markers(
                [(t, i, marker) for t, i in local], self._timeout_ms
            )
            if delayed is not None:
                await self._replicas.produce_purgatory.wait(delayed, self._timeout_s)
                results = delayed.results
            answers.update({(r.topic, r.partition): r.error for r in results})
        for outcome in await asyncio.gather(*sends, return_exceptions=True):
            if isinstance(outcome, dict):
                answers.update(outcome)
        for tp in partitions:  # a remote send that failed as a whole: retried
            answers.setdefault(tp, errors.NotLeaderOrFollower.code)
        return answers
