"""Transactional produce against idempotent produce, in the same run (issue 26).

``python -m bench transactions [--records N] [--commit-every N...] [--value-size B] [--runs R]``

A broker subprocess (``EmbeddedBroker(mode="subprocess")``, a fresh data dir) and
confluent-kafka producers (librdkafka, so the figure is the broker's): an idempotent producer
sends ``--records`` values of ``--value-size`` bytes to a 3-partition topic and flushes; a
transactional one sends the same values, committing every ``--commit-every`` records (each
commit: EndTxn, PrepareCommit written, markers to the 3 partitions, CompleteCommit; the
producer waits for the EndTxn answer). Runs alternate (idempotent, then each commit interval),
``--runs`` times, so every kind sees the same neighbours' load; the best and median records/s
of each are printed. Each producer first sends one record (one transaction) untimed, so the
figures are steady state, not the first metadata and producer id round trips. Figures for
this machine and this moment: ``bench/NOTES.md``.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.testing.embedded import EmbeddedBroker

_DEADLINE_S = 120.0


def _topic(bootstrap: str) -> str:
    name = f"bench-txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the future is done
    admin.create_topics([NewTopic(name, 3, 1)])[name].result(_DEADLINE_S)
    return name


def _idempotent(bootstrap: str, records: int, value: bytes) -> float:
    topic = _topic(bootstrap)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    producer.produce(topic, value, partition=0)  # warm: metadata, producer id, connections
    assert producer.flush(_DEADLINE_S) == 0
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=i % 3)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(_DEADLINE_S) == 0
    return records / (time.perf_counter() - started)


def _transactional(bootstrap: str, records: int, value: bytes, every: int) -> float:
    topic = _topic(bootstrap)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
         "linger.ms": 5}
    )  # fmt: skip
    producer.init_transactions(_DEADLINE_S)
    producer.begin_transaction()  # warm, as the idempotent run
    producer.produce(topic, value, partition=0)
    producer.commit_transaction(_DEADLINE_S)
    started = time.perf_counter()
    sent = 0
    while sent < records:
        producer.begin_transaction()
        for i in range(min(every, records - sent)):
            while True:
                try:
                    producer.produce(topic, value, partition=(sent + i) % 3)
                    break
                except BufferError:
                    producer.poll(0.01)
        sent += min(every, records - sent)
        producer.commit_transaction(_DEADLINE_S)
    return records / (time.perf_counter() - started)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench transactions")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--commit-every", type=int, nargs="+", default=[100, 1000, 10_000])
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    value = b"x" * args.value_size
    results: dict[str, list[float]] = {}
    with EmbeddedBroker(mode="subprocess") as broker:
        bootstrap = broker.bootstrap_servers
        for _ in range(args.runs):
            results.setdefault("idempotent", []).append(_idempotent(bootstrap, args.records, value))
            for every in args.commit_every:
                results.setdefault(f"transactional, commit every {every}", []).append(
                    _transactional(bootstrap, args.records, value, every)
                )
    base = statistics.median(results["idempotent"])
    print(f"{args.records} records of {args.value_size} B, 3 partitions, {args.runs} runs")
    for kind, rates in results.items():
        median = statistics.median(rates)
        print(f"{kind:40s} best {max(rates):9.0f} rec/s  median {median:9.0f} rec/s  "
              f"({median / base:.2f} of idempotent)")  # fmt: skip
    return 0
