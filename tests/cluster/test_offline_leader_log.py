"""A leader whose log goes offline (an I/O error in its cleaner's segment swap) tells the
controller (Kafka's log dir event notification), which moves the leadership to an in-sync
follower and takes the replica out of the ISR: acks=all producers carry on, nothing acknowledged
is lost, and the rest of the broker keeps serving.

Three real brokers in this process on the session's ZooKeeper (a chroot per test); broker 1,
the partition's first replica and so its leader, runs its storage through a VFS that fails a
``.swap`` rename once. A confluent-kafka producer (acks=all, idempotent) writes keyed updates
before and after; a confluent-kafka consumer reads the result back, judged latest per key
(:func:`tests.jepsen.compacted_workload.check_latest`).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from sluice.protocol.structs import TopicPartition
from sluice.server.config import Config
from sluice.server.server import Server
from sluice.server.storage.layout import CLEAN_SHUTDOWN_MARKER
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.log_manager import LogManager
from sluice.server.zk.data import LOG_DIR_EVENT_NOTIFICATION_PATH, decode_log_dir_event
from sluice.testing.zookeeper import ZooKeeperServer
from tests.broker_util import read_to_end
from tests.jepsen.compacted_workload import (
    KeyedObservation,
    KeyedSend,
    check_latest,
    keyed_observation,
)
from tests.storage.test_log_manager import BootVFS
from tests.storage.test_swap_io_error import FailingSwapVFS

TOPIC = "compacted"
WAIT_S = 30.0


async def until(condition: Any, what: str, timeout: float = WAIT_S) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not condition():
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for: {what}") from None


def config(tmp_path: Path, zookeeper: str, broker_id: int) -> Config:
    return Config.load(
        None,
        [
            "listeners=PLAINTEXT://127.0.0.1:0",
            f"log.dirs={tmp_path / f'b{broker_id}' / 'data'}",
            f"node.id={broker_id}",
            f"zookeeper.connect={zookeeper}",
            "zookeeper.session.timeout.ms=4000",
            "replica.fetch.wait.max.ms=100",
            "replica.fetch.backoff.ms=50",
            "log.cleaner.backoff.ms=20",
            "log.cleaner.min.cleanable.ratio=0.01",
            "auto.leader.rebalance.enable=false",
            "controlled.shutdown.enable=false",  # the teardown: nothing to hand over
        ],
    )


async def test_an_offline_leader_log_moves_leadership_and_loses_nothing(
    tmp_path: Path, sluice_zookeeper_connect: str, sluice_zookeeper: ZooKeeperServer
) -> None:
    # Broker 1's previous run stopped uncleanly in another boot (a power loss): it registers
    # saying it may have lost unflushed writes, and its registration keeps saying so when it
    # states its offline log there.
    previous = LogManager(tmp_path / "b1" / "data", LogConfig(), vfs=BootVFS("before"))
    previous.open()
    previous.close()
    (tmp_path / "b1" / "data" / CLEAN_SHUTDOWN_MARKER).unlink()
    vfs = RebootedSwapVFS()
    vfs.armed = False  # armed once the topic has data, so only this partition's swap fails
    servers = [
        Server(config(tmp_path, sluice_zookeeper_connect, 1), vfs=vfs),
        Server(config(tmp_path, sluice_zookeeper_connect, 2)),
        Server(config(tmp_path, sluice_zookeeper_connect, 3)),
    ]
    started: list[Server] = []
    try:
        with capture_logs() as captured:
            for server in servers:
                await server.start()
                started.append(server)
            await run(servers, vfs)
            await registers_again_with_its_offline_log(servers, sluice_zookeeper)
    finally:
        for server in reversed(started):
            await server.shutdown()
    reported = [e for e in captured if e["event"] == "log dir failure reported to the controller"]
    assert len(reported) == 1 and reported[0]["partitions"] == [f"{TOPIC}-0"]
    moved = [e for e in captured if e["event"] == "replicas offline after a storage failure"]
    assert moved and moved[0]["broker_id"] == 1 and moved[0]["partitions"] == [f"{TOPIC}-0"]


class RebootedSwapVFS(FailingSwapVFS):
    """:class:`FailingSwapVFS` in a boot after the one that wrote the data dir."""

    def boot_id(self) -> str:
        return "after"


class KeyedUpdates:
    """An acks=all idempotent confluent-kafka producer of keyed updates to partition 0 of
    ``TOPIC``; each send is recorded as a :class:`KeyedSend` (its outcome filled in by the
    delivery report) for :func:`check_latest`."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self.sends: dict[int, KeyedSend] = {}
        self.failures: dict[int, str] = {}
        self.count = 0
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "batch.size": 500, "message.timeout.ms": 30_000,
            "topic.metadata.refresh.interval.ms": 500, "log_level": 3,
        })  # fmt: skip

    def send(self, key: str) -> None:
        i = self.count
        self.count += 1
        self.sends[i] = KeyedSend(i, key, f"v{i}", "unknown")

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                self.sends[i] = KeyedSend(i, key, f"v{i}", "ok", msg.partition(), msg.offset())
            else:
                self.failures[i] = err.name()

        self.producer.produce(TOPIC, f"v{i}".encode(), key.encode(), partition=0,
                              on_delivery=delivered)  # fmt: skip
        self.producer.poll(0)

    async def until_offline(self, server: Server, vfs: FailingSwapVFS) -> None:
        """Updates to 5 keys, 50 first (some data: then the next swap fails), then on until
        ``server``'s cleaner meets the failing rename and its log of the partition is offline."""

        def offline() -> bool:
            assert server.replica_manager is not None
            partition = server.replica_manager.get_partition(TOPIC, 0)
            return partition is not None and partition.log.offline

        async with asyncio.timeout(WAIT_S):
            while self.count < 50:
                self.send(f"k{self.count % 5}")
                await asyncio.sleep(0.005)
            vfs.armed = True
            while not offline():
                self.send(f"k{self.count % 5}")
                await asyncio.sleep(0.005)

    async def new_keys(self, n: int) -> list[KeyedSend]:
        """``n`` updates of new keys, each the only value of its key (so every one must be read
        back), flushed: each must have been acknowledged. Returns them."""
        first = self.count
        for _ in range(n):
            self.send(f"new{self.count}")
        assert await asyncio.to_thread(self.producer.flush, WAIT_S) == 0
        acked = [s for s in self.sends.values() if s.index >= first]
        assert all(s.outcome == "ok" for s in acked), self.failures
        return acked


