"""Replication's price and failover times on a real 3-broker cluster (``python -m bench cluster``).

Every figure is taken in the same run, on the same machine, as a ratio to a baseline from that run
(the machines are shared and noisy; never compare absolute numbers across runs):

* **throughput**: pipelined Produce requests (``--batch`` records of 100 bytes each, a window of
  ``--window`` in flight per connection, ``--connections`` of them: a broker serves one request
  per connection at a time, so acks=all needs many) to a partition's leader, acks=all on an RF=3
  topic with
  ``min.insync.replicas=2``, as a ratio to acks=1 on an RF=1 topic (target >= 0.5; Kafka's 2014
  figures give 0.51 on separate machines -- here all three brokers share one machine's cores),
  in ``--rounds`` alternating acks=1 / acks=all rounds so that load from elsewhere on a shared
  machine weighs on both sides alike;
* **latency**: one acks=all batch at a time, p50 / p99 / max round trip, against acks=1 RF=1;
* **failover**: a producer sends one acks=all batch at a time; the leader is killed (-9), or
  stopped gracefully (SIGTERM: a controlled shutdown moves leadership first); the time from the
  signal to the first batch acknowledged by the new leader, and for how long sends failed.
  Targets: kill -9 <= ``zookeeper.session.timeout.ms`` + 1 s (here 2 s + 1 s); controlled
  shutdown < 0.5 s of errors.

The brokers are subprocesses (:class:`sluice.testing.cluster.EmbeddedCluster`) with their own
ZooKeeper; the load generator is this process (raw frames, as ``bench broker``). Where the CPU
goes, and what was tried: ``bench/NOTES.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import time
from typing import Any

from bench.broker import _check_produce, build_batch, process_cpu_seconds, run_pipelines
from sluice.protocol.framing import decode_response, encode_request
from sluice.protocol.messages import CreateTopicsRequest, ProduceRequest

PRODUCE_VERSION = 8
CREATE_TOPICS_VERSION = 4


def produce_frame(topic: str, batch: bytes, acks: int, correlation: int = 1) -> bytes:
    body = ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)],
            )
        ],
    )
    return encode_request(0, PRODUCE_VERSION, correlation, "bench", body)


class Client:
    """One connection, one request at a time (what a latency or failover probe needs)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int) -> Client:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
        return cls(reader, writer)

    async def call(self, api_key: int, version: int, frame: bytes, timeout: float = 15.0) -> Any:
        self.writer.write(frame)
        await self.writer.drain()
        async with asyncio.timeout(timeout):
            (size,) = struct.unpack(">i", await self.reader.readexactly(4))
            payload = await self.reader.readexactly(size)
        _, body = decode_response(api_key, version, payload)
        return body

    def close(self) -> None:
        self.writer.close()


async def create_topic(port: int, name: str, rf: int, configs: dict[str, str]) -> None:
    body = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name=name,
                num_partitions=1,
                replication_factor=rf,
                configs=[
                    CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                    for k, v in configs.items()
                ],
            )
        ],
        timeout_ms=30_000,
        validate_only=False,
    )
    client = await Client.connect(port)
    try:
        resp = await client.call(19, CREATE_TOPICS_VERSION, encode_request(19, 4, 1, "b", body))
    finally:
        client.close()
    code = resp.topics[0].error_code
    if code:
        raise RuntimeError(f"create {name}: error {code} {resp.topics[0].error_message}")


async def throughput(port: int, topic: str, acks: int, args: argparse.Namespace) -> float:
    """Records per second through ``args.connections`` pipelined connections."""
    elapsed, records = await timed_run(port, topic, acks, args, args.requests)
    return records / elapsed


async def timed_run(
    port: int, topic: str, acks: int, args: argparse.Namespace, requests: int
) -> tuple[float, int]:
    """(seconds, records) for ``requests`` produce requests over ``args.connections``."""
    batch = build_batch(args.batch)
    per = requests // args.connections
    frames = [[produce_frame(topic, batch, acks)] * per for _ in range(args.connections)]
    elapsed, _ = await run_pipelines("127.0.0.1", port, frames, args.window, _check_produce)
    return elapsed, per * args.connections * args.batch


