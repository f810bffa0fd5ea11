"""A follower whose local log goes offline (an I/O error in its cleaner's segment swap) stops
fetching that partition only (Kafka's ``markPartitionFailed``): its other partitions from the
same leader replicate on, and the error is logged once, not at every fetch.

Two real brokers in this process on the session's ZooKeeper (a chroot per test), each with its
controller campaigning; the follower's storage goes through a VFS that fails a ``.swap``
rename once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from sluice.protocol import messages as m
from sluice.protocol import records as rec
from sluice.server.config import Config
from sluice.server.server import Server
from tests.broker.test_server import produce
from tests.broker_util import WireClient
from tests.storage.test_swap_io_error import FailingSwapVFS

NOW = 1_700_000_000_000
WAIT_S = 30.0


async def until(condition: Any, what: str) -> None:
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.02)
    assert condition(), what


async def test_an_offline_follower_log_stops_only_its_own_fetching(
    tmp_path: Path, sluice_zookeeper_connect: str
) -> None:
    def config(broker_id: int) -> Config:
        return Config.load(
            None,
            [
                "listeners=PLAINTEXT://127.0.0.1:0",
                f"log.dirs={tmp_path / f'b{broker_id}' / 'data'}",
                f"node.id={broker_id}",
                f"zookeeper.connect={sluice_zookeeper_connect}",
                "zookeeper.session.timeout.ms=2000",
                "replica.fetch.wait.max.ms=100",
                "replica.fetch.backoff.ms=50",
                # the leader stops last, its follower gone: its controlled shutdown cannot move
                # anything and retries (Kafka's 5 s backoff, 10 s in all)
                "controlled.shutdown.retry.backoff.ms=100",
                "log.cleaner.backoff.ms=20",
                "log.cleaner.min.cleanable.ratio=0.01",
            ],
        )

    leader = Server(config(1))
    follower_vfs = FailingSwapVFS()
    follower = Server(config(2), vfs=follower_vfs)
    await leader.start()
    try:
        with capture_logs() as captured:
            await follower.start()
            try:
                await run(leader, follower, follower_vfs)
            finally:
                await follower.shutdown()
    finally:
        await leader.shutdown()
    stopped = [e for e in captured if str(e["event"]).startswith("replica fetching stopped")]
    assert len(stopped) == 1 and stopped[0]["topic"] == "compacted"


async def run(leader: Server, follower: Server, vfs: FailingSwapVFS) -> None:
    client = await WireClient.connect("127.0.0.1", leader.port)
    assert leader.cluster is not None
    cache = leader.cluster.cache
    await until(lambda: len(cache.brokers) == 2, "two brokers")
    topic_cls = m.CreateTopicsRequest.CreatableTopic
    config_cls = topic_cls.CreatableTopicConfig
    compacted = [config_cls(name="cleanup.policy", value="compact"),
                 config_cls(name="segment.bytes", value="300")]  # fmt: skip
    req = m.CreateTopicsRequest(
        topics=[
            topic_cls(name=name, num_partitions=-1, replication_factor=-1, configs=configs,
                      assignments=[topic_cls.CreatableReplicaAssignment(
                          partition_index=0, broker_ids=[1, 2])])
            for name, configs in (("compacted", compacted), ("plain", []))
        ],
        timeout_ms=10_000,
        validate_only=False,
    )  # fmt: skip
    created = await client.request(19, 4, req)
    assert [t.error_code for t in created.topics] == [0, 0]
    assert follower.replica_manager is not None
    follower_replicas = follower.replica_manager

    def follower_log(topic: str) -> Any:
        partition = follower_replicas.get_partition(topic, 0)
        return None if partition is None else partition.log

    await until(lambda: follower_log("compacted") is not None, "follower replica created")
    async with asyncio.timeout(WAIT_S):
        i = 0
        while not follower_log("compacted").offline:
            records = rec.build_batch([(NOW + i, b"k%d" % (i % 4), b"v%d" % i)])
            response = await produce(client, "compacted", records)
            assert response.error_code in (0, 6), response  # 6: the leader not elected yet
            i += 1
            await asyncio.sleep(0.01)
    assert not vfs.armed
    # The follower's other partition from the same leader replicates on.
    leader_replicas = leader.replica_manager
    assert leader_replicas is not None
    for j in range(20):  # the compacted partition keeps being written at the leader too
        records = rec.build_batch([(NOW + j, b"x", b"y%d" % j)])
        assert (await produce(client, "plain", records)).error_code == 0
        records = rec.build_batch([(NOW + j, b"k0", b"w%d" % j)])
        assert (await produce(client, "compacted", records)).error_code == 0
    leader_plain = leader_replicas.get_partition("plain", 0)
    assert leader_plain is not None and leader_plain.log.log_end_offset == 20
    await until(
        lambda: follower_log("plain") is not None and follower_log("plain").log_end_offset == 20,
        "the follower's other partition stopped replicating",
    )
    await client.close()
