"""KafkaZkClient against a real ZooKeeper: registration and broker epochs, controller election
and fencing, topics, conditional partition-state updates, deletion, producer id blocks."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
import uuid
from dataclasses import replace
from typing import Any

import pytest

from sluice.protocol.structs import TopicPartition
from sluice.server.zk import kafka_zk as kafka_zk_module
from sluice.server.zk.client import CreateOp, SessionEvent, SessionState, ZkClient, ZnodeStat
from sluice.server.zk.data import (
    CONTROLLER_EPOCH_PATH,
    PERSISTENT_PATHS,
    BrokerInfo,
    EndPoint,
    PartitionState,
    ProducerIdBlock,
    ReplicaAssignment,
    TopicAssignment,
    broker_path,
    delete_topic_path,
    partition_state_path,
    topic_config_path,
    topic_path,
)
from sluice.server.zk.errors import (
    BadVersionError,
    ConnectionLossError,
    ControllerMovedError,
    NodeExistsError,
    NoNodeError,
)
from sluice.server.zk.kafka_zk import ControllerEpoch, KafkaZkClient
from sluice.testing.zookeeper import ZooKeeperServer

from .conftest import MakeClient, ephemeral_owner, wait_for

TP0 = TopicPartition("orders", 0)


def broker(broker_id: int, port: int = 9092) -> BrokerInfo:
    return BrokerInfo(broker_id, (EndPoint("PLAINTEXT", "127.0.0.1", port + broker_id),))


async def kafka_zk(make_client: MakeClient, **kwargs: Any) -> KafkaZkClient:
    client = KafkaZkClient(await make_client(**kwargs))
    await client.create_top_level_paths()
    return client


async def new_topic(kzk: KafkaZkClient, partitions: int = 1, topic: str = "orders") -> None:
    await kzk.create_topic(
        TopicAssignment(
            topic, uuid.uuid4(), {p: ReplicaAssignment((1, 2)) for p in range(partitions)}
        )
    )


def lose_replies(zk: ZkClient, method: str) -> list[int]:
    """Make ``zk.<method>`` apply the request and then raise ConnectionLossError, once: a reply
    lost after the write happened. Returns a list that counts the injected losses."""
    real = getattr(zk, method)
    lost: list[int] = []

    async def applied_then_lost(*args: Any, **kwargs: Any) -> Any:
        result = await real(*args, **kwargs)
        if not lost:
            lost.append(1)
            raise ConnectionLossError("injected: reply lost")
        return result

    setattr(zk, method, applied_then_lost)
    return lost


# --- brokers ------------------------------------------------------------------------------------


async def test_top_level_paths(make_client: MakeClient) -> None:
    kzk = await kafka_zk(make_client)
    await kzk.create_top_level_paths()  # idempotent
    for path in PERSISTENT_PATHS:
        assert await kzk.zk.exists(path) is not None


async def test_register_broker_returns_the_czxid_as_broker_epoch(make_client: MakeClient) -> None:
    kzk = await kafka_zk(make_client)
    epoch = await kzk.register_broker(broker(1))
    _, stat = await kzk.zk.get(broker_path(1))
    assert epoch == stat.czxid > 0
    assert stat.ephemeral_owner == kzk.zk.session_id
    info = await kzk.get_broker(1)
    assert info is not None and info.epoch == epoch
    assert info.endpoints == broker(1).endpoints
    assert await kzk.get_broker(2) is None
    assert await kzk.get_broker_ids() == [1]

    # A restarted broker (new session) gets a larger epoch.
    await kzk.zk.close()
    again = await kafka_zk(make_client)
    assert await again.register_broker(broker(1)) > epoch


async def test_register_broker_recognises_its_own_node(make_client: MakeClient) -> None:
    kzk = await kafka_zk(make_client)
    lost = lose_replies(kzk.zk, "create")
    epoch = await kzk.register_broker(broker(4))
    assert lost == [1]  # the create went through, its reply was "lost"
    _, stat = await kzk.zk.get(broker_path(4))
    assert epoch == stat.czxid


async def test_register_broker_waits_for_a_previous_session_to_expire(
    make_client: MakeClient, sluice_zookeeper_connect: str
) -> None:
    old = broker(5).encode().decode()
    async with ephemeral_owner(
        sluice_zookeeper_connect, broker_path(5), old.encode(), session=1.0
    ) as (proc, old_session):
        kzk = await kafka_zk(make_client)
        # A live broker with the same id: refused after the (short) wait.
        with pytest.raises(NodeExistsError, match="another live session"):
            await kzk.register_broker(broker(5), wait=0.3)
        # Our previous incarnation crashed: its node goes with its session, then we register.
        os.kill(proc.pid, signal.SIGKILL)
        start = time.monotonic()
        epoch = await kzk.register_broker(broker(5), wait=10)
        waited = time.monotonic() - start
    _, stat = await kzk.zk.get(broker_path(5))
    assert stat.ephemeral_owner == kzk.zk.session_id != old_session
    assert epoch == stat.czxid
    assert 0.3 < waited < 5.0


async def test_broker_re_registers_on_a_new_session_after_expiry(
    make_client: MakeClient, sluice_zookeeper: ZooKeeperServer
) -> None:
    kzk = await kafka_zk(make_client)
    epochs = [await kzk.register_broker(broker(1))]
    reregistered = asyncio.Event()

    async def on_session(event: SessionEvent) -> None:
        # What the broker does on SessionEvent(new_session=True): register again.
        if event.state is SessionState.CONNECTED and event.new_session:
            epochs.append(await kzk.register_broker(broker(1)))
            reregistered.set()

    kzk.zk.add_session_listener(on_session)
    client_id = kzk.zk.client_id
    assert client_id is not None
    await asyncio.to_thread(sluice_zookeeper.expire_session, *client_id)
    async with asyncio.timeout(10):
        await reregistered.wait()
    info = await kzk.get_broker(1)
    assert info is not None and info.epoch == epochs[1] > epochs[0]
    _, stat = await kzk.zk.get(broker_path(1))
    assert stat.ephemeral_owner == kzk.zk.session_id != client_id[0]


async def test_watch_brokers_follows_registrations(make_client: MakeClient) -> None:
    observer = await kafka_zk(make_client)
    seen: list[dict[int, BrokerInfo]] = []
    watcher = observer.watch_brokers(seen.append)
    await wait_for(lambda: seen == [{}], what="the initial empty set")
    one = await kafka_zk(make_client)
    two = await kafka_zk(make_client)
    epoch1 = await one.register_broker(broker(1))
    await wait_for(lambda: list(seen[-1]) == [1], what="broker 1")
    await two.register_broker(broker(2))
    await wait_for(lambda: list(seen[-1]) == [1, 2], what="brokers 1 and 2")
    assert seen[-1][1].epoch == epoch1
    assert seen[-1][2].endpoints == broker(2).endpoints
    await one.zk.close()  # a clean shutdown: its node goes at once
    await wait_for(lambda: list(seen[-1]) == [2], what="broker 1 gone")
    watcher.cancel()
    assert await observer.get_all_brokers() == {2: seen[-1][2]}


# --- controller ---------------------------------------------------------------------------------


async def test_exactly_one_of_racing_contenders_becomes_controller(
    make_client: MakeClient,
) -> None:
    contenders = [await kafka_zk(make_client) for _ in range(4)]
    for round_ in range(3):
        alive = [c for c in contenders if c.zk.state is SessionState.CONNECTED]
        results = await asyncio.gather(*(c.elect_controller(i) for i, c in enumerate(alive)))
        winners = [(i, r) for i, r in enumerate(results) if r is not None]
        assert len(winners) == 1, results
        index, epoch = winners[0]
        assert epoch.epoch == round_ + 1  # one increment per election, from 0
        current = await alive[0].get_controller()
        assert current is not None and current.broker_id == index
        assert await alive[0].get_controller_epoch() == epoch
        # The controller goes away (its session closes): the next round elects another.
        await alive[index].zk.close()


async def test_a_deposed_controllers_fenced_writes_fail(
    make_client: MakeClient, sluice_zookeeper: ZooKeeperServer
) -> None:
    first = await kafka_zk(make_client)
    second = await kafka_zk(make_client)
    fence1 = await first.elect_controller(1)
    assert fence1 == ControllerEpoch(1, 1)
    assert await second.elect_controller(2) is None  # /controller exists

    # The first controller's session expires (a long GC pause, a partition): the second wins.
    client_id = first.zk.client_id
    assert client_id is not None
    await asyncio.to_thread(sluice_zookeeper.expire_session, *client_id)
    fence2 = None
    deadline = time.monotonic() + 10
    while fence2 is None and time.monotonic() < deadline:
        fence2 = await second.elect_controller(2)
        if fence2 is None:
            await asyncio.sleep(0.05)
    assert fence2 == ControllerEpoch(2, 2)

    await first.zk.wait_connected(10)  # back on a new session, still believing it leads
    with pytest.raises(ControllerMovedError, match="stale"):
        await first.create_partition_states("orders", {0: PartitionState(1, 0, (1,), 1)}, fence1)
    with pytest.raises(ControllerMovedError):
        await first.fenced_multi(fence1, [CreateOp("/written-by-deposed")])
    assert await first.zk.exists("/written-by-deposed") is None
    assert await first.zk.exists("/brokers/topics/orders/partitions") is None
    # The new controller writes fine; a resignation by the deposed one is a no-op.
    await first.resign_controller(fence1)
    await second.create_topic(TopicAssignment("orders", None, {0: ReplicaAssignment((2,))}))
    current = await second.get_controller()
    assert current is not None and current.broker_id == 2
    created = await second.create_partition_states(
        "orders", {0: PartitionState(2, 0, (2,), 2)}, fence2
    )
    assert created == {0: PartitionState(2, 0, (2,), 2, zk_version=0)}
    await second.resign_controller(fence2)
    assert await second.get_controller() is None


async def test_election_survives_a_lost_reply(make_client: MakeClient) -> None:
    kzk = await kafka_zk(make_client)
    lost = lose_replies(kzk.zk, "multi")
    fence = await kzk.elect_controller(7)
    assert lost == [1]
    assert fence == ControllerEpoch(1, 1)
    assert await kzk.get_controller_epoch() == fence


async def test_fenced_multi_reports_the_callers_op_index(make_client: MakeClient) -> None:
    kzk = await kafka_zk(make_client)
    fence = await kzk.elect_controller(1)
    assert fence is not None
    await kzk.zk.create("/x")
    with pytest.raises(NodeExistsError) as err:
        await kzk.fenced_multi(fence, [CreateOp("/y"), CreateOp("/x")])
    assert (err.value.op_index, err.value.path) == (1, "/x")
    assert await kzk.zk.exists("/y") is None
    results = await kzk.fenced_multi(fence, [CreateOp("/y")])
    assert results == ["/y"]
    # The controller epoch node itself must not change under a fenced write.
    assert (await kzk.get_controller_epoch()) == fence


async def test_controller_epoch_node_is_created_once(make_client: MakeClient) -> None:
    kzk = await kafka_zk(make_client)
    assert await kzk.get_controller_epoch() is None
    fence = await kzk.elect_controller(3)
    assert fence == ControllerEpoch(1, 1)
    data, stat = await kzk.zk.get(CONTROLLER_EPOCH_PATH)
    assert (data, stat.version) == (b"1", 1)


# --- topics and partition state -----------------------------------------------------------------


async def test_create_and_read_topics(make_client: MakeClient) -> None:
    kzk = await kafka_zk(make_client)
    changed = asyncio.Event()
    assert await kzk.get_topics(watch=lambda e: changed.set()) == []
    tid = uuid.uuid4()
    assignment = TopicAssignment(
        "orders", tid, {0: ReplicaAssignment((1, 2)), 1: ReplicaAssignment((2, 1))}
    )
    created = await kzk.create_topic(assignment, {"retention.ms": "1000"})
    assert created.zk_version == 0
    async with asyncio.timeout(5):
        await changed.wait()
    assert await kzk.get_topics() == ["orders"]
    read = await kzk.get_topic_assignment("orders")
    assert read == created and read is not None and read.topic_id == tid
    assert (await kzk.get_topic_config("orders")).config == {"retention.ms": "1000"}
    assert await kzk.get_topic_assignment("nope") is None
    assert await kzk.get_topic_assignments(["orders", "nope"]) == {"orders": created}
    with pytest.raises(NodeExistsError):
        await kzk.create_topic(TopicAssignment("orders", None, {0: ReplicaAssignment((3,))}))
    assert (await kzk.get_topic_config("orders")).config == {"retention.ms": "1000"}

    updated = await kzk.set_topic_config("orders", {"cleanup.policy": "compact"})
    assert updated.zk_version == 1
    assert (await kzk.get_topic_config("orders")).config == {"cleanup.policy": "compact"}
    assert (await kzk.get_topic_config("other")).config == {}

    # The controller adds a partition, conditional on the version it read, fenced.
    fence = await kzk.elect_controller(1)
    assert fence is not None
    grown = TopicAssignment(
        "orders", tid, {**created.partitions, 2: ReplicaAssignment((1, 2))}, created.zk_version
    )
    written = await kzk.set_topic_assignment(grown, fence)
    assert written.zk_version == 1 and (await kzk.get_topic_assignment("orders")) == written
    with pytest.raises(BadVersionError):
        await kzk.set_topic_assignment(grown, fence)  # stale version


async def test_conditional_isr_update(make_client: MakeClient) -> None:
    controller = await kafka_zk(make_client)
    leader = await kafka_zk(make_client)
    fence = await controller.elect_controller(0)
    assert fence is not None
    await new_topic(controller)
    created = await controller.create_partition_states(
        "orders", {0: PartitionState(1, 0, (1, 2, 3), fence.epoch)}, fence
    )
    assert created[0] == PartitionState(1, 0, (1, 2, 3), 1, zk_version=0)

    # The leader shrinks the ISR at the version it holds.
    held = await leader.get_partition_state(TP0)
    assert held is not None and held.zk_version == 0
    shrunk = PartitionState(1, 0, (1, 2), held.controller_epoch, zk_version=held.zk_version)
    assert await leader.update_leader_and_isr(TP0, shrunk) == (True, 1)

    # A stale zkVersion with other data fails and changes nothing.
    stale = PartitionState(1, 0, (1,), 1, zk_version=0)
    assert await leader.update_leader_and_isr(TP0, stale) == (False, -1)
    now = await leader.get_partition_state(TP0)
    assert now is not None and (now.isr, now.zk_version) == ((1, 2), 1)

    # A retry after a lost reply: our write is there (version moved on), same data = success.
    assert await leader.update_leader_and_isr(TP0, shrunk) == (True, 1)

    # The controller elects another leader (new epoch): the old leader can no longer shrink the
    # ISR to itself, whatever it tries with the version it held.
    moved = await controller.set_partition_states(
        "orders", {0: PartitionState(2, 1, (2,), fence.epoch, zk_version=1)}, fence
    )
    assert moved[0] == PartitionState(2, 1, (2,), 1, zk_version=2)
    alone = PartitionState(1, 0, (1,), 1, zk_version=1)
    assert await leader.update_leader_and_isr(TP0, alone) == (False, -1)
    final = await leader.get_partition_state(TP0)
    assert final is not None and (final.leader, final.leader_epoch, final.isr) == (2, 1, (2,))

    # No state znode: nothing to update.
    missing = TopicPartition("orders", 9)
    assert await leader.update_leader_and_isr(missing, alone) == (False, -1)


async def test_isr_update_survives_a_lost_reply(make_client: MakeClient) -> None:
    controller = await kafka_zk(make_client)
    fence = await controller.elect_controller(0)
    assert fence is not None
    await new_topic(controller)
    await controller.create_partition_states("orders", {0: PartitionState(1, 0, (1, 2), 1)}, fence)
    leader = await kafka_zk(make_client)
    lost = lose_replies(leader.zk, "set")
    expanded = PartitionState(1, 0, (1, 2, 3), 1, zk_version=0)
    assert await leader.update_leader_and_isr(TP0, expanded) == (True, 1)
    assert lost == [1]  # applied, reply lost, resent: BADVERSION, re-read, equal: success


async def test_controller_state_writes_report_conflicts(make_client: MakeClient) -> None:
    kzk = await kafka_zk(make_client)
    fence = await kzk.elect_controller(0)
    assert fence is not None
    states = {p: PartitionState(1, 0, (1, 2), 1) for p in range(3)}
    await new_topic(kzk, partitions=3)
    created = await kzk.create_partition_states("orders", states, fence)
    assert all(isinstance(s, PartitionState) and s.zk_version == 0 for s in created.values())
    again = await kzk.create_partition_states("orders", {0: states[0]}, fence)
    assert isinstance(again[0], NodeExistsError)
    # The leader of partition 1 changed its ISR meanwhile: that one must be retried.
    await kzk.update_leader_and_isr(
        TopicPartition("orders", 1), PartitionState(1, 0, (1,), 1, zk_version=0)
    )
    result = await kzk.set_partition_states(
        "orders",
        {p: PartitionState(2, 1, (2,), 1, zk_version=0) for p in range(3)},
        fence,
    )
    assert isinstance(result[1], BadVersionError)
    assert result[0] == result[2] == PartitionState(2, 1, (2,), 1, zk_version=1)
    read = await kzk.get_partition_states(TopicPartition("orders", p) for p in range(4))
    assert sorted(tp.partition for tp in read) == [0, 1, 2]
    assert read[TopicPartition("orders", 1)].isr == (1,)


async def test_a_new_topics_partition_states_are_created_in_one_transaction(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All partitions' state znodes in one multi (one zxid), so a broker reading ZooKeeper sees
    none or all of them, as Kafka's controller sends a new topic's partitions in one batch;
    past ``STATES_PER_MULTI`` one multi per that many, and where one exists already, the others
    of its multi are still created."""
    kzk = await kafka_zk(make_client)
    fence = await kzk.elect_controller(0)
    assert fence is not None
    await new_topic(kzk, partitions=8)
    states = {p: PartitionState(1 + p % 3, 0, (1, 2, 3), 1) for p in range(8)}
    created = await kzk.create_partition_states("orders", states, fence)
    assert created == {p: replace(s, zk_version=0) for p, s in states.items()}
    stats = [await kzk.zk.exists(partition_state_path(TopicPartition("orders", p))) for p in states]
    assert len({s.czxid for s in stats if s is not None}) == 1, stats

    monkeypatch.setattr(kafka_zk_module, "STATES_PER_MULTI", 2)
    await new_topic(kzk, partitions=5, topic="split")
    await kzk.create_partition_states("split", {3: PartitionState(2, 0, (2,), 1)}, fence)
    states = {p: PartitionState(1, 0, (1,), 1) for p in range(5)}
    created = await kzk.create_partition_states("split", states, fence)
    assert isinstance(created.pop(3), NodeExistsError)
    assert created == {p: replace(states[p], zk_version=0) for p in (0, 1, 2, 4)}
    stats = [await kzk.zk.exists(partition_state_path(TopicPartition("split", p))) for p in (0, 1)]
    assert len({s.czxid for s in stats if s is not None}) == 1  # one multi for 0 and 1
    held = await kzk.get_partition_state(TopicPartition("split", 3))
    assert held is not None and held.leader == 2  # the existing one untouched


