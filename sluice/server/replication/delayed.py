"""The two delayed operations of the produce and fetch paths (Kafka's ``DelayedProduce`` and
``DelayedFetch``). Each finds partitions through the lookup it is given (the ReplicaManager's
``get_partition``), so this module imports nothing of the ReplicaManager.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

from sluice.protocol import errors
from sluice.server.replication.partition import NO_EPOCH, NONE, Partition, PartitionKey
from sluice.server.replication.purgatory import DelayedOperation
from sluice.server.storage.log import (
    Isolation,
)

if TYPE_CHECKING:
    from sluice.server.storage.log import AppendInfo

#: Finds a hosted partition: ``ReplicaManager.get_partition``.
PartitionLookup = Callable[[str, int], "Partition | None"]


class DelayedFetch(DelayedOperation):
    """A Fetch that found fewer than ``min_bytes``, parked until one of its partitions has new
    data below its read bound (HW for consumers, the last stable offset for read_committed
    ones, LEO for ``Isolation.LOG_END``), changes leader
    epoch (a new leader or a new term: Kafka completes the fetch, whose epoch check then answers
    FENCED_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER), or is gone or replaced. The handler then
    reads again and may park again (today's long-poll behaviour).

    The bound seen at parking is remembered, not the fetch offsets: data already readable but
    too little for ``min_bytes`` must not wake the fetch again and again.
    """

    __slots__ = ("_get_partition", "_isolation", "_observed")

    def __init__(
        self, get_partition: PartitionLookup, keys: Iterable[PartitionKey], isolation: Isolation
    ) -> None:
        super().__init__(keys)
        self._get_partition = get_partition
        self._isolation = isolation
        self._observed = [self._bound(key) for key in self.keys]

    def _bound(self, key: PartitionKey) -> tuple[Partition | None, int, int]:
        """(partition, its leader epoch, its read bound) now; -1s when gone or closed."""
        partition = self._get_partition(*key)
        if partition is None:
            return None, NO_EPOCH, -1
        log_ = partition.log
        if log_.closed:
            return partition, partition.leader_epoch, -1
        if self._isolation is Isolation.LOG_END:
            return partition, partition.leader_epoch, log_.log_end_offset
        if self._isolation is Isolation.TXN_COMMITTED:
            return partition, partition.leader_epoch, log_.last_stable_offset
        return partition, partition.leader_epoch, log_.high_watermark

    def try_complete(self) -> bool:
        for key, observed in zip(self.keys, self._observed, strict=True):
            now = self._bound(key)
            if now[0] is not observed[0] or now[1:] != observed[1:]:
                return self.force_complete()
        return False


class AppendResult(NamedTuple):
    """One partition's outcome of :meth:`ReplicaManager.append_records` (``info`` None on
    error). A parked ``acks=-1`` produce rewrites ``error`` when it completes."""

    topic: str
    partition: int
    error: int
    message: str | None
    info: AppendInfo | None
    log_start_offset: int


class DelayedProduce(DelayedOperation):
    """An ``acks=-1`` produce waiting for HW to reach each partition's last offset + 1.

    Per partition: HW there -> NONE; the partition gone, replaced or no longer led here ->
    NOT_LEADER_OR_FOLLOWER; the stored ISR below ``min.insync.replicas`` (it shrank after the
    append; HW cannot pass the records then) -> NOT_ENOUGH_REPLICAS_AFTER_APPEND; the wait timed
    out -> REQUEST_TIMED_OUT. The outcome is written into the shared ``results`` list the
    handler encodes.
    """

    __slots__ = ("_get_partition", "_pending", "results")

    def __init__(
        self,
        get_partition: PartitionLookup,
        results: list[AppendResult],
        pending: dict[int, tuple[Partition, int]],
    ) -> None:
        super().__init__((results[i].topic, results[i].partition) for i in pending)
        self._get_partition = get_partition
        self.results = results
        # index into results -> (the partition appended to, the offset HW must reach)
        self._pending = pending

    def _settle(self, i: int, code: int) -> None:
        if code != NONE:  # (a pending result is a successful append: NONE already, no message)
            self.results[i] = self.results[i]._replace(error=code, message=None)
        del self._pending[i]

    def try_complete(self) -> bool:
        for i, (partition, required) in list(self._pending.items()):
            result = self.results[i]
            now = self._get_partition(result.topic, result.partition)
            if now is not partition or not partition.is_leader:
                self._settle(i, errors.NotLeaderOrFollower.code)
            elif len(partition.isr) < partition.min_insync_replicas:
                self._settle(i, errors.NotEnoughReplicasAfterAppend.code)
            elif partition.log.high_watermark >= required:
                self._settle(i, NONE)
        if self._pending:
            return False
        return self.force_complete()

    def expire(self) -> None:
        for i in list(self._pending):
            self._settle(i, errors.RequestTimedOut.code)
        self.force_complete()
