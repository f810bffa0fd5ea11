"""Client quota benchmark: how closely a throttled client is held to its byte rate.

``python -m bench quota [--rate 1000000] [--seconds 70] [--warmup 15] [--record-size 10000]
[--fetch-bytes 1048576]``

A ``python -m sluice.server`` subprocess; ``producer_byte_rate`` and ``consumer_byte_rate`` of
``--rate`` bytes/s are set (AlterClientQuotas) for the client ids ``throttled-producer`` and
``throttled-consumer``. A confluent-kafka producer with that client id then produces as fast as
it can for ``--seconds`` (librdkafka backs off on ``throttle_time_ms``, KIP-219, and the broker
mutes the connection); a consumer with the other id reads a topic filled beforehand, as fast as
it can. The figure is each client's rate over the time after ``--warmup`` (the quota window,
11 x 1 s, lets a new client burst at first: Kafka measures against at least 10 s; and as
samples age out of the window the allowance comes back in steps, so the rate is measured over
several windows), against the bound: the issue's target is within 10 %. The throttle times
the clients reported are printed beside it. This is a 2-core machine shared with other work:
figures vary run to run; they are in bench/NOTES.md.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.client.admin import Admin
from tests.broker_util import BrokerProcess, start_broker

TARGET = 0.10  # within 10 % of the bound
#: (time.monotonic(), bytes) of each record produced (acknowledged) or consumed.
Samples = list[tuple[float, int]]


def _steady_rate(samples: Samples, start: float, end: float) -> float:
    """Bytes per second over [start, end] of (time, bytes) samples."""
    total = sum(n for t, n in samples if start <= t <= end)
    return total / (end - start)


def _produce(broker: BrokerProcess, seconds: float, size: int) -> tuple[Samples, list[float]]:
    samples: Samples = []
    throttles: list[float] = []  # seconds (confluent-kafka's ThrottleEvent.throttle_time)
    producer = Producer({
        "bootstrap.servers": broker.bootstrap, "client.id": "throttled-producer",
        "linger.ms": 5, "queue.buffering.max.kbytes": 8192,
        "throttle_cb": lambda event: throttles.append(event.throttle_time),
    })  # fmt: skip

    def delivered(err: object, msg: object) -> None:
        if err is None:
            samples.append((time.monotonic(), size))

    payload = b"p" * size
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            producer.produce("quota-produce", payload, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
            continue
        producer.poll(0)
    producer.flush(60)
    return samples, throttles


def _consume(
    broker: BrokerProcess, seconds: float, fetch_bytes: int
) -> tuple[Samples, list[float]]:
    samples: Samples = []
    throttles: list[float] = []
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap, "client.id": "throttled-consumer",
        "group.id": "quota-bench", "auto.offset.reset": "earliest",
        "max.partition.fetch.bytes": fetch_bytes,
        "throttle_cb": lambda event: throttles.append(event.throttle_time),
    })  # fmt: skip
    consumer.subscribe(["quota-fetch"])
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                samples.append((time.monotonic(), len(msg.value() or b"")))
    finally:
        consumer.close()
    return samples, throttles


def _fill(broker: BrokerProcess, total: int, size: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
    payload = b"f" * size
    for _ in range(total // size):
        while True:
            try:
                producer.produce("quota-fetch", payload)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(120)


async def _set_quotas(broker: BrokerProcess, rate: int) -> None:
    async with Admin(broker.bootstrap) as admin:
        await admin.alter_client_quotas({"client-id": "throttled-producer"},
                                        {"producer_byte_rate": rate})  # fmt: skip
        await admin.alter_client_quotas({"client-id": "throttled-consumer"},
                                        {"consumer_byte_rate": rate})  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench quota")
    parser.add_argument("--rate", type=int, default=1_000_000, help="bytes/s for both clients")
    parser.add_argument("--seconds", type=float, default=70.0)
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--record-size", type=int, default=10_000)
    parser.add_argument("--fetch-bytes", type=int, default=1_048_576,
                        help="the consumer's max.partition.fetch.bytes")  # fmt: skip
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-quota-") as tmp:
        broker = start_broker(Path(tmp) / "data")
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for name in ("quota-produce", "quota-fetch"):
                admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
            # enough for the consumer never to run dry: rate x seconds, and half again
            _fill(broker, int(args.rate * args.seconds * 1.5), args.record_size)
            asyncio.run(_set_quotas(broker, args.rate))
            results: dict[str, tuple[Samples, list[float]]] = {}
            start = time.monotonic()
            threads = [
                threading.Thread(target=lambda: results.__setitem__(
                    "produce", _produce(broker, args.seconds, args.record_size))),
                threading.Thread(target=lambda: results.__setitem__(
                    "fetch", _consume(broker, args.seconds, args.fetch_bytes))),
            ]  # fmt: skip
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            status = 0
            for what in ("produce", "fetch"):
                samples, throttles = results[what]
                rate = _steady_rate(samples, start + args.warmup, start + args.seconds)
                ratio = rate / args.rate
                ok = abs(ratio - 1) <= TARGET
                status |= 0 if ok else 1
                print(
                    f"{what}: {rate / 1e6:.3f} MB/s over {args.seconds - args.warmup:.0f} s "
                    f"after {args.warmup:.0f} s (bound {args.rate / 1e6:.3f} MB/s: "
                    f"{ratio:.3f} x, {'✔' if ok else '✘'} within {TARGET:.0%}); "
                    f"throttle reports {len(throttles)}, max {max(throttles, default=0):.2f} s"
                )
            return status
        finally:
            broker.stop()