async def latencies(port: int, topic: str, acks: int, count: int, batch: bytes) -> list[float]:
    client = await Client.connect(port)
    out = []
    try:
        frame = produce_frame(topic, batch, acks)
        for _ in range(count):
            started = time.perf_counter()
            resp = await client.call(0, PRODUCE_VERSION, frame)
            out.append(time.perf_counter() - started)
            code = resp.responses[0].partition_responses[0].error_code
            if code:
                raise RuntimeError(f"produce error {code}")
    finally:
        client.close()
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def failover(cluster: Any, topic: str, how: str, batch: bytes) -> tuple[float, float]:
    """(seconds from the signal to the first acknowledged batch at a new leader, seconds of
    failed sends). The probe re-reads the leader from Metadata after every failure."""
    leader = await asyncio.to_thread(cluster.wait_for_leader, topic)
    signalled = time.monotonic()
    if how == "kill":
        await asyncio.to_thread(cluster.kill, leader)
    else:
        stopping = asyncio.create_task(asyncio.to_thread(cluster.stop_broker, leader))
    first_error: float | None = None
    last_error: float | None = None
    deadline = signalled + 60
    recovered = None
    while time.monotonic() < deadline:
        try:
            target = await asyncio.to_thread(cluster.leader_of, topic)
            if target < 0 or target == leader:
                raise RuntimeError("no new leader yet")
            client = await Client.connect(cluster._ports[target])
            try:
                resp = await client.call(0, PRODUCE_VERSION, produce_frame(topic, batch, -1), 5)
            finally:
                client.close()
            if resp.responses[0].partition_responses[0].error_code == 0:
                recovered = time.monotonic()
                break
            raise RuntimeError("produce error")
        except (OSError, RuntimeError, TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            now = time.monotonic()
            first_error = first_error or now
            last_error = now
            await asyncio.sleep(0.02)
    if how != "kill":
        await stopping
    if recovered is None:
        raise RuntimeError(f"no acknowledged produce within 60 s after {how}")
    errors = 0.0 if first_error is None or last_error is None else last_error - first_error
    await asyncio.to_thread(cluster.restart, leader)
    return recovered - signalled, errors


async def bench(args: argparse.Namespace) -> list[str]:
    from sluice.testing.cluster import EmbeddedCluster

    lines = []
    props = {"min.insync.replicas": "2", "auto.leader.rebalance.enable": "false"}
    with EmbeddedCluster(3, properties=props) as cluster:
        any_port = cluster._ports[1]
        await create_topic(any_port, "rf3", 3, {})
        await create_topic(any_port, "rf1", 1, {})
        rf3 = await asyncio.to_thread(cluster.wait_for_leader, "rf3")
        rf1 = await asyncio.to_thread(cluster.wait_for_leader, "rf1")
        p3, p1 = cluster._ports[rf3], cluster._ports[rf1]
        await throughput(p1, "rf1", 1, argparse.Namespace(**{**vars(args), "requests": 200}))
        pids = {b: cluster.broker(b).process.pid for b in cluster.ids}  # type: ignore[union-attr]

        def cpu() -> dict[int, float]:
            return {b: process_cpu_seconds(pid) for b, pid in pids.items()}

        # Alternating rounds (acks=1, acks=all, acks=1, ...): the machine is shared, and load
        # from elsewhere then weighs on both sides of the ratio alike.
        zero = {b: 0.0 for b in cluster.ids}
        spent = {1: dict(zero), -1: dict(zero)}
        seconds = {1: 0.0, -1: 0.0}
        records = 0
        for _ in range(args.rounds):
            for acks, port, topic in ((1, p1, "rf1"), (-1, p3, "rf3")):
                start = cpu()
                elapsed, records = await timed_run(
                    port, topic, acks, args, args.requests // args.rounds
                )
                end = cpu()
                seconds[acks] += elapsed
                for b in cluster.ids:
                    spent[acks][b] += end[b] - start[b]
        records *= args.rounds
        base, replicated = records / seconds[1], records / seconds[-1]
        before, middle, after = zero, spent[1], {b: spent[1][b] + spent[-1][b] for b in zero}
        lines.append(f"throughput acks=1 RF=1   {base:12,.0f} records/s   (baseline)")
        lines.append(
            f"throughput acks=all RF=3 {replicated:12,.0f} records/s   "
            f"{replicated / base:.2f} x baseline (target >= 0.50)"
        )
        for name, start, end, leader in (("acks=1 RF=1", before, middle, rf1),
                                         ("acks=all RF=3", middle, after, rf3)):  # fmt: skip
            per = ", ".join(
                f"{b}{'(leader)' if b == leader else ''} {(end[b] - start[b]) / records * 1e6:.2f}"
                for b in cluster.ids
            )
            lines.append(f"broker CPU us/record, {name}: {per}")
        small = build_batch(10)
        l1 = await latencies(p1, "rf1", 1, args.latency_count, small)
        l3 = await latencies(p3, "rf3", -1, args.latency_count, small)
        for name, values in (("acks=1 RF=1  ", l1), ("acks=all RF=3", l3)):
            lines.append(
                f"latency {name} p50 {pct(values, 0.5) * 1000:6.2f} ms  "
                f"p99 {pct(values, 0.99) * 1000:6.2f} ms  max {max(values) * 1000:6.2f} ms"
            )
        lines.append(f"latency acks=all p99 / acks=1 p99: {pct(l3, 0.99) / pct(l1, 0.99):.2f} x")
        for how in ("kill", "controlled") if args.failovers > 0 else ():
            times = []
            for _ in range(args.failovers):
                times.append(await failover(cluster, "rf3", how, small))
            recover = [t for t, _ in times]
            errs = [e for _, e in times]
            lines.append(
                f"failover ({how:10}) to first ack: median {statistics.median(recover):5.2f} s, "
                f"max {max(recover):5.2f} s; errors for median {statistics.median(errs):5.2f} s"
            )
        lines.append(
            "targets: kill -9 <= session timeout (2 s) + 1 s; controlled shutdown < 0.5 s of errors"
        )
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench cluster", description=__doc__)
    parser.add_argument("--batch", type=int, default=100, help="records per batch")
    parser.add_argument("--requests", type=int, default=16000, help="produce requests per run")
    # A broker handles one request per connection at a time (as Kafka does), so an acks=all
    # connection carries one batch per replication round trip: enough connections to keep the
    # leader busy (4 measured 0.25-0.35 x, latency-bound; 16: 0.37; 32 and 64: 0.39).
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--window", type=int, default=16, help="requests in flight per connection")
    parser.add_argument(
        "--rounds", type=int, default=4, help="alternating acks=1 / acks=all rounds"
    )
    parser.add_argument("--latency-count", type=int, default=500)
    parser.add_argument("--failovers", type=int, default=3, help="trials of each failover kind")
    args = parser.parse_args(argv)
    for line in asyncio.run(bench(args)):
        print(line)
    return 0
