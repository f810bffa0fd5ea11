"""Real Kafka clients against a real 3-broker cluster (subprocesses, a real ZooKeeper): acks=all
to RF=3 topics while the leader is killed (-9) or stopped gracefully; every acknowledged record is
read back exactly once, in order; the replicas are byte-identical below HW afterwards.

The producers run in a thread while the test injects the fault; every send's outcome is recorded
(Jepsen's discipline, ``tests/jepsen/checker.py``), and the final read uses a fresh consumer from
offset 0 after the cluster healed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from sluice.testing.cluster import EmbeddedCluster
from sluice.testing.zookeeper import ZooKeeperServer
from tests.broker_util import read_to_end

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0
RF3 = {"min.insync.replicas": "2", "auto.leader.rebalance.enable": "false"}


def create_topic(cluster: EmbeddedCluster, name: str, partitions: int = 1, rf: int = 3) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(cluster.client_config())
    futures = admin.create_topics([NewTopic(name, partitions, rf)], operation_timeout=30)
    futures[name].result(30)
    for p in range(partitions):
        cluster.wait_for_leader(name, p)


class ConfluentWriter:
    """confluent-kafka producing unique values in a thread, acks=all, recording outcomes."""

    def __init__(self, cluster: EmbeddedCluster, topic: str, idempotent: bool) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failed: list[bytes] = []
        self.sent = 0
        self._stop = threading.Event()
        self._producer = Producer(
            {
                **cluster.client_config(),
                "acks": "all",
                "enable.idempotence": idempotent,
                "linger.ms": 2,
                "message.timeout.ms": 45_000,
                "retry.backoff.ms": 50,
                "topic.metadata.refresh.interval.ms": 500,
            }
        )
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            self.failed.append(msg.value())

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            value = b"v-%06d" % i
            i += 1
            while True:
                try:
                    self._producer.produce(self.topic, value, on_delivery=self._delivered)
                    break
                except BufferError:
                    self._producer.poll(0.05)
            self.sent = i
            self._producer.poll(0)
            time.sleep(0.002)
        self._producer.flush(60)

    def start(self) -> ConfluentWriter:
        self._thread.start()
        return self

    def wait_acked(self, count: int) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while len(self.acked) < count:
            assert time.monotonic() < deadline, f"only {len(self.acked)} acked"
            time.sleep(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(DEADLINE_S + 30)
        assert not self._thread.is_alive()


def read_all(cluster: EmbeddedCluster, topic: str, partitions: int = 1) -> dict[int, list[Any]]:
    """Every record of every partition from offset 0 to its end, with a fresh consumer:
    ``(offset, value)`` by partition."""
    out: dict[int, list[Any]] = {p: [] for p in range(partitions)}
    wanted = [(topic, p) for p in range(partitions)]
    for msg in read_to_end(cluster.client_config(), wanted, timeout=DEADLINE_S):
        out[msg.partition()].append((msg.offset(), msg.value()))
    return out


def check(writer: ConfluentWriter, records: dict[int, list[Any]]) -> None:
    values = [v for part in records.values() for _, v in part]
    for part in records.values():
        offsets = [o for o, _ in part]
        assert offsets == list(range(len(offsets))), "offsets not contiguous from 0"
    lost = [v for v in writer.acked if v not in set(values)]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"
    assert len(values) == len(set(values)), "duplicates"
    where = {v: (p, o) for p, part in records.items() for o, v in part}
    wrong = {v: (at, where[v]) for v, at in writer.acked.items() if where[v] != at}
    assert not wrong, f"acknowledged at one offset, read at another: {list(wrong.items())[:5]}"


def replicas_identical(cluster: EmbeddedCluster, topic: str) -> None:
    """Each live replica's segment bytes agree below the smallest LEO (HW after a quiet spell)."""

    def data(broker_id: int) -> bytes:
        d = cluster.data_dir(broker_id) / f"{topic}-0"
        return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))

    logs = {b: data(b) for b in cluster.ids}
    shortest = min(len(v) for v in logs.values())
    first = logs[cluster.ids[0]][:shortest]
    assert shortest > 0
    assert all(v[:shortest] == first for v in logs.values())
    # And the leader epoch caches agree: the same epochs starting at the same offsets.
    caches = {
        b: (cluster.data_dir(b) / f"{topic}-0" / "leader-epoch-checkpoint").read_text()
        for b in cluster.ids
    }
    assert len(set(caches.values())) == 1, caches


