"""The group coordinator's writes to ``__consumer_offsets``, through the replica layer.

Kafka's ``GroupMetadataManager.appendForGroup``: ``ReplicaManager.appendRecords`` on the offsets
partition with ``offsets.commit.required.acks`` (-1) and ``offsets.commit.timeout.ms``, answered
by a callback when the append is settled. The coordinator room sits below the core, so it only
knows the :data:`~sluice.server.group.offsets_store.Appender` signature; this is the core's
implementation of it.

The append is a leader append (:meth:`Partition.append_as_leader` via
:meth:`ReplicaManager.append_records`): the batch is stamped with the partition's leader epoch, a
broker that is not the leader gets NOT_LEADER_OR_FOLLOWER, ``acks=-1`` checks
``min.insync.replicas`` first (NOT_ENOUGH_REPLICAS) and then parks a DelayedProduce until the
high watermark passes the batch (NONE), the ISR shrinks below the minimum
(NOT_ENOUGH_REPLICAS_AFTER_APPEND), leadership moves (NOT_LEADER_OR_FOLLOWER) or the timeout
passes (REQUEST_TIMED_OUT).

**Cost**: when the append is settled at once (``acks=1``; ``acks=-1`` with a single in-sync
replica, i.e. standalone) the outcome is returned directly: no future, no timer, no task. A
parked append costs one future and one timer handle, not a task: the timer expires the
DelayedProduce and the DelayedProduce's completion settles the future, whoever (if anyone) is
waiting for it -- so the coordinator's bookkeeping never depends on a request coroutine being
alive.
"""

from __future__ import annotations

import asyncio

from sluice.server.group.offsets_store import OFFSETS_TOPIC, AppendOutcome
from sluice.server.replication.delayed import AppendResult, DelayedProduce
from sluice.server.replication.replica_manager import ReplicaManager


def _outcome(result: AppendResult) -> AppendOutcome:
    info = result.info
    if result.error or info is None:
        return AppendOutcome(result.error, -1)
    return AppendOutcome(0, int(info.first_offset))


class ReplicaAppender:
    """An :data:`~sluice.server.group.offsets_store.Appender` over a :class:`ReplicaManager`;
    ``timeout_ms`` is ``offsets.commit.timeout.ms`` (the transaction coordinator's appender to
    ``__transaction_state``: ``topic`` and Kafka's ``request.timeout.ms``)."""

    def __init__(
        self, replicas: ReplicaManager, timeout_ms: int, topic: str = OFFSETS_TOPIC
    ) -> None:
        self._replicas = replicas
        self._topic = topic
        self._timeout_s = timeout_ms / 1000
        self._timeout_ms = timeout_ms

    def __call__(
        self, partition: int, records: bytes, acks: int
    ) -> AppendOutcome | asyncio.Future[AppendOutcome]:
        results, delayed = self._replicas.append_records(
            [(self._topic, partition, records)], acks, self._timeout_ms,
            internal_topics_allowed=True,
        )  # fmt: skip
        if delayed is None:
            return _outcome(results[0])
        return self._settle_later(delayed)

    def _settle_later(self, delayed: DelayedProduce) -> asyncio.Future[AppendOutcome]:
        loop = asyncio.get_running_loop()
        settled: asyncio.Future[AppendOutcome] = loop.create_future()
        purgatory = self._replicas.produce_purgatory
        # expire() on an operation that completed meanwhile changes nothing (nothing pending).
        timer = loop.call_later(self._timeout_s, delayed.expire)

        def done(_completed: asyncio.Future[None]) -> None:
            timer.cancel()
            purgatory.remove(delayed)
            if not settled.done():
                settled.set_result(_outcome(delayed.results[0]))

        delayed.future.add_done_callback(done)
        return settled