async def run(servers: list[Server], vfs: FailingSwapVFS) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    one, two, _ = servers
    assert two.cluster is not None and one.replica_manager is not None
    cache = two.cluster.cache
    await until(lambda: len(cache.brokers) == 3, "three brokers")
    bootstrap = ",".join(f"127.0.0.1:{s.port}" for s in servers)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic_config = {"cleanup.policy": "compact", "segment.bytes": "1024",
                    "min.insync.replicas": "2", "min.cleanable.dirty.ratio": "0.01"}  # fmt: skip
    new = NewTopic(TOPIC, 1, replica_assignment=[[1, 2, 3]], config=topic_config)
    await asyncio.to_thread(admin.create_topics([new])[TOPIC].result, 30)
    await until(
        lambda: (s := cache.state(TOPIC, 0)) is not None and s.leader == 1 and len(s.isr) == 3,
        "broker 1 leads with the full ISR",
    )

    updates = KeyedUpdates(bootstrap)
    # Keyed updates to 5 keys until the leader's cleaner meets the failing rename.
    await updates.until_offline(one, vfs)
    before = updates.count
    # The controller moves the leadership to an in-sync follower; broker 1 leaves the ISR.
    await until(
        lambda: (s := cache.state(TOPIC, 0)) is not None and s.leader in (2, 3) and 1 not in s.isr,
        "the controller moved the leadership off the offline log",
    )
    # acks=all goes on with the two in-sync followers (min ISR 2): 40 updates of new keys, each
    # one the only value of its key, so every one must be read back.
    acked_after = await updates.new_keys(40)
    assert sum(s.outcome == "ok" for s in updates.sends.values() if s.index < before) >= 40

    observations = await asyncio.to_thread(read_all, bootstrap)
    report = check_latest(updates.sends.values(), [observations])
    assert report.valid, json.dumps(report.evidence(), indent=1)
    read_keys = {o.key for o in observations}
    assert {s.key for s in acked_after} <= read_keys
    # The broker serves its other partitions on, and the notification was consumed.
    assert one.cluster is not None and one.cluster.kzk is not None
    zk = one.cluster.kzk.zk
    async with asyncio.timeout(WAIT_S):
        while pending := await zk.get_children(LOG_DIR_EVENT_NOTIFICATION_PATH):
            for name in pending:
                data, _ = await zk.get(f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{name}")
                assert decode_log_dir_event(data).broker == 1
            await asyncio.sleep(0.05)


async def registers_again_with_its_offline_log(
    servers: list[Server], zookeeper: ZooKeeperServer
) -> None:
    """Broker 1's registration names its offline log (what a new controller and every broker's
    Metadata read), also when a new ZooKeeper session (the old one expired) registers again:
    the process did not restart, so the log is still offline."""
    one, two, _ = servers
    assert one.cluster is not None and one.cluster.kzk is not None
    assert two.cluster is not None and two.cluster.kzk is not None
    reader = two.cluster.kzk
    offline = (TopicPartition(TOPIC, 0),)
    info = await reader.get_broker(1)
    assert info is not None and info.offline_partitions == offline
    assert info.may_have_lost_unflushed  # its first registration's, kept
    client_id = one.cluster.kzk.zk.client_id
    assert client_id is not None
    await asyncio.to_thread(zookeeper.expire_session, *client_id)
    async with asyncio.timeout(WAIT_S):
        while (again := await reader.get_broker(1)) is None or again.epoch == info.epoch:
            await asyncio.sleep(0.05)
    assert again.offline_partitions == offline
    assert not again.may_have_lost_unflushed  # a later registration lost nothing


def read_all(bootstrap: str) -> list[KeyedObservation]:
    """Every record of the partition, from offset 0 to its high watermark."""
    config = {"bootstrap.servers": bootstrap}
    return [keyed_observation(msg) for msg in read_to_end(config, [(TOPIC, 0)], timeout=WAIT_S)]
