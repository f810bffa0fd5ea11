"""Local partitions ZooKeeper has no record of are kept (Kafka's stray logs), never deleted; a
topic deleted through DeleteTopics is still deleted everywhere, also on a broker that was down.

Real brokers (in this process, each with its own controller campaigning) on the session's
ZooKeeper, a chroot per test. ``make cluster`` once lost its ZooKeeper state at every stop, and
the brokers, finding no topics in ZooKeeper, deleted every partition they held.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.server.server import Server
from sluice.testing.zookeeper import ZooKeeperServer
from tests.broker.test_follower_fetch import produce_request
from tests.broker.test_server import DELETE_TOPICS, PRODUCE, batch, start_server
from tests.broker_util import WireClient
from tests.cluster.test_cluster_member import create, metadata, until

SETTINGS = (
    "zookeeper.session.timeout.ms=2000",
    "replica.fetch.wait.max.ms=100",
    "replica.fetch.backoff.ms=50",
    "controlled.shutdown.retry.backoff.ms=200",
)


class Brokers:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.servers: dict[int, Server] = {}

    async def start(self, broker_id: int, connect: str) -> Server:
        server = await start_server(
            self.tmp_path / f"b{broker_id}",
            f"node.id={broker_id}",
            f"zookeeper.connect={connect}",
            *SETTINGS,
        )
        self.servers[broker_id] = server
        return server

    async def stop(self, broker_id: int) -> None:
        await self.servers.pop(broker_id).shutdown()

    def data(self, broker_id: int) -> Path:
        return self.tmp_path / f"b{broker_id}" / "data"

    def partition_dirs(self, broker_id: int, topic: str) -> list[str]:
        """The names of ``topic``'s directories here, ``*-delete`` ones included."""
        return sorted(p.name for p in self.data(broker_id).glob(f"{topic}-*") if p.is_dir())

    def hosted(self, broker_id: int, topic: str) -> list[int]:
        logs = self.servers[broker_id].log_manager
        assert logs is not None
        return logs.hosted_partitions(topic)

    async def client(self, broker_id: int) -> WireClient:
        return await WireClient.connect("127.0.0.1", self.servers[broker_id].port)


@pytest.fixture
async def brokers(tmp_path: Path, sluice_zookeeper_connect: str) -> AsyncIterator[Brokers]:
    """(Set up after the test's chroot, so its brokers stop before the chroot is removed.)"""
    b = Brokers(tmp_path)
    try:
        yield b
    finally:
        for broker_id in list(b.servers):
            await b.stop(broker_id)


async def produce(client: WireClient, topic: str, n: int) -> None:
    resp = await client.request(PRODUCE, 8, produce_request(topic, batch(n), acks=-1))
    assert resp.responses[0].partition_responses[0].error_code == 0


async def wait_led_here(brokers: Brokers, broker_id: int, topic: str, count: int) -> None:
    def led() -> bool:
        rm = brokers.servers[broker_id].replica_manager
        assert rm is not None
        parts = [rm.get_partition(topic, p) for p in range(count)]
        return all(p is not None and p.is_leader for p in parts)

    await until(led, f"broker {broker_id} leads {topic}")


async def test_a_fresh_zookeeper_does_not_make_a_broker_delete_its_partitions(
    brokers: Brokers, sluice_zookeeper_connect: str
) -> None:
    cluster_a = f"{sluice_zookeeper_connect}/a"
    await brokers.start(1, cluster_a)
    client = await brokers.client(1)
    try:
        assert (await create(client, "kept", 2, 1, timeout_ms=10_000)).error_code == 0
        await wait_led_here(brokers, 1, "kept", 2)
        await produce(client, "kept", 5)
    finally:
        await client.close()
    await brokers.stop(1)
    assert brokers.partition_dirs(1, "kept") == ["kept-0", "kept-1"]

    # The same broker on an empty ZooKeeper (a reset one, or zookeeper.connect gone wrong).
    with capture_logs() as logs:
        await brokers.start(1, f"{sluice_zookeeper_connect}/fresh")
    assert brokers.partition_dirs(1, "kept") == ["kept-0", "kept-1"]  # nothing renamed -delete
    (warning,) = [e for e in logs if e["event"].startswith("stray partitions kept")]
    assert warning["log_level"] == "warning"
    assert warning["partitions"] == ["kept-0", "kept-1"]
    assert "no topics at all" in warning["reason"]
    client = await brokers.client(1)
    try:  # not served: the cluster has no such topic
        resp = await metadata(client, "kept")
        assert resp.topics[0].error_code == errors.UnknownTopicOrPartition.code
    finally:
        await client.close()
    await brokers.stop(1)

    # Back on its own cluster, the topic is served with every record.
    await brokers.start(1, cluster_a)
    await wait_led_here(brokers, 1, "kept", 2)
    logs_here = brokers.servers[1].log_manager
    assert logs_here is not None
    log = logs_here.get_log("kept", 0)
    assert log is not None and log.log_end_offset == 5


