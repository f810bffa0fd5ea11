"""Requests parked until they can complete (Kafka's ``DelayedOperation`` and
``DelayedOperationPurgatory``): the generic operation and the purgatory that watches operations
by partition and expires them on a shared timer. Knows no partition or log.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable
from typing import Generic, TypeVar

#: Partition key: ``(topic, partition)``, as in :mod:`sluice.server.replication.partition`.
PartitionKey = tuple[str, int]


class DelayedOperation:
    """A request parked until it can complete (Kafka's ``DelayedOperation``).

    Completed exactly once: by :meth:`try_complete` finding its condition true (when a
    purgatory checks a key it watches), by :meth:`expire` when its wait times out, or by
    :meth:`force_complete` (shutdown). The waiting handler awaits :attr:`future`.
    """

    __slots__ = ("expired", "future", "keys")

    def __init__(self, keys: Iterable[PartitionKey]) -> None:
        self.keys = tuple(keys)
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        #: Set by :meth:`DelayedOperationPurgatory.wait` when the wait timed out.
        self.expired = False

    @property
    def completed(self) -> bool:
        return self.future.done()

    def try_complete(self) -> bool:
        """Complete now if the condition holds; returns whether the operation is complete."""
        raise NotImplementedError

    def force_complete(self) -> bool:
        """Complete now whatever the condition; False if it was already complete."""
        if self.future.done():
            return False
        self.future.set_result(None)
        return True

    def expire(self) -> None:
        """The wait timed out (called once, before completion)."""
        self.force_complete()


Op = TypeVar("Op", bound=DelayedOperation)

#: Granularity of purgatory timeouts (seconds): a parked operation expires at most this much
#: after its deadline.
EXPIRY_TICK_S = 0.005


class DelayedOperationPurgatory(Generic[Op]):
    """Parked operations watched by partition (Kafka's ``DelayedOperationPurgatory``).

    Whoever changes what an operation waits for (an append, an HW move, a deleted partition)
    calls :meth:`check_and_complete` for that partition; the waiting handler calls :meth:`wait`,
    which bounds the wait and unregisters the operation however it ends. Timeouts are rounded up
    to :data:`EXPIRY_TICK_S` and share one event-loop timer per tick (a one-level timing wheel;
    Kafka's purgatory timer ticks in milliseconds too).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[PartitionKey, set[Op]] = {}
        #: tick (deadline / EXPIRY_TICK_S, rounded up) -> operations waiting that expire then
        self._expiring: dict[int, set[Op]] = {}

    def try_complete_else_watch(self, op: Op) -> bool:
        """Complete ``op`` now if it can; else watch it on each of its keys. Returns whether it
        completed. (Synchronous, so no state change can slip between the check and the watch.)
        """
        if op.try_complete():
            return True
        for key in op.keys:
            self._watchers.setdefault(key, set()).add(op)
        return False

    def check_and_complete(self, key: PartitionKey) -> int:
        """Try to complete every operation watching ``key``; returns how many completed."""
        ops = self._watchers.get(key)
        if not ops:
            return 0
        completed = 0
        for op in list(ops):
            if op.completed:
                ops.discard(op)
            elif op.try_complete():
                ops.discard(op)
                completed += 1
        if not ops:
            del self._watchers[key]
        return completed

    def remove(self, op: Op) -> None:
        for key in op.keys:
            ops = self._watchers.get(key)
            if ops is not None:
                ops.discard(op)
                if not ops:
                    del self._watchers[key]

    async def wait(self, op: Op, timeout_s: float) -> bool:
        """Wait until ``op`` completes or ``timeout_s`` passes (then it expires). Returns whether
        it completed before the timeout. ``op`` is unwatched afterwards in every case.

        The handler awaits the operation's own future (no ``asyncio.wait``: a waiter future, a
        done callback and result sets per parked request). The deadline is rounded up to the
        next :data:`EXPIRY_TICK_S` and the operation joins that tick's set, which one loop timer
        expires: arming and cancelling a uvloop timer per parked request cost 2-3 us, a set
        insertion 0.3 (``bench/NOTES.md``). Cancelling the waiting task cancels
        ``op.future``, which counts as complete from then on (nothing reads its outcome)."""
        loop = op.future.get_loop()
        tick = math.ceil((loop.time() + max(timeout_s, 0)) / EXPIRY_TICK_S)
        expiring = self._expiring.get(tick)
        if expiring is None:
            # (A tick already expired gets a new set and timer, so no operation is left behind.)
            expiring = self._expiring[tick] = set()
            loop.call_at(tick * EXPIRY_TICK_S, self._expire_tick, tick)
        expiring.add(op)
        try:
            await op.future
        finally:
            expiring.discard(op)
            self.remove(op)
        return not op.expired

    def _expire_tick(self, tick: int) -> None:
        for op in self._expiring.pop(tick, ()):
            if not op.completed:
                self.remove(op)
                op.expired = True
                op.expire()

    def drain(self) -> list[Op]:
        """Unwatch and return every parked operation not yet complete (shutdown)."""
        ops = {op for watched in self._watchers.values() for op in watched if not op.completed}
        self._watchers.clear()
        return list(ops)

    def watched(self) -> int:
        """Number of keys with at least one parked operation (tests, metrics)."""
        return len(self._watchers)

    def __len__(self) -> int:
        return len({op for watched in self._watchers.values() for op in watched})
