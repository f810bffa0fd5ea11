"""An offline replica survives a controller failover: a broker's log goes offline, the controller
is killed (-9) and another elected, then the partition's leader is killed: the new controller,
which never saw the log dir event notification, still does not elect the offline replica (it
reads it in the broker's registration), Metadata lists it in ``offline_replicas`` throughout
(kafka-python), DescribeLogDirs lists it in no dir, and once the leader is back nothing
acknowledged is lost.

Brokers 1-3 are processes (:class:`~sluice.testing.cluster.EmbeddedCluster`, what kill -9
needs) on the session's ZooKeeper (a chroot per test); broker 4 runs in this process, its
storage through a VFS that fails a cleaner's ``.swap`` rename once (how a log goes offline).
The partition has two replicas, the leader L (neither the controller nor broker 4) and broker 4,
and allows unclean elections: once broker 4 has left the ISR, that is the only way a
controller could elect it, and the one a controller that forgot it is offline takes when L
dies (broker 4 is then the only live replica). Kafka's controller leaves such a partition
without a leader (an offline replica is never a candidate), and so must ours.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sluice.server.config import Config
from sluice.server.server import Server
from sluice.testing.cluster import TEST_PROPERTIES, EmbeddedCluster
from tests.cluster.test_offline_leader_log import TOPIC, WAIT_S, KeyedUpdates, read_all, until
from tests.jepsen.compacted_workload import check_latest
from tests.storage.test_swap_io_error import FailingSwapVFS

pytestmark = pytest.mark.slow

OFFLINE = 4
PLAIN = "plain"


def in_process_config(tmp_path: Path, zookeeper: str) -> Config:
    return Config.load(
        None,
        [
            "listeners=PLAINTEXT://127.0.0.1:0",
            f"log.dirs={tmp_path / 'b4' / 'data'}",
            f"node.id={OFFLINE}",
            f"zookeeper.connect={zookeeper}",
            *(f"{k}={v}" for k, v in TEST_PROPERTIES.items()),
            "log.cleaner.backoff.ms=20",
            "log.cleaner.min.cleanable.ratio=0.01",
            "auto.leader.rebalance.enable=false",
            "controlled.shutdown.enable=false",  # the teardown: nothing to hand over
        ],
    )


async def test_a_new_controller_never_elects_the_offline_replica(
    tmp_path: Path, sluice_zookeeper_connect: str
) -> None:
    cluster = EmbeddedCluster(
        3,
        zookeeper_connect=sluice_zookeeper_connect,
        properties={"auto.leader.rebalance.enable": "false"},
        data_root=tmp_path / "cluster",
    )
    await asyncio.to_thread(cluster.start_sync)
    vfs = FailingSwapVFS()
    vfs.armed = False  # armed once the topic has data, so only this partition's swap fails
    offline = Server(in_process_config(tmp_path, sluice_zookeeper_connect), vfs=vfs)
    try:
        await offline.start()
        await run(cluster, offline, vfs)
    finally:
        await offline.shutdown()
        await asyncio.to_thread(cluster.stop_sync)


def partition_metadata(bootstrap: str, topic: str) -> dict[str, Any]:
    """Partition 0 of ``topic`` as kafka-python's admin client describes it (Metadata)."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        (described,) = admin.describe_topics([topic])
        (partition,) = described["partitions"]
        return dict(partition)
    finally:
        admin.close()