async def test_a_topic_unknown_to_a_zookeeper_with_other_topics_is_kept_too(
    brokers: Brokers, sluice_zookeeper_connect: str
) -> None:
    await brokers.start(1, f"{sluice_zookeeper_connect}/a")
    client = await brokers.client(1)
    try:
        assert (await create(client, "mine", 1, 1, timeout_ms=10_000)).error_code == 0
        await wait_led_here(brokers, 1, "mine", 1)
    finally:
        await client.close()
    await brokers.stop(1)
    await brokers.start(2, f"{sluice_zookeeper_connect}/b")  # another cluster, with a topic
    client = await brokers.client(2)
    try:
        assert (await create(client, "theirs", 1, 1, timeout_ms=10_000)).error_code == 0
    finally:
        await client.close()
    await brokers.stop(2)
    with capture_logs() as logs:
        await brokers.start(1, f"{sluice_zookeeper_connect}/b")
    assert brokers.partition_dirs(1, "mine") == ["mine-0"]
    (warning,) = [e for e in logs if e["event"].startswith("stray partitions kept")]
    assert warning["partitions"] == ["mine-0"]
    assert warning["reason"] == "ZooKeeper has no record of these topics"


async def test_a_topic_deleted_while_a_replicas_broker_is_down_is_deleted_when_it_returns(
    brokers: Brokers, sluice_zookeeper_connect: str
) -> None:
    for broker_id in (1, 2):
        await brokers.start(broker_id, sluice_zookeeper_connect)
    c1 = await brokers.client(1)
    try:
        member = brokers.servers[1].cluster
        assert member is not None
        await until(lambda: len(member.cache.brokers) == 2, "broker 1 sees both")
        assert (await create(c1, "doomed", 1, 2, timeout_ms=10_000)).error_code == 0

        def both_host() -> bool:
            return all(brokers.hosted(b, "doomed") == [0] for b in (1, 2))

        await until(both_host, "both brokers host the partition")
        await brokers.stop(2)
        req = m.DeleteTopicsRequest(topic_names=["doomed"], timeout_ms=1000)
        resp: Any = await c1.request(DELETE_TOPICS, 3, req)
        # Kafka: ineligible for deletion while a replica's broker is down; the request stays.
        assert resp.responses[0].error_code == errors.RequestTimedOut.code
        assert brokers.hosted(1, "doomed") == [0]
        assert brokers.partition_dirs(2, "doomed") == ["doomed-0"]
        await brokers.start(2, sluice_zookeeper_connect)

        def deleted_everywhere() -> bool:
            return all(
                not brokers.hosted(b, "doomed")
                and "doomed-0" not in brokers.partition_dirs(b, "doomed")
                for b in (1, 2)
            )

        await until(deleted_everywhere, "deleted on both brokers once broker 2 is back")
        resp = await metadata(c1, "doomed")
        assert resp.topics[0].error_code == errors.UnknownTopicOrPartition.code
    finally:
        await c1.close()


def advance_zxid(zookeeper: ZooKeeperServer, past: int) -> None:
    """Write to ``zookeeper`` until its last zxid is beyond ``past`` (bounded)."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper.hosts)
    client.start(timeout=10)
    try:
        client.ensure_path("/zxid-padding")
        for _ in range(1000):
            if int(zookeeper.srvr()["Zxid"], 16) > past:
                return
            for _ in range(50):
                client.set("/zxid-padding", b"")
        raise AssertionError(f"zxid not beyond {past:#x}")
    finally:
        client.stop()
        client.close()


async def test_a_zookeeper_wiped_under_a_running_broker_does_not_make_it_delete_its_partitions(
    brokers: Brokers, sluice_zookeeper_factory: Callable[..., ZooKeeperServer]
) -> None:
    """ZooKeeper restarted on an empty data dir: the broker's session is gone (a new one is
    made), /brokers/topics is empty. The broker sees the /cluster/id it joined is missing and
    keeps its partitions instead of taking every topic for deleted."""
    zookeeper = sluice_zookeeper_factory()
    server = await brokers.start(1, zookeeper.connect_string())
    client = await brokers.client(1)
    try:
        assert (await create(client, "kept", 2, 1, timeout_ms=10_000)).error_code == 0
        await wait_led_here(brokers, 1, "kept", 2)
        await produce(client, "kept", 5)
    finally:
        await client.close()
    member = server.cluster
    assert member is not None
    old_zxid = int(zookeeper.srvr()["Zxid"], 16)
    with capture_logs() as logs:
        await asyncio.to_thread(zookeeper.kill)
        shutil.rmtree(zookeeper.data_dir)
        zookeeper.data_dir.mkdir()
        await asyncio.to_thread(zookeeper.restart)
        # A client that has seen a later zxid than the server's is refused (it must "try
        # another server"): the broker reconnects once the new ZooKeeper has done as many
        # transactions, and then learns its session is gone.
        await asyncio.to_thread(advance_zxid, zookeeper, old_zxid)
        await until(lambda: "kept" not in member.cache.assignments, "the topic gone from the cache")
        assert brokers.partition_dirs(1, "kept") == ["kept-0", "kept-1"]  # none renamed -delete
        await until(
            lambda: any(e["event"] == "re-registered" for e in logs), "registered again", 30
        )
    (error,) = [e for e in logs if e["event"].startswith("ZooKeeper does not hold")]
    assert error["zookeeper_cluster_id"] is None and error["cluster_id"] == member.cluster_id
    assert brokers.partition_dirs(1, "kept") == ["kept-0", "kept-1"]
    logs_here = server.log_manager
    assert logs_here is not None
    log = logs_here.get_log("kept", 0)
    assert log is not None and log.log_end_offset == 5
    await brokers.stop(1)  # before its ZooKeeper stops
