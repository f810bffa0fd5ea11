"""Producer and consumer throughput tests, like ``kafka-producer-perf-test`` /
``kafka-consumer-perf-test``; used by ``sluice perf`` and ``python -m bench client_perf``.

Latency is per record, from ``send()`` to its delivery future completing (Kafka's perf test
measures the same: send to callback). Percentiles are over every record (nearest-rank).
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .cluster import TopicPartition
from .consumer import Consumer
from .producer import Producer

__all__ = ["ConsumeResult", "ProduceResult", "percentile", "run_consume", "run_produce"]

Progress = Callable[[int], None]


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (0 for an empty one)."""
    if not sorted_values:
        return 0.0
    rank = max(0, min(len(sorted_values) - 1, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[rank]


@dataclass
class ProduceResult:
    records: int
    record_size: int
    seconds: float
    errors: int
    latencies_ms: list[float] = field(default_factory=list, repr=False)

    @property
    def records_per_sec(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_sec(self) -> float:
        return self.records_per_sec * self.record_size / (1024 * 1024)

    def summary(self) -> str:
        """One line in kafka-producer-perf-test's format."""
        lat = sorted(self.latencies_ms)
        avg = sum(lat) / len(lat) if lat else 0.0
        return (
            f"{self.records} records sent, {self.records_per_sec:.1f} records/sec "
            f"({self.mb_per_sec:.2f} MB/sec), {avg:.2f} ms avg latency, "
            f"{(lat[-1] if lat else 0.0):.2f} ms max latency, "
            f"{percentile(lat, 50):.0f} ms 50th, {percentile(lat, 95):.0f} ms 95th, "
            f"{percentile(lat, 99):.0f} ms 99th, {percentile(lat, 99.9):.0f} ms 99.9th."
        )


@dataclass
class ConsumeResult:
    records: int
    bytes: int
    seconds: float

    @property
    def records_per_sec(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_sec(self) -> float:
        return self.bytes / (1024 * 1024) / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        return (
            f"{self.records} records consumed, {self.bytes / (1024 * 1024):.2f} MB, "
            f"{self.records_per_sec:.1f} records/sec ({self.mb_per_sec:.2f} MB/sec) "
            f"in {self.seconds:.2f} s"
        )


async def run_produce(
    producer: Producer,
    topic: str,
    num_records: int,
    record_size: int,
    *,
    throughput: float = -1,
    progress: Progress | None = None,
) -> ProduceResult:
    """Send ``num_records`` random ``record_size``-byte values (no key) as fast as possible, or
    at ``throughput`` records/s when positive; wait for every delivery."""
    payload = os.urandom(record_size)
    latencies: list[float] = []
    errors = 0
    pending: set[asyncio.Future[object]] = set()

    def done(fut: asyncio.Future[object], started: float) -> None:
        nonlocal errors
        pending.discard(fut)
        if fut.cancelled() or fut.exception() is not None:
            errors += 1
        else:
            latencies.append((time.perf_counter() - started) * 1000)

    await producer.partitions_for(topic)  # metadata (and auto-creation) outside the clock
    start = time.perf_counter()
    step = max(1, num_records // 200)
    for i in range(num_records):
        if throughput > 0:
            ahead = i / throughput - (time.perf_counter() - start)
            if ahead > 0:
                await asyncio.sleep(ahead)
        sent = time.perf_counter()
        fut: asyncio.Future[object] = await producer.send(topic, payload)  # type: ignore[assignment]
        pending.add(fut)
        fut.add_done_callback(functools.partial(done, started=sent))
        if progress is not None and i % step == step - 1:
            progress(step)
    await producer.flush()
    if pending:
        await asyncio.wait(pending)
    elapsed = time.perf_counter() - start
    if progress is not None:
        progress(num_records % step)
    return ProduceResult(num_records - errors, record_size, elapsed, errors, latencies)


async def run_consume(
    consumer: Consumer,
    topic: str,
    num_records: int,
    *,
    timeout_s: float = 30.0,
    progress: Progress | None = None,
) -> ConsumeResult:
    """Read ``num_records`` from the beginning of every partition of ``topic`` (stops early
    after ``timeout_s`` seconds without a record)."""
    parts = await consumer.partitions_for_topic(topic)
    tps = [TopicPartition(topic, p) for p in parts]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    count = size = 0
    start = time.perf_counter()
    last = start
    while count < num_records:
        batch = await consumer.getmany(timeout_ms=200, max_records=num_records - count)
        now = time.perf_counter()
        if not batch:
            if now - last > timeout_s:
                break
            continue
        last = now
        got = 0
        for records in batch.values():
            got += len(records)
            size += sum(len(r.value or b"") + len(r.key or b"") for r in records)
        count += got
        if progress is not None:
            progress(got)
    return ConsumeResult(count, size, (last if count else time.perf_counter()) - start)
