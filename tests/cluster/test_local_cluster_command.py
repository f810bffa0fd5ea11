"""``make cluster`` (``python -m sluice.testing.cluster``): three brokers and a ZooKeeper on fixed
local ports until interrupted, data kept, each broker serving Prometheus metrics on a port of its
own; a second start finds its topics again."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from sluice.testing.cluster import EmbeddedCluster
from tests.broker_util import free_port

pytestmark = pytest.mark.slow


def start(
    data: Path, port: int, metrics_port: int | None = None, cwd: Path | None = None
) -> tuple[subprocess.Popen[str], list[str]]:
    """The command (as `make cluster` runs it, in ``cwd``) and its first lines: bootstrap
    servers, ZooKeeper, data dir and, with ``metrics_port``, one metrics URL per broker."""
    metrics = ["--metrics-port", str(metrics_port)] if metrics_port is not None else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "sluice.testing.cluster", "--brokers", "3",
         "--port", str(port), "--data", str(data), *metrics],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=cwd,
    )  # fmt: skip
    assert proc.stdout is not None
    expected = 6 if metrics else 3
    lines: list[str] = []
    deadline = time.monotonic() + 90
    while len(lines) < expected and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.strip())
    assert len(lines) == expected, lines
    return proc, lines


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        assert proc.wait(90) == 0
    finally:
        if proc.stdout is not None:
            proc.stdout.close()


def three_free_ports() -> int:
    """A port p with p, p+1 and p+2 free a moment ago."""
    for _ in range(50):
        port = free_port()
        socks = []
        try:
            for i in range(3):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", port + i))
            return port
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no three consecutive free ports")


def test_local_cluster_runs_until_interrupted_and_keeps_its_data(tmp_path: Path) -> None:
    """Started as `make cluster` starts it (``--data ./cluster-data``, relative), stopped,
    started again: the topic and its records are there (ZooKeeper's state too, which once went
    to the JVM's scratch directory and was lost: the brokers then deleted every topic)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    port = three_free_ports()
    metrics_port = three_free_ports()
    data = tmp_path / "cluster-data"
    proc, lines = start(Path("./cluster-data"), port, metrics_port, cwd=tmp_path)
    sent = [f"record-{i}".encode() for i in range(20)]
    try:
        servers = ",".join(f"127.0.0.1:{port + i}" for i in range(3))
        assert lines[0] == f"bootstrap.servers={servers}"
        urls = [f"http://127.0.0.1:{metrics_port + i}/metrics" for i in range(3)]
        assert lines[3:] == [f"metrics: {url}" for url in urls]
        admin = AdminClient({"bootstrap.servers": servers})
        admin.create_topics([NewTopic("kept", 2, 3)])["kept"].result(30)
        meta = admin.list_topics(timeout=30)
        assert sorted(meta.brokers) == [1, 2, 3]
        # every broker serves its own metrics: exactly one is the active controller
        controllers = []
        for url in urls:
            with urllib.request.urlopen(url, timeout=30) as response:
                text = response.read().decode()
            (value,) = re.findall(
                r"^kafka_controller_kafkacontroller_activecontrollercount (\S+)$", text, re.M
            )
            controllers.append(float(value))
        assert sorted(controllers) == [0.0, 0.0, 1.0]
        producer = Producer({"bootstrap.servers": servers, "acks": "all"})
        delivered: list[Any] = []
        for value in sent:
            producer.produce(
                "kept", value, partition=0, on_delivery=lambda e, _m: delivered.append(e)
            )
        assert producer.flush(30) == 0
        assert delivered == [None] * len(sent)
    finally:
        stop(proc)
    assert sorted(p.name for p in data.iterdir()) == [
        "broker-1",
        "broker-2",
        "broker-3",
        "zookeeper",
    ]
    proc, _ = start(Path("./cluster-data"), port, cwd=tmp_path)
    try:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        topics = admin.list_topics(timeout=30).topics
        assert "kept" in topics and len(topics["kept"].partitions) == 2
        assert read_partition_0(f"127.0.0.1:{port}", "kept", len(sent)) == sent
    finally:
        stop(proc)
    assert not any(p.name.endswith("-delete") for p in data.glob("broker-*/*"))


def read_partition_0(servers: str, topic: str, count: int) -> list[bytes]:
    """The first ``count`` values of ``topic``-0 from the start (bounded: 60 s)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": servers, "group.id": "kept-reader", "enable.auto.commit": False}
    )
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 60
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
    finally:
        consumer.close()
    return values


def test_ports_must_match_the_size() -> None:
    with pytest.raises(ValueError, match="3 brokers need 3 ports"):
        EmbeddedCluster(3, ports=[1, 2])
