"""Client throughput: ``sluice perf produce`` / ``perf consume`` next to confluent-kafka
(librdkafka, C) and aiokafka (pure-Python asyncio) on the same broker, in the same run.

``python -m bench client_perf [--records N] [--record-size S] [--quick]``

One Sluice broker runs as a subprocess (``EmbeddedBroker(mode="subprocess")``: its own process
and GIL), each client in this process in turn, each on its own topic (1 partition). Producers:
acks=all, linger 5 ms, 16 KiB batches, no compression, values of S random bytes, no key; the
client sends as fast as it can and every delivery is awaited, latency measured per record from
send to delivery callback (like kafka-producer-perf-test). Consumers read the N records back
from offset 0. The figures are for this machine and moment; compare the rows with each other.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from sluice.client import Consumer, Producer
from sluice.client.perf import ConsumeResult, ProduceResult, percentile, run_consume, run_produce

T = TypeVar("T")
LINGER_MS = 5
BATCH_SIZE = 16_384


def sluice_produce(bootstrap: str, topic: str, n: int, size: int) -> ProduceResult:
    async def go() -> ProduceResult:
        async with Producer(bootstrap, linger_ms=LINGER_MS, batch_size=BATCH_SIZE) as p:
            return await run_produce(p, topic, n, size)

    return _run(go())


def sluice_consume(bootstrap: str, topic: str, n: int) -> ConsumeResult:
    async def go() -> ConsumeResult:
        async with Consumer(bootstrap) as c:
            return await run_consume(c, topic, n)

    return _run(go())


def confluent_produce(bootstrap: str, topic: str, n: int, size: int) -> ProduceResult:
    from confluent_kafka import Producer as CkProducer

    producer = CkProducer({
        "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": LINGER_MS,
        "batch.size": BATCH_SIZE, "queue.buffering.max.messages": 1_000_000,
    })  # fmt: skip
    producer.list_topics(topic, timeout=10)  # auto-create outside the clock
    payload = os.urandom(size)
    latencies: list[float] = []
    errors = 0
    now = time.perf_counter

    def callback(sent: float) -> Callable[[object, object], None]:
        def on_delivery(err: object, _msg: object) -> None:
            nonlocal errors
            if err is not None:
                errors += 1
            else:
                latencies.append((now() - sent) * 1000)

        return on_delivery

    start = now()
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, payload, on_delivery=callback(now()))
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(120)
    return ProduceResult(n - errors, size, now() - start, errors, latencies)


def confluent_consume(bootstrap: str, topic: str, n: int) -> ConsumeResult:
    from confluent_kafka import Consumer as CkConsumer
    from confluent_kafka import TopicPartition

    consumer = CkConsumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                           "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    count = size = 0
    start = time.perf_counter()
    deadline = start + 120
    try:
        while count < n and time.perf_counter() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                if msg.error() is None:
                    count += 1
                    size += len(msg.value() or b"")
    finally:
        consumer.close()
    return ConsumeResult(count, size, time.perf_counter() - start)


def aiokafka_produce(bootstrap: str, topic: str, n: int, size: int) -> ProduceResult:
    from aiokafka import AIOKafkaProducer

    async def go() -> ProduceResult:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", linger_ms=LINGER_MS, max_batch_size=BATCH_SIZE
        )
        await producer.start()
        try:
            await producer.partitions_for(topic)
            payload = os.urandom(size)
            latencies: list[float] = []
            futs = []
            start = time.perf_counter()
            for _ in range(n):
                sent = time.perf_counter()
                fut = await producer.send(topic, payload)
                fut.add_done_callback(
                    lambda _f, s=sent: latencies.append((time.perf_counter() - s) * 1000)
                )
                futs.append(fut)
            results = await asyncio.gather(*futs, return_exceptions=True)
            errors = sum(isinstance(r, BaseException) for r in results)
            return ProduceResult(n - errors, size, time.perf_counter() - start, errors, latencies)
        finally:
            await producer.stop()

    return _run(go())


def aiokafka_consume(bootstrap: str, topic: str, n: int) -> ConsumeResult:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def go() -> ConsumeResult:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            count = size = 0
            start = time.perf_counter()
            deadline = start + 120
            while count < n and time.perf_counter() < deadline:
                batch = await consumer.getmany(tp, timeout_ms=500, max_records=10_000)
                for records in batch.values():
                    count += len(records)
                    size += sum(len(r.value or b"") for r in records)
            return ConsumeResult(count, size, time.perf_counter() - start)
        finally:
            await consumer.stop()

    return _run(go())


def _run(coro: Coroutine[Any, Any, T]) -> T:
    import uvloop

    return uvloop.run(coro)


def _latency(result: ProduceResult) -> str:
    lat = sorted(result.latencies_ms)
    return f"p50 {percentile(lat, 50):6.0f} ms  p99 {percentile(lat, 99):6.0f} ms"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench client_perf", description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="20,000 records")
    args = parser.parse_args(argv)
    n = 20_000 if args.quick else args.records
    from sluice.server.logging import configure_logging
    from sluice.testing.embedded import EmbeddedBroker

    configure_logging("warning")
    clients = [
        ("sluice", sluice_produce, sluice_consume),
        ("confluent-kafka", confluent_produce, confluent_consume),
        ("aiokafka", aiokafka_produce, aiokafka_consume),
    ]
    print(f"{n} records of {args.record_size} bytes, acks=all, linger {LINGER_MS} ms, "
          f"batch {BATCH_SIZE} bytes, one partition, broker in a subprocess")  # fmt: skip
    with EmbeddedBroker(mode="subprocess") as broker:
        bs = broker.bootstrap_servers
        for name, produce, _consume in clients:
            p = produce(bs, f"perf-{name}", n, args.record_size)
            print(f"produce {name:<16} {p.records_per_sec:10.0f} rec/s {p.mb_per_sec:7.2f} MB/s"
                  f"   {_latency(p)}   errors {p.errors}")  # fmt: skip
        for name, _produce, consume in clients:
            c = consume(bs, f"perf-{name}", n)
            print(f"consume {name:<16} {c.records_per_sec:10.0f} rec/s {c.mb_per_sec:7.2f} MB/s"
                  f"   ({c.records} records)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
