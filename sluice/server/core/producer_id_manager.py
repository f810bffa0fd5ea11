"""Producer id allocation for InitProducerId (Kafka's ``ProducerIdManager``)."""

from __future__ import annotations

import time
from collections.abc import Callable


class ProducerIdManager:
    """Hands out producer ids, each once per broker lifetime and, in practice, across restarts.

    Standalone: ids start at the wall clock in milliseconds, so a restarted broker (which takes
    more than a millisecond per id handed out before it) never repeats one without persisting a
    counter. A cluster will take blocks of ids from ZooKeeper instead (Kafka's
    ``/latest_producer_id_block``); only this class changes then.

    Written only by :meth:`generate`, from the event-loop thread (InitProducerId).
    """

    def __init__(self, clock_ms: Callable[[], int] | None = None) -> None:
        now = clock_ms() if clock_ms is not None else int(time.time() * 1000)
        self._next = now

    def generate(self) -> int:
        producer_id = self._next
        self._next += 1
        return producer_id
