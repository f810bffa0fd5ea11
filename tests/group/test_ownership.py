"""The coordinator follows leadership of ``__consumer_offsets``, on one broker.

A real broker on 127.0.0.1 and wire clients; the test plays the cluster glue: it changes the
offsets partition's leadership in the ReplicaManager (``make_follower`` / ``make_leader`` at a new
epoch) and calls the coordinator's hooks, as the state watcher will. Writes that must wait for
replication wait for a phantom follower (broker 9 in the ISR that never fetches) whose fetch
position the test reports by hand -- the two-broker version is ``test_replicated_offsets.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from sluice.protocol import messages as m
from sluice.server.group.coordinator import (
    Group,
    GroupCoordinator,
    GroupState,
    commit_error,
    group_write_error,
)
from sluice.server.group.offsets_store import (
    OFFSETS_TOPIC,
    OffsetAndMetadata,
    partition_for,
)
from sluice.server.replication.replica_manager import ReplicaManager
from sluice.server.server import Server
from tests.broker.test_server import create_topic
from tests.broker_util import WireClient
from tests.group.test_groups import (
    DELETE,
    DESCRIBE,
    LIST,
    OFFSET_FETCH,
    commit,
    connect,
    heartbeat,
    join,
    join_new,
    start,
    sync,
)

NONE, NOT_LEADER, REQUEST_TIMED_OUT, MESSAGE_TOO_LARGE = 0, 6, 7, 10
LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR = 14, 15, 16
NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND = 19, 20
REBALANCE_IN_PROGRESS, INVALID_COMMIT_OFFSET_SIZE, KAFKA_STORAGE_ERROR = 27, 28, 56
UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_SERVER_ERROR = 3, -1
PHANTOM = 9  # a follower that never fetches by itself
WAIT_S = 10.0

#: Two offsets partitions; one group in each (Kafka's placement: abs(hashCode) % 2).
GROUP_A, GROUP_B = "ga", "gb"


def test_groups_fall_into_different_partitions() -> None:
    assert (partition_for(GROUP_A, 2), partition_for(GROUP_B, 2)) == (0, 1)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    # offsets.load.buffer.size=1: a load reads one batch per step (a read returns at least one).
    srv = await start(
        tmp_path,
        "offsets.topic.num.partitions=2",
        "offsets.commit.timeout.ms=300",
        "offsets.load.buffer.size=1",
    )
    try:
        yield srv
    finally:
        await srv.shutdown()


@pytest.fixture
async def client(server: Server) -> AsyncIterator[WireClient]:
    c = await connect(server)
    try:
        assert await create_topic(c, "t", 2) == 0
        yield c
    finally:
        await c.close()


def parts(server: Server) -> tuple[ReplicaManager, GroupCoordinator]:
    assert server.replica_manager is not None and server.group_coordinator is not None
    server.group_coordinator.store.ensure_topic()
    return server.replica_manager, server.group_coordinator


async def until(condition: Callable[[], bool]) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), WAIT_S)


async def fetch(c: WireClient, group: str) -> tuple[int, dict[tuple[str, int], int]]:
    resp = await c.request(OFFSET_FETCH, 5, m.OffsetFetchRequest(group_id=group, topics=None))
    found = {(t.name, p.partition_index): p.committed_offset for t in resp.topics
             for p in t.partitions}  # fmt: skip
    return resp.error_code, found


async def describe_code(c: WireClient, group: str) -> tuple[int, str]:
    resp = await c.request(DESCRIBE, 4, m.DescribeGroupsRequest(groups=[group]))
    (g,) = resp.groups
    return g.error_code, g.group_state


async def list_groups(c: WireClient) -> tuple[int, list[str]]:
    resp = await c.request(LIST, 2, m.ListGroupsRequest())
    return resp.error_code, sorted(g.group_id for g in resp.groups)


async def stable_member(c: WireClient, group: str) -> tuple[int, str]:
    """A one-member group, Stable: (generation, member id)."""
    joined = await join_new(c, group=group)
    assert joined.error_code == NONE
    synced = await sync(c, joined.generation_id, joined.member_id,
                        {joined.member_id: b"assigned"}, group=group)  # fmt: skip
    assert synced.error_code == NONE
    return joined.generation_id, joined.member_id


def resign(server: Server, partition: int, epoch: int) -> bool:
    replicas, coordinator = parts(server)
    assert replicas.make_follower(OFFSETS_TOPIC, partition, PHANTOM, epoch)
    return coordinator.on_resigned(partition, epoch)


def elect(server: Server, partition: int, epoch: int, **state: Any) -> bool:
    replicas, coordinator = parts(server)
    assert replicas.make_leader(OFFSETS_TOPIC, partition, epoch, **state)
    return coordinator.on_elected(partition, epoch)


async def test_resign_answers_not_coordinator_and_reelection_loads_groups_back(
    server: Server, client: WireClient
) -> None:
    replicas, coordinator = parts(server)
    generation, member = await stable_member(client, GROUP_A)
    assert await commit(client, generation, member, {("t", 0): 42}, group=GROUP_A) == {
        ("t", 0): NONE
    }
    assert await commit(client, -1, "", {("t", 1): 7}, group="solo-0") == {("t", 1): NONE}
    assert partition_for("solo-0", 2) == 0
    b_gen, b_member = await stable_member(client, GROUP_B)
    # A second member joining GROUP_A leaves its JoinGroup waiting for the first to rejoin.
    other = await connect(server)
    try:
        waiting = asyncio.ensure_future(join_new(other, group=GROUP_A))
        await until(lambda: coordinator.groups[GROUP_A].state is GroupState.PREPARING_REBALANCE)
        assert resign(server, 0, 1)
        assert (await asyncio.wait_for(waiting, WAIT_S)).error_code == NOT_COORDINATOR
    finally:
        await other.close()
    assert coordinator.owned_partitions == {1}
    assert set(coordinator.groups) == {GROUP_B}
    # Every group API for a group of partition 0 is refused; partition 1 is unaffected.
    assert await heartbeat(client, generation, member, GROUP_A) == NOT_COORDINATOR
    assert (await fetch(client, GROUP_A))[0] == NOT_COORDINATOR
    assert (await fetch(client, "solo-0"))[0] == NOT_COORDINATOR
    assert await commit(client, -1, "", {("t", 0): 1}, group="solo-0") == {
        ("t", 0): NOT_COORDINATOR
    }
    assert (await join(client, group=GROUP_A)).error_code == NOT_COORDINATOR
    assert (await describe_code(client, GROUP_A))[0] == NOT_COORDINATOR
    deleted = await client.request(DELETE, 1, m.DeleteGroupsRequest(groups_names=[GROUP_A]))
    assert deleted.results[0].error_code == NOT_COORDINATOR
    assert await list_groups(client) == (NONE, [GROUP_B])
    assert await heartbeat(client, b_gen, b_member, GROUP_B) == NONE
    # Nothing is written to a partition this broker does not own, whatever runs.
    end = replicas.get_partition(OFFSETS_TOPIC, 0).log.log_end_offset
    coordinator.expire_offsets(now_ms=2**62)
    assert replicas.get_partition(OFFSETS_TOPIC, 0).log.log_end_offset == end
    # Elected again (a new term): the groups and offsets come back from the log.
    assert elect(server, 0, 2)
    await until(lambda: 0 in coordinator.owned_partitions)
    assert await fetch(client, GROUP_A) == (NONE, {("t", 0): 42})
    assert await fetch(client, "solo-0") == (NONE, {("t", 1): 7})
    assert await describe_code(client, GROUP_A) == (NONE, "Stable")
    # The member of the loaded group keeps its generation (a coordinator move, not a restart).
    assert await heartbeat(client, generation, member, GROUP_A) == NONE
    # A late resignation of the first term is ignored.
    assert not coordinator.on_resigned(0, 1)
    assert coordinator.owned_partitions == {0, 1}
    assert await fetch(client, GROUP_A) == (NONE, {("t", 0): 42})


async def test_loading_answers_load_in_progress_until_the_partition_is_read(
    server: Server, client: WireClient
) -> None:
    _replicas, coordinator = parts(server)
    generation, member = await stable_member(client, GROUP_A)
    assert await commit(client, generation, member, {("t", 0): 5}, group=GROUP_A) == {
        ("t", 0): NONE
    }
    batches = len(list(coordinator.store.read_partition(0)))
    assert batches == 2  # the group's metadata and the commit, one batch per read
    gate = asyncio.Event()
    pauses: list[int] = []

    async def held(partition: int) -> None:
        pauses.append(partition)
        await gate.wait()

    coordinator.load_pause = held
    assert resign(server, 0, 1)
    assert elect(server, 0, 2)
    await until(lambda: pauses == [0])
    assert coordinator.loading_partitions == {0} and coordinator.loading
    assert (await fetch(client, GROUP_A))[0] == LOAD_IN_PROGRESS
    assert await commit(client, generation, member, {("t", 0): 6}, group=GROUP_A) == {
        ("t", 0): LOAD_IN_PROGRESS
    }
    assert (await join(client, group=GROUP_A)).error_code == LOAD_IN_PROGRESS
    assert (await describe_code(client, GROUP_A))[0] == LOAD_IN_PROGRESS
    assert (await list_groups(client))[0] == LOAD_IN_PROGRESS
    # Kafka's two exceptions: SyncGroup says rejoin, Heartbeat answers blindly.
    synced = await sync(client, generation, member, group=GROUP_A)
    assert synced.error_code == REBALANCE_IN_PROGRESS
    assert await heartbeat(client, generation, member, GROUP_A) == NONE
    # A stale election does not start another load; the loading one goes on.
    assert not coordinator.on_elected(0, 1)
    gate.set()
    await until(lambda: coordinator.owned_partitions == {0, 1})
    assert pauses == [0] * (batches + 1)  # before each step, and before finding the end
    assert not coordinator.loading
    assert await fetch(client, GROUP_A) == (NONE, {("t", 0): 5})
    assert (await list_groups(client))[0] == NONE


async def test_resignation_during_a_load_cancels_it(server: Server, client: WireClient) -> None:
    _replicas, coordinator = parts(server)
    assert await commit(client, -1, "", {("t", 0): 3}, group=GROUP_A) == {("t", 0): NONE}
    gate = asyncio.Event()
    coordinator.load_pause = lambda _p: gate.wait()
    assert resign(server, 0, 1)
    assert elect(server, 0, 2)
    assert coordinator.loading_partitions == {0}
    assert resign(server, 0, 3)
    assert coordinator.loading_partitions == frozenset()
    gate.set()
    await until(
        lambda: not any("GroupCoordinator._load" in repr(t.get_coro()) for t in asyncio.all_tasks())
    )
    assert 0 not in coordinator.owned_partitions and GROUP_A not in coordinator.groups
    assert (await fetch(client, GROUP_A))[0] == NOT_COORDINATOR
    # An election of the resigned term is stale; a newer one loads.
    assert not coordinator.on_elected(0, 2)
    coordinator.load_pause = lambda _p: asyncio.sleep(0)
    assert elect(server, 0, 4)
    await until(lambda: 0 in coordinator.owned_partitions)
    assert await fetch(client, GROUP_A) == (NONE, {("t", 0): 3})


def phantom_isr(server: Server, epoch: int) -> ReplicaManager:
    """Partition 0 of the offsets topic with the phantom follower in its ISR (HW waits for it);
    the coordinator keeps owning the partition (a new term of the same leader)."""
    replicas, coordinator = parts(server)
    assert elect(server, 0, epoch, replicas=[0, PHANTOM], isr=[0, PHANTOM])
    assert coordinator.owned_partitions == {0, 1}
    return replicas


def phantom_catches_up(replicas: ReplicaManager) -> None:
    log_ = replicas.get_partition(OFFSETS_TOPIC, 0).log
    replicas.update_follower_end_offset(OFFSETS_TOPIC, 0, PHANTOM, log_.log_end_offset)


async def test_commit_is_answered_when_replicated_and_cached_only_then(
    server: Server, client: WireClient
) -> None:
    _replicas, coordinator = parts(server)
    assert await commit(client, -1, "", {("t", 0): 1}, group=GROUP_A) == {("t", 0): NONE}
    replicas = phantom_isr(server, 1)
    log_ = replicas.get_partition(OFFSETS_TOPIC, 0).log
    end = log_.log_end_offset
    pending = asyncio.ensure_future(commit(client, -1, "", {("t", 0): 2}, group=GROUP_A))
    await until(lambda: log_.log_end_offset == end + 1)  # written, not replicated
    assert not pending.done()
    reader = await connect(server)  # a parked request holds its connection
    try:
        assert await fetch(reader, GROUP_A) == (NONE, {("t", 0): 1})  # the cache waits too
    finally:
        await reader.close()
    phantom_catches_up(replicas)
    assert await asyncio.wait_for(pending, WAIT_S) == {("t", 0): NONE}
    assert await fetch(client, GROUP_A) == (NONE, {("t", 0): 2})
    # offsets.commit.timeout.ms (300) passes without the follower: COORDINATOR_NOT_AVAILABLE,
    # and the cache keeps the replicated value.
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await commit(client, -1, "", {("t", 0): 3}, group=GROUP_A) == {("t", 0): NOT_AVAILABLE}
    assert loop.time() - started >= 0.25
    assert await fetch(client, GROUP_A) == (NONE, {("t", 0): 2})
    assert coordinator.groups[GROUP_A].pending_commits == {}
    # A commit parked when leadership moves away answers NOT_COORDINATOR.
    pending = asyncio.ensure_future(commit(client, -1, "", {("t", 0): 4}, group=GROUP_A))
    await until(lambda: bool(coordinator.groups[GROUP_A].pending_commits))
    assert resign(server, 0, 2)
    assert await asyncio.wait_for(pending, WAIT_S) == {("t", 0): NOT_COORDINATOR}


async def test_sync_group_is_answered_when_the_assignment_is_replicated(
    server: Server, client: WireClient
) -> None:
    _replicas, coordinator = parts(server)
    replicas = phantom_isr(server, 1)
    joined = await join_new(client, group=GROUP_A)
    assert joined.error_code == NONE
    log_ = replicas.get_partition(OFFSETS_TOPIC, 0).log
    end = log_.log_end_offset
    gen, mid = joined.generation_id, joined.member_id
    pending = asyncio.ensure_future(sync(client, gen, mid, {mid: b"a1"}, group=GROUP_A))
    await until(lambda: log_.log_end_offset == end + 1)
    assert not pending.done()
    assert coordinator.groups[GROUP_A].state is GroupState.COMPLETING_REBALANCE
    phantom_catches_up(replicas)
    synced = await asyncio.wait_for(pending, WAIT_S)
    assert (synced.error_code, synced.assignment) == (NONE, b"a1")
    assert coordinator.groups[GROUP_A].state is GroupState.STABLE
    # The next rebalance's assignment times out: the members are told to rejoin (Kafka's
    # storeGroup: REQUEST_TIMED_OUT -> REBALANCE_IN_PROGRESS) and the group rebalances.
    rejoined = await join(client, member_id=mid, group=GROUP_A)
    assert rejoined.error_code == NONE and rejoined.generation_id == gen + 1
    failed = await sync(client, gen + 1, mid, {mid: b"a2"}, group=GROUP_A)
    assert failed.error_code == REBALANCE_IN_PROGRESS
    assert coordinator.groups[GROUP_A].state is GroupState.PREPARING_REBALANCE


def test_out_of_order_settlement_keeps_the_later_commit() -> None:
    """Two commits of one partition in flight; whichever settles first, the cache ends with
    the one later in the log (Kafka's pendingOffsetCommits + appendedBatchOffset)."""
    first, second = OffsetAndMetadata(1, -1, "", 0), OffsetAndMetadata(2, -1, "", 0)
    for order in ((first, 10), (second, 11)), ((second, 11), (first, 10)):
        group = Group("g")
        group.pending_commits[("t", 0)] = first
        group.pending_commits[("t", 0)] = second  # the latest staged
        for value, position in order:
            group.on_commit_written(("t", 0), value, position)
        assert group.offsets == {("t", 0): second} and group.pending_commits == {}
    # A deletion while a commit is in flight: the commit does not land.
    group = Group("g")
    group.pending_commits[("t", 0)] = first
    group.remove_offsets([("t", 0)])
    group.on_commit_written(("t", 0), first, 12)
    assert group.offsets == {}


@pytest.mark.parametrize(
    ("append_error", "for_commit", "for_group"),
    [
        (UNKNOWN_TOPIC_OR_PARTITION, NOT_AVAILABLE, NOT_AVAILABLE),
        (NOT_ENOUGH_REPLICAS, NOT_AVAILABLE, NOT_AVAILABLE),
        (NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_AVAILABLE, NOT_AVAILABLE),
        (REQUEST_TIMED_OUT, NOT_AVAILABLE, REBALANCE_IN_PROGRESS),
        (NOT_LEADER, NOT_COORDINATOR, NOT_COORDINATOR),
        (KAFKA_STORAGE_ERROR, NOT_COORDINATOR, NOT_COORDINATOR),
        (MESSAGE_TOO_LARGE, INVALID_COMMIT_OFFSET_SIZE, UNKNOWN_SERVER_ERROR),
        (18, INVALID_COMMIT_OFFSET_SIZE, UNKNOWN_SERVER_ERROR),  # RECORD_LIST_TOO_LARGE
        (4, INVALID_COMMIT_OFFSET_SIZE, UNKNOWN_SERVER_ERROR),  # INVALID_FETCH_SIZE
        (UNKNOWN_SERVER_ERROR, UNKNOWN_SERVER_ERROR, UNKNOWN_SERVER_ERROR),
    ],
)
def test_append_errors_are_translated_as_kafka_does(
    append_error: int, for_commit: int, for_group: int
) -> None:
    assert (commit_error(append_error), group_write_error(append_error)) == (for_commit, for_group)


async def test_a_commit_the_isr_cannot_take_writes_nothing(
    server: Server, client: WireClient
) -> None:
    """min.insync.replicas 2 with the ISR just the leader: NOT_ENOUGH_REPLICAS before the append
    -> COORDINATOR_NOT_AVAILABLE, and the log is untouched."""
    replicas, _coordinator = parts(server)
    partition = replicas.get_partition(OFFSETS_TOPIC, 0)
    assert partition is not None
    replicas.settings.min_insync_replicas = lambda _p: 2
    end = partition.log.log_end_offset
    assert await commit(client, -1, "", {("t", 0): 9}, group=GROUP_A) == {("t", 0): NOT_AVAILABLE}
    assert partition.log.log_end_offset == end
    assert (await fetch(client, GROUP_A)) == (NONE, {})
