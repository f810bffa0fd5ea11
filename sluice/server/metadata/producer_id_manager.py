"""Producer id allocation for InitProducerId (Kafka's ``ProducerIdManager``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class ProducerIdManager:
    """Hands out producer ids, each once per broker lifetime and, in practice, across restarts.

    Standalone: ids start at the wall clock in milliseconds, so a restarted broker (which takes
    more than a millisecond per id handed out before it) never repeats one without persisting a
    counter. A cluster takes blocks of ids from ZooKeeper instead: :class:`BlockProducerIdManager`.

    Written only by :meth:`generate`, from the event-loop thread (InitProducerId).
    """

    def __init__(self, clock_ms: Callable[[], int] | None = None) -> None:
        now = clock_ms() if clock_ms is not None else int(time.time() * 1000)
        self._next = now

    def generate(self) -> int:
        producer_id = self._next
        self._next += 1
        return producer_id


class BlockProducerIdManager:
    """Cluster mode: ids from blocks every broker takes in turn from ZooKeeper (Kafka's
    ``ZkProducerIdManager``, ``/latest_producer_id_block``), so no two brokers ever hand out
    the same id, across restarts too (a restarted broker takes a fresh block; the rest of its
    old block is skipped, which is harmless).

    ``allocate()`` returns the next block's ``(first, last)`` ids. The next block is fetched in
    the background once the current one is 90% used, so InitProducerId rarely waits on
    ZooKeeper. Called only from the event loop; concurrent callers share one allocation.
    """

    def __init__(self, allocate: Callable[[], Awaitable[tuple[int, int]]]) -> None:
        self._allocate = allocate
        self._next = 0
        self._last = -1
        self._prefetch_at = 0
        self._pending: asyncio.Task[tuple[int, int]] | None = None

    def _start_allocation(self) -> asyncio.Task[tuple[int, int]]:
        if self._pending is None:
            self._pending = asyncio.get_running_loop().create_task(self._run_allocation())
        return self._pending

    async def _run_allocation(self) -> tuple[int, int]:
        return await self._allocate()

    async def generate(self) -> int:
        """The next id; raises what ``allocate`` raises when no block could be had."""
        while self._next > self._last:
            task = self._start_allocation()
            try:
                first, last = await asyncio.shield(task)
            finally:
                if task.done() and self._pending is task:
                    self._pending = None
            if first > self._last:  # not already taken by a concurrent caller
                self._next, self._last = first, last
                self._prefetch_at = first + (last - first + 1) * 9 // 10
        producer_id = self._next
        self._next += 1
        if producer_id >= self._prefetch_at and self._pending is None:
            self._start_allocation()
        return producer_id