async def test_watch_partition_state(make_client: MakeClient) -> None:
    kzk = await kafka_zk(make_client)
    seen: list[PartitionState | None] = []
    watcher = kzk.watch_partition_state(TP0, seen.append)
    await wait_for(lambda: seen == [None], what="no state yet")
    fence = await kzk.elect_controller(0)
    assert fence is not None
    await new_topic(kzk)
    await kzk.create_partition_states("orders", {0: PartitionState(1, 0, (1, 2), 1)}, fence)
    await wait_for(lambda: seen[-1] is not None, what="the created state")
    await kzk.update_leader_and_isr(TP0, PartitionState(1, 0, (1,), 1, zk_version=0))
    await wait_for(lambda: len(seen) == 3, what="the ISR change")
    assert seen[1] == PartitionState(1, 0, (1, 2), 1, zk_version=0)
    assert seen[2] == PartitionState(1, 0, (1,), 1, zk_version=1)
    watcher.cancel()


# --- deletion -----------------------------------------------------------------------------------


async def test_topic_deletion_removes_every_znode_at_once(make_client: MakeClient) -> None:
    kzk = await kafka_zk(make_client)
    fence = await kzk.elect_controller(0)
    assert fence is not None
    await kzk.create_topic(
        TopicAssignment("doomed", uuid.uuid4(), {0: ReplicaAssignment((1,))}), {"a": "b"}
    )
    await kzk.create_partition_states("doomed", {0: PartitionState(1, 0, (1,), 1)}, fence)
    await kzk.request_topic_deletion("doomed")
    await kzk.request_topic_deletion("doomed")  # already pending: fine
    assert await kzk.get_topic_deletions() == ["doomed"]
    # A deposed controller cannot delete it.
    stale = ControllerEpoch(fence.epoch - 1, fence.zk_version - 1)
    with pytest.raises(ControllerMovedError):
        await kzk.delete_topic("doomed", stale)
    assert await kzk.get_topic_assignment("doomed") is not None
    await kzk.delete_topic("doomed", fence)
    for path in (
        topic_path("doomed"),
        partition_state_path(TopicPartition("doomed", 0)),
        topic_config_path("doomed"),
        delete_topic_path("doomed"),
    ):
        assert await kzk.zk.exists(path) is None, path
    assert await kzk.get_topics() == [] and await kzk.get_topic_deletions() == []


