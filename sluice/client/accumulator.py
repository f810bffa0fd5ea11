"""The producer's record accumulator: per-partition batches, filled by ``send``, drained by the
sender.

Each partition has a queue of :class:`ProducerBatch` es; ``append`` adds a record to the last
(open) batch of its partition, or opens a new one when the record does not fit ``batch_size``
(a record larger than ``batch_size`` gets a batch of its own, as in Kafka). A batch is *ready*
when it is full (a later batch exists behind it), when it has waited ``linger_ms``, when it is
being retried and its backoff has passed, or when the producer flushes or closes.

Records are serialized into the batch's :class:`sluice.protocol.records.RecordBatchBuilder` as they
are
appended (protocol/'s codec: one builder per open batch); the sender calls ``build()`` when it
drains the batch, which compresses and computes the CRC once. A retried batch keeps its built
bytes (``ProducerBatch.payload``).

Backpressure: the accumulator holds at most ``buffer_memory`` bytes of unsent records, and (when
``max_queued_batches`` > 0) at most that many unsent batches per partition; ``append`` waits for
room (bounded by ``max_block_ms``). The byte bound is Kafka's ``buffer.memory``. The batch bound
is aiokafka's behaviour: a producer that sends faster than the broker takes waits in ``send``
instead of queueing seconds of records, so delivery latency stays at a few batches' worth while
the pipeline to the broker stays full.

Single-threaded: used only from the event loop of its producer (``append`` from ``send``; the
rest from the sender task).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from sluice.protocol.records import RecordBatchBuilder

from .cluster import TopicPartition
from .errors import KafkaTimeoutError, RecordTooLargeError

__all__ = ["ProducerBatch", "RecordAccumulator", "RecordMetadata"]


class RecordMetadata(NamedTuple):
    """Where a record was stored: the result of a delivery future.

    ``offset`` is -1 with acks=0 (the broker does not answer). ``timestamp`` is the broker's
    LogAppendTime when the topic uses it, else the record's CreateTime.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int
    serialized_value_size: int


@dataclass(eq=False, slots=True)
class ProducerBatch:
    """Records bound for one partition in one Produce request."""

    tp: TopicPartition
    builder: RecordBatchBuilder
    created: float  # monotonic seconds
    # per record: (delivery future, timestamp, key size, value size)
    records: list[tuple[asyncio.Future[RecordMetadata], int, int, int]] = field(
        default_factory=list
    )
    estimated_size: int = 0
    attempts: int = 0
    retry_at: float = 0.0
    payload: bytes | None = None  # built bytes (kept for retries)

    def build(self) -> bytes:
        if self.payload is None:
            self.payload = self.builder.build()
        return self.payload

    def complete(self, base_offset: int, log_append_time: int) -> None:
        """Resolve every delivery future (offsets are consecutive from ``base_offset``)."""
        topic, partition = self.tp
        for i, (fut, ts, ksize, vsize) in enumerate(self.records):
            if not fut.done():
                offset = base_offset + i if base_offset >= 0 else -1
                stamp = log_append_time if log_append_time != -1 else ts
                fut.set_result(RecordMetadata(topic, partition, offset, stamp, ksize, vsize))

    def fail(self, exc: BaseException) -> None:
        for fut, _, _, _ in self.records:
            if not fut.done():
                fut.set_exception(exc)


