"""A broker started on a data dir an older Sluice wrote: its ``__consumer_offsets`` was created
``cleanup.policy=delete`` (the group coordinator kept it bounded by re-appending live offsets,
a workaround now gone). The broker switches it to ``compact`` -- standalone in its topic
metadata, in a cluster in ZooKeeper's ``/config/topics/__consumer_offsets`` -- logs it once,
serves every committed offset, and the log cleaner then compacts the partition.

Real brokers in this process on 127.0.0.1 (the cluster one on the session's ZooKeeper, a
chroot per test), a wire client for the group APIs.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from sluice.protocol import messages as m
from sluice.server.group.offsets_store import (
    OFFSETS_TOPIC,
    OffsetAndMetadata,
    OffsetRecord,
    offset_commit_record,
)
from sluice.server.server import Server
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.log_manager import LogManager
from tests.broker.test_server import start_server
from tests.broker_util import WireClient
from tests.group.test_groups import commit, fetch_offsets
from tests.group.test_offsets_store import OLD_OFFSETS_CONFIG, store_for

WAIT_S = 30.0
SWITCHED = "switched to cleanup.policy=compact"
#: Cleaner on a short backoff; groups without the initial delay.
SETTINGS = ("log.cleaner.backoff.ms=50", "group.initial.rebalance.delay.ms=0")


async def until(condition: Callable[[], Any], what: str) -> None:
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.02)
    assert condition(), what


def switched(logs: list[dict[str, Any]]) -> int:
    return sum(1 for e in logs if SWITCHED in str(e.get("event")))


def offset_records(server: Server) -> int:
    """Offset-commit records left in __consumer_offsets (what replay reads)."""
    assert server.group_coordinator is not None
    return sum(1 for r in server.group_coordinator.store.replay() if isinstance(r, OffsetRecord))


def cleaned(server: Server) -> bool:
    logs = server.log_manager
    assert logs is not None and logs.cleaner is not None
    return logs.cleaner.checkpoints.get((OFFSETS_TOPIC, 0), 0) > 0


def write_old_data_dir(data: Path, commits: int) -> dict[tuple[str, int], int]:
    """What an older Sluice left: topic ``t`` and a delete-policy offsets topic holding
    ``commits`` commits of group ``g`` (three partitions each)."""
    manager = LogManager(data, LogConfig())
    manager.open()
    try:
        manager.create_topic("t", 3)
        manager.create_topic(OFFSETS_TOPIC, 1, OLD_OFFSETS_CONFIG)
        store = store_for(manager, 1)
        for i in range(commits):
            records = [
                offset_commit_record("g", "t", p, OffsetAndMetadata(i * 10 + p, -1, "", i))
                for p in range(3)
            ]
            assert store.write(0, records, -1).error == 0  # type: ignore[union-attr]
    finally:
        manager.close()
    return {("t", p): (commits - 1) * 10 + p for p in range(3)}


async def test_a_standalone_broker_compacts_an_older_delete_offsets_topic(tmp_path: Path) -> None:
    expected = write_old_data_dir(tmp_path / "data", 200)
    for start in range(2):
        with capture_logs() as logs:
            server = await start_server(tmp_path, *SETTINGS)
        try:
            assert switched(logs) == (1 if start == 0 else 0)
            assert server.log_manager is not None
            assert server.log_manager.topic_overrides(OFFSETS_TOPIC) == {
                **OLD_OFFSETS_CONFIG, "cleanup.policy": "compact"
            }  # fmt: skip
            client = await WireClient.connect("127.0.0.1", server.port)
            got = await fetch_offsets(client, "g")
            assert {k: o for k, (o, _meta) in got.items()} == expected
            await client.close()
            # 600 records over ~50 segments: the cleaner leaves the live keys and the active
            # segment's records.
            await until(functools.partial(cleaned, server), "__consumer_offsets not cleaned")
            assert offset_records(server) < 100
        finally:
            await server.shutdown()


async def test_a_cluster_broker_compacts_an_older_delete_offsets_topic_in_zookeeper(
    tmp_path: Path, sluice_zookeeper_connect: str
) -> None:
    settings = (
        "node.id=1",
        f"zookeeper.connect={sluice_zookeeper_connect}",
        "zookeeper.session.timeout.ms=2000",
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=1",  # as the standalone test: group g in partition 0
        *SETTINGS,
    )

    async def commit_until_served(client: WireClient, offsets: dict[tuple[str, int], int]) -> None:
        """Commit, retrying while the coordinator is being created or loaded."""
        async with asyncio.timeout(WAIT_S):
            while set((await commit(client, -1, "", offsets)).values()) != {0}:
                # FindCoordinator creates the offsets topic (Kafka's createInternalTopic).
                await client.request(10, 1, m.FindCoordinatorRequest(key="g", key_type=0))
                await asyncio.sleep(0.05)

    server = await start_server(tmp_path, *settings)
    try:
        client = await WireClient.connect("127.0.0.1", server.port)
        req = m.CreateTopicsRequest(
            topics=[m.CreateTopicsRequest.CreatableTopic(
                name="t", num_partitions=3, replication_factor=1, configs=[])],
            timeout_ms=10_000, validate_only=False,
        )  # fmt: skip
        assert (await client.request(19, 4, req)).topics[0].error_code == 0
        await commit_until_served(client, {("t", 0): 0})
        cluster = server.cluster
        assert cluster is not None and cluster.kzk is not None
        # Make it the topic an older Sluice created, applied by the broker from its watch.
        await cluster.kzk.set_topic_config(OFFSETS_TOPIC, OLD_OFFSETS_CONFIG)
        assert server.log_manager is not None
        logs = server.log_manager
        await until(lambda: not logs.topic_config(OFFSETS_TOPIC).compact, "config not applied")
        for i in range(200):
            await commit_until_served(client, {("t", p): i * 10 + p for p in range(3)})
        await client.close()
    finally:
        await server.shutdown()
    with capture_logs() as captured:
        server = await start_server(tmp_path, *settings)
    try:
        assert switched(captured) == 1
        cluster = server.cluster
        assert cluster is not None and cluster.kzk is not None
        in_zk = await cluster.kzk.get_topic_config(OFFSETS_TOPIC)
        assert dict(in_zk.config) == {**OLD_OFFSETS_CONFIG, "cleanup.policy": "compact"}
        logs = server.log_manager
        assert logs is not None
        await until(lambda: logs.topic_config(OFFSETS_TOPIC).compact, "compact not applied")
        client = await WireClient.connect("127.0.0.1", server.port)
        expected = {("t", p): 1990 + p for p in range(3)}

        async def fetched() -> dict[tuple[str, int], int]:
            body = m.OffsetFetchRequest(group_id="g", topics=None)
            resp = await client.request(9, 5, body)
            if resp.error_code:
                return {}
            return {(t.name, p.partition_index): p.committed_offset
                    for t in resp.topics for p in t.partitions}  # fmt: skip

        async with asyncio.timeout(WAIT_S):
            while await fetched() != expected:
                await asyncio.sleep(0.05)
        await client.close()
        await until(lambda: cleaned(server), "__consumer_offsets not cleaned")
        assert offset_records(server) < 100
    finally:
        await server.shutdown()