async def described_until(
    bootstrap: str, check: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    """Partition 0 of the topic as kafka-python describes it, once ``check`` holds (bounded:
    each broker hears of a change through its own ZooKeeper watches)."""
    described: dict[str, Any] = {}
    try:
        async with asyncio.timeout(WAIT_S):
            while not check(described := await asyncio.to_thread(partition_metadata, bootstrap,
                                                                 TOPIC)):  # fmt: skip
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for: {what}; last {described}") from None
    return described


def log_dirs(bootstrap: str, broker: int) -> list[dict[str, Any]]:
    """DescribeLogDirs of ``broker`` through kafka-python's admin client."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        (answer,) = admin.describe_log_dirs(brokers=[broker])
        return list(answer["log_dirs"])
    finally:
        admin.close()


async def run(cluster: EmbeddedCluster, offline: Server, vfs: FailingSwapVFS) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    assert offline.cluster is not None and offline.replica_manager is not None
    cache = offline.cluster.cache
    await until(lambda: len(cache.brokers) == 4 and cache.controller_id > 0, "four brokers")

    def all_see_four() -> bool:
        return all(len(cluster.metadata(via=b).brokers) == 4 for b in cluster.ids)

    await asyncio.to_thread(cluster.wait_for, all_see_four, "every broker sees broker 4")
    controller = cache.controller_id
    assert controller != OFFLINE  # the processes started first
    leader = min({1, 2, 3} - {controller})
    bootstrap = f"{cluster.bootstrap_servers},127.0.0.1:{offline.port}"
    via_leader = f"127.0.0.1:{cluster.broker(leader).port}"

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic_config = {"cleanup.policy": "compact", "segment.bytes": "1024",
                    "min.cleanable.dirty.ratio": "0.01", "min.insync.replicas": "1",
                    "unclean.leader.election.enable": "true"}  # fmt: skip
    futures = admin.create_topics([
        NewTopic(TOPIC, 1, replica_assignment=[[leader, OFFLINE]], config=topic_config),
        NewTopic(PLAIN, 1, replica_assignment=[[leader, OFFLINE]]),
    ])  # fmt: skip
    for future in futures.values():
        await asyncio.to_thread(future.result, 30)
    await until(
        lambda: (s := cache.state(TOPIC, 0)) is not None and s.isr == (leader, OFFLINE),
        "the leader with broker 4 in sync",
    )

    updates = KeyedUpdates(bootstrap)
    # Keyed updates to 5 keys until broker 4's cleaner meets the failing rename.
    await updates.until_offline(offline, vfs)
    await until(
        lambda: (s := cache.state(TOPIC, 0)) is not None and s.isr == (leader,),
        "the controller took broker 4 out of the ISR",
    )
    # Every broker's Metadata lists the offline replica (here: the leader's, a process).
    described = await described_until(
        via_leader, lambda d: d["offline_replicas"] == [OFFLINE], "broker 4's replica offline"
    )
    assert described["leader_id"] == leader and described["isr_nodes"] == [leader], described

    # The controller dies (kill -9) and another is elected: it never saw the notice.
    await asyncio.to_thread(cluster.kill, controller)
    await until(lambda: cache.controller_id not in (-1, controller), "a new controller")
    # acks=all goes on with the leader alone in the ISR (min.insync.replicas=1): 30 updates
    # of new keys, each the only value of its key, so every one must be read back.
    before = updates.count
    acked_after = await updates.new_keys(30)

    # The leader dies: broker 4 is the only live replica and unclean elections are allowed,
    # but its log is offline: the new controller leaves the partition without a leader.
    epoch = cache.state(TOPIC, 0).leader_epoch  # type: ignore[union-attr]
    await asyncio.to_thread(cluster.kill, leader)
    await until(
        lambda: (s := cache.state(TOPIC, 0)) is not None and s.leader_epoch > epoch,
        "the new controller's election",
    )
    state = cache.state(TOPIC, 0)
    assert state is not None and (state.leader, state.isr) == (-1, (leader,)), state
    described = await described_until(
        f"127.0.0.1:{offline.port}",
        lambda d: sorted(d["offline_replicas"]) == sorted([leader, OFFLINE]),
        "both replicas offline",
    )
    assert described["leader_id"] == -1, described

    # DescribeLogDirs: broker 4's dir answers no error and lists its online log only.
    dirs = await asyncio.to_thread(log_dirs, f"127.0.0.1:{offline.port}", OFFLINE)
    (log_dir,) = dirs
    assert log_dir["error_code"] == 0
    listed = {(t["name"], p["partition_index"]) for t in log_dir["topics"] for p in t["partitions"]}
    assert (PLAIN, 0) in listed and (TOPIC, 0) not in listed, log_dir

    # The leader is back (its data kept: kill -9 loses nothing the OS had): it leads again,
    # and every acknowledged update is there.
    await asyncio.to_thread(cluster.restart, leader)
    await until(
        lambda: (s := cache.state(TOPIC, 0)) is not None and s.leader == leader,
        "the old leader leads again",
    )
    survivors = f"127.0.0.1:{cluster.broker(leader).port}"
    observations = await asyncio.to_thread(read_all, survivors)
    report = check_latest(updates.sends.values(), [observations])
    assert report.valid, json.dumps(report.evidence(), indent=1)
    assert {s.key for s in acked_after} <= {o.key for o in observations}
    assert sum(s.outcome == "ok" for s in updates.sends.values() if s.index < before) >= 50