@pytest.mark.sluice_cluster(properties=RF3)
@pytest.mark.parametrize("fault", ["kill", "graceful"])
def test_confluent_acks_all_survives_losing_the_leader(
    sluice_cluster: EmbeddedCluster, fault: str
) -> None:
    """(A leader killed under this writer on SASL_SSL, the clients' and the brokers' own traffic
    alike: test_acks_all_over_sasl_ssl_survives_a_controller_kill, whose killed controller leads
    one of its topic's three partitions.)"""
    cluster = sluice_cluster
    create_topic(cluster, "orders")
    writer = ConfluentWriter(cluster, "orders", idempotent=True).start()
    try:
        writer.wait_acked(200)
        leader = cluster.wait_for_leader("orders")
        if fault == "kill":
            cluster.kill(leader)
        else:
            cluster.stop_broker(leader)
        acked_before = len(writer.acked)
        writer.wait_acked(acked_before + 300)  # the new leader takes writes
        new_leader = cluster.wait_for_leader("orders")
        assert new_leader != leader
        cluster.restart(leader)
    finally:
        writer.stop()
    assert not writer.failed
    records = read_all(cluster, "orders")
    check(writer, records)
    # The restarted broker catches up; then the replicas agree byte for byte.
    end = len(records[0])

    def caught_up() -> bool:
        meta = cluster.metadata(["orders"])
        return len(meta.topics[0].partitions[0].isr_nodes) == 3

    cluster.wait_for(caught_up, "the restarted replica back in the ISR")
    assert end >= len(writer.acked)
    replicas_identical(cluster, "orders")


@pytest.mark.sluice_cluster(properties=RF3, security="sasl_ssl")
def test_acks_all_over_sasl_ssl_survives_a_controller_kill(sluice_cluster: EmbeddedCluster) -> None:
    """The controller killed under an acks=all SASL_SSL producer: another broker is elected and
    moves the dead broker's leaderships (LeaderAndIsr and UpdateMetadata over SASL_SSL, the
    inter-broker listener); the writes go on and nothing acknowledged is lost."""
    cluster = sluice_cluster
    create_topic(cluster, "ctl", partitions=3)
    writer = ConfluentWriter(cluster, "ctl", idempotent=True).start()
    try:
        writer.wait_acked(200)
        controller = int(cluster.metadata().controller_id)
        # it leads a partition too (one each, Kafka's assignment): a leader lost on SASL_SSL
        assert controller in {cluster.wait_for_leader("ctl", p) for p in range(3)}
        cluster.kill(controller)
        cluster.wait_for(
            lambda: cluster.metadata().controller_id not in (-1, controller), "a new controller"
        )
        for p in range(3):
            assert cluster.wait_for_leader("ctl", p) != controller
        acked_before = len(writer.acked)
        writer.wait_acked(acked_before + 300)
        cluster.restart(controller)
    finally:
        writer.stop()
    assert not writer.failed
    check(writer, read_all(cluster, "ctl", partitions=3))


