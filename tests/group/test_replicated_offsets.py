"""``__consumer_offsets`` replicated between two real brokers; the coordinator moves with it.

As in ``tests/broker/test_replica_fetcher.py``: no ZooKeeper; the partition state is applied to
both brokers by hand (as the state watcher will), the follower's fetcher manager is told whom to
follow, and the coordinators' hooks are called as the cluster glue will call them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from sluice.protocol import messages as m
from sluice.server.group.coordinator import GroupCoordinator
from sluice.server.group.offsets_store import OFFSETS_TOPIC, OffsetRecord
from sluice.server.replication.replica_fetcher import FetcherConfig, ReplicaFetcherManager
from sluice.server.server import Server
from tests.broker.test_server import create_topic
from tests.group.test_groups import commit, connect, join_new, start, sync
from tests.group.test_ownership import fetch, until

LEADER, FOLLOWER = 0, 1
NONE, NOT_AVAILABLE, NOT_COORDINATOR = 0, 15, 16
WAIT_S = 15.0
TIMEOUT_MS = 400  # offsets.commit.timeout.ms
KEY = (OFFSETS_TOPIC, 0)


def coordinator_of(server: Server) -> GroupCoordinator:
    assert server.group_coordinator is not None
    return server.group_coordinator


def committed_in_log(server: Server, group: str) -> list[int]:
    """The offsets committed for ``group`` that this broker's offsets log holds, in order."""
    return [
        r.value.offset
        for chunk in coordinator_of(server).store.read_partition(0)
        for r in chunk
        if isinstance(r, OffsetRecord) and r.group == group and r.value is not None
    ]


def set_state(servers: list[Server], leader: int, epoch: int) -> None:
    """Partition 0 of the offsets topic: replicas = ISR = {0, 1}, led by ``leader``."""
    for server in servers:
        assert server.replica_manager is not None
        applied = server.replica_manager.apply_partition_state(
            OFFSETS_TOPIC, 0, leader, epoch, [LEADER, FOLLOWER], [LEADER, FOLLOWER], epoch
        )
        assert applied


async def test_commits_wait_for_the_follower_and_the_follower_takes_over(
    tmp_path: Path,
) -> None:
    settings = (f"offsets.commit.timeout.ms={TIMEOUT_MS}",)
    leader = await start(tmp_path / "a", "node.id=0", *settings)
    follower = await start(tmp_path / "b", "node.id=1", *settings)
    servers = [leader, follower]
    assert leader.replica_manager is not None and follower.replica_manager is not None
    addresses = {LEADER: ("127.0.0.1", leader.port), FOLLOWER: ("127.0.0.1", follower.port)}
    fetchers = ReplicaFetcherManager(
        follower.replica_manager, addresses.get, FetcherConfig(wait_max_ms=100, backoff_ms=50)
    )
    client = await connect(leader)
    member_client = await connect(leader)
    peer = await connect(follower)
    try:
        for c in (client, peer):
            assert await create_topic(c, "t") == 0
        for server in servers:
            coordinator_of(server).store.ensure_topic()  # RF 2: a replica on each broker
        set_state(servers, LEADER, 1)
        assert coordinator_of(follower).on_resigned(0, 1)
        assert coordinator_of(leader).on_elected(0, 1)  # already owned: nothing to load
        assert coordinator_of(leader).owned_partitions == {0}
        assert coordinator_of(follower).owned_partitions == frozenset()
        fetchers.follow(KEY, LEADER, 1)

        # 1. A commit is answered only once the follower has its record.
        assert await commit(client, -1, "", {("t", 0): 42}, group="solo") == {("t", 0): NONE}
        assert committed_in_log(follower, "solo") == [42]
        # So is the assignment of a consumer group (SyncGroup).
        joined = await join_new(member_client, group="cg")
        gen, mid = joined.generation_id, joined.member_id
        synced = await sync(member_client, gen, mid, {mid: b"part-0"}, group="cg")
        assert synced.error_code == NONE
        follower_part = follower.replica_manager.get_partition(*KEY)
        assert follower_part is not None
        leader_part = leader.replica_manager.get_partition(*KEY)
        assert leader_part is not None
        assert follower_part.log.log_end_offset == leader_part.log.log_end_offset
        assert await commit(member_client, gen, mid, {("t", 0): 7}, group="cg") == {("t", 0): NONE}

        # 2. The follower stops fetching; the ISR still names it: a commit waits, then answers
        # COORDINATOR_NOT_AVAILABLE at offsets.commit.timeout.ms, and the cache is unchanged.
        await fetchers.shutdown()
        loop = asyncio.get_running_loop()
        started = loop.time()
        pending = asyncio.ensure_future(commit(client, -1, "", {("t", 0): 43}, group="solo"))
        await until(lambda: committed_in_log(leader, "solo") == [42, 43])
        # Meanwhile (on another connection: the parked commit holds its own) the cache has 42.
        assert await fetch(member_client, "solo") == (NONE, {("t", 0): 42})
        assert await asyncio.wait_for(pending, WAIT_S) == {("t", 0): NOT_AVAILABLE}
        assert loop.time() - started >= TIMEOUT_MS / 1000 * 0.9
        assert await fetch(client, "solo") == (NONE, {("t", 0): 42})
        assert committed_in_log(follower, "solo") == [42]
        assert leader_part.isr == (
            LEADER,
            FOLLOWER,
        )  # nobody shrank it: the commit waited for the stopped follower

        # 3. Leadership moves to the follower: the old leader resigns, the new one loads what it
        # replicated and serves it; the old one answers NOT_COORDINATOR.
        set_state(servers, FOLLOWER, 2)
        assert coordinator_of(leader).on_resigned(0, 2)
        assert coordinator_of(follower).on_elected(0, 2)
        await until(lambda: coordinator_of(follower).owned_partitions == {0})
        assert await fetch(peer, "solo") == (NONE, {("t", 0): 42})
        assert await fetch(peer, "cg") == (NONE, {("t", 0): 7})
        described = await peer.request(
            m.DescribeGroups.key, 4, m.DescribeGroupsRequest(groups=["cg"])
        )
        (group,) = described.groups
        assert (group.error_code, group.group_state) == (NONE, "Stable")
        assert [(x.member_id, x.member_assignment) for x in group.members] == [(mid, b"part-0")]
        assert (await fetch(client, "solo"))[0] == NOT_COORDINATOR
    finally:
        await fetchers.shutdown()
        for c in (client, member_client, peer):
            await c.close()
        await leader.shutdown()
        await follower.shutdown()