# --- producer ids -------------------------------------------------------------------------------


async def test_producer_id_blocks_never_overlap(make_client: MakeClient) -> None:
    brokers = [await kafka_zk(make_client) for _ in range(3)]
    first = await brokers[0].allocate_producer_id_block(0)
    assert first == ProducerIdBlock(0, 0, 999)
    blocks = await asyncio.gather(
        *(b.allocate_producer_id_block(i, size=10) for i, b in enumerate(brokers) for _ in range(4))
    )
    ranges = sorted((b.first, b.last) for b in blocks)
    assert ranges[0][0] == 1000
    for (_, last), (next_first, _) in itertools.pairwise(ranges):
        assert next_first == last + 1  # contiguous, disjoint
    latest, stat = await brokers[0].zk.get("/latest_producer_id_block")
    assert ProducerIdBlock.decode(latest).last == ranges[-1][1]
    # Created empty by create_top_level_paths, then one write per block: 13.
    assert isinstance(stat, ZnodeStat) and stat.version == 13


async def test_reading_missing_things(make_client: MakeClient) -> None:
    kzk = KafkaZkClient(await make_client())  # no top-level paths at all
    assert await kzk.get_broker_ids() == []
    assert await kzk.get_all_brokers() == {}
    assert await kzk.get_topics() == []
    assert await kzk.get_topic_deletions() == []
    assert await kzk.get_controller() is None
    assert await kzk.get_partition_state(TP0) is None
    with pytest.raises(NoNodeError):
        await kzk.zk.get(broker_path(1))


