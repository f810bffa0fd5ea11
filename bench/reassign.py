"""Throttled reassignment benchmark: how closely a moving replica is held to ``--throttle``.

``python -m bench reassign [--rates 1000000,2000000] [--seconds 20] [--window-num 11]``

A 3-broker :class:`~sluice.testing.cluster.EmbeddedCluster` (subprocesses, a real ZooKeeper)
with Kafka's replication quota window (``replication.quota.window.num`` x 1 s). For each rate a
topic on broker 1 is filled with ``rate x (window-num + seconds + 2)`` bytes, then ``sluice
reassign-partitions --execute --throttle <rate>`` adds broker 2; the new replica's segment
bytes are sampled every 50 ms until it holds them all, and ``--verify`` removes the throttle.
A new quota lets ``window-num - 1`` windows' bytes through at once (Kafka's ``Rate`` measures
over at least that much), so the figure is the copy rate after those bytes, until the copy
ends (the target: within 10 % of the throttle). The unthrottled copy rate of the same data is
printed for scale. A 2-core machine shared with other work: figures are in bench/NOTES.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.testing.cluster import EmbeddedCluster

TARGET = 0.10
DEADLINE_S = 600.0


def _fill(cluster: EmbeddedCluster, topic: str, total: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 20,
                         "queue.buffering.max.kbytes": 65536})  # fmt: skip
    payload = b"r" * 10_000
    for _ in range(total // len(payload)):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(120) == 0


def _held(cluster: EmbeddedCluster, broker: int, topic: str) -> int:
    try:
        return sum(
            p.stat().st_size for p in (cluster.data_dir(broker) / f"{topic}-0").glob("*.log")
        )
    except FileNotFoundError:
        return -1


def _cli(cluster: EmbeddedCluster, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "sluice.cli.main", "reassign-partitions", *args,
         "--bootstrap-server", cluster.bootstrap_servers],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"reassign-partitions {args}: {done.stdout} {done.stderr}")
    return done.stdout


def _topic(cluster: EmbeddedCluster, topic: str, total: int) -> None:
    """``topic``, one partition on broker 1, holding ``total`` bytes of records."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1]])])[topic].result(30)
    cluster.wait_for_leader(topic)
    _fill(cluster, topic, total)


def _copy(
    cluster: EmbeddedCluster, tmp: Path, topic: str, throttle: int | None
) -> list[tuple[float, int]]:
    data = _held(cluster, 1, topic)
    file = tmp / f"{topic}.json"
    file.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [1, 2]}]}))  # fmt: skip
    args = ["--reassignment-json-file", str(file), "--execute"]
    if throttle is not None:
        args += ["--throttle", str(throttle)]
    samples: list[tuple[float, int]] = [(time.monotonic(), 0)]  # (the CLI takes ~0.5 s)
    _cli(cluster, *args)
    deadline = time.monotonic() + DEADLINE_S
    while True:
        held = _held(cluster, 2, topic)
        if held >= 0:
            samples.append((time.monotonic(), held))
        if held >= data:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: not copied in {DEADLINE_S} s: {held} of {data}")
        time.sleep(0.05)
    verify_deadline = time.monotonic() + 60
    while True:  # --verify removes the throttles once the move is done
        try:
            _cli(cluster, "--reassignment-json-file", str(file), "--verify")
            break
        except RuntimeError:
            if time.monotonic() > verify_deadline:
                raise
            time.sleep(0.2)
    return samples


def _steady(samples: list[tuple[float, int]], burst: int) -> float:
    """Bytes/s from the first sample past ``burst`` bytes to the last."""
    start = next((s for s in samples if s[1] >= burst), samples[0])
    end = samples[-1]
    return (end[1] - start[1]) / (end[0] - start[0]) if end[0] > start[0] else float("inf")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench reassign")
    parser.add_argument("--rates", default="1000000,2000000", help="throttles, bytes/s")
    parser.add_argument("--seconds", type=float, default=20.0, help="throttled span measured")
    parser.add_argument("--window-num", type=int, default=11)
    args = parser.parse_args(argv)
    rates = [int(r) for r in args.rates.split(",")]
    props = {"auto.leader.rebalance.enable": "false",
             "replication.quota.window.num": str(args.window_num)}  # fmt: skip
    status = 0
    with (
        tempfile.TemporaryDirectory(prefix="bench-reassign-") as tmp_dir,
        EmbeddedCluster(3, properties=props) as cluster,
    ):
        tmp = Path(tmp_dir)
        for rate in rates:
            topic = f"moved-{rate}"
            _topic(cluster, topic, int(rate * (args.window_num + args.seconds + 2)))
            samples = _copy(cluster, tmp, topic, rate)
            burst = rate * (args.window_num - 1)
            steady = _steady(samples, burst)
            ratio = steady / rate
            ok = abs(ratio - 1) <= TARGET
            status |= 0 if ok else 1
            span = samples[-1][0] - samples[0][0]
            print(
                f"throttle {rate / 1e6:.2f} MB/s: {samples[-1][1] / 1e6:.1f} MB copied in "
                f"{span:.1f} s; after the first {burst / 1e6:.1f} MB (the window's burst) "
                f"{steady / 1e6:.3f} MB/s = {ratio:.3f} x ({'✔' if ok else '✘'} within "
                f"{TARGET:.0%})"
            )
        topic = "moved-unthrottled"
        _topic(cluster, topic, int(rates[-1] * (args.window_num + args.seconds + 2)))
        samples = _copy(cluster, tmp, topic, None)
        span = samples[-1][0] - samples[0][0]
        print(f"unthrottled: {samples[-1][1] / 1e6:.1f} MB copied in {span:.1f} s "
              f"({samples[-1][1] / max(span, 1e-3) / 1e6:.1f} MB/s)")  # fmt: skip
    return status