@pytest.mark.sluice_cluster(properties=RF3)
def test_our_own_client_follows_the_leader_through_a_kill(sluice_cluster: EmbeddedCluster) -> None:
    """sluice.client: the producer refreshes metadata on NOT_LEADER_OR_FOLLOWER / a dead
    connection and retries at the new leader (idempotent: written once); the consumer reads
    everything back from the new leader."""
    import asyncio

    from sluice import Consumer, Producer, TopicPartition

    cluster = sluice_cluster
    create_topic(cluster, "ours")

    async def run() -> tuple[list[tuple[bytes, int]], list[tuple[int, bytes]]]:
        acked: list[tuple[bytes, int]] = []
        async with Producer(
            cluster.bootstrap_servers, enable_idempotence=True, retry_backoff_ms=50,
            delivery_timeout_ms=60_000,
        ) as producer:  # fmt: skip
            for i in range(300):
                if i == 100:
                    await asyncio.to_thread(cluster.kill, cluster.wait_for_leader("ours"))
                value = b"o-%04d" % i
                meta = await (await producer.send("ours", value, partition=0))
                acked.append((value, meta.offset))
        read: list[tuple[int, bytes]] = []
        async with Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition("ours", 0)])
            async with asyncio.timeout(DEADLINE_S):
                async for record in consumer:
                    read.append((record.offset, record.value))
                    if len(read) == len(acked):
                        break
        return acked, read

    acked, read = asyncio.run(run())
    assert [v for _, v in read] == [v for v, _ in acked]  # each once, in order
    assert [o for o, _ in read] == list(range(len(acked)))
    assert all(offset == i for i, (_, offset) in enumerate(acked))