def drop_requests(zk: ZkClient, method: str, times: int = 1) -> list[int]:
    """Make ``zk.<method>`` raise ConnectionLossError without sending, ``times`` times: the
    connection dropped under the request (a ping missed on a loaded machine)."""
    real = getattr(zk, method)
    dropped: list[int] = []

    async def dropped_then_real(*args: Any, **kwargs: Any) -> Any:
        if len(dropped) < times:
            dropped.append(1)
            raise ConnectionLossError("injected: connection dropped")
        return await real(*args, **kwargs)

    setattr(zk, method, dropped_then_real)
    return dropped


async def test_start_up_requests_survive_a_dropped_connection(make_client: MakeClient) -> None:
    """A broker starting on a loaded machine: its first requests meet a dropped connection and
    are sent again once connected, instead of failing the start (seen in the fault suite)."""
    kzk = KafkaZkClient(await make_client())
    dropped = drop_requests(kzk.zk, "ensure_path", times=2)
    await kzk.create_top_level_paths()
    assert dropped == [1, 1]
    for path in PERSISTENT_PATHS:
        assert await kzk.zk.exists(path) is not None
    dropped = drop_requests(kzk.zk, "get", times=2)
    first = await kzk.get_or_create_cluster_id()
    assert dropped == [1, 1]
    assert await kzk.get_or_create_cluster_id() == first
    dropped = drop_requests(kzk.zk, "get", times=1)
    assert await kzk.get_cluster_id() == first
    assert dropped == [1]


async def test_get_cluster_id_is_none_on_a_new_zookeeper(make_client: MakeClient) -> None:
    kzk = KafkaZkClient(await make_client())
    assert await kzk.get_cluster_id() is None
    assert await kzk.get_cluster_id() is None  # reading creates nothing
    created = await kzk.get_or_create_cluster_id()
    assert await kzk.get_cluster_id() == created


async def test_until_connected_gives_up_after_its_budget(make_client: MakeClient) -> None:
    kzk = KafkaZkClient(await make_client())
    drop_requests(kzk.zk, "ensure_path", times=10**6)
    with pytest.raises(ConnectionLossError):
        await kzk.until_connected(lambda: kzk.zk.ensure_path("/x"), budget=0.2)