class RecordAccumulator:
    """Per-partition queues of batches; see the module docstring for the rules."""

    def __init__(
        self,
        *,
        batch_size: int = 16_384,
        linger_ms: float = 5,
        compression: int = 0,
        buffer_memory: int = 32 * 1024 * 1024,
        max_request_size: int = 1_048_576,
        max_queued_batches: int = 0,
    ) -> None:
        self.batch_size = batch_size
        self.max_queued_batches = max_queued_batches
        self.linger = linger_ms / 1000
        self.compression = compression
        self.buffer_memory = buffer_memory
        self.max_request_size = max_request_size
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._buffered = 0
        self._incomplete: set[ProducerBatch] = set()
        self._room = asyncio.Event()
        self.wakeup = asyncio.Event()  # set when a batch may have become ready
        self._flushing = 0
        self.closing = False

    def has_open_batch(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` has a batch that can still take records (the sticky partitioner moves
        on once the batch it chose was drained)."""
        q = self._queues.get(tp)
        return q is not None and bool(q) and q[-1].payload is None and q[-1].attempts == 0

    async def append(
        self,
        tp: TopicPartition,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]],
        *,
        max_block_ms: int,
    ) -> asyncio.Future[RecordMetadata]:
        """Add one record; return its delivery future. Waits while the buffer is full."""
        size = RecordBatchBuilder.max_record_size(key, value, headers)
        if size + 61 > self.max_request_size:
            raise RecordTooLargeError(
                f"record of ~{size} bytes exceeds max_request_size {self.max_request_size}"
            )
        if self._buffered + size > self.buffer_memory and self._buffered > 0:
            await self._wait_for_room(size, max_block_ms)
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        if self.max_queued_batches and self._needs_new_batch(queue, size):
            await self._wait_for_queue(queue, size, max_block_ms)
        batch = queue[-1] if queue else None
        if batch is None or self._needs_new_batch(queue, size):
            # The sender recomputes its sleep: the previous batch is full (ready now) or this
            # new batch starts a linger timer.
            self.wakeup.set()
            batch = ProducerBatch(
                tp, RecordBatchBuilder(compression=self.compression), time.monotonic()
            )
            batch.estimated_size = 61
            queue.append(batch)
            self._incomplete.add(batch)
        batch.builder.append(timestamp, key, value, headers)
        batch.estimated_size += size
        self._buffered += size
        fut: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        batch.records.append(
            (
                fut,
                timestamp,
                len(key) if key is not None else -1,
                len(value) if value is not None else -1,
            )
        )
        if batch.estimated_size >= self.batch_size or self.linger <= 0:
            self.wakeup.set()
        return fut

    def _needs_new_batch(self, queue: deque[ProducerBatch], size: int) -> bool:
        """Whether a record of ``size`` bytes cannot join the last batch of ``queue``."""
        if not queue:
            return True
        batch = queue[-1]
        return (
            batch.payload is not None
            or batch.attempts > 0
            or (len(batch.builder) > 0 and batch.estimated_size + size > self.batch_size)
        )

    async def _wait_for_queue(
        self, queue: deque[ProducerBatch], size: int, max_block_ms: int
    ) -> None:
        deadline = time.monotonic() + max_block_ms / 1000
        while len(queue) >= self.max_queued_batches and self._needs_new_batch(queue, size):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"{self.max_queued_batches} batches queued for one partition for "
                    f"{max_block_ms} ms"
                )
            self.wakeup.set()  # the full batches are ready: make sure the sender looks
            self._room.clear()
            try:
                async with asyncio.timeout(remaining):
                    await self._room.wait()
            except TimeoutError:
                continue

    async def _wait_for_room(self, size: int, max_block_ms: int) -> None:
        deadline = time.monotonic() + max_block_ms / 1000
        while self._buffered + size > self.buffer_memory and self._buffered > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"buffer_memory ({self.buffer_memory} bytes) full for {max_block_ms} ms"
                )
            self._room.clear()
            try:
                async with asyncio.timeout(remaining):
                    await self._room.wait()
            except TimeoutError:
                continue

    def ready(self, now: float) -> tuple[list[TopicPartition], float | None]:
        """Partitions whose first batch may be sent now, and the seconds until the next one may
        become ready by lingering (None: nothing pending)."""
        ready = []
        next_in: float | None = None
        flushing = self._flushing > 0 or self.closing
        for tp, queue in self._queues.items():
            if not queue:
                continue
            batch = queue[0]
            if batch.attempts:
                due = batch.retry_at
            elif len(queue) > 1 or flushing or batch.estimated_size >= self.batch_size:
                due = now
            else:
                due = batch.created + self.linger
            if due <= now:
                ready.append(tp)
            elif next_in is None or due - now < next_in:
                next_in = due - now
        return ready, next_in

    def drain(
        self, tp: TopicPartition, stamp: Callable[[ProducerBatch], None] | None = None
    ) -> ProducerBatch:
        """Take the first batch of ``tp`` for sending (it must be :meth:`ready`). ``stamp`` is
        called before a batch is built for the first time (the idempotent producer sets its
        producer id, epoch and base sequence there; retries resend the built bytes)."""
        batch = self._queues[tp].popleft()
        if stamp is not None and batch.payload is None:
            stamp(batch)
        batch.build()
        self._room.set()  # a queue slot is free
        return batch

    def reenqueue(self, batch: ProducerBatch, retry_at: float) -> None:
        """Put a batch that failed with a retriable error back in front of its partition."""
        batch.attempts += 1
        batch.retry_at = retry_at
        self._queues.setdefault(batch.tp, deque()).appendleft(batch)

    def done(self, batch: ProducerBatch) -> None:
        """A batch was completed or failed: release its memory."""
        if batch in self._incomplete:
            self._incomplete.discard(batch)
            self._buffered -= batch.estimated_size - 61
            self._room.set()

    def expired(self, now: float, delivery_timeout: float) -> list[ProducerBatch]:
        """Queued batches older than ``delivery_timeout`` seconds (removed from the queues)."""
        out = []
        for queue in self._queues.values():
            while queue and now - queue[0].created > delivery_timeout:
                out.append(queue.popleft())
        return out

    def pending(self) -> list[ProducerBatch]:
        """Every batch not yet completed (queued or in flight)."""
        return list(self._incomplete)

    def abort_all(self, exc: BaseException) -> None:
        """Fail every queued batch (forced close)."""
        for queue in self._queues.values():
            while queue:
                batch = queue.popleft()
                batch.fail(exc)
                self.done(batch)

    def begin_flush(self) -> None:
        self._flushing += 1
        self.wakeup.set()

    def end_flush(self) -> None:
        self._flushing -= 1