@pytest.mark.sluice_cluster(properties=RF3)
def test_cli_creates_replicated_topics_and_shows_under_replicated_partitions(
    sluice_cluster: EmbeddedCluster,
) -> None:
    import re
    import subprocess

    from tests.client.test_cli import COMMAND

    cluster = sluice_cluster

    def sluice(*args: str) -> str:
        result = subprocess.run(
            [*COMMAND, *args, "--bootstrap-server", cluster.bootstrap_servers],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    def rows(text: str) -> list[list[str]]:
        return [re.findall(r"\S+", line.replace("│", " ")) for line in text.splitlines()
                if line.replace("│", " ").split()[:1] == ["cli"]]  # fmt: skip

    sluice("topics", "create", "--topic", "cli", "--partitions", "3", "--replication-factor", "3")
    for p in range(3):
        cluster.wait_for_leader("cli", p)
    described = rows(sluice("topics", "describe", "--topic", "cli"))
    assert [r[1] for r in described] == ["0", "1", "2"]
    assert all(sorted(r[3].split(",")) == ["1", "2", "3"] for r in described)
    assert rows(sluice("topics", "describe", "--under-replicated-partitions")) == []
    cluster.kill(3)
    cluster.wait_for(
        lambda: all(3 not in p.isr_nodes for p in cluster.metadata(["cli"]).topics[0].partitions),
        "broker 3 out of every ISR",
    )
    under = rows(sluice("topics", "describe", "--under-replicated-partitions"))
    assert [r[1] for r in under] == ["0", "1", "2"]
    assert all(r[5] == "3" for r in under)  # the Offline column names the dead broker
    assert all(r[2] != "3" for r in under)  # and it leads nothing


@pytest.mark.sluice_cluster(properties=RF3)
def test_a_consumer_group_keeps_its_offsets_across_a_coordinator_kill(
    sluice_cluster: EmbeddedCluster,
) -> None:
    """confluent-kafka group: offsets committed, the coordinator (leader of the group's
    __consumer_offsets partition) killed -9; the group finds the new coordinator, commits there,
    and a new member resumes exactly after the last committed offset."""
    from confluent_kafka import Consumer, KafkaException, Producer

    from sluice.server.group.offsets_store import partition_for

    cluster = sluice_cluster
    create_topic(cluster, "events")
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(300):
        producer.produce("events", b"e-%03d" % i, partition=0)
    assert producer.flush(30) == 0

    def consumer() -> Any:
        c = Consumer({
            "bootstrap.servers": cluster.bootstrap_servers, "group.id": "g",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
        })  # fmt: skip
        c.subscribe(["events"])
        return c

    def take(c: Any, n: int) -> list[int]:
        offsets: list[int] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(offsets) < n:
            assert time.monotonic() < deadline, offsets[-3:]
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                offsets.append(msg.offset())
        return offsets

    def commit(c: Any) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                c.commit(asynchronous=False)
                return
            except KafkaException:  # coordinator moving: retriable for the application
                assert time.monotonic() < deadline
                time.sleep(0.2)

    first = consumer()
    try:
        assert take(first, 100) == list(range(100))
        commit(first)
        offsets_partitions = len(cluster.metadata(["__consumer_offsets"]).topics[0].partitions)
        coordinator = cluster.wait_for_leader(
            "__consumer_offsets", partition_for("g", offsets_partitions)
        )
        cluster.kill(coordinator)
        assert take(first, 100) == list(range(100, 200))
        commit(first)
    finally:
        first.close()
    second = consumer()
    try:
        assert take(second, 50) == list(range(200, 250))
    finally:
        second.close()


_KAFKA_PYTHON_SENDER = """
import sys
from kafka import KafkaProducer
servers, topic, pause_after = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3])
producer = KafkaProducer(
    bootstrap_servers=servers, acks="all", retries=50, retry_backoff_ms=100,
    request_timeout_ms=10_000, max_in_flight_requests_per_connection=1, metadata_max_age_ms=1000,
)
for i in range(300):
    if i == pause_after:
        print("pause", flush=True)
        sys.stdin.readline()
    value = b"kp-%04d" % i
    offset = producer.send(topic, value, partition=0).get(timeout=60).offset
    print(value.decode(), offset, flush=True)
producer.close(10)
"""


def _kafka_python_send(cluster: EmbeddedCluster, topic: str, kill_after: int) -> dict[bytes, int]:
    """kafka-python in a process of its own: it leaves the sockets of its failed connection
    attempts to the killed broker for the garbage collector, and those ResourceWarnings would
    land in whichever later test happened to collect them."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-c", _KAFKA_PYTHON_SENDER, cluster.bootstrap_servers, topic,
         str(kill_after)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    acked: dict[bytes, int] = {}
    try:
        for line in proc.stdout:
            if line.strip() == "pause":
                cluster.kill(cluster.wait_for_leader(topic))
                proc.stdin.write("go\n")
                proc.stdin.flush()
                continue
            value, offset = line.split()
            acked[value.encode()] = int(offset)
        assert proc.wait(DEADLINE_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdin.close()
        proc.stdout.close()
    assert len(acked) == 300
    return acked


def _aiokafka_send(cluster: EmbeddedCluster, topic: str, kill_after: int) -> dict[bytes, int]:
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def run() -> dict[bytes, int]:
        producer = AIOKafkaProducer(
            bootstrap_servers=cluster.bootstrap_servers, acks="all", retry_backoff_ms=100,
            request_timeout_ms=10_000, metadata_max_age_ms=1000,
        )  # fmt: skip
        await producer.start()
        acked: dict[bytes, int] = {}
        try:
            for i in range(300):
                if i == kill_after:
                    await asyncio.to_thread(cluster.kill, cluster.wait_for_leader(topic))
                value = b"ak-%04d" % i
                deadline = time.monotonic() + DEADLINE_S
                while True:  # aiokafka does not retry a request that timed out: the app does
                    try:
                        meta = await producer.send_and_wait(topic, value, partition=0)
                        break
                    except Exception:
                        assert time.monotonic() < deadline
                        await asyncio.sleep(0.1)
                acked[value] = meta.offset
        finally:
            await producer.stop()
        return acked

    return asyncio.run(run())


@pytest.mark.sluice_cluster(properties=RF3)
@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_python_clients_acks_all_survive_a_leader_kill(
    sluice_cluster: EmbeddedCluster, client: str
) -> None:
    """kafka-python and aiokafka, one acks=all send at a time, the leader killed (-9) after 100:
    every acknowledged record is read back at its offset (a retried record may appear twice
    without idempotence -- these clients' producers here are not idempotent -- but never at a
    different offset than acknowledged, and none is lost)."""
    cluster = sluice_cluster
    create_topic(cluster, "py")
    send = _kafka_python_send if client == "kafka-python" else _aiokafka_send
    acked = send(cluster, "py", 100)
    records = read_all(cluster, "py")[0]
    at = dict(records)
    assert all(at.get(offset) == value for value, offset in acked.items()), "lost or moved"
    assert [o for o, _ in records] == list(range(len(records)))


@pytest.mark.sluice_cluster(properties=RF3)
def test_kcat_lists_the_cluster(sluice_cluster: EmbeddedCluster) -> None:
    import json
    import shutil
    import subprocess

    kcat = shutil.which("kcat")
    assert kcat is not None, "make setup installs kcat"
    cluster = sluice_cluster
    create_topic(cluster, "listed", partitions=3)
    listing = json.loads(
        subprocess.run(
            [kcat, "-L", "-J", "-b", cluster.bootstrap_servers, "-t", "listed"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    )
    assert sorted(b["id"] for b in listing["brokers"]) == [1, 2, 3]
    (topic,) = listing["topics"]
    assert topic["topic"] == "listed"
    for p in topic["partitions"]:
        assert sorted(r["id"] for r in p["replicas"]) == [1, 2, 3]
        assert sorted(r["id"] for r in p["isrs"]) == [1, 2, 3]
        assert p["leader"] == cluster.leader_of("listed", p["partition"])
    assert sorted(p["leader"] for p in topic["partitions"]) == [1, 2, 3]  # Kafka's spread


def test_an_election_after_zookeeper_restarts(
    sluice_zookeeper_factory: Callable[..., ZooKeeperServer],
) -> None:
    """ZooKeeper hangs under a running cluster while the controller is at work (its preferred-
    leader check runs every second), so an event meets connection trouble and is retried -- the
    path that once crashed the controller's event task on a log call. ZooKeeper then restarts
    (sessions survive). A broker that leads a partition dies: the controller from before must
    elect a new leader, and every acknowledged record is read back."""
    from confluent_kafka import Producer
    from kazoo.client import KazooClient

    zookeeper = sluice_zookeeper_factory()
    props = {
        **RF3,
        "zookeeper.session.timeout.ms": "6000",  # sessions outlast the hang and the restart
        "auto.leader.rebalance.enable": "true",
        "leader.imbalance.check.interval.seconds": "1",
    }
    # (``copies``: a reconnect to the restarted server is not stuck for a whole session.)
    with EmbeddedCluster(
        3, zookeeper_connect=zookeeper.connect_string("/c", copies=4), properties=props
    ) as cluster:
        create_topic(cluster, "through-restart", partitions=3)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
        outcomes: list[Any] = []
        for i in range(300):
            producer.produce("through-restart", b"v-%04d" % i, partition=i % 3,
                             on_delivery=lambda e, _m: outcomes.append(e))  # fmt: skip
        assert producer.flush(30) == 0 and outcomes == [None] * 300
        controller = cluster.metadata().controller_id
        log_path = cluster.broker(controller).log_path
        assert log_path is not None
        zookeeper.pause()
        try:
            cluster.wait_for(
                lambda: "connection trouble; retrying the event" in log_path.read_text(),
                "the controller retries an event after losing its connection",
            )
        finally:
            zookeeper.restart()
        zk = KazooClient(hosts=zookeeper.connect_string("/c"))
        zk.start(timeout=30)
        try:
            cluster.wait_for(
                lambda: (
                    sorted(zk.get_children("/brokers/ids")) == ["1", "2", "3"]
                    and zk.exists("/controller") is not None
                ),
                "every broker registered and a controller, after the restart",
            )
        finally:
            zk.stop()
            zk.close()
        assert cluster.metadata().controller_id == controller  # the same one lived through it
        # A partition led by another broker than the controller: the surviving controller's
        # event task is what must elect its new leader.
        partition, victim = next(
            (p, leader)
            for p in range(3)
            if (leader := cluster.wait_for_leader("through-restart", p)) != controller
        )
        cluster.kill(victim)
        new_leader = cluster.wait_for_leader("through-restart", partition)
        assert new_leader not in (victim, -1)
        records = read_all(cluster, "through-restart", partitions=3)
        assert sorted(v for part in records.values() for _, v in part) == [
            b"v-%04d" % i for i in range(300)
        ]
